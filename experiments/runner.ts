/**
 * Runs an experiment: expands runs, preflights every one (so bad input fails before any
 * output exists), runs them (one at a time in this thread, on a pool of worker threads with
 * `jobs`, or on `moesim worker` processes through a Redis queue with `queue`), and writes
 * results atomically after each run, in run-index order whatever order runs finish in (a killed
 * experiment keeps every finished run; `complete` says whether all ran, and running it again
 * with the same `outDir` resumes it: `experiments/parallel/resume.ts`). The outputs do not
 * depend on how the runs were executed: results.json, runs.csv and the table are byte-identical.
 *
 * Outputs in `outDir`: `results.json` (schema-versioned; simulated quantities only, so reruns
 * are byte-identical), `timing.json` (wall time and events/s per run), `runs.csv`, and with
 * `timeline` one Chrome-trace `timeline-<index>-<policy>.json` per run.
 * Only this module measures wall time.
 */
import { existsSync, readdirSync, rmdirSync } from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { availableParallelism } from 'node:os';
import { isMainThread } from 'node:worker_threads';
import cliProgress from 'cli-progress';
import { PolicyError, UserError } from '../sim/kernel/errors.ts';
import {
  SERVING_HOOKS,
  type EvictionQuery,
  type ExpertKey,
  type ModelShapeView,
  type PolicyDecision,
  type ServingHook,
  type ServingPolicy,
  type ServingView,
  type TopRequest,
} from '../sim/serving/policy.ts';
import { interceptPolicy, type AnyHook } from '../sim/serving/policy-driver.ts';
import type { PolicyDefinition } from '../policies/types.ts';
import type { TraceSink } from '../sim/observe/trace-sink.ts';
import { fanout } from '../sim/observe/trace-sink.ts';
import { servingMetrics, type RunMetrics } from '../sim/metrics/serving-metrics.ts';
import { throughputMetrics, type ThroughputMetrics } from '../sim/metrics/throughput-metrics.ts';
import { expandRuns, type RunSpec } from './config/expand.ts';
import { checkServingHooks, importPluginModule } from './config/plugin-loader.ts';
import type { LoadedConfig } from './config/load.ts';
import { writeFileAtomic, toJson } from './outputs/atomic.ts';
import { runsToCsv } from './outputs/csv.ts';
import {
  chooseColumns,
  columnById,
  metricAt,
  metricColumn,
  renderSeedSummary,
  renderTable,
  type Column,
  type ColumnChoice,
  type TableRow,
  type TableStyle,
} from './outputs/table.ts';
import { TimelineSink } from './outputs/timeline.ts';
import { makeOutDir } from './outputs/out-dir.ts';
import { renderPlot } from './outputs/plot.ts';
import { thresholdOutputs } from './outputs/thresholds.ts';
import type { ExperimentConfig } from './config/schema.ts';
import { buildServingWorld, buildThroughputWorld } from './world.ts';
import { loadHardware, loadModel } from '../hardware-profiles/load.ts';
import { runInIndexOrder, threadBackend, type Backend, type OnStall, type TaskBase } from './parallel/pool.ts';
import { readResumable } from './parallel/resume.ts';
import { DEFAULT_PLUGIN_BUDGET_MS, PluginExit, probeImport, readOnly, runPluginCode } from './parallel/sandbox.ts';

export const RESULTS_SCHEMA_VERSION = 1;

/**
 * Shortest wall time between two partial writes of a sweep's outputs (ms). A choice, not a
 * measurement: what a killed sweep may have to simulate again on resume, against rewriting every
 * run so far after each run (quadratic in the runs; MoE-Lens's throughput sweep writes 23 MB).
 */
const PARTIAL_WRITE_INTERVAL_MS = 5000;

export interface RunRecord {
  readonly index: number;
  readonly policy: string;
  readonly params: Readonly<Record<string, unknown>>;
  readonly seed: number;
  /**
   * The serving executor's metrics. Runs of the throughput executor carry `ThroughputMetrics`
   * here instead (`sim/metrics/throughput-metrics.ts`; typed as `RunMetrics` for compatibility:
   * read them through `throughputMetricsOf`).
   */
  readonly metrics: RunMetrics;
  /** `output.relative`: metric / the baseline policy's at the same sweep point and seed. */
  relative?: Record<string, number>;
  readonly sim: { readonly events: number; readonly simulatedS: number };
}

export interface TimingRecord {
  readonly index: number;
  readonly policy: string;
  readonly wallS: number;
  readonly eventsPerS: number;
  readonly simulatedSPerWallS: number;
}

export interface ExperimentResult {
  readonly runs: RunRecord[];
  readonly timing: TimingRecord[];
  readonly table: string;
  readonly outDir: string | undefined;
}

export interface RunnerOptions {
  /** Folder for results; nothing is written when undefined. */
  readonly outDir?: string;
  readonly timeline?: boolean;
  /** Show a progress bar over the sweep on stderr (only when it is a terminal and the sweep takes more than ~1.5 s). */
  readonly progress?: boolean;
  /**
   * Runs simulated at once, on a pool of worker threads (default 1: in this thread). Ignored
   * (one at a time, in this thread) when `sinks` is given: sinks cannot cross threads.
   */
  readonly jobs?: number;
  /** `redis://host:port`: send the runs to `moesim worker` processes on this queue (BullMQ) instead. */
  readonly queue?: string;
  /** Keep the runs of an interrupted experiment of the same config in `outDir` (default true). */
  readonly resume?: boolean;
  /** Diagnostics (stderr). */
  readonly log?: (message: string) => void;
  /** Extra sinks for every run (tests: invariant checkers). */
  readonly sinks?: (spec: RunSpec) => readonly TraceSink[];
  /** Style of the returned table (default box). */
  readonly tableStyle?: TableStyle;
  /** Which columns (`--columns`, `--wide`); default: the family's key columns, fitted to `maxWidth`. */
  readonly columns?: ColumnChoice;
  /** Width the default box table must fit (default 120). */
  readonly maxWidth?: number;
  /**
   * Render the returned table (default true). `reproduce` prints none, so it skips the layout
   * (seconds for a big sweep's table fitted column by column); the files are written either way.
   */
  readonly table?: boolean;
  /** Called once every run has passed preflight, before the first one starts (nothing is called when the input is bad). */
  readonly onReady?: (runs: number) => void;
  /** Run on this backend (a pool shared with other experiments: `moesim reproduce`) instead of `jobs`/`queue`. */
  readonly backend?: Backend;
}

/**
 * The progress bar over a sweep: runs done out of the runs to simulate, with an ETA. Shown on a
 * terminal only, and only once the sweep has taken ~1.5 s (a quick experiment prints no bar).
 * A run simulated in this thread also moves it within the run (finished requests), since a
 * long serial run blocks the timer.
 */
class SweepProgress implements TraceSink {
  private bar: cliProgress.SingleBar | null = null;
  private done = 0;
  private within = 0;
  private readonly t0 = performance.now();
  private readonly timer: NodeJS.Timeout | undefined;
  constructor(
    private readonly total: number,
    private readonly resumed: number,
    private readonly enabled: boolean,
  ) {
    if (enabled && total > 0) this.timer = setInterval(() => this.draw(), 1000).unref();
  }
  /** The run simulated in this thread: its number of requests (0: not in this thread). */
  private requests = 0;
  private finished = 0;
  startRun(requests: number): void {
    this.requests = requests;
    this.finished = 0;
    this.within = 0;
  }
  onRequest: NonNullable<TraceSink['onRequest']> = (_id, phase) => {
    if (phase !== 'finish' || this.requests === 0) return;
    this.finished++;
    this.within = Math.min(0.99, this.finished / this.requests);
    this.draw();
  };
  runDone(): void {
    this.done++;
    this.within = 0;
    this.requests = 0;
    this.draw();
  }
  private draw(): void {
    if (!this.enabled || this.total === 0) return;
    const value = this.done + this.within;
    // ETA from the average pace since the start (runs finish in bursts when they run in parallel).
    const elapsedS = (performance.now() - this.t0) / 1000;
    const etaS = value > 0 ? (elapsedS * (this.total - value)) / value : undefined;
    const eta =
      etaS === undefined
        ? '…'
        : etaS >= 3600
          ? `${Math.floor(etaS / 3600)}h${Math.round((etaS % 3600) / 60)}m`
          : etaS >= 60
            ? `${Math.floor(etaS / 60)}m${Math.round(etaS % 60)}s`
            : `${Math.round(etaS)}s`;
    const payload = { runs: this.done, resumed: this.resumed > 0 ? ` (+${this.resumed} resumed)` : '', left: eta };
    if (!this.bar) {
      if (performance.now() - this.t0 < 1500) return;
      this.bar = new cliProgress.SingleBar(
        {
          stream: process.stderr,
          format: 'sweep [{bar}] {percentage}% | {runs}/{total} runs{resumed} | eta {left}',
          hideCursor: true,
        },
        cliProgress.Presets.shades_classic,
      );
      this.bar.start(this.total, value, payload);
      return;
    }
    this.bar.update(value, payload);
  }
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.bar?.stop();
  }
}

/**
 * Everything `experiment` checks before it simulates, and all that `validate` does: expands
 * the runs and builds the world of every one of them (profiles, the feasibility of the model on
 * the GPU and the host, the workload and its files, the policy's factory) without running it.
 * Returns the runs ready to run: model and hardware `.json` paths resolved against the config's
 * folder, plugin policies wrapped in the contract guard.
 * @throws UserError (sizes human-readable, naming the config file) or PluginError
 */
export async function preflight(loaded: LoadedConfig, o: { onWarning?: (m: string) => void } = {}): Promise<RunSpec[]> {
  const { config, baseDir, file } = loaded;
  const specs = await prepareRuns(config, baseDir, file);
  await checkWorlds(specs, loaded, o.onWarning ?? (() => {}));
  return specs;
}

/** Builds the world of every run without running it (the second half of `preflight`). */
async function checkWorlds(
  specs: readonly RunSpec[],
  loaded: LoadedConfig,
  onWarning: (m: string) => void,
): Promise<void> {
  const { baseDir, file } = loaded;
  // Runs that differ only in their policy share the check of their profiles and workload (a
  // checked world never runs: no recording pass or warm-up uses them).
  const checkedParts = new Map();
  for (const spec of specs) {
    // Lets the event loop run between worlds: a pool's workers (their results, their next runs)
    // are served while a long preflight goes on (an experiment sharing the pool with others).
    await new Promise<void>((resolve) => setImmediate(resolve));
    try {
      if (spec.throughput) await buildThroughputWorld(spec, { baseDir, onWarning, checkedParts });
      else await buildServingWorld(spec, { baseDir, onWarning, checkedParts, check: true });
    } catch (err) {
      throw asReported(err, spec, file);
    }
  }
}

/**
 * The runs of a config, ready to run (what `preflight` returns, without building their worlds):
 * expanded, profile paths resolved against `baseDir`, plugins wrapped in the contract guard.
 */
export async function prepareRuns(config: ExperimentConfig, baseDir: string, file: string): Promise<RunSpec[]> {
  const budgetMs = config.pluginBudgetMs ?? DEFAULT_PLUGIN_BUDGET_MS;
  // A module that loops or exits at import would hang or end this process: it is tried first on a thread.
  if (isMainThread) await probePlugins(config, baseDir, budgetMs);
  const expanded = await expandRuns(config, baseDir, file);
  const plugins = await pluginFiles(config, baseDir);
  return expanded.map((s) => prepareSpec(s, baseDir, plugins, budgetMs));
}

/** What simulating one run gives: its record (as results.json holds it), wall time, and its timeline (with `timeline`). */
export interface RunOutput {
  readonly record: RunRecord;
  readonly timing: TimingRecord;
  readonly timeline?: string;
}

/**
 * Simulates one prepared run. The same code runs a serial sweep, a worker thread's run and a
 * `moesim worker`'s. The record is returned as results.json holds it (a JSON copy: no NaN,
 * Infinity or undefined left), so a run read back from an interrupted experiment's file is
 * the same value as a run just simulated.
 */
export async function runOne(
  spec: RunSpec,
  o: {
    readonly baseDir: string;
    readonly file: string;
    readonly timeline?: boolean;
    readonly sinks?: readonly TraceSink[];
    readonly onWarning?: (m: string) => void;
  },
): Promise<RunOutput> {
  const { baseDir, file } = o;
  const onWarning = o.onWarning ?? (() => {});
  const timeline = o.timeline ? new TimelineSink() : undefined;
  const sinks: TraceSink[] = [...(timeline ? [timeline] : []), ...(o.sinks ?? [])];
  let metrics: RunMetrics | ThroughputMetrics;
  let events: number;
  let endNs: number;
  let wallS: number;
  if (spec.throughput) {
    const executor = await buildThroughputWorld(spec, { baseDir, onWarning, sink: fanout(sinks) }).catch(
      (err: unknown) => Promise.reject(asReported(err, spec, file)),
    );
    const t0 = performance.now();
    const outcome = guarded(spec, file, () => executor.run());
    wallS = (performance.now() - t0) / 1000;
    metrics = throughputMetrics(outcome, { model: loadModel(spec.model) });
    events = outcome.events;
    endNs = outcome.endNs;
  } else {
    const executor = await buildServingWorld(spec, { baseDir, onWarning, sink: fanout(sinks) }).catch((err: unknown) =>
      Promise.reject(asReported(err, spec, file)),
    );
    const t0 = performance.now();
    const outcome = guarded(spec, file, () => executor.run());
    wallS = (performance.now() - t0) / 1000;
    const cap = { model: loadModel(spec.model), hardware: loadHardware(spec.hardware) };
    metrics = servingMetrics(
      outcome,
      spec.workload.shift ? { shiftAtRequest: spec.workload.shift.atRequest, cap } : { cap },
    );
    events = outcome.events;
    endNs = outcome.endNs;
  }
  const simulatedS = endNs / 1e9;
  const record = JSON.parse(
    JSON.stringify({
      index: spec.index,
      policy: spec.policy.label,
      params: spec.params,
      seed: spec.seed,
      metrics,
      sim: { events, simulatedS },
    }),
  ) as RunRecord;
  const eventsPerS = wallS > 0 ? events / wallS : 0;
  const timing: TimingRecord = {
    index: spec.index,
    policy: spec.policy.label,
    wallS,
    eventsPerS,
    simulatedSPerWallS: wallS > 0 ? simulatedS / wallS : 0,
  };
  return { record, timing, ...(timeline ? { timeline: timeline.toJson() } : {}) };
}

/** The file a run's timeline is written to. */
export const timelineFile = (index: number, policy: string): string =>
  `timeline-${index}-${policy.replace(/[^\w.-]+/g, '_')}.json`;

export async function runExperiment(loaded: LoadedConfig, o: RunnerOptions = {}): Promise<ExperimentResult> {
  const { config, baseDir, file } = loaded;
  const log = o.log ?? (() => {});
  const family = config.executor.kind === 'throughput' ? 'throughput' : 'serving';
  // The columns are known before any run: a bad --columns fails now.
  try {
    chooseColumns(family, o.columns ?? {});
  } catch (err) {
    throw new UserError((err as Error).message, undefined, '--columns', o.columns?.columns?.join(','));
  }
  const warnings = new Set<string>();
  const onWarning = (m: string) => {
    if (!warnings.has(m)) {
      warnings.add(m);
      log(`warning: ${m}`);
    }
  };
  // Preflight (as `preflight`): every run's world must build (profiles, capacities, workload,
  // policy) before anything is written; worker threads start loading meanwhile.
  const specs = await prepareRuns(config, baseDir, file);
  const outDir = o.outDir;
  const byIndex = new Map<number, RunRecord>();
  const timingByIndex = new Map<number, TimingRecord>();
  // Said after preflight: bad input prints exactly one line.
  const notes: string[] = [];
  if (outDir && (o.resume ?? true)) {
    const prev = readResumable(outDir, config, specs, RESULTS_SCHEMA_VERSION, (m) => notes.push(m));
    // With --timeline, a run whose timeline is missing (the first invocation had none) is simulated again.
    const kept = prev.runs.filter((r) => !o.timeline || existsSync(path.join(outDir, timelineFile(r.index, r.policy))));
    for (const r of kept) byIndex.set(r.index, r);
    for (const t of prev.timing) if (byIndex.has(t.index)) timingByIndex.set(t.index, t);
    if (kept.length > 0)
      notes.push(
        `resuming: ${kept.length} of ${specs.length} runs already in ${path.join(outDir, 'results.json')}, ${specs.length - kept.length} to simulate`,
      );
  }
  const todo = specs.filter((s) => !byIndex.has(s.index));
  const jobs = o.jobs ?? 1;
  const base: TaskBase = { config, file, baseDir, timeline: o.timeline === true };
  const threads = o.queue === undefined && !o.sinks ? Math.min(jobs, todo.length, availableParallelism() * 4) : 1;
  // A plugin's runs go to a thread even with --jobs 1: a hook stuck in a loop cannot be stopped
  // on its own thread, but the watchdog here can terminate another one.
  const sandboxed = o.queue === undefined && !o.sinks && todo.some((s) => pluginOfSpec.has(s));
  const onStall: OnStall = (spec, hook, ms, budget) =>
    new PluginError(
      spec.policy.label,
      shownPath(pluginOfSpec.get(spec)?.file ?? '?'),
      hook,
      undefined,
      `still running after ${ms.toFixed(0)} ms, over the budget of ${budget} ms per call (config pluginBudgetMs); its thread was terminated`,
      CONTRACT_RULES.sandbox,
      undefined,
    );
  // Started before the worlds are checked: each thread loads the simulator while this one checks.
  let createdOut = false;
  const pool =
    (threads > 1 || sandboxed) && !o.backend
      ? threadBackend(threads, base, PluginError.make, sandboxed ? onStall : undefined)
      : undefined;
  try {
    await checkWorlds(specs, loaded, onWarning);
    createdOut = outDir !== undefined && !existsSync(outDir);
    if (outDir) makeOutDir(outDir);
  } catch (err) {
    await pool?.close();
    throw err;
  }
  o.onReady?.(specs.length);
  for (const n of notes) log(n);
  const progress = new SweepProgress(todo.length, byIndex.size, (o.progress ?? true) && process.stderr.isTTY === true);
  /** Every run done so far, in run-index order (the order of results.json whatever order runs finish in). */
  const sorted = <T extends { index: number }>(m: Map<number, T>): T[] =>
    [...m.values()].sort((a, b) => a.index - b.index);
  /** Writes one output file; a failure is the user's folder, not a bug. */
  const put = async (name: string, text: string): Promise<void> => {
    const target = path.join(outDir!, name);
    try {
      await writeFileAtomic(target, text);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      throw new UserError(`cannot write ${target} (${code ?? String(err)})`, undefined, '--out', outDir);
    }
  };
  let runs: RunRecord[] = sorted(byIndex);
  const writeNow = async (complete: boolean): Promise<void> => {
    runs = sorted(byIndex);
    if (!outDir) return;
    // results.json last: what it holds is what a resume keeps, and the others are already written for it.
    await put('timing.json', toJson({ name: config.name, runs: sorted(timingByIndex) }));
    await put('runs.csv', runsToCsv(runs));
    await put(
      'results.json',
      toJson({ schemaVersion: RESULTS_SCHEMA_VERSION, name: config.name, complete, config, runs }),
    );
  };
  // Writes are queued: one at a time (they share temporary file names), each with every run done by then.
  let writes: Promise<void> = Promise.resolve();
  const write = (complete: boolean): Promise<void> => (writes = writes.then(() => writeNow(complete)));
  // The files written after a run hold every run done so far (what a resume keeps), so each write
  // costs more as runs accumulate (tens of MB for MoE-Lens sweeps). The first run is written at
  // once, later ones at most every PARTIAL_WRITE_INTERVAL_MS or 10 × the last write's wall time
  // (a kill loses at most that much), the rest after a failure and at the end.
  let unwritten = 0;
  let nextWriteMs = Number.NEGATIVE_INFINITY;
  const writeSome = async (): Promise<void> => {
    unwritten++;
    if (performance.now() < nextWriteMs) return;
    unwritten = 0;
    const t0 = performance.now();
    await write(false);
    const t1 = performance.now();
    nextWriteMs = t1 + Math.max(PARTIAL_WRITE_INTERVAL_MS, 10 * (t1 - t0));
  };

  let backend: Backend;
  if (o.backend) {
    backend = o.backend;
  } else if (o.queue !== undefined) {
    const { queueBackend } = await import('./parallel/queue.ts');
    backend = await queueBackend(o.queue, base, PluginError.make, log);
  } else if (pool) {
    backend = pool;
  } else {
    backend = {
      concurrency: 1,
      run: (spec) => {
        progress.startRun(spec.workload.requests);
        return runOne(spec, {
          baseDir,
          file,
          timeline: o.timeline === true,
          onWarning,
          sinks: [progress, ...(o.sinks?.(spec) ?? [])],
        });
      },
      close: async () => {},
    };
  }
  try {
    await runInIndexOrder(todo, backend.concurrency, async (spec) => {
      const out = await backend.run(spec);
      // The timeline first: a run in results.json has its timeline on disk (resume skips it).
      if (outDir && out.timeline !== undefined) await put(timelineFile(spec.index, spec.policy.label), out.timeline);
      byIndex.set(spec.index, out.record);
      timingByIndex.set(spec.index, out.timing);
      progress.runDone();
      await writeSome();
    });
  } catch (err) {
    // The runs done are written (as each would have been); if none was, the folder this call made
    // is removed (nothing partial left).
    if (unwritten > 0) await write(false).catch(() => {});
    await writes.catch(() => {});
    if (createdOut && outDir && readdirSync(outDir).length === 0) rmdirSync(outDir);
    throw err;
  } finally {
    progress.stop();
    await backend.close();
    await writes.catch(() => {});
  }
  runs = sorted(byIndex);
  const timing = sorted(timingByIndex);
  const rows: TableRow[] = runs.map((r) => {
    const t = timingByIndex.get(r.index);
    return {
      policy: r.policy,
      params: r.params,
      seed: r.seed,
      metrics: r.metrics,
      wallS: t?.wallS ?? 0,
      eventsPerS: t?.eventsPerS ?? 0,
      simulatedS: r.sim.simulatedS,
    };
  });
  const relCols = addRelative(config, runs);
  await writeNow(true);
  if (outDir) {
    for (const plot of config.output.plots) await put(`${plot.name}.svg`, await renderPlot(plot, runs));
  }
  // The threshold outputs are files too: written either way, their table printed under the main one.
  const thresholdTable = await thresholdOutputs(config.output.thresholds, runs, o.tableStyle, outDir ? put : undefined);
  if (o.table === false) return { runs, timing, table: '', outDir };
  const extra: Column[] = config.output.columns.map((c) => columnById(family, c) ?? metricColumn(c));
  const rel: Column[] = relCols.map((m) => ({
    id: `rel:${m}`,
    header: `${m}/${config.output.relative!.baseline}`,
    get: (r: TableRow) => r.relative?.[m],
  }));
  const tableRows = rows.map((r, i) => ({ ...r, relative: runs[i]!.relative }));
  const { columns, fit } = chooseColumns(family, o.columns ?? {}, [...extra, ...rel]);
  let table = renderTable(
    tableRows,
    columns,
    o.tableStyle,
    fit ? { maxWidth: o.maxWidth ?? 120, hideEmpty: true } : {},
  );
  // A --columns metric path that no run has is most likely a typo: say so (the files are written).
  for (const id of o.columns?.columns ?? []) {
    const c = columns.find((x) => x.id === id);
    if (c && tableRows.every((r) => c.get(r) === undefined))
      log(`warning: --columns: no run has a metric '${id}' (the table shows '-')`);
  }
  if (config.output.seedSummary.length > 0)
    table += `\n${renderSeedSummary(tableRows, config.output.seedSummary, o.tableStyle)}`;
  table += thresholdTable;
  return { runs, timing, table, outDir };
}

/** The throughput metrics of a run of the throughput executor (undefined for a serving run). */
export function throughputMetricsOf(r: RunRecord): ThroughputMetrics | undefined {
  return 'feasible' in r.metrics ? (r.metrics as unknown as ThroughputMetrics) : undefined;
}

/** Fills `relative` on every run (see `output.relative`); returns the metric names. */
function addRelative(config: ExperimentConfig, runs: RunRecord[]): string[] {
  const rel = config.output.relative;
  if (!rel) return [];
  const pointKey = (r: RunRecord) =>
    JSON.stringify([Object.entries(r.params).filter(([k]) => !k.startsWith('policy.')), r.seed]);
  const base = new Map<string, RunRecord>();
  for (const r of runs) if (r.policy === rel.baseline) base.set(pointKey(r), r);
  for (const r of runs) {
    const b = base.get(pointKey(r));
    if (!b) continue;
    const out: Record<string, number> = {};
    for (const m of rel.metrics) {
      const v = metricAt(r.metrics, m);
      const bv = metricAt(b.metrics, m);
      if (typeof v === 'number' && typeof bv === 'number')
        out[m] = bv !== 0 ? Number((v / bv).toPrecision(6)) : v === 0 ? 1 : Infinity;
    }
    r.relative = out;
  }
  return rel.metrics;
}

// ---------------------------------------------------------------------------------------
// Paths, plugins and how their failures are reported
// ---------------------------------------------------------------------------------------

/**
 * A plugin policy failed: it threw, or broke a rule of the hook contract. Reported as the
 * plugin's error, not moesim's (the CLI prints `oneLine()` and exits 3).
 */
export class PluginError extends Error {
  override readonly name = 'PluginError';
  constructor(
    /** The policy's label in the config. */
    readonly policy: string,
    /** The plugin module: relative to the current directory when inside it, else absolute. */
    readonly file: string,
    /** The hook (or `create`, the factory) that failed. */
    readonly hook: string,
    /** Simulated time of the failure, when a run was under way. */
    readonly simTimeNs: number | undefined,
    /** What went wrong: the plugin's own message, or what it asked for. */
    readonly detail: string,
    /** The contract rule it broke; undefined when the plugin threw. */
    readonly rule: string | undefined,
    /** The plugin's original error (its stack, for `--debug`). */
    readonly original: unknown,
  ) {
    super(detail);
  }

  /** The constructor as a function (a worker's failure is rebuilt with it). */
  static make(
    policy: string,
    file: string,
    hook: string,
    simTimeNs: number | undefined,
    detail: string,
    rule: string | undefined,
    original: unknown,
  ): PluginError {
    return new PluginError(policy, file, hook, simTimeNs, detail, rule, original);
  }

  oneLine(): string {
    const at = this.simTimeNs === undefined ? '' : ` at t=${(this.simTimeNs / 1e9).toFixed(3)} s`;
    const head = `policy '${this.policy}' (${this.file})`;
    const line = this.rule
      ? `${head} broke a rule in hook '${this.hook}'${at}: ${this.rule}: ${this.detail}`
      : `${head} threw in hook '${this.hook}'${at}: ${this.detail}`;
    return line.replace(/\s*\n\s*/g, ' ');
  }
}

/** The rules of the serving hook contract that moesim enforces on plugins (docs/PLUGINS.md). */
export const CONTRACT_RULES = {
  key: 'expert keys must name existing experts (0 ≤ key < MoE layers × experts)',
  pinned: 'a policy may not evict an expert in use (pinned: computing, or awaited by the current layer)',
  victim: 'chooseVictim must return one of query.candidates, or undefined',
  demandVictim: 'chooseVictim must free a slot for an on-demand fetch (it may decline only for a prefetch)',
  budget: 'one decision may prefetch at most as many experts as the buffer has slots',
  plan: 'a throughput plan must fit the machine (valid configuration; VRAM and host DRAM within capacity)',
  result: 'a hook returns what its type says, synchronously (a decision object or undefined; never a Promise)',
  readOnly: 'views are read-only (a policy keeps its own state in its own objects)',
  sandbox: 'plugin code may not end the process, and each call must finish within pluginBudgetMs',
} as const;

/** Contract checks the executor itself makes, by the message of its PolicyError. */
const EXECUTOR_RULES: readonly [RegExp, string][] = [
  [/^invalid expert key/, CONTRACT_RULES.key],
  [/^declined to evict for an on-demand fetch/, CONTRACT_RULES.demandVictim],
  [/which is not an evictable candidate/, CONTRACT_RULES.victim],
  [/^invalid plan/, CONTRACT_RULES.plan],
  [/of a read-only view/, CONTRACT_RULES.readOnly],
  [/^called process\.exit|over the budget of/, CONTRACT_RULES.sandbox],
];

export interface GuardState {
  /** The last rule the guard saw broken (the executor wraps the guard's throw in a PolicyError). */
  violation: string | undefined;
}

interface PluginInfo {
  readonly file: string;
  readonly guard: GuardState;
}

/** Prepared runs that use a plugin, with its file and guard. */
const pluginOfSpec = new WeakMap<RunSpec, PluginInfo>();

/** Imports each plugin module of the config on a throwaway thread first (sandbox.ts `probeImport`). */
async function probePlugins(config: ExperimentConfig, baseDir: string, budgetMs: number): Promise<void> {
  for (const e of config.policies) {
    if ('name' in e || typeof e.path !== 'string') continue;
    const abs = path.resolve(baseDir, e.path);
    if (!existsSync(abs)) continue;
    const why = await probeImport(abs, budgetMs);
    if (why !== undefined)
      throw new PluginError(
        e.label ?? e.path,
        shownPath(abs),
        'import',
        undefined,
        why,
        CONTRACT_RULES.sandbox,
        undefined,
      );
  }
}

/** A plugin's file as messages show it: relative to the current directory when inside it, else absolute. */
function shownPath(file: string): string {
  const rel = path.relative(process.cwd(), file);
  return rel && !rel.startsWith('..') && !path.isAbsolute(rel) ? rel : file;
}

/** Plugin definitions of the config's `policies[].path` entries → absolute module path. */
async function pluginFiles(config: ExperimentConfig, baseDir: string): Promise<Map<unknown, string>> {
  const out = new Map<unknown, string>();
  for (const e of config.policies) {
    if ('name' in e || typeof e.path !== 'string') continue;
    const abs = path.resolve(baseDir, e.path);
    // Already imported (and checked) by expandRuns: this is the cached module.
    const mod = await importPluginModule(abs);
    out.set(mod.default ?? mod.policy, abs);
  }
  return out;
}

/** A model or hardware reference: an id, or a `.json` (or `.yaml` testbed) file relative to `baseDir`. */
const resolveProfileRef = (ref: string, baseDir: string): string =>
  /\.(json|ya?ml)$/.test(ref) ? path.resolve(baseDir, ref) : ref;

/**
 * The run as it is built: profile files resolved against the config's folder (the one rule for
 * paths inside a config), and a plugin's factory wrapped so its policy is checked against the
 * hook contract. `params` keep the values as written, so results do not depend on the
 * working directory.
 */
function prepareSpec(spec: RunSpec, baseDir: string, plugins: Map<unknown, string>, budgetMs: number): RunSpec {
  const model = resolveProfileRef(spec.model, baseDir);
  const hardware = resolveProfileRef(spec.hardware, baseDir);
  const file = plugins.get(spec.policy.definition);
  if (!file) return { ...spec, model, hardware };
  const guard: GuardState = { violation: undefined };
  const def = spec.policy.definition;
  const definition: PolicyDefinition<unknown> =
    def.family === 'serving'
      ? {
          ...def,
          create: (params, ctx) =>
            guardPolicy(
              checkServingHooks(
                runPluginCode('create', budgetMs, () => def.create(params, ctx)),
                def.name,
                file,
              ),
              guard,
              budgetMs,
            ),
        }
      : def;
  const prepared: RunSpec = { ...spec, model, hardware, policy: { ...spec.policy, definition } };
  pluginOfSpec.set(prepared, { file, guard });
  return prepared;
}

/** Runs `f` (a run of `spec`), reporting a plugin's failure as the plugin's. */
function guarded<T>(spec: RunSpec, file: string, f: () => T): T {
  try {
    return f();
  } catch (err) {
    throw asReported(err, spec, file);
  }
}

/** Multiples of 1024 → human-readable ("34235267072 B" → "31.9 GiB"). */
export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let v = n;
  let u = 0;
  while (Math.abs(v) >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${n} B` : `${v.toFixed(1)} ${units[u]}`;
}

/** Rewrites every raw byte count ("25769803776 B") of a message in human units. */
export const humanizeSizes = (message: string): string =>
  message.replace(/\b(\d{4,}) B\b/g, (_m, n: string) => formatBytes(Number(n)));

/**
 * What to report for an error of a run's preflight or run: user errors name the config file
 * (profile and capacity errors know their field but not the file) with readable sizes; a
 * plugin's failure becomes a `PluginError`; anything else (a built-in policy's PolicyError
 * included) is a fault of moesim and is passed on as it is.
 */
function asReported(err: unknown, spec: RunSpec, configFile: string): unknown {
  if (err instanceof UserError) {
    const message = humanizeSizes(err.message);
    if (err.file && message === err.message) return err;
    return new UserError(message, err.file ?? configFile, err.field, err.value);
  }
  const plugin = pluginOfSpec.get(spec);
  if (!plugin) return err;
  const shown = shownPath(plugin.file);
  if (err instanceof PolicyError) {
    const detail = err.message.replace(/^\[t=\d+ns [^\]]*\] /, '');
    const rule = plugin.guard.violation ?? EXECUTOR_RULES.find(([re]) => re.test(detail))?.[1];
    plugin.guard.violation = undefined;
    return new PluginError(spec.policy.label, shown, err.hook, err.simTimeNs, detail, rule, err);
  }
  if (err instanceof PluginExit)
    return new PluginError(spec.policy.label, shown, 'create', undefined, err.message, CONTRACT_RULES.sandbox, err);
  // Thrown outside a hook (the factory, or code the executor does not wrap): the plugin's if its
  // own file is on top of the stack.
  const stack = err instanceof Error ? (err.stack ?? '') : '';
  const firstFrame = stack.split('\n').find((l) => /^\s+at /.test(l)) ?? '';
  if (firstFrame.includes(plugin.file) || firstFrame.includes(pathToFileURL(plugin.file).href)) {
    return new PluginError(
      spec.policy.label,
      shown,
      'create',
      undefined,
      err instanceof Error ? err.message : String(err),
      undefined,
      err,
    );
  }
  return err;
}

/**
 * Wraps a plugin's serving policy so that every result is checked against the hook contract
 * before the executor sees it. Every hook of `ServingPolicy` is wrapped (`interceptPolicy` walks
 * the typed hook list) and every setting kept, so a plugin gets each hook it wrote. A broken
 * rule throws (inside the hook, so the executor reports the hook and the time) and is
 * remembered in `state` for the report.
 */
export function guardPolicy(p: ServingPolicy, state: GuardState, budgetMs = DEFAULT_PLUGIN_BUDGET_MS): ServingPolicy {
  const violate = (rule: string, detail: string): never => {
    state.violation = rule;
    throw new Error(detail);
  };
  const checkKey = (shape: ModelShapeView, key: unknown, what: string): void => {
    const n = shape.moeLayers * shape.experts;
    if (!(typeof key === 'number' && Number.isInteger(key) && key >= 0 && key < n)) {
      const layers = `${shape.moeLayers} MoE layers × ${shape.experts} experts`;
      violate(CONTRACT_RULES.key, `${what} expert key ${String(key)}, but this model has keys 0…${n - 1} (${layers})`);
    }
  };
  const checkDecision = (view: ServingView, d: PolicyDecision | void): PolicyDecision | void => {
    if (!d) return d;
    const prefetch = d.prefetch ?? [];
    for (const r of prefetch) checkKey(view, (r as { key?: unknown } | null)?.key, 'asked to prefetch');
    for (const k of d.cancel ?? []) checkKey(view, k, 'asked to cancel');
    for (const k of d.evict ?? []) {
      checkKey(view, k, 'asked to evict');
      if (view.buffer.entry(k)?.pinned) {
        const which = `expert ${view.expertOf(k)} of MoE layer ${view.layerOf(k)} (key ${k})`;
        violate(CONTRACT_RULES.pinned, `asked to evict ${which} while the current layer uses it`);
      }
    }
    for (const k of d.dropTops ?? []) checkKey(view, k, 'asked to drop the top of');
    for (const t of d.loadTops ?? []) checkKey(view, (t as { key?: unknown } | null)?.key, 'asked to load a top of');
    const distinct = new Set(prefetch.map((r) => r.key)).size;
    if (distinct > view.slots)
      violate(CONTRACT_RULES.budget, `asked to prefetch ${distinct} experts into a buffer of ${view.slots} slots`);
    return d;
  };
  const checkVictim = (
    view: ServingView,
    query: EvictionQuery,
    victim: ExpertKey | undefined,
  ): ExpertKey | undefined => {
    if (victim === undefined) {
      if (query.reason === 'demand')
        violate(
          CONTRACT_RULES.demandVictim,
          `returned undefined when expert key ${query.forKey} had to be fetched on demand`,
        );
      return victim;
    }
    if (!query.candidates.includes(victim)) {
      checkKey(view, victim, 'chose');
      const detail = `chose key ${victim}, which is not among the ${query.candidates.length} candidates (resident and not in use)`;
      violate(CONTRACT_RULES.victim, detail);
    }
    return victim;
  };
  const checkKeep = (view: ServingView, r: ReturnType<NonNullable<ServingPolicy['afterUse']>>): typeof r => {
    if (typeof r === 'object' && r !== null)
      for (const k of r.dropTops ?? []) checkKey(view, k, 'asked to drop the top of');
    return r;
  };
  const checkTops = (shape: ModelShapeView, tops: readonly TopRequest[]): readonly TopRequest[] => {
    for (const t of tops) checkKey(shape, (t as { key?: unknown } | null)?.key, 'gave an initial top of');
    return tops;
  };
  const checkResult = (hook: ServingHook, r: unknown): void => {
    if (isThenable(r)) violate(CONTRACT_RULES.result, `returned a Promise (an async hook?); ${expected(hook)}`);
    const kind = SERVING_HOOKS[hook];
    const ok =
      kind === 'decision'
        ? r === undefined || isDecision(r)
        : kind === 'victim'
          ? r === undefined || typeof r === 'number'
          : kind === 'keep'
            ? r === undefined ||
              typeof r === 'boolean' ||
              (isPlainObject(r) && typeof r.keepTop === 'number' && isArrayOrAbsent(r.dropTops))
            : hook === 'initialTops'
              ? Array.isArray(r)
              : true;
    if (!ok) violate(CONTRACT_RULES.result, `returned ${describe(r)}; ${expected(hook)}`);
  };
  return interceptPolicy(p, (hook, call): AnyHook => {
    const check = checkerOf(hook);
    // Plugin code sees the executor's objects read-only, under the sandbox (exit, budget, heartbeat).
    return (...args) => {
      const r = runPluginCode(hook, budgetMs, () => call(...args.map(readOnly)));
      checkResult(hook, r);
      return check ? check(args, r) : r;
    };
  });

  function checkerOf(hook: ServingHook): ((args: unknown[], r: unknown) => unknown) | undefined {
    switch (SERVING_HOOKS[hook]) {
      case 'decision':
        return ([view], r) => checkDecision(view as ServingView, r as PolicyDecision | void);
      case 'victim':
        return ([view, query], r) =>
          checkVictim(view as ServingView, query as EvictionQuery, r as ExpertKey | undefined);
      case 'keep':
        return ([view], r) => checkKeep(view as ServingView, r as ReturnType<typeof checkKeep>);
      case 'setup':
        if (hook !== 'initialTops') return undefined;
        return ([shape], r) => checkTops(shape as ModelShapeView, r as readonly TopRequest[]);
      case 'notice':
        return undefined;
    }
  }
}

/** What a hook of this kind must return (for the message of a broken `result` rule). */
function expected(hook: ServingHook): string {
  switch (SERVING_HOOKS[hook]) {
    case 'decision':
      return `${hook} must return a decision object ({ prefetch?, cancel?, evict?, dropTops?, loadTops?, topPriority? }) or undefined`;
    case 'victim':
      return `${hook} must return an expert key (a number) or undefined`;
    case 'keep':
      return `${hook} must return a boolean, { keepTop, dropTops? } or undefined`;
    default:
      return hook === 'initialTops'
        ? `${hook} must return an array of { key, fraction }`
        : `${hook} must return synchronously`;
  }
}

const isThenable = (r: unknown): boolean =>
  typeof r === 'object' && r !== null && typeof (r as { then?: unknown }).then === 'function';
const isPlainObject = (r: unknown): r is Record<string, unknown> =>
  typeof r === 'object' && r !== null && !Array.isArray(r);
const isArrayOrAbsent = (v: unknown): boolean => v === undefined || Array.isArray(v);
const DECISION_LISTS = ['prefetch', 'cancel', 'evict', 'dropTops', 'loadTops'] as const;
const isDecision = (r: unknown): boolean =>
  isPlainObject(r) &&
  DECISION_LISTS.every((f) => isArrayOrAbsent(r[f])) &&
  (r.topPriority === undefined || typeof r.topPriority === 'number');

/** A hook's result as a message shows it (short). */
function describe(r: unknown): string {
  if (r === null) return 'null';
  if (Array.isArray(r)) return 'an array';
  if (typeof r === 'object') return 'an object that is not a decision';
  if (typeof r === 'string') return `a string ${JSON.stringify(r.slice(0, 40))}`;
  return `${typeof r} ${String(r)}`;
}
