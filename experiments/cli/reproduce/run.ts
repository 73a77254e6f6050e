/**
 * `moesim reproduce <paper|all>`: every shipped experiment of the papers as one pool of runs.
 *
 * Each experiment is an ordinary `runExperiment` (the same preflight, the same atomic writes
 * after every run, the same resume), writing to `reproduction/<paper>/<experiment>/`, but all of
 * them share one pool of worker threads (`experiments/parallel/shared-pool.ts`): the threads
 * start once and stay busy across configs. An experiment whose results.json is complete for the
 * same config is kept as it is (a killed reproduction, run again, simulates only what is left:
 * finished experiments are skipped, a partial one resumes). A run that several experiments
 * hold is simulated once (`shared-runs.ts`). One progress bar on a terminal.
 *
 * Every config is loaded and validated before anything runs, so a bad shipped file fails with
 * one line before any output exists. The comparison tables are written afterwards (`tables.ts`).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import cliProgress from 'cli-progress';
import { loadConfigFile, type LoadedConfig } from '../../config/load.ts';
import { toJson } from '../../outputs/atomic.ts';
import { checkOutDir } from '../../outputs/out-dir.ts';
import { comparisonOf, experimentsOf, type Paper } from './papers.ts';
import { RunSharing } from './shared-runs.ts';

export interface ReproduceOptions {
  readonly outRoot: string;
  readonly jobs: number;
  readonly progress: boolean;
  readonly log: (m: string) => void;
}

interface Planned {
  readonly paper: Paper;
  readonly name: string;
  readonly loaded: LoadedConfig;
  readonly outDir: string;
  /** Complete results of this very config already there. */
  readonly done: boolean;
  /** Runs already in a results.json (complete or not). */
  readonly runsThere: number;
  /** Run seconds of its last reproduction (timing.json), to start the long ones first. */
  readonly lastRunS: number;
  /** Its paper's comparison tables read it (such experiments run first). */
  readonly tabled: boolean;
}

/** What a reproduction measured (wall and CPU seconds of this process, run time per experiment). */
export interface ReproduceTiming {
  readonly wallS: number;
  readonly cpuS: number;
  readonly experiments: { paper: Paper; name: string; skipped: boolean; runS: number }[];
}

/** The results.json of `outDir`: whether it is complete for `config`, and how many runs it holds. */
function stateOf(outDir: string, loaded: LoadedConfig, schemaVersion: number): { done: boolean; runs: number } {
  try {
    type Prev = { schemaVersion?: unknown; complete?: unknown; config?: unknown; runs?: unknown[] };
    const prev = JSON.parse(readFileSync(path.join(outDir, 'results.json'), 'utf8')) as Prev;
    const same = prev.schemaVersion === schemaVersion && toJson(prev.config) === toJson(loaded.config);
    return { done: same && prev.complete === true, runs: same && Array.isArray(prev.runs) ? prev.runs.length : 0 };
  } catch {
    return { done: false, runs: 0 };
  }
}

/** The run seconds a previous reproduction recorded in `outDir/timing.json` (0 when none). */
function lastRunSOf(outDir: string): number {
  try {
    const t = JSON.parse(readFileSync(path.join(outDir, 'timing.json'), 'utf8')) as { runs?: { wallS?: number }[] };
    return (t.runs ?? []).reduce((a, r) => a + (r.wallS ?? 0), 0);
  } catch {
    return 0;
  }
}

/** The bar over every run of the reproduction (a terminal only; total grows as experiments pass preflight). */
function makeBar(enabled: boolean, startDone: number) {
  if (!enabled) return { add: () => {}, total: () => {}, stop: () => {} };
  const bar = new cliProgress.SingleBar(
    {
      stream: process.stderr,
      format: 'reproduce [{bar}] {percentage}% | {value}/{total} runs | eta {eta_formatted}',
      hideCursor: true,
      etaBuffer: 50,
    },
    cliProgress.Presets.shades_classic,
  );
  let total = startDone;
  let value = startDone;
  bar.start(Math.max(total, 1), value);
  return {
    add: () => bar.update(++value),
    total: (n: number) => {
      total += n;
      bar.setTotal(total);
    },
    stop: () => bar.stop(),
  };
}

export async function reproduce(papers: readonly Paper[], o: ReproduceOptions): Promise<ReproduceTiming> {
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  const { RESULTS_SCHEMA_VERSION, runExperiment, PluginError } = await import('../../runner.ts');
  // Every config loads (schema, keys) before anything runs or is written.
  const planned: Planned[] = [];
  for (const paper of papers) {
    const reads = new Set((await comparisonOf(paper)).reads);
    for (const { name, file } of experimentsOf(paper)) {
      const loaded = loadConfigFile(file);
      const outDir = path.join(o.outRoot, paper, name);
      checkOutDir(outDir);
      const s = stateOf(outDir, loaded, RESULTS_SCHEMA_VERSION);
      const lastRunS = lastRunSOf(outDir);
      planned.push({ paper, name, loaded, outDir, done: s.done, runsThere: s.runs, lastRunS, tabled: reads.has(name) });
    }
  }
  const todo = planned.filter((p) => !p.done);
  const kept = planned.filter((p) => p.done);
  if (kept.length > 0) {
    o.log(`keeping ${kept.length} finished experiment(s): ${kept.map((p) => `${p.paper}/${p.name}`).join(', ')}`);
  }
  const bar = makeBar(o.progress && process.stderr.isTTY === true, 0);
  const { sharedThreadPool } = await import('../../parallel/shared-pool.ts');
  const pool = o.jobs > 1 ? sharedThreadPool(o.jobs, PluginError.make, () => bar.add()) : undefined;
  const runS = new Map<Planned, number>();
  // Runs that several experiments hold are simulated once (`shared-runs.ts`).
  const sharing = new RunSharing();
  try {
    const one = async (p: Planned, rank: number, ready: () => void = () => {}): Promise<void> => {
      const { loaded } = p;
      const base = { config: loaded.config, file: loaded.file, baseDir: loaded.baseDir, timeline: false };
      const backend = pool ? sharing.wrap(pool.backendFor(base, rank), loaded.baseDir) : undefined;
      const result = await runExperiment(loaded, {
        outDir: p.outDir,
        progress: false,
        jobs: 1,
        resume: true,
        table: false,
        log: (m) => o.log(`${p.paper}/${p.name}: ${m}`),
        onReady: (runs) => {
          bar.total(runs);
          ready();
        },
        ...(backend ? { backend } : {}),
      });
      runS.set(
        p,
        result.timing.reduce((a, t) => a + t.wallS, 0),
      );
      ready();
      if (!pool) for (let i = 0; i < result.runs.length; i++) bar.add();
    };
    if (pool) {
      // What the tables read first (they are ready soonest), then the longest experiments of the
      // last reproduction (stable: file order otherwise).
      const ranked = [...todo].sort((a, b) => Number(b.tabled) - Number(a.tabled) || b.lastRunS - a.lastRunS);
      // Preflights one after another in rank order (this thread builds every world of a config
      // before its first run): the first experiment's runs start after its own preflight, not
      // after everyone's, and the next preflight overlaps its runs.
      let gate: Promise<void> = Promise.resolve();
      const settled = await Promise.allSettled(
        ranked.map((p, rank) => {
          const prev = gate;
          let open!: () => void;
          gate = new Promise<void>((resolve) => (open = resolve));
          return prev
            .then(() => new Promise<void>((resolve) => setImmediate(resolve)))
            .then(() => one(p, rank, open))
            .finally(() => open());
        }),
      );
      const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
      if (failed) throw failed.reason;
    } else {
      for (const p of todo) await one(p, 0);
    }
  } finally {
    bar.stop();
    await pool?.close();
  }
  if (sharing.shared > 0) o.log(`${sharing.shared} run(s) were the same as another experiment's: simulated once`);
  const cpu = process.cpuUsage(cpu0);
  return {
    wallS: (performance.now() - t0) / 1000,
    cpuS: (cpu.user + cpu.system) / 1e6,
    experiments: planned.map((p) => ({ paper: p.paper, name: p.name, skipped: p.done, runS: runS.get(p) ?? 0 })),
  };
}
