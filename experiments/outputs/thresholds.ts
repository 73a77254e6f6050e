/**
 * Thresholds (`output.thresholds`): for each target value of a metric, the smallest grid point
 * of a swept parameter at which each policy meets it — e.g. MoEpic's Fig 8, "the minimum VRAM each
 * system needs to reach a target TPOT", as a sweep over the budget plus this step.
 *
 * ```yaml
 * sweep: { policy.budgetExperts: [48, 96, 144, 192] }
 * output:
 *   thresholds:
 *     x: policy.budgetExperts        # the searched parameter (a swept path or case key)
 *     metric: tpotMs.mean            # metric path
 *     targets: [80, 100, 120]        # or per case label: { Qwen1.5-MoE: [...], Mixtral: [...] }
 *     report: peakBytes.vram.total   # reported at the point found (default: x itself)
 *     unit: GiB                      # bytes shown in GiB (or GB, MiB, MB)
 * ```
 *
 * Groups: runs are grouped by policy and every run parameter except `x` (cases, other sweep
 * keys); seeds of one point are averaged (metric and report). In each group, for each target,
 * the smallest x whose mean metric meets it (`≤ target`, or `≥` with `direction: above`) is the
 * answer; if no grid point meets it the target is "not reached" (the grid's resolution bounds
 * the answer: the true minimum lies between the point found and the grid point before it).
 * Outputs: a table per case (targets as columns), `<name>.json` and `<name>.svg` (report vs
 * target per policy, one panel per case).
 */
import { z } from 'zod';
import { UserError } from '../../sim/kernel/errors.ts';
import { layout, metricAt, type TableStyle } from './table.ts';
import { renderPlot, type PlotRun } from './plot.ts';

const UNITS = { GiB: 2 ** 30, GB: 1e9, MiB: 2 ** 20, MB: 1e6 } as const;

export const ThresholdsSchema = z
  .object({
    /** File name of the outputs (without extension). */
    name: z
      .string()
      .regex(/^[\w.-]+$/)
      .default('thresholds'),
    title: z.string().optional(),
    /** The searched run parameter: a swept path (e.g. `policy.budgetExperts`) or a case key. */
    x: z.string().min(1),
    /** Metric path compared with the targets (a leading `metrics.` is allowed). */
    metric: z.string().min(1),
    /** `below`: met when metric ≤ target (latency); `above`: when metric ≥ target (throughput). */
    direction: z.enum(['below', 'above']).default('below'),
    /** Targets, or targets per case label (`cases[].case`). */
    targets: z.union([z.array(z.number()).min(1), z.record(z.string(), z.array(z.number()).min(1))]),
    /** Metric path reported at the point found (default: x itself). */
    report: z.string().min(1).optional(),
    /** Unit of a byte-valued `report`. */
    unit: z.enum(['GiB', 'GB', 'MiB', 'MB']).optional(),
  })
  .strict();
export type ThresholdsSpec = z.infer<typeof ThresholdsSchema>;

/** What a threshold search needs of a run (a `RunRecord` is one). */
export interface ThresholdRun {
  readonly policy: string;
  readonly seed: number;
  readonly params: Readonly<Record<string, unknown>>;
  readonly metrics: Readonly<Record<string, unknown>>;
}

export interface ThresholdRow {
  /** The case label (`params.case`), if the experiment has cases. */
  readonly case?: string;
  readonly policy: string;
  /** The group's other parameters (neither x nor the case), as `key=value` text; empty if none. */
  readonly point: string;
  readonly target: number;
  readonly reached: boolean;
  /** Smallest x meeting the target (absent when not reached). */
  readonly x?: number | string;
  /** Mean metric at that point. */
  readonly metric?: number;
  /** The report value there (in `unit`), absent when not reached. */
  readonly report?: number;
  /** The best the grid reached (mean metric at its best point), so "not reached" says by how much. */
  readonly best: number;
}

const CASE = 'case';
const metricPath = (p: string): string => (p.startsWith('metrics.') ? p.slice('metrics.'.length) : p);

/** Config-time checks: x must be a run parameter, per-case targets must name the cases. */
export function checkThresholds(
  spec: ThresholdsSpec,
  runFields: ReadonlySet<string>,
  caseLabels: readonly string[],
  file?: string,
): void {
  if (!runFields.has(spec.x))
    throw new UserError('thresholds.x must be a swept path or a case key', file, 'output.thresholds.x', spec.x);
  if (!Array.isArray(spec.targets)) {
    for (const label of Object.keys(spec.targets)) {
      if (!caseLabels.includes(label))
        throw new UserError(
          `thresholds.targets names no case (cases: ${caseLabels.join(', ') || 'none'})`,
          file,
          `output.thresholds.targets.${label}`,
          label,
        );
    }
    for (const label of caseLabels) {
      if (!(label in spec.targets))
        throw new UserError('a case has no thresholds.targets entry', file, 'output.thresholds.targets', label);
    }
  }
}

const mean = (v: readonly number[]): number => v.reduce((a, b) => a + b, 0) / v.length;

/** The smallest grid point meeting each target, per (case, policy, other parameters). */
export function findThresholds(spec: ThresholdsSpec, runs: readonly ThresholdRun[]): ThresholdRow[] {
  const metric = metricPath(spec.metric);
  const report = spec.report !== undefined ? metricPath(spec.report) : undefined;
  const div = spec.unit ? UNITS[spec.unit] : 1;
  interface Point {
    x: number | string;
    metric: number[];
    report: number[];
  }
  interface Group {
    case?: string;
    policy: string;
    point: string;
    points: Map<string, Point>;
  }
  const caseOf = (r: ThresholdRun): string | undefined =>
    typeof r.params[CASE] === 'string' ? (r.params[CASE] as string) : undefined;
  const restOf = (r: ThresholdRun): [string, unknown][] =>
    Object.entries(r.params)
      .filter(([k]) => k !== spec.x && k !== CASE)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  // Shown in a row: the other parameters that vary among the runs of its case.
  const varying = new Map<string | undefined, Set<string>>();
  const seen = new Map<string, Set<string>>();
  for (const r of runs) {
    for (const [k, v] of restOf(r)) {
      const sk = JSON.stringify([caseOf(r) ?? null, k]);
      let vals = seen.get(sk);
      if (!vals) seen.set(sk, (vals = new Set()));
      vals.add(JSON.stringify(v));
      if (vals.size > 1) {
        let set = varying.get(caseOf(r));
        if (!set) varying.set(caseOf(r), (set = new Set()));
        set.add(k);
      }
    }
  }
  const groups = new Map<string, Group>();
  for (const r of runs) {
    const xv = r.params[spec.x];
    if (typeof xv !== 'number' && typeof xv !== 'string') continue;
    const caseLabel = caseOf(r);
    const rest = restOf(r);
    const shown = varying.get(caseLabel) ?? new Set<string>();
    const point = rest
      .filter(([k]) => shown.has(k))
      .map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : String(v)}`)
      .join(', ');
    const key = JSON.stringify([caseLabel ?? null, r.policy, rest]);
    let g = groups.get(key);
    if (!g)
      groups.set(
        key,
        (g = { ...(caseLabel !== undefined ? { case: caseLabel } : {}), policy: r.policy, point, points: new Map() }),
      );
    const pk = JSON.stringify(xv);
    let p = g.points.get(pk);
    if (!p) g.points.set(pk, (p = { x: xv, metric: [], report: [] }));
    const m = metricAt(r.metrics, metric);
    if (typeof m === 'number' && Number.isFinite(m)) p.metric.push(m);
    const rv = report !== undefined ? metricAt(r.metrics, report) : xv;
    if (typeof rv === 'number') p.report.push(rv);
  }
  const meets = (v: number, t: number): boolean => (spec.direction === 'below' ? v <= t : v >= t);
  const out: ThresholdRow[] = [];
  for (const g of groups.values()) {
    const pts = [...g.points.values()].filter((p) => p.metric.length > 0);
    pts.sort((a, b) =>
      typeof a.x === 'number' && typeof b.x === 'number' ? a.x - b.x : String(a.x).localeCompare(String(b.x)),
    );
    const targets = Array.isArray(spec.targets) ? spec.targets : (spec.targets[g.case ?? ''] ?? []);
    const means = pts.map((p) => mean(p.metric));
    const best = means.length === 0 ? NaN : spec.direction === 'below' ? Math.min(...means) : Math.max(...means);
    for (const target of targets) {
      const i = means.findIndex((m) => meets(m, target));
      const base = {
        ...(g.case !== undefined ? { case: g.case } : {}),
        policy: g.policy,
        point: g.point,
        target,
        best,
      };
      if (i < 0) {
        out.push({ ...base, reached: false });
        continue;
      }
      const p = pts[i]!;
      const rep = p.report.length > 0 ? mean(p.report) : typeof p.x === 'number' ? p.x : NaN;
      out.push({ ...base, reached: true, x: p.x, metric: means[i]!, report: report !== undefined ? rep / div : rep });
    }
  }
  return out;
}

const fmt = (v: number): string =>
  Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2);

/** One table per case: a row per policy (and other parameters), a column per target. */
export function renderThresholds(
  spec: ThresholdsSpec,
  rows: readonly ThresholdRow[],
  style: TableStyle = 'box',
): string {
  const rel = spec.direction === 'below' ? '≤' : '≥';
  const what = spec.report !== undefined ? `${metricPath(spec.report)}${spec.unit ? ` (${spec.unit})` : ''}` : spec.x;
  const cases = [...new Set(rows.map((r) => r.case))];
  const parts: string[] = [];
  for (const c of cases) {
    const mine = rows.filter((r) => r.case === c);
    const targets = [...new Set(mine.map((r) => r.target))];
    const withPoint = mine.some((r) => r.point !== '');
    const head = [
      'policy',
      ...(withPoint ? ['point'] : []),
      ...targets.map((t) => `${metricPath(spec.metric)}\n${rel} ${t}`),
    ];
    const body: string[][] = [];
    const keys = [...new Set(mine.map((r) => JSON.stringify([r.policy, r.point])))];
    for (const k of keys) {
      const [policy, point] = JSON.parse(k) as [string, string];
      const cells = targets.map((t) => {
        const r = mine.find((x) => x.policy === policy && x.point === point && x.target === t);
        if (!r) return '-';
        if (!r.reached) return `not reached (best ${fmt(r.best)})`;
        return spec.report !== undefined
          ? `${fmt(r.report!)} (${spec.x.replace(/^policy\./, '')} ${r.x})`
          : String(r.x);
      });
      body.push([policy, ...(withPoint ? [point] : []), ...cells]);
    }
    const title = `${spec.title ?? `smallest ${spec.x} meeting each ${metricPath(spec.metric)} target → ${what}`}${c !== undefined ? ` — ${c}` : ''}`;
    parts.push(`${title}\n${layout(head, body, style)}`);
  }
  return parts.join('\n\n');
}

/** The SVG of the thresholds: report (or x) vs target, a line per policy, a panel per case. */
export async function renderThresholdsPlot(spec: ThresholdsSpec, rows: readonly ThresholdRow[]): Promise<string> {
  const what = spec.report !== undefined ? `${metricPath(spec.report)}${spec.unit ? ` (${spec.unit})` : ''}` : spec.x;
  // Axis fields named for their titles (a metric field may not contain dots).
  const yKey = what.replace(/\./g, ' ');
  const xKey = `${metricPath(spec.metric)} target`;
  const points: PlotRun[] = rows
    .filter((r) => r.reached)
    .map((r) => ({
      policy: r.point ? `${r.policy} (${r.point})` : r.policy,
      seed: 0,
      params: { [xKey]: r.target, case: r.case ?? '' },
      metrics: { [yKey]: r.report ?? (typeof r.x === 'number' ? r.x : NaN) },
    }));
  const hasCases = rows.some((r) => r.case !== undefined);
  return renderPlot(
    {
      name: spec.name,
      title: spec.title ?? `${what} needed to reach each ${metricPath(spec.metric)} target`,
      x: xKey,
      y: `metrics.${yKey}`,
      series: 'policy',
      ...(hasCases ? { facet: 'case' } : {}),
      kind: 'line',
      logX: false,
      logY: false,
    },
    points,
  );
}

/**
 * The runner's step: finds the thresholds, writes `<name>.json` and `<name>.svg` through `put`
 * (when there is an output folder) and returns the table to print under the main one.
 */
export async function thresholdOutputs(
  spec: ThresholdsSpec | undefined,
  runs: readonly ThresholdRun[],
  style: TableStyle | undefined,
  put: ((name: string, text: string) => Promise<void>) | undefined,
): Promise<string> {
  if (!spec) return '';
  const rows = findThresholds(spec, runs);
  if (put) {
    await put(`${spec.name}.json`, `${JSON.stringify({ spec, rows }, null, 2)}\n`);
    if (rows.some((r) => r.reached)) await put(`${spec.name}.svg`, await renderThresholdsPlot(spec, rows));
  }
  return `\n${renderThresholds(spec, rows, style)}`;
}
