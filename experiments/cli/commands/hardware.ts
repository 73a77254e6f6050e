/**
 * `moesim hardware new`: a user describes their own box in a few flags
 * (GPU, CPU, DIMMs, link, drive, RAM) and gets a small YAML testbed that `moesim experiment`
 * accepts as `hardware: ./my-box.yaml`. Every component is a shipped profile id (listed by
 * `moesim list hardware` siblings: gpus/, cpus/, pcie/, drives/), so the constants keep their
 * sources; the DIMMs override the CPU profile's channels and transfer rate. Nothing is written
 * when any flag is wrong (exit 2, one line naming the flag and value).
 */
import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { CommandModule } from 'yargs';
import { stringify } from 'yaml';
import { UserError } from '../../../sim/kernel/errors.ts';

interface NewArgs {
  gpu: string;
  cpu: string;
  dram: string;
  link: string;
  drive?: string;
  ram: number;
  name?: string;
  pageable: boolean;
  out: string;
  force: boolean;
}

/** `ddr5-6000x2` → DIMM type, MT/s and channels. @throws UserError naming --dram */
export function parseDram(spec: string): { type: 'ddr4' | 'ddr5'; megaTransfersPerSec: number; channels: number } {
  const m = /^(ddr[45])-(\d{3,5})x(\d{1,2})$/i.exec(spec.trim());
  if (!m) throw new UserError('expected ddr4|ddr5-<MT/s>x<channels>, e.g. ddr5-6000x2', undefined, '--dram', spec);
  return { type: m[1]!.toLowerCase() as 'ddr4' | 'ddr5', megaTransfersPerSec: Number(m[2]), channels: Number(m[3]) };
}

/**
 * `pcie4x16` → the link profile id `gen4-x16` (or a shipped id / .json path as given).
 * @throws UserError naming --link
 */
export function parseLink(spec: string, known: readonly string[]): string {
  const m = /^pcie(\d)x(\d{1,2})$/i.exec(spec.trim());
  const id = m ? `gen${m[1]}-x${m[2]}` : spec;
  if (id.endsWith('.json') || known.includes(id)) return id;
  const names = known.map((k) => k.replace(/^gen(\d)-x(\d+)$/, 'pcie$1x$2')).join(', ');
  throw new UserError(`unknown link (known: ${names})`, undefined, '--link', spec);
}

function need(flag: string, value: string, known: readonly string[]): string {
  if (value.endsWith('.json') || known.includes(value)) return value;
  throw new UserError(`unknown ${flag.slice(2)} (known: ${known.join(', ')})`, undefined, flag, value);
}

/** Builds the testbed document (validated by loading it back before it is written). */
export async function buildTestbed(a: Omit<NewArgs, 'out' | 'force'>): Promise<Record<string, unknown>> {
  const { listGpus, listCpus, listPcie, listDrives } = await import('../../../hardware-profiles/load.ts');
  const gpu = need('--gpu', a.gpu, listGpus());
  const cpu = need('--cpu', a.cpu, listCpus());
  const pcie = parseLink(a.link, listPcie());
  const drive = a.drive === undefined ? undefined : need('--drive', a.drive, listDrives());
  const dram = parseDram(a.dram);
  if (!(a.ram > 0)) throw new UserError('host RAM must be a positive number of GiB', undefined, '--ram', a.ram);
  const id = (a.name ?? `${gpu}-${cpu}`).toLowerCase().replace(/[^a-z0-9._-]+/g, '-');
  return {
    id,
    name: a.name ?? `${gpu} + ${cpu} + ${a.dram} + ${a.link}`,
    gpu,
    cpu,
    pcie,
    hostDramGiB: a.ram,
    pinnedHostMemory: !a.pageable,
    dram,
    ...(drive !== undefined && { drive }),
    cost: { boardUsd: 300, dramUsdPerGb: 3, ssdUsd: 150, lifetimeYears: 3, electricityUsdPerKwh: 0.15 },
    sources: [
      'moesim hardware new: components are the shipped profiles named here (each file lists its sources)',
      `dram ${a.dram}: the user's DIMMs (peak = channels × MT/s × 8 B, the CPU profile's sustained fraction)`,
      'cost fields: defaults [assumption]',
    ],
  };
}

export const hardwareCommand: CommandModule = {
  command: 'hardware <action>',
  describe: 'describe your own box: `hardware new --gpu … --cpu … --dram … --link … --out my-box.yaml`',
  builder: (y) =>
    y
      .positional('action', { choices: ['new'] as const, describe: 'new: write a testbed file' })
      .option('gpu', {
        type: 'string',
        demandOption: true,
        describe: 'GPU profile id (rtx-4090 = rtx4090; hardware-profiles/gpus)',
      })
      .option('cpu', { type: 'string', demandOption: true, describe: 'CPU profile id (e.g. ryzen-9-7950x)' })
      .option('dram', {
        type: 'string',
        demandOption: true,
        describe: 'DIMMs: ddr4|ddr5-<MT/s>x<channels> (ddr5-6000x2)',
      })
      .option('link', {
        type: 'string',
        demandOption: true,
        describe: 'GPU link: pcie<gen>x<lanes> (pcie4x16) or a pcie id',
      })
      .option('drive', { type: 'string', describe: 'NVMe drive profile id (hardware-profiles/drives)' })
      .option('ram', { type: 'number', default: 64, describe: 'host RAM in GiB' })
      .option('name', { type: 'string', describe: 'a name for the box (default: gpu + cpu)' })
      .option('pageable', { type: 'boolean', default: false, describe: 'host weights are not pinned (llama.cpp mmap)' })
      .option('out', { type: 'string', demandOption: true, describe: 'the file to write (.yaml, .yml or .json)' })
      .option('force', { type: 'boolean', default: false, describe: 'overwrite --out if it exists' }) as never,
  handler: async (raw) => {
    const a = raw as unknown as NewArgs;
    const gpuAlias = a.gpu.replace(/^rtx-(\d)/, 'rtx$1');
    const doc = await buildTestbed({ ...a, gpu: gpuAlias });
    const out = path.resolve(a.out);
    if (!/\.(ya?ml|json)$/.test(out)) {
      throw new UserError('must end in .yaml, .yml or .json', undefined, '--out', a.out);
    }
    if (existsSync(out) && !a.force)
      throw new UserError('exists (pass --force to overwrite)', undefined, '--out', a.out);
    const text = out.endsWith('.json')
      ? `${JSON.stringify(doc, null, 2)}\n`
      : `# moesim testbed (moesim hardware new)\n${stringify(doc)}`;
    // Validate through the loader before writing: a temp copy beside the target, removed after.
    const { loadHardware, clearProfileCache } = await import('../../../hardware-profiles/load.ts');
    const tmp = `${out}.check${path.extname(out)}`;
    writeFileSync(tmp, text);
    try {
      loadHardware(tmp);
    } finally {
      const { rmSync } = await import('node:fs');
      rmSync(tmp, { force: true });
      clearProfileCache();
    }
    writeFileSync(out, text);
    process.stdout.write(`wrote ${a.out}: use it as \`hardware: ${a.out}\` in an experiment config\n`);
  },
};
