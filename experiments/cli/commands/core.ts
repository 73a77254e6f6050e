/** `moesim experiment`, `moesim validate`, `moesim list`. */
import { availableParallelism } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import type { CommandModule } from 'yargs';
import { checkOutDir, folderName, printable } from '../../outputs/out-dir.ts';
import { UserError } from '../../../sim/kernel/errors.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
/** The built-in default experiment. */
export const QUICKSTART = path.resolve(here, '../../quickstart.yaml');

interface ExperimentArgs {
  config?: string;
  out?: string;
  timeline: boolean;
  progress: boolean;
  table: 'box' | 'markdown';
  columns?: string;
  wide: boolean;
  report: boolean;
  jobs?: string;
  queue?: string;
  resume: boolean;
}

/** `--jobs`: a positive integer (default: the cores this process may use). */
/** `--jobs` as given (read as a string, so a bad value is named as typed, not as yargs's NaN). */
export function jobsOf(value: unknown): number {
  if (value === undefined) return availableParallelism();
  const n =
    typeof value === 'string' && /^\s*\d+\s*$/.test(value)
      ? Number(value)
      : typeof value === 'number'
        ? value
        : Number.NaN;
  if (!Number.isSafeInteger(n) || n < 1)
    throw new UserError('must be a whole number of runs at once, at least 1', undefined, '--jobs', value);
  return n;
}

export const experimentCommand: CommandModule<object, ExperimentArgs> = {
  command: 'experiment [config]',
  describe: 'run an experiment config (default: experiments/quickstart.yaml) and print its table',
  builder: (y) =>
    y
      .positional('config', { type: 'string', describe: 'YAML or JSON experiment config' })
      .option('out', { type: 'string', describe: 'output folder (default: results/<name>)' })
      .option('timeline', { type: 'boolean', default: false, describe: 'also write a Perfetto/Chrome trace per run' })
      .option('progress', { type: 'boolean', default: true, describe: 'progress bar on stderr when it is a terminal' })
      .option('table', {
        choices: ['box', 'markdown'] as const,
        default: 'box' as const,
        describe: 'table style on stdout',
      })
      .option('columns', {
        type: 'string',
        describe:
          'table columns, comma-separated: column ids (ttft.p50, tpot.p50, tok/s, hit, blocked, pcie, vram, sim, queue.p50, ...) or metric paths (ttftQueueMs.p99)',
      })
      .option('report', {
        type: 'boolean',
        default: false,
        describe: 'also write report.html into the output folder (see `moesim report`)',
      })
      .option('wide', {
        type: 'boolean',
        default: false,
        describe: 'show every column of the table (it may be wider than the terminal)',
      })
      .option('jobs', {
        type: 'string',
        describe:
          'runs simulated at once, on worker threads (default: the number of cores; 1: one at a time in this process)',
      })
      .option('queue', {
        type: 'string',
        describe: 'redis://host:port: send the runs to `moesim worker` processes through this Redis (BullMQ) instead',
      })
      .option('resume', {
        type: 'boolean',
        default: true,
        describe: 'keep the runs of an interrupted run of the same config in --out (--no-resume: start afresh)',
      }) as never,
  handler: async (args) => {
    const file = args.config ?? QUICKSTART;
    const jobs = jobsOf(args.jobs);
    if (args.queue !== undefined) {
      // A bad or unreachable queue fails now, before preflight and before the output folder exists.
      const { probe } = await import('../../parallel/queue.ts');
      await probe(args.queue);
    }
    const { loadConfigFile } = await import('../../config/load.ts');
    const loaded = loadConfigFile(file);
    const outDir = args.out ?? path.join('results', folderName(loaded.config.name));
    // Before anything is simulated: a folder that cannot be written fails now, not after the first run.
    checkOutDir(outDir);
    // The simulator is loaded only now, so that the checks above answer at once.
    const { runExperiment } = await import('../../runner.ts');
    // The banner waits for preflight: bad input must print exactly one line (the error).
    const banner = (runs: number) =>
      process.stderr.write(
        `moesim: ${printable(loaded.config.name)}: ${printable(path.relative(process.cwd(), file) || file)} (${runs} run${runs === 1 ? '' : 's'})\n`,
      );
    const columns = args.columns
      ?.split(',')
      .map((c) => c.trim())
      .filter((c) => c.length > 0);
    const started = performance.now();
    const result = await runExperiment(loaded, {
      outDir,
      timeline: args.timeline,
      progress: args.progress,
      jobs,
      ...(args.queue !== undefined ? { queue: args.queue } : {}),
      resume: args.resume,
      tableStyle: args.table,
      columns: { wide: args.wide, ...(columns ? { columns } : {}) },
      log: (m) => process.stderr.write(`moesim: ${m}\n`),
      onReady: banner,
    });
    process.stdout.write(`${result.table}\n`);
    const wallS = result.timing.reduce((a, t) => a + t.wallS, 0);
    const events = result.runs.reduce((a, r) => a + r.sim.events, 0);
    const sweepS = (performance.now() - started) / 1000;
    const how =
      args.queue !== undefined
        ? `runs on ${args.queue}`
        : jobs > 1
          ? `up to ${jobs} runs at once`
          : 'one run at a time';
    process.stderr.write(
      `moesim: simulated in ${wallS.toFixed(2)} s of run time (${(wallS > 0 ? events / wallS : 0).toExponential(2)} events/s; per run in timing.json), ${sweepS.toFixed(2)} s of wall time (${how})\n`,
    );
    process.stderr.write(
      `moesim: wrote ${path.join(outDir, 'results.json')}, timing.json, runs.csv${args.timeline ? ', timeline-*.json' : ''}\n`,
    );
    if (args.report) {
      const { writeReport } = await import('../../outputs/report.ts');
      process.stderr.write(`moesim: wrote ${await writeReport(outDir)}\n`);
    }
  },
};

export const validateCommand: CommandModule<object, { config: string }> = {
  command: 'validate <config>',
  describe:
    'check an experiment config without running it: schema, profiles, policies, sweeps, files, and that every run fits the machine',
  builder: (y) => y.positional('config', { type: 'string', demandOption: true }) as never,
  handler: async (args) => {
    const { loadConfigFile } = await import('../../config/load.ts');
    const loaded = loadConfigFile(args.config);
    // Exactly what `experiment` checks before its first run (the same function, the same messages).
    const { preflight } = await import('../../runner.ts');
    const runs = await preflight(loaded, { onWarning: (m) => process.stderr.write(`moesim: warning: ${m}\n`) });
    process.stdout.write(`${args.config}: valid (${runs.length} run${runs.length === 1 ? '' : 's'})\n`);
  },
};

export const listCommand: CommandModule<object, { what: string }> = {
  command: 'list <what>',
  describe: 'list models | hardware | runtimes | policies',
  builder: (y) =>
    y.positional('what', {
      type: 'string',
      choices: ['models', 'hardware', 'runtimes', 'policies'],
      demandOption: true,
    }) as never,
  handler: async (args) => {
    const { listHardware, listModels, listRuntimes, loadHardware, loadModel, loadRuntime } = await import(
      '../../../hardware-profiles/load.ts'
    );
    const { BUILTIN_POLICIES } = await import('../../../policies/registry.ts');
    const lines: string[] = [];
    if (args.what === 'models') {
      for (const id of listModels()) {
        const m = loadModel(id);
        lines.push(
          `${id.padEnd(22)} ${m.name} — ${m.moeLayers} MoE layers × ${m.experts} experts, top-${m.topK}, ${(m.derived.bytesPerExpert / 2 ** 20).toFixed(1)} MiB/expert, ${(m.derived.totalBytes / 1e9).toFixed(1)} GB`,
        );
      }
    } else if (args.what === 'hardware') {
      for (const id of listHardware()) {
        const h = loadHardware(id);
        lines.push(
          `${id.padEnd(22)} ${h.name} — ${h.gpu.name} ${(h.gpu.vramBytes / 2 ** 30).toFixed(0)} GiB, PCIe gen${h.pcie.generation} ${(h.pcie.h2dBytesPerSec / 1e9).toFixed(1)} GB/s, ${h.cpu.cores} cores, ${(h.hostDramBytes / 2 ** 30).toFixed(0)} GiB DRAM`,
        );
      }
    } else if (args.what === 'runtimes') {
      for (const id of listRuntimes()) {
        const r = loadRuntime(id);
        const dispatch = r.dispatchNs === null ? 'GPU launch' : `${(r.dispatchNs / 1e3).toFixed(0)} µs`;
        lines.push(
          `${id.padEnd(22)} ${r.name} — dispatch ${dispatch}/op, sync ${(r.syncNs / 1e3).toFixed(0)} µs, experts ${r.expertLoop} in ${r.expertOrder} order, ${r.attention} attention, ${r.calibration.length} calibration figure(s)`,
        );
      }
    } else {
      for (const [name, d] of Object.entries(BUILTIN_POLICIES))
        lines.push(`${name.padEnd(22)} [${d.family}] ${d.summary}`);
    }
    process.stdout.write(`${lines.join('\n')}\n`);
  },
};
