/**
 * The table printed on stdout after an experiment.
 *
 * Each executor family has a catalogue of named columns (`moesim experiment --columns` takes
 * their ids, or any metric path such as `ttftQueueMs.p99`). By default a few key columns are
 * shown and the box table is kept within `maxWidth` (120) characters: the least important
 * default columns are left out, and a note under the table says which. `--wide` shows the whole
 * catalogue. A run that could not be simulated (an infeasible throughput plan) shows a footnote
 * mark in its row and its reason on a line of its own under the table.
 */
import Table from 'cli-table3';

export interface Column {
  /** The id `--columns` takes (for config columns and metric paths: the path). */
  readonly id: string;
  /** Header; `\n` splits it over two lines. */
  readonly header: string;
  readonly get: (row: TableRow) => unknown;
  /** Fixed decimals; default: `compact` (about 3–4 significant digits). */
  readonly digits?: number;
  /** In the default table: the lower, the longer it stays when the table must shrink to fit. */
  readonly keep?: number;
}

export interface TableRow {
  readonly policy: string;
  readonly params: Readonly<Record<string, unknown>>;
  readonly seed: number;
  readonly metrics: Readonly<Record<string, unknown>>;
  readonly wallS: number;
  readonly eventsPerS: number;
  /** Simulated duration of the run (seconds). */
  readonly simulatedS?: number;
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

/** About 3–4 significant digits, never an exponent below a million. */
function compact(v: number): string {
  const a = Math.abs(v);
  if (a >= 1e6) return v.toExponential(2);
  if (Number.isInteger(v)) return String(v);
  if (a >= 1000) return v.toFixed(0);
  if (a >= 100) return v.toFixed(1);
  if (a >= 1) return v.toFixed(2);
  return v.toFixed(3);
}

/** A cell's text: numbers as `compact` (or with `digits` decimals), `missing` for no value. */
export function fmt(v: unknown, digits?: number, missing = '-'): string {
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) return String(v);
    if (digits !== undefined)
      return Math.abs(v) >= 1e6 ? v.toExponential(2) : Number.isInteger(v) ? String(v) : v.toFixed(digits);
    return compact(v);
  }
  if (v === undefined || v === null) return missing;
  return typeof v === 'string' ? v : JSON.stringify(v);
}

/**
 * The swept parameters whose value differs between rows, in first-seen order. A named case
 * (config `cases: [{ case: ... }]`) stands for the paths it sets: the parameters whose value
 * the case determines are left out.
 */
export function varyingParams(rows: readonly { readonly params: Readonly<Record<string, unknown>> }[]): string[] {
  const keys: string[] = [];
  for (const r of rows) for (const k of Object.keys(r.params)) if (!keys.includes(k)) keys.push(k);
  const varying = keys.filter((k) => new Set(rows.map((r) => JSON.stringify(r.params[k]))).size > 1);
  if (!varying.includes('case')) return varying;
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
  return varying.filter((k) => k === 'case' || !determined(k));
}

const GB = 1e9;
const GiB = 2 ** 30;
const num = (v: unknown, div = 1): number | undefined => (typeof v === 'number' ? v / div : undefined);
const pct = (v: unknown): number | undefined => (typeof v === 'number' ? v * 100 : undefined);
const m = (path: string) => (r: TableRow) => metricAt(r.metrics, path);

/** MoE-CAP columns, both families (`sim/metrics/cap.ts`; nothing for an infeasible throughput run). */
const capColumns = (get: (r: TableRow, path: string) => unknown): Column[] => [
  { id: 's-mbu', header: 'S-MBU\n%', get: (r) => pct(get(r, 'cap.sMbu')), digits: 2 },
  { id: 's-mfu', header: 'S-MFU\n%', get: (r) => pct(get(r, 'cap.sMfu')), digits: 2 },
  { id: 'mbu', header: 'dense\nMBU %', get: (r) => pct(get(r, 'cap.mbu')), digits: 2 },
  { id: 'mfu', header: 'dense\nMFU %', get: (r) => pct(get(r, 'cap.mfu')), digits: 2 },
  { id: 'usd/Mtok', header: 'US$ per\nM tok', get: (r) => get(r, 'cost.usdPerMTok'), digits: 2 },
];

/** Every named column of the serving family; `SERVING_DEFAULT` picks the table's. */
export const SERVING_COLUMNS: readonly Column[] = [
  { id: 'ttft.p50', header: 'TTFT\np50 ms', get: m('ttftMs.p50'), keep: 1 },
  { id: 'ttft.p99', header: 'TTFT\np99 ms', get: m('ttftMs.p99'), keep: 6 },
  { id: 'ttft.mean', header: 'TTFT\nmean ms', get: m('ttftMs.mean') },
  { id: 'queue.p50', header: 'queue\np50 ms', get: m('ttftQueueMs.p50') },
  { id: 'service.p50', header: 'service\np50 ms', get: m('ttftServiceMs.p50') },
  { id: 'tpot.p50', header: 'TPOT\np50 ms', get: m('tpotMs.p50'), keep: 1 },
  { id: 'tpot.p99', header: 'TPOT\np99 ms', get: m('tpotMs.p99') },
  { id: 'tpot.mean', header: 'TPOT\nmean ms', get: m('tpotMs.mean') },
  { id: 'e2e.p50', header: 'e2e\np50 ms', get: m('e2eMs.p50') },
  { id: 'tok/s', header: 'tok/s', get: m('throughputTokPerS'), keep: 1 },
  { id: 'prefill-tok/s', header: 'prefill\ntok/s', get: m('prefillTokPerS') },
  { id: 'hit', header: 'hit\nrate', get: m('bufferHitRate'), digits: 3, keep: 2 },
  { id: 'prefetch-hit', header: 'prefetch\nhit rate', get: m('prefetchHitRate'), digits: 3 },
  { id: 'precision', header: 'prefetch\nprecision', get: m('prefetchPrecision'), digits: 3 },
  { id: 'blocked', header: 'GPU\nblocked%', get: (r) => pct(r.metrics.gpuBlockedFrac), digits: 1, keep: 2 },
  { id: 'busy', header: 'GPU\nbusy %', get: (r) => pct(r.metrics.gpuBusyFrac), digits: 1 },
  { id: 'pcie', header: 'PCIe\nGB/s', get: m('pcieGBps'), keep: 3 },
  {
    id: 'pcie-gb',
    header: 'PCIe\nGB',
    get: (r) => num((r.metrics.h2dBytes as number) + (r.metrics.d2hBytes as number), GB),
  },
  { id: 'h2d-util', header: 'H2D\nutil %', get: (r) => pct(r.metrics.h2dUtil), digits: 1 },
  { id: 'slots', header: 'buffer\nslots', get: m('bufferSlots') },
  {
    id: 'vram',
    header: 'VRAM\npeak GB',
    get: (r) => num(metricAt(r.metrics, 'peakBytes.vram.total'), GB),
    digits: 2,
    keep: 5,
  },
  { id: 'host', header: 'host\npeak GB', get: (r) => num(metricAt(r.metrics, 'peakBytes.host.total'), GB), digits: 1 },
  { id: 'sim', header: 'sim s', get: (r) => r.simulatedS, keep: 4 },
  { id: 'wall', header: 'wall s', get: (r) => r.wallS, digits: 2 },
  { id: 'events/s', header: 'events/s', get: (r) => Math.round(r.eventsPerS) },
  ...capColumns((r, path) => metricAt(r.metrics, path)),
];
export const SERVING_DEFAULT: readonly string[] = [
  'ttft.p50',
  'ttft.p99',
  'tpot.p50',
  'tok/s',
  'hit',
  'blocked',
  'pcie',
  'vram',
  'sim',
];

/** A throughput metric, or nothing for an infeasible run. */
const ok = (r: TableRow, path: string): unknown =>
  r.metrics.feasible === false ? undefined : metricAt(r.metrics, path);
const passes = (r: TableRow, phase: 'prefill' | 'decode'): boolean =>
  typeof ok(r, `passes.${phase}`) === 'number' && (ok(r, `passes.${phase}`) as number) > 0;

/** Every named column of the throughput family (`sim/metrics/throughput-metrics.ts`); `search.*` is the main phase's chosen configuration. */
export const THROUGHPUT_COLUMNS: readonly Column[] = [
  {
    id: 'prefill-tok/s',
    header: 'prefill\ntok/s',
    get: (r) => (passes(r, 'prefill') ? ok(r, 'prefillTokPerS') : undefined),
    keep: 1,
  },
  {
    id: 'decode-tok/s',
    header: 'decode\ntok/s',
    get: (r) => (passes(r, 'decode') ? ok(r, 'decodeTokPerS') : undefined),
    keep: 1,
  },
  { id: 'tok/s', header: 'tok/s', get: (r) => ok(r, 'throughputTokPerS') },
  { id: 'batch', header: 'batch', get: (r) => ok(r, 'search.B'), keep: 2 },
  { id: 'b_a', header: 'b_a', get: (r) => ok(r, 'search.ba') },
  { id: 'b_e', header: 'b_e', get: (r) => ok(r, 'search.be') },
  { id: 'omega', header: 'ω', get: (r) => ok(r, 'search.omega'), digits: 2, keep: 2 },
  { id: 's-exp', header: 'S_exp\nGiB', get: (r) => num(ok(r, 'search.sExpertBytes'), GiB), digits: 2 },
  { id: 's-par', header: 'S_par\nGiB', get: (r) => num(ok(r, 'search.sParamsBytes'), GiB), digits: 2 },
  { id: 'pred-pass', header: 'pred\npass s', get: (r) => ok(r, 'search.predictedPassS') },
  { id: 'sim-pass', header: 'sim\npass s', get: (r) => ok(r, 'search.simulatedPassS') },
  { id: 'gpu', header: 'GPU\nbusy %', get: (r) => pct(ok(r, 'gpuBusyFrac')), digits: 1, keep: 3 },
  { id: 'pcie', header: 'PCIe\nutil %', get: (r) => pct(ok(r, 'h2dUtil')), digits: 1, keep: 3 },
  { id: 'cpu', header: 'CPU\nutil %', get: (r) => pct(ok(r, 'cpuUtil')), digits: 1 },
  { id: 'vram', header: 'VRAM\npeak GB', get: (r) => num(ok(r, 'peakBytes.vram.total'), GB), digits: 2, keep: 4 },
  { id: 'host', header: 'host\npeak GB', get: (r) => num(ok(r, 'peakBytes.host.total'), GB), digits: 1, keep: 4 },
  { id: 'sim', header: 'sim s', get: (r) => (r.metrics.feasible === false ? undefined : r.simulatedS), keep: 5 },
  { id: 'wall', header: 'wall s', get: (r) => r.wallS, digits: 2 },
  ...capColumns(ok),
];
export const THROUGHPUT_DEFAULT: readonly string[] = [
  'prefill-tok/s',
  'decode-tok/s',
  'batch',
  'omega',
  'gpu',
  'pcie',
  'vram',
  'host',
  'sim',
];

export type Family = 'serving' | 'throughput';
const CATALOG: Record<Family, { readonly all: readonly Column[]; readonly defaults: readonly string[] }> = {
  serving: { all: SERVING_COLUMNS, defaults: SERVING_DEFAULT },
  throughput: { all: THROUGHPUT_COLUMNS, defaults: THROUGHPUT_DEFAULT },
};

/** What the user asked for: nothing (the default table), `--columns`, or `--wide`. */
export interface ColumnChoice {
  readonly columns?: readonly string[];
  readonly wide?: boolean;
}

/** A column for a metric path (`--columns ttftQueueMs.p99`, `output.columns`). */
export const metricColumn = (path: string, header = path): Column => ({
  id: path,
  header,
  get: (r) => metricAt(r.metrics, path),
});

const METRIC_PATH = /^[A-Za-z_][\w]*(\.[\w]+)*$/;

/**
 * A column by catalogue id of the family, else by metric path (`output.columns` in a config
 * takes either). Undefined when `id` is neither.
 */
export function columnById(family: Family, id: string): Column | undefined {
  const c = CATALOG[family].all.find((x) => x.id === id);
  if (c) return c;
  return METRIC_PATH.test(id) ? metricColumn(id) : undefined;
}

/**
 * The columns a table shows. `--columns` items are catalogue ids of the family or metric paths;
 * anything else is an error listing the ids. `extra` (the config's `output.columns` and
 * relative columns) follow the chosen ones.
 * @throws Error with a message for the CLI (the caller makes it a UserError)
 */
export function chooseColumns(
  family: Family,
  choice: ColumnChoice,
  extra: readonly Column[] = [],
): { columns: Column[]; fit: boolean } {
  const cat = CATALOG[family];
  const byId = new Map(cat.all.map((c) => [c.id, c]));
  if (choice.wide) return { columns: [...cat.all, ...extra.filter((e) => !byId.has(e.id))], fit: false };
  if (choice.columns && choice.columns.length > 0) {
    const cols = choice.columns.map((id) => {
      const c = columnById(family, id);
      if (c) return c;
      throw new Error(
        `unknown column '${id}' (columns of the ${family} family: ${cat.all.map((x) => x.id).join(', ')}; or a metric path such as ttftQueueMs.p99)`,
      );
    });
    return { columns: [...cols, ...extra.filter((e) => !cols.some((c) => c.id === e.id))], fit: false };
  }
  // The config's own columns go before the least important default ones when space runs out.
  return {
    columns: [...cat.defaults.map((id) => byId.get(id)!), ...extra.map((e) => ({ ...e, keep: e.keep ?? 3 }))],
    fit: true,
  };
}

/** Every catalogue id of a family (for `--columns` help and errors). */
export const columnIds = (family: Family): string[] => CATALOG[family].all.map((c) => c.id);

export interface RenderOptions {
  /** Default table: leave out the least important columns until the box table fits this width. */
  readonly maxWidth?: number;
  /** Leave out columns that are empty in every row (the default table does). */
  readonly hideEmpty?: boolean;
}

/** A swept parameter's header: the last segment of its path, unless two would collide. */
function paramHeaders(keys: readonly string[]): string[] {
  const last = (k: string) => k.split('.').pop()!;
  return keys.map((k) => (keys.filter((o) => last(o) === last(k)).length > 1 ? k : last(k)));
}

/** Character width of a rendered line (code points; the table uses no wide characters). */
const widthOf = (text: string): number => Math.max(0, ...text.split('\n').map((l) => [...l].length));

/**
 * Renders rows: policy, the swept parameters that vary, seed (when several), then the columns.
 * Infeasible runs get a footnote mark and their reason under the table.
 */
export function renderTable(
  rows: readonly TableRow[],
  columns: readonly Column[],
  style: TableStyle = 'box',
  o: RenderOptions = {},
): string {
  const varying = varyingParams(rows);
  const multiSeed = new Set(rows.map((r) => r.seed)).size > 1;

  // Footnotes: one per distinct reason a run could not be simulated.
  const reasons: string[] = [];
  const mark = rows.map((r) => {
    if (r.metrics.feasible !== false) return '';
    const why = `infeasible: ${String(r.metrics.infeasibleReason ?? 'no reason given')}`;
    let i = reasons.indexOf(why);
    if (i < 0) i = reasons.push(why) - 1;
    return ` [${i + 1}]`;
  });

  let cols = [...columns];
  if (o.hideEmpty) cols = cols.filter((c) => rows.some((r) => c.get(r) !== undefined && c.get(r) !== null));
  const build = (cs: readonly Column[]) => {
    const head = ['policy', ...paramHeaders(varying), ...(multiSeed ? ['seed'] : []), ...cs.map((c) => c.header)];
    const body = rows.map((r, i) => [
      r.policy + mark[i],
      ...varying.map((k) => fmt(r.params[k])),
      ...(multiSeed ? [String(r.seed)] : []),
      ...cs.map((c) => fmt(c.get(r), c.digits)),
    ]);
    return layout(head, body, style);
  };
  let table = build(cols);
  const left: string[] = [];
  if (o.maxWidth !== undefined && style === 'box') {
    // Leave out the least important columns (highest `keep`, rightmost first) until it fits.
    while (widthOf(table) > o.maxWidth) {
      let victim = -1;
      cols.forEach((c, i) => {
        if ((c.keep ?? 0) > 0 && (victim < 0 || (c.keep ?? 0) >= (cols[victim]!.keep ?? 0))) victim = i;
      });
      if (victim < 0) break;
      left.push(cols[victim]!.id);
      cols = cols.filter((_, i) => i !== victim);
      table = build(cols);
    }
  }
  const notes: string[] = [];
  reasons.forEach((why, i) => notes.push(...wrap(`[${i + 1}] ${why}`, o.maxWidth ?? 120)));
  if (left.length > 0)
    notes.push(
      ...wrap(
        `(left out to fit ${o.maxWidth} columns: ${left.join(', ')}; --wide shows every column, --columns picks them)`,
        o.maxWidth ?? 120,
      ),
    );
  return notes.length > 0 ? `${table}\n${notes.join('\n')}` : table;
}

/** Splits a long note at spaces, indenting continuation lines. */
function wrap(text: string, width: number): string[] {
  const out: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line && [...line].length + 1 + [...word].length > width) {
      out.push(line);
      line = `    ${word}`;
    } else line = line ? `${line} ${word}` : word;
  }
  if (line) out.push(line);
  return out;
}

/**
 * One row per (policy, sweep point): min / mean / max over seeds of each metric path
 * (`output.seedSummary`; e.g. requests to recover after a workload shift).
 */
export function renderSeedSummary(
  rows: readonly TableRow[],
  metrics: readonly string[],
  style: TableStyle = 'box',
): string {
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
  const head = [
    'policy',
    ...paramHeaders(varying),
    'seeds',
    ...metrics.flatMap((m) => [`${m} min`, `${m} mean`, `${m} max`]),
  ];
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

/** Header and rows (cells already text) as a table of `style`. */
export function layout(head: readonly string[], body: readonly (readonly string[])[], style: TableStyle): string {
  if (style === 'markdown') {
    const row = (cells: readonly string[]) =>
      `| ${cells.map((c) => c.replace(/\n/g, ' ').replace(/\|/g, '\\|')).join(' | ')} |`;
    return [row(head), `|${head.map(() => '---|').join('')}`, ...body.map(row)].join('\n');
  }
  const table = new Table({ head: [...head], style: { head: [], border: [], compact: true } });
  for (const r of body) table.push([...r]);
  return table.toString();
}
