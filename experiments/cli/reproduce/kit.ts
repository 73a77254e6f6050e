/**
 * What a paper's comparison module produces and how it is printed: tables of paper vs ours, read
 * from the results of the shipped experiments (never typed in), as markdown (COMPARISON.md, the
 * generated sections of FIDELITY.md) and HTML.
 *
 * A row holds the paper's value, ours under the default reading, the band of ours over every
 * reading that competes (a calibration figure the sources give two ways, swept as named testbed
 * variants), and optionally a physical bound we compute: a paper value beyond it is marked ⚠
 * with the bound beside it. The ratio is ours / paper under the default reading.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';

/** One run as results.json holds it (what comparisons read). */
export interface Run {
  readonly index: number;
  readonly policy: string;
  readonly params: Readonly<Record<string, unknown>>;
  readonly seed: number;
  readonly metrics: Readonly<Record<string, unknown>>;
  readonly relative?: Readonly<Record<string, number>>;
}

/** An experiment's results (by the config file's base name, e.g. `prefetch`). */
export interface Results {
  readonly name: string;
  readonly complete: boolean;
  readonly runs: readonly Run[];
}

export type ResultsByExperiment = ReadonlyMap<string, Results>;

/** A physical bound on the row's quantity: the paper's value must be `≤ value` (max) or `≥ value` (min). */
export interface Bound {
  readonly value: number;
  readonly sense: 'max' | 'min';
  /** What the bound is, in a few words (e.g. "weights over PCIe at 31.5 GB/s"). */
  readonly what: string;
}

export interface Row {
  /** The row's labels (one per `keyHeads`). */
  readonly keys: readonly string[];
  readonly paper?: number | undefined;
  /** Ours under the default reading. */
  readonly ours?: number | undefined;
  /** Ours under every competing reading (the default included); a band is shown when there are two or more. */
  readonly readings?: readonly (number | undefined)[];
  readonly bound?: Bound | undefined;
  /** Cells of the table's `extraHeads` (figures read from the results, or the row's mechanism in words). */
  readonly extra?: readonly string[];
}

export interface Table {
  /** Stable id: the name of its generated section in FIDELITY.md. */
  readonly id: string;
  readonly title: string;
  readonly keyHeads: readonly string[];
  /** A sentence under the title (setting, units). */
  readonly note?: string;
  /** Significant decimals of the values (default 0). */
  readonly digits?: number;
  /** What the band spans (e.g. "PCIe 25 / 19.5 GB/s"); no band column when undefined. */
  readonly band?: string;
  /** Columns after the standard ones (each row's `extra` fills them), e.g. the searched batch or the mechanism. */
  readonly extraHeads?: readonly string[];
  /** A table of figures with no paper column: the keys and the extra cells only (e.g. ours under two models). */
  readonly grid?: boolean;
  /** Extra columns that hold words rather than figures (aligned left). */
  readonly wordHeads?: readonly string[];
  readonly rows: readonly Row[];
}

export interface PaperComparison {
  /** The folder under experiments/ (and reproduction/). */
  readonly paper: string;
  readonly title: string;
  /** The experiments its tables read (run first by `reproduce`, so the tables are ready soonest). */
  readonly reads: readonly string[];
  /**
   * Every table id it can make, and the experiment the table reads: a generated section of
   * FIDELITY.md whose experiment has no stored results is left as it is (and reported unverified).
   */
  readonly sources: Readonly<Record<string, string>>;
  /** Every table, from the results at hand (a table whose experiment is missing is left out). */
  tables(results: ResultsByExperiment): Table[];
}

// ----------------------------------------------------------------------------------------
// Reading results
// ----------------------------------------------------------------------------------------

const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

/** The metric paths read while `recording` runs (what the stored tables input must keep). */
let readPaths: Set<string> | undefined;

/** Runs `f`, returning the metric paths (`metrics.x.y`, `relative.m`) it read through `metric`/`relativeOf`. */
export function recording<T>(f: () => T): { value: T; paths: Set<string> } {
  const prev = readPaths;
  const paths = new Set<string>();
  readPaths = paths;
  try {
    return { value: f(), paths };
  } finally {
    readPaths = prev;
  }
}

const at = (o: unknown, p: string): unknown =>
  p.split('.').reduce<unknown>((x, k) => (x as Record<string, unknown> | undefined)?.[k], o);

/** The number at a dotted path of a run's metrics (undefined when absent or not finite). */
export function metric(r: Run | undefined, p: string): number | undefined {
  readPaths?.add(`metrics.${p}`);
  return r ? num(at(r.metrics, p)) : undefined;
}

/** A value of a run's `relative` (metric / the config's baseline at the same point). */
export function relativeOf(r: Run | undefined, m: string): number | undefined {
  readPaths?.add(`relative.${m}`);
  return num(r?.relative?.[m]);
}

/** The value of a run's metrics at a path, as it is (not only numbers: e.g. `feasible`). */
export function rawMetric(r: Run | undefined, p: string): unknown {
  readPaths?.add(`metrics.${p}`);
  return r ? at(r.metrics, p) : undefined;
}

/** A copy of `runs` keeping, of metrics and relative, only `paths` (the stored input of the tables). */
export function keepPaths(runs: readonly Run[], paths: ReadonlySet<string>): Run[] {
  const pick = (src: unknown, prefix: string): Record<string, unknown> | undefined => {
    const out: Record<string, unknown> = {};
    let any = false;
    for (const p of paths) {
      if (!p.startsWith(`${prefix}.`)) continue;
      const sub = p.slice(prefix.length + 1);
      const v = at(src, sub);
      if (v === undefined) continue;
      let o = out;
      const ks = sub.split('.');
      for (const k of ks.slice(0, -1)) o = (o[k] ??= {}) as Record<string, unknown>;
      o[ks[ks.length - 1]!] = v;
      any = true;
    }
    return any ? out : undefined;
  };
  return runs.map((r) => {
    const rel = pick(r.relative, 'relative');
    const metrics = pick(r.metrics, 'metrics') ?? {};
    const relative = rel ? { relative: rel as Record<string, number> } : {};
    return { index: r.index, policy: r.policy, params: r.params, seed: r.seed, metrics, ...relative };
  });
}

/** Runs whose params match every entry of `where` (a missing param matches `undefined`). */
export function select(runs: readonly Run[], where: Readonly<Record<string, unknown>>): Run[] {
  const matches = (r: Run, k: string, v: unknown): boolean => (k === 'policy' ? r.policy === v : r.params[k] === v);
  return runs.filter((r) => Object.entries(where).every(([k, v]) => matches(r, k, v)));
}

export const one = (runs: readonly Run[], where: Readonly<Record<string, unknown>>): Run | undefined =>
  select(runs, where)[0];

/** 100 × a / b (undefined when either is missing or b is 0). */
export const pct = (a: number | undefined, b: number | undefined): number | undefined =>
  a !== undefined && b !== undefined && b !== 0 ? (100 * a) / b : undefined;

/** The distinct values of a param, in run order. */
export const distinct = (runs: readonly Run[], key: string): unknown[] => [
  ...new Set(runs.map((r) => (key === 'policy' ? r.policy : r.params[key]))),
];

/** Reads `<dir>/<exp>/results.json` for every experiment folder under `dir`. */
export function readResults(dir: string, experiments: readonly string[]): Map<string, Results> {
  const out = new Map<string, Results>();
  for (const e of experiments) {
    const f = path.join(dir, e, 'results.json');
    if (!existsSync(f)) continue;
    const j = JSON.parse(readFileSync(f, 'utf8')) as Results;
    out.set(e, { name: j.name, complete: j.complete, runs: j.runs });
  }
  return out;
}

// ----------------------------------------------------------------------------------------
// Rendering
// ----------------------------------------------------------------------------------------

/** A number with `d` decimals and thin grouping of thousands ('–' when missing). */
export function fmt(v: number | undefined, d = 0): string {
  if (v === undefined || !Number.isFinite(v)) return '–';
  const s = v.toFixed(d);
  const [int, frac] = s.split('.');
  const grouped = int!.replace(/\B(?=(\d{3})+(?!\d))/g, ' ');
  return frac !== undefined ? `${grouped}.${frac}` : grouped;
}

const ratioOf = (ours: number | undefined, paper: number | undefined): string =>
  ours !== undefined && paper !== undefined && paper !== 0 ? (ours / paper).toFixed(2) : '–';

/** Whether the paper's value breaks the row's bound. */
export const breaksBound = (r: Row): boolean =>
  r.paper !== undefined &&
  r.bound !== undefined &&
  (r.bound.sense === 'max' ? r.paper > r.bound.value : r.paper < r.bound.value);

function bandOf(r: Row, d: number): string {
  const vs = (r.readings ?? []).filter((v): v is number => v !== undefined && Number.isFinite(v));
  if (vs.length < 2) return '–';
  const lo = Math.min(...vs);
  const hi = Math.max(...vs);
  return fmt(lo, d) === fmt(hi, d) ? fmt(lo, d) : `${fmt(lo, d)}–${fmt(hi, d)}`;
}

/** The cells of a table: header then rows (strings). */
export function cells(t: Table): string[][] {
  const extraHeads = t.extraHeads ?? [];
  const extraOf = (r: Row): string[] => extraHeads.map((_, i) => r.extra?.[i] ?? '–');
  if (t.grid) return [[...t.keyHeads, ...extraHeads], ...t.rows.map((r) => [...r.keys, ...extraOf(r)])];
  const d = t.digits ?? 0;
  const hasBound = t.rows.some((r) => r.bound !== undefined);
  const band = t.band ? [`band (${t.band})`] : [];
  const head = [
    ...t.keyHeads,
    'paper',
    'ours',
    'ours / paper',
    ...band,
    ...(hasBound ? ['physical bound'] : []),
    ...extraHeads,
  ];
  const rows = t.rows.map((r) => {
    const paper = r.paper === undefined ? '–' : `${fmt(r.paper, d)}${breaksBound(r) ? ' ⚠' : ''}`;
    const b = r.bound;
    const bound = b ? `${b.sense === 'max' ? '≤' : '≥'} ${fmt(b.value, d)} (${b.what})` : '–';
    const cellsOfBand = t.band ? [bandOf(r, d)] : [];
    const boundCell = hasBound ? [bound] : [];
    return [...r.keys, paper, fmt(r.ours, d), ratioOf(r.ours, r.paper), ...cellsOfBand, ...boundCell, ...extraOf(r)];
  });
  return [head, ...rows];
}

const escMd = (s: string): string => s.replace(/\|/g, '\\|');

/** A table as markdown: title line, note, the table, and a legend when a paper value is marked. */
export function tableMarkdown(t: Table): string {
  const [head, ...rows] = cells(t);
  const line = (cs: string[]) => `| ${cs.map(escMd).join(' | ')} |`;
  const out = [`**${t.title}**`, ''];
  if (t.note) out.push(t.note, '');
  // Keys and words (the mechanism, notes) align left; figures right.
  const words = new Set(t.wordHeads ?? []);
  const left = (h: string, i: number): boolean => i < t.keyHeads.length || words.has(h);
  const align = `|${head!.map((h, i) => (left(h, i) ? ' --- ' : ' ---: ')).join('|')}|`;
  out.push(line(head!), align, ...rows.map(line));
  if (t.rows.some(breaksBound)) out.push('', '⚠: the paper’s value is beyond the physical bound beside it.');
  return out.join('\n');
}

/** A paper's whole comparison as markdown (COMPARISON.md). */
export function comparisonMarkdown(c: PaperComparison, tables: readonly Table[], missing: readonly string[]): string {
  const out = [
    `# ${c.title}: paper vs ours`,
    '',
    `Generated by \`npm run reproduce -- ${c.paper}\` from the results in this folder`,
    `(experiments/${c.paper}/comparison.ts).`,
    'Ratio: ours / paper under the default reading. Band: ours over every competing reading (named testbed variants).',
    '⚠ marks a paper value beyond a physical bound we compute (the bound beside it).',
    '',
  ];
  if (missing.length > 0) out.push(`Missing results (tables left out): ${missing.join(', ')}.`, '');
  for (const t of tables) out.push(`## ${t.id}`, '', tableMarkdown(t), '');
  return `${out.join('\n').trimEnd()}\n`;
}

const escHtml = (s: string): string => s.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);

/** An experiment folder beside COMPARISON.html, and the page to open of it (its report.html, else results.json). */
export interface ExperimentLink {
  readonly name: string;
  readonly href: string;
}

/** The same as a self-contained HTML page (no script; every string escaped), linking each experiment's page. */
export function comparisonHtml(
  c: PaperComparison,
  tables: readonly Table[],
  experiments: readonly ExperimentLink[] = [],
): string {
  const parts = tables.map((t) => {
    const [head, ...rows] = cells(t);
    const tr = (cs: string[], tag: string) => `<tr>${cs.map((x) => `<${tag}>${escHtml(x)}</${tag}>`).join('')}</tr>`;
    const note = t.note ? `<p>${escHtml(t.note)}</p>` : '';
    const body = rows.map((r) => tr(r, 'td')).join('');
    return `<h2>${escHtml(t.title)}</h2>${note}<table><thead>${tr(head!, 'th')}</thead><tbody>${body}</tbody></table>`;
  });
  return [
    '<!doctype html><html><head><meta charset="utf-8">',
    `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">`,
    `<title>${escHtml(c.title)}: paper vs ours</title>`,
    '<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1.5em}',
    'td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}',
    'td:first-child,th:first-child{text-align:left}</style>',
    `</head><body><h1>${escHtml(c.title)}: paper vs ours</h1>`,
    '<p>Ratio: ours / paper under the default reading. Band: ours over every competing reading.',
    '⚠: the paper’s value is beyond the physical bound beside it.</p>',
    ...parts,
    ...(experiments.length > 0
      ? [
          '<h2>Experiments</h2><ul>',
          ...experiments.map((e) => `<li><a href="${escHtml(e.href)}">${escHtml(e.name)}</a></li>`),
          '</ul>',
        ]
      : []),
    '</body></html>',
    '',
  ].join('\n');
}
