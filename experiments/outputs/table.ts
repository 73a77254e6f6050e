/** The table printed on stdout after an experiment. */
import Table from 'cli-table3';

export interface Column {
  readonly header: string;
  readonly get: (row: TableRow) => unknown;
  readonly digits?: number;
}

export interface TableRow {
  readonly policy: string;
  readonly params: Readonly<Record<string, unknown>>;
  readonly seed: number;
  readonly metrics: Readonly<Record<string, unknown>>;
  readonly wallS: number;
  readonly eventsPerS: number;
  readonly relative?: Readonly<Record<string, number>>;
}

/** Reads `a.b.c` from a metrics object. */
export function metricAt(metrics: Readonly<Record<string, unknown>>, dotted: string): unknown {
  let v: unknown = metrics;
  for (const k of dotted.split('.')) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<string, unknown>)[k];
  }
  return v;
}

function fmt(v: unknown, digits = 3): string {
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) return String(v);
    if (v !== 0 && Math.abs(v) >= 1e6) return v.toExponential(2);
    return Number.isInteger(v) ? String(v) : v.toFixed(digits);
  }
  if (v === undefined || v === null) return '-';
  return typeof v === 'string' ? v : JSON.stringify(v);
}

const GB = 1e9;

export const SERVING_COLUMNS: readonly Column[] = [
  { header: 'TTFT ms', get: (r) => metricAt(r.metrics, 'ttftMs.mean'), digits: 1 },
  { header: 'TPOT ms', get: (r) => metricAt(r.metrics, 'tpotMs.mean'), digits: 1 },
  { header: 'tok/s', get: (r) => metricAt(r.metrics, 'throughputTokPerS'), digits: 2 },
  { header: 'hit rate', get: (r) => metricAt(r.metrics, 'bufferHitRate') },
  { header: 'GPU blocked', get: (r) => metricAt(r.metrics, 'gpuBlockedFrac') },
  { header: 'PCIe GB', get: (r) => ((r.metrics.h2dBytes as number) + (r.metrics.d2hBytes as number)) / GB, digits: 1 },
  { header: 'peak VRAM GB', get: (r) => (metricAt(r.metrics, 'peakBytes.vram.total') as number) / GB, digits: 2 },
  { header: 'wall s', get: (r) => r.wallS, digits: 2 },
  { header: 'events/s', get: (r) => Math.round(r.eventsPerS) },
];

const GiB = 2 ** 30;
/** A throughput metric, or nothing for an infeasible run. */
const ok = (r: TableRow, path: string): unknown => (r.metrics.feasible === false ? undefined : metricAt(r.metrics, path));

/** Columns of the throughput family (`sim/metrics/throughput-metrics.ts`); `search.*` is the main phase's chosen configuration. */
export const THROUGHPUT_COLUMNS: readonly Column[] = [
  { header: 'prefill tok/s', get: (r) => (ok(r, 'passes.prefill') ? ok(r, 'prefillTokPerS') : undefined), digits: 1 },
  { header: 'decode tok/s', get: (r) => (ok(r, 'passes.decode') ? ok(r, 'decodeTokPerS') : undefined), digits: 1 },
  { header: 'B', get: (r) => ok(r, 'search.B') },
  { header: 'b_a', get: (r) => ok(r, 'search.ba') },
  { header: 'b_e', get: (r) => ok(r, 'search.be') },
  { header: 'ω', get: (r) => ok(r, 'search.omega'), digits: 2 },
  { header: 'S_exp GiB', get: (r) => num(ok(r, 'search.sExpertBytes'), GiB), digits: 2 },
  { header: 'S_par GiB', get: (r) => num(ok(r, 'search.sParamsBytes'), GiB), digits: 2 },
  { header: 'pred pass s', get: (r) => ok(r, 'search.predictedPassS'), digits: 3 },
  { header: 'sim pass s', get: (r) => ok(r, 'search.simulatedPassS'), digits: 3 },
  { header: 'GPU busy', get: (r) => ok(r, 'gpuBusyFrac'), digits: 2 },
  { header: 'H2D util', get: (r) => ok(r, 'h2dUtil'), digits: 2 },
  { header: 'CPU util', get: (r) => ok(r, 'cpuUtil'), digits: 2 },
  { header: 'peak VRAM GB', get: (r) => num(ok(r, 'peakBytes.vram.total'), GB), digits: 2 },
  { header: 'wall s', get: (r) => r.wallS, digits: 2 },
  { header: 'note', get: (r) => (r.metrics.feasible === false ? `infeasible: ${String(r.metrics.infeasibleReason)}` : '') },
];

function num(v: unknown, div: number): number | undefined {
  return typeof v === 'number' ? v / div : undefined;
}

/** Renders rows: policy, the swept parameters that vary, seed (when several), then the columns. */
export function renderTable(rows: readonly TableRow[], columns: readonly Column[], style: TableStyle = 'box'): string {
  const paramKeys: string[] = [];
  for (const r of rows) for (const k of Object.keys(r.params)) if (!paramKeys.includes(k)) paramKeys.push(k);
  let varying = paramKeys.filter((k) => new Set(rows.map((r) => JSON.stringify(r.params[k]))).size > 1);
  // A named case (config `cases: [{ case: ... }]`) stands for the paths it sets: hide the columns
  // whose value the case determines.
  if (varying.includes('case')) {
    const determined = (k: string) => {
      const seen = new Map<string, string>();
      for (const r of rows) {
        const c = JSON.stringify(r.params.case);
        const v = JSON.stringify(r.params[k]);
        if ((seen.get(c) ?? v) !== v) return false;
        seen.set(c, v);
      }
      return true;
    };
    varying = varying.filter((k) => k === 'case' || !determined(k));
  }
  const multiSeed = new Set(rows.map((r) => r.seed)).size > 1;
  const head = ['policy', ...varying, ...(multiSeed ? ['seed'] : []), ...columns.map((c) => c.header)];
  const body = rows.map((r) => [r.policy, ...varying.map((k) => fmt(r.params[k])), ...(multiSeed ? [String(r.seed)] : []), ...columns.map((c) => fmt(c.get(r), c.digits))]);
  return layout(head, body, style);
}

/**
 * One row per (policy, sweep point): min / mean / max over seeds of each metric path
 * (`output.seedSummary`; e.g. requests to recover after a workload shift).
 */
export function renderSeedSummary(rows: readonly TableRow[], metrics: readonly string[], style: TableStyle = 'box'): string {
  const groups = new Map<string, TableRow[]>();
  for (const r of rows) {
    const key = JSON.stringify([r.policy, r.params]);
    let g = groups.get(key);
    if (!g) groups.set(key, (g = []));
    g.push(r);
  }
  const paramKeys: string[] = [];
  for (const r of rows) for (const k of Object.keys(r.params)) if (!paramKeys.includes(k)) paramKeys.push(k);
  const varying = paramKeys.filter((k) => new Set(rows.map((r) => JSON.stringify(r.params[k]))).size > 1);
  const head = ['policy', ...varying, 'seeds', ...metrics.flatMap((m) => [`${m} min`, `${m} mean`, `${m} max`])];
  const body: string[][] = [];
  for (const g of groups.values()) {
    const first = g[0]!;
    const cells = metrics.flatMap((m) => {
      const v = g.map((r) => metricAt(r.metrics, m)).filter((x): x is number => typeof x === 'number');
      if (v.length === 0) return ['-', '-', '-'];
      return [fmt(Math.min(...v)), fmt(v.reduce((a, b) => a + b, 0) / v.length), fmt(Math.max(...v))];
    });
    body.push([first.policy, ...varying.map((k) => fmt(first.params[k])), String(g.length), ...cells]);
  }
  return layout(head, body, style);
}

/** `box`: a boxed terminal table (cli-table3); `markdown`: a GitHub-flavoured table for notes and reports. */
export type TableStyle = 'box' | 'markdown';

function layout(head: readonly string[], body: readonly (readonly string[])[], style: TableStyle): string {
  if (style === 'markdown') {
    const row = (cells: readonly string[]) => `| ${cells.map((c) => c.replace(/\|/g, '\\|')).join(' | ')} |`;
    return [row(head), `|${head.map(() => '---|').join('')}`, ...body.map(row)].join('\n');
  }
  const table = new Table({ head: [...head], style: { head: [], border: [], compact: true } });
  for (const r of body) table.push([...r]);
  return table.toString();
}
