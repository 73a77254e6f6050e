/** `moesim experiment`, `moesim validate`, `moesim list`. */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { CommandModule } from 'yargs';
import { loadConfigFile } from '../../config/load.ts';
import { checkOutDir } from '../../outputs/out-dir.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
/** The built-in default experiment. */
export const QUICKSTART = path.resolve(here, '../../quickstart.yaml');

interface ExperimentArgs {
  config?: string;
  out?: string;
  timeline: boolean;
  progress: boolean;
  table: 'box' | 'markdown';
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
      .option('table', { choices: ['box', 'markdown'] as const, default: 'box' as const, describe: 'table style on stdout' }) as never,
  handler: async (args) => {
    const file = args.config ?? QUICKSTART;
    const loaded = loadConfigFile(file);
    const outDir = args.out ?? path.join('results', loaded.config.name);
    // Before anything is simulated: a folder that cannot be written fails now, not after the first run.
    checkOutDir(outDir);
    // The simulator is loaded only now, so that the checks above answer at once.
    const { runExperiment } = await import('../../runner.ts');
    // The banner waits for preflight: bad input must print exactly one line (the error).
    const banner = (runs: number) => process.stderr.write(`moesim: ${loaded.config.name}: ${path.relative(process.cwd(), file) || file} (${runs} run${runs === 1 ? '' : 's'})\n`);
    const result = await runExperiment(loaded, { outDir, timeline: args.timeline, progress: args.progress, tableStyle: args.table, log: (m) => process.stderr.write(`moesim: ${m}\n`), onReady: banner });
    process.stdout.write(`${result.table}\n`);
    process.stderr.write(`moesim: wrote ${path.join(outDir, 'results.json')}, timing.json, runs.csv${args.timeline ? ', timeline-*.json' : ''}\n`);
  },
};

export const validateCommand: CommandModule<object, { config: string }> = {
  command: 'validate <config>',
  describe: 'check an experiment config without running it: schema, profiles, policies, sweeps, files, and that every run fits the machine',
  builder: (y) => y.positional('config', { type: 'string', demandOption: true }) as never,
  handler: async (args) => {
    const loaded = loadConfigFile(args.config);
    // Exactly what `experiment` checks before its first run (the same function, the same messages).
    const { preflight } = await import('../../runner.ts');
    const runs = await preflight(loaded, { onWarning: (m) => process.stderr.write(`moesim: warning: ${m}\n`) });
    process.stdout.write(`${args.config}: valid (${runs.length} run${runs.length === 1 ? '' : 's'})\n`);
  },
};

export const listCommand: CommandModule<object, { what: string }> = {
  command: 'list <what>',
  describe: 'list models | hardware | policies',
  builder: (y) => y.positional('what', { type: 'string', choices: ['models', 'hardware', 'policies'], demandOption: true }) as never,
  handler: async (args) => {
    const { listHardware, listModels, loadHardware, loadModel } = await import('../../../hardware-profiles/load.ts');
    const { BUILTIN_POLICIES } = await import('../../../policies/registry.ts');
    const lines: string[] = [];
    if (args.what === 'models') {
      for (const id of listModels()) {
        const m = loadModel(id);
        lines.push(`${id.padEnd(22)} ${m.name} — ${m.moeLayers} MoE layers × ${m.experts} experts, top-${m.topK}, ${(m.derived.bytesPerExpert / 2 ** 20).toFixed(1)} MiB/expert, ${(m.derived.totalBytes / 1e9).toFixed(1)} GB`);
      }
    } else if (args.what === 'hardware') {
      for (const id of listHardware()) {
        const h = loadHardware(id);
        lines.push(`${id.padEnd(22)} ${h.name} — ${h.gpu.name} ${(h.gpu.vramBytes / 2 ** 30).toFixed(0)} GiB, PCIe gen${h.pcie.generation} ${(h.pcie.h2dBytesPerSec / 1e9).toFixed(1)} GB/s, ${h.cpu.cores} cores, ${(h.hostDramBytes / 2 ** 30).toFixed(0)} GiB DRAM`);
      }
    } else {
      for (const [name, d] of Object.entries(BUILTIN_POLICIES)) lines.push(`${name.padEnd(22)} [${d.family}] ${d.summary}`);
    }
    process.stdout.write(`${lines.join('\n')}\n`);
  },
};
