/**
 * Runs an experiment: expands runs, preflights every one (so bad input fails before any
 * output exists), runs them in order, and writes results atomically after each run (a killed
 * experiment keeps every finished run; `complete` says whether all ran).
 *
 * Outputs in `outDir`: `results.json` (schema-versioned; simulated quantities only, so reruns
 * are byte-identical), `timing.json` (wall time and events/s per run), `runs.csv`, and with
 * `timeline` one Chrome-trace `timeline-<index>-<policy>.json` per run.
 * Only this module measures wall time.
 */
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import cliProgress from 'cli-progress';
import { UserError } from '../sim/kernel/errors.ts';
import type { TraceSink } from '../sim/observe/trace-sink.ts';
import { fanout } from '../sim/observe/trace-sink.ts';
import { servingMetrics, type RunMetrics } from '../sim/metrics/serving-metrics.ts';
import { throughputMetrics, type ThroughputMetrics } from '../sim/metrics/throughput-metrics.ts';
import { expandRuns, type RunSpec } from './config/expand.ts';
import type { LoadedConfig } from './config/load.ts';
import { writeFileAtomic, toJson } from './outputs/atomic.ts';
import { runsToCsv } from './outputs/csv.ts';
import { renderSeedSummary, renderTable, type TableStyle, SERVING_COLUMNS, THROUGHPUT_COLUMNS, metricAt, type Column, type TableRow } from './outputs/table.ts';
import { TimelineSink } from './outputs/timeline.ts';
import { renderPlot } from './outputs/plot.ts';
import type { ExperimentConfig } from './config/schema.ts';
import { buildServingWorld, buildThroughputWorld } from './world.ts';

export const RESULTS_SCHEMA_VERSION = 1;

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
  /** Show a progress bar on stderr (only when it is a terminal and the run takes more than ~1.5 s). */
  readonly progress?: boolean;
  /** Diagnostics (stderr). */
  readonly log?: (message: string) => void;
  /** Extra sinks for every run (tests: invariant checkers). */
  readonly sinks?: (spec: RunSpec) => readonly TraceSink[];
  /** Style of the returned table (default box). */
  readonly tableStyle?: TableStyle;
  /** Called once every run has passed preflight, before the first one starts (nothing is called when the input is bad). */
  readonly onReady?: (runs: number) => void;
}

class LazyProgress implements TraceSink {
  private bar: cliProgress.SingleBar | null = null;
  private done = 0;
  private readonly t0 = performance.now();
  constructor(
    private readonly total: number,
    private readonly enabled: boolean,
  ) {}
  onRequest: NonNullable<TraceSink['onRequest']> = (_id, phase) => {
    if (phase !== 'finish') return;
    this.done++;
    if (!this.enabled) return;
    if (!this.bar && performance.now() - this.t0 > 1500) {
      this.bar = new cliProgress.SingleBar({ stream: process.stderr, format: 'simulating [{bar}] {percentage}% | {value}/{total} requests | eta {eta}s', hideCursor: true }, cliProgress.Presets.shades_classic);
      this.bar.start(this.total, this.done);
    }
    this.bar?.update(this.done);
  };
  stop(): void {
    this.bar?.stop();
  }
}

export async function runExperiment(loaded: LoadedConfig, o: RunnerOptions = {}): Promise<ExperimentResult> {
  const { config, baseDir, file } = loaded;
  const log = o.log ?? (() => {});
  const specs = await expandRuns(config, baseDir, file);
  const warnings = new Set<string>();
  const onWarning = (m: string) => {
    if (!warnings.has(m)) {
      warnings.add(m);
      log(`warning: ${m}`);
    }
  };
  // Preflight: every run's world must build (profiles, capacities, workload, policy) before anything is written.
  try {
    for (const spec of specs) {
      if (spec.throughput) await buildThroughputWorld(spec, { baseDir, onWarning });
      else await buildServingWorld(spec, { baseDir, onWarning });
    }
  } catch (err) {
    // Profile and capacity errors know their field but not the config file they came from.
    if (err instanceof UserError && !err.file) throw new UserError(err.message, file, err.field, err.value);
    throw err;
  }
  o.onReady?.(specs.length);

  const totalRequests = specs.reduce((a, s) => a + s.workload.requests, 0);
  const progress = new LazyProgress(totalRequests, (o.progress ?? true) && process.stderr.isTTY === true);
  const runs: RunRecord[] = [];
  const timing: TimingRecord[] = [];
  const rows: TableRow[] = [];
  const outDir = o.outDir;
  const write = async (complete: boolean): Promise<void> => {
    if (!outDir) return;
    await writeFileAtomic(path.join(outDir, 'results.json'), toJson({ schemaVersion: RESULTS_SCHEMA_VERSION, name: config.name, complete, config, runs }));
    await writeFileAtomic(path.join(outDir, 'timing.json'), toJson({ name: config.name, runs: timing }));
    await writeFileAtomic(path.join(outDir, 'runs.csv'), runsToCsv(runs));
  };
  try {
    for (const spec of specs) {
      const timeline = o.timeline ? new TimelineSink() : undefined;
      const sinks: TraceSink[] = [progress, ...(timeline ? [timeline] : []), ...(o.sinks?.(spec) ?? [])];
      let metrics: RunMetrics | ThroughputMetrics;
      let events: number;
      let endNs: number;
      let wallS: number;
      if (spec.throughput) {
        const executor = await buildThroughputWorld(spec, { baseDir, onWarning, sink: fanout(sinks) });
        const t0 = performance.now();
        const outcome = executor.run();
        wallS = (performance.now() - t0) / 1000;
        metrics = throughputMetrics(outcome);
        events = outcome.events;
        endNs = outcome.endNs;
      } else {
        const executor = await buildServingWorld(spec, { baseDir, onWarning, sink: fanout(sinks) });
        const t0 = performance.now();
        const outcome = executor.run();
        wallS = (performance.now() - t0) / 1000;
        metrics = servingMetrics(outcome, spec.workload.shift ? { shiftAtRequest: spec.workload.shift.atRequest } : {});
        events = outcome.events;
        endNs = outcome.endNs;
      }
      const simulatedS = endNs / 1e9;
      const record: RunRecord = {
        index: spec.index,
        policy: spec.policy.label,
        params: spec.params,
        seed: spec.seed,
        metrics,
        sim: { events, simulatedS },
      } as RunRecord;
      runs.push(record);
      const eventsPerS = wallS > 0 ? events / wallS : 0;
      timing.push({ index: spec.index, policy: spec.policy.label, wallS, eventsPerS, simulatedSPerWallS: wallS > 0 ? simulatedS / wallS : 0 });
      rows.push({ policy: record.policy, params: record.params, seed: record.seed, metrics: record.metrics, wallS, eventsPerS });
      if (outDir && timeline) {
        await writeFileAtomic(path.join(outDir, `timeline-${spec.index}-${spec.policy.label.replace(/[^\w.-]+/g, '_')}.json`), timeline.toJson());
      }
      await write(false);
    }
  } finally {
    progress.stop();
  }
  const relCols = addRelative(config, runs);
  await write(true);
  if (outDir) {
    for (const plot of config.output.plots) await writeFileAtomic(path.join(outDir, `${plot.name}.svg`), await renderPlot(plot, runs));
  }
  const extra: Column[] = config.output.columns.map((c) => ({ header: c, get: (r: TableRow) => metricAt(r.metrics, c) }));
  const rel: Column[] = relCols.map((m) => ({ header: `${m}/${config.output.relative!.baseline}`, get: (r: TableRow) => r.relative?.[m] }));
  const tableRows = rows.map((r, i) => ({ ...r, relative: runs[i]!.relative }));
  const base = config.executor.kind === 'throughput' ? THROUGHPUT_COLUMNS : SERVING_COLUMNS;
  let table = renderTable(tableRows, [...base, ...extra, ...rel], o.tableStyle);
  if (config.output.seedSummary.length > 0) table += `\n${renderSeedSummary(tableRows, config.output.seedSummary, o.tableStyle)}`;
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
      if (typeof v === 'number' && typeof bv === 'number') out[m] = bv !== 0 ? Number((v / bv).toPrecision(6)) : v === 0 ? 1 : Infinity;
    }
    r.relative = out;
  }
  return rel.metrics;
}
