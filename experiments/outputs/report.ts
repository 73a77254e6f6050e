/**
 * `moesim report <results-dir>` (and `moesim experiment --report`): one self-contained
 * `report.html` in the results folder, for a person to read.
 *
 * It holds the experiment's name and description, its results table (the columns of the
 * printed table, not cut to a terminal's width), the config's `output.plots` drawn inline by
 * Vega-Lite from the results' numbers (an overview drawn by the same renderer when the config asks
 * for none; other SVG files of the folder shown as images), the analytic models and bounds the runs carry
 * (MoE-Lens's `metrics.analytic`, a throughput policy's predicted pass time, MoE-CAP's fractions of
 * peak), the definitions of every metric shown, the config as YAML, and relative links to the
 * Perfetto timelines and the other files of the folder.
 *
 * Safety: every string from a config, a trace or a results file is HTML-escaped; the page carries
 * a Content-Security-Policy that allows no script, form or base URL; only SVG this process
 * rendered is inlined, and every SVG file of the folder is shown as an `<img>` of a data URL
 * (which runs no script and cannot navigate). The page reads nothing from the network.
 *
 * Bad input (no folder, no results.json, a malformed results file) is a one-line `UserError`
 * naming the path and field, found before anything is written; the report is written atomically,
 * so a failed command leaves no partial report.html.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { z } from 'zod';
import { UserError } from '../../sim/kernel/errors.ts';
import { zodToUserError } from '../config/load.ts';
import { writeFileAtomic } from './atomic.ts';
import { PlotSchema, renderPlot, type PlotRun, type PlotSpec } from './plot.ts';
import {
  chooseColumns,
  columnById,
  fmt as fmtCell,
  metricAt,
  metricColumn,
  renderSeedSummary,
  varyingParams,
  type Column,
  type Family,
  type TableRow,
} from './table.ts';
import { esc, fileLink, foreignSvgImage, headerHtml, inlineRenderedSvg, STYLE } from './report/html.ts';
import { COLUMN_METRICS, metricDef, type MetricDef } from './report/metric-defs.ts';

export const REPORT_FILE = 'report.html';

// ---------------------------------------------------------------------------------------
// Reading a results folder
// ---------------------------------------------------------------------------------------

const RunSchema = z.object({
  index: z.number().int().nonnegative(),
  policy: z.string(),
  params: z.record(z.string(), z.unknown()),
  seed: z.number(),
  metrics: z.record(z.string(), z.unknown()),
  // JSON has no Infinity: a ratio over a zero baseline is written as null.
  relative: z.record(z.string(), z.number().nullable()).optional(),
  sim: z.object({ events: z.number(), simulatedS: z.number() }),
});

/** The parts of the stored config the report uses; the rest is shown as it is. */
const ConfigView = z.looseObject({
  name: z.string().optional(),
  description: z.string().optional(),
  executor: z.looseObject({ kind: z.string().optional() }).optional(),
  output: z
    .looseObject({
      plots: z.array(PlotSchema).default([]),
      columns: z.array(z.string()).default([]),
      relative: z.object({ baseline: z.string(), metrics: z.array(z.string()) }).optional(),
      seedSummary: z.array(z.string()).default([]),
    })
    .optional(),
});

const ResultsSchema = z.object({
  schemaVersion: z.literal(1),
  name: z.string(),
  complete: z.boolean(),
  config: ConfigView,
  runs: z.array(RunSchema),
});

const TimingSchema = z.looseObject({
  runs: z.array(z.looseObject({ index: z.number(), wallS: z.number(), eventsPerS: z.number() })),
});

export type ReportRun = z.infer<typeof RunSchema>;

export interface LoadedResults {
  /** The results folder, as given. */
  readonly dir: string;
  readonly resultsFile: string;
  readonly results: z.infer<typeof ResultsSchema>;
  /** The config exactly as results.json stores it (for the YAML). */
  readonly rawConfig: unknown;
  /** Wall time per run index (timing.json), when the folder has it. */
  readonly timing: ReadonlyMap<number, { wallS: number; eventsPerS: number }>;
  /** The folder's file names, sorted. */
  readonly files: readonly string[];
}

function readJson(file: string): unknown {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new UserError(`cannot read it (${(err as NodeJS.ErrnoException).code ?? String(err)})`, file);
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new UserError(`not valid JSON: ${(err as Error).message.split('\n')[0]}`, file);
  }
}

/**
 * Reads and checks a results folder.
 * @throws UserError naming the folder or file, and the field
 */
export function loadResultsDir(dir: string): LoadedResults {
  let isDir: boolean;
  try {
    isDir = statSync(dir).isDirectory();
  } catch {
    throw new UserError('no such results folder', dir);
  }
  if (!isDir) throw new UserError('not a folder (give the folder of an experiment’s results.json)', dir);
  const resultsFile = path.join(dir, 'results.json');
  if (!existsSync(resultsFile))
    throw new UserError('no results.json in this folder (run `moesim experiment <config> --out <folder>` first)', dir);
  const raw = readJson(resultsFile);
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
    throw new UserError('not a results file: expected a JSON object', resultsFile);
  const version = (raw as Record<string, unknown>).schemaVersion;
  if (version !== undefined && version !== 1)
    throw new UserError(
      'this results file has a schema version this moesim does not read (it reads 1)',
      resultsFile,
      'schemaVersion',
      version,
    );
  const parsed = ResultsSchema.safeParse(raw);
  if (!parsed.success) throw zodToUserError(parsed.error, raw, resultsFile);
  const timing = new Map<number, { wallS: number; eventsPerS: number }>();
  const timingFile = path.join(dir, 'timing.json');
  if (existsSync(timingFile)) {
    const t = readJson(timingFile);
    const pt = TimingSchema.safeParse(t);
    if (!pt.success) throw zodToUserError(pt.error, t, timingFile);
    for (const r of pt.data.runs) timing.set(r.index, { wallS: r.wallS, eventsPerS: r.eventsPerS });
  }
  const files = readdirSync(dir).sort();
  return { dir, resultsFile, results: parsed.data, rawConfig: (raw as Record<string, unknown>).config, timing, files };
}

// ---------------------------------------------------------------------------------------
// Formatting
// ---------------------------------------------------------------------------------------

const fmt = (v: unknown, digits?: number): string => fmtCell(v, digits, '–');

const td = (v: unknown, digits?: number): string =>
  typeof v === 'number' ? `<td class="num">${esc(fmt(v, digits))}</td>` : `<td>${esc(fmt(v, digits))}</td>`;

// ---------------------------------------------------------------------------------------
// The page
// ---------------------------------------------------------------------------------------

interface Context {
  readonly loaded: LoadedResults;
  readonly runs: readonly ReportRun[];
  readonly family: Family;
  readonly varying: readonly string[];
  readonly multiSeed: boolean;
  /** Metric paths shown somewhere in the page, for the definitions (path → how it is shown). */
  readonly shown: Map<string, string | undefined>;
  /** The runs as the plot renderer takes them (a null relative value, a ratio over a zero baseline, left out). */
  readonly plotRuns: readonly PlotRun[];
}

/** A run's name in the report: its policy, the swept values that vary, and its seed when several. */
function runLabel(c: Context, r: ReportRun): string {
  const parts = c.varying.map((k) => `${k.split('.').pop()}=${fmt(r.params[k])}`);
  if (c.multiSeed) parts.push(`seed=${r.seed}`);
  return parts.length ? `${r.policy} (${parts.join(', ')})` : r.policy;
}

function resultsTable(c: Context): string {
  const cfg = c.loaded.results.config;
  const out = cfg.output;
  const extra: Column[] = (out?.columns ?? []).map((id) => columnById(c.family, id) ?? metricColumn(id));
  const rel: Column[] = out?.relative
    ? out.relative.metrics.map((m) => ({
        id: `rel:${m}`,
        header: `${m}\n/ ${out.relative!.baseline}`,
        get: (r: TableRow) => r.relative?.[m],
      }))
    : [];
  const rows: TableRow[] = c.runs.map((r) => {
    const t = c.loaded.timing.get(r.index);
    return {
      policy: r.policy,
      params: r.params,
      seed: r.seed,
      metrics: r.metrics,
      wallS: t?.wallS ?? Number.NaN,
      eventsPerS: t?.eventsPerS ?? Number.NaN,
      simulatedS: r.sim.simulatedS,
      ...(r.relative
        ? { relative: Object.fromEntries(Object.entries(r.relative).map(([k, v]) => [k, v ?? Infinity])) }
        : {}),
    };
  });
  let { columns } = chooseColumns(c.family, {}, [...extra, ...rel]);
  columns = columns.filter((col) => rows.some((r) => col.get(r) !== undefined && col.get(r) !== null));
  const reasons: string[] = [];
  const marks = c.runs.map((r) => {
    if (r.metrics.feasible !== false) return '';
    const why = `infeasible: ${String(r.metrics.infeasibleReason ?? 'no reason given')}`;
    let i = reasons.indexOf(why);
    if (i < 0) i = reasons.push(why) - 1;
    return ` [${i + 1}]`;
  });
  const titleOf = (col: Column): string => {
    const path = columnPath(c, col);
    if (!path) return '';
    const d = defOf(path.path, c.family);
    return d
      ? `${path.path}: ${d.def}${d.unit ? ` (${d.unit})` : ''}${path.shown ? `; ${path.shown}` : ''}`
      : path.path;
  };
  for (const col of columns) {
    const p = columnPath(c, col);
    if (p) c.shown.set(p.path, p.shown);
  }
  const head = [
    '<th>policy</th>',
    ...c.varying.map((k) => `<th title="${esc(k)}">${esc(k.split('.').pop())}</th>`),
    ...(c.multiSeed ? ['<th>seed</th>'] : []),
    ...columns.map((col) => `<th title="${esc(titleOf(col))}">${headerHtml(col.header)}</th>`),
  ];
  const body = rows.map((r, i) => {
    const cells = [
      `<td class="policy">${esc(r.policy + marks[i])}</td>`,
      ...c.varying.map((k) =>
        typeof r.params[k] === 'number' ? td(r.params[k]) : `<td class="param">${esc(fmt(r.params[k]))}</td>`,
      ),
      ...(c.multiSeed ? [td(r.seed)] : []),
      ...columns.map((col) => {
        const v = col.get(r);
        return td(typeof v === 'number' && Number.isNaN(v) ? undefined : v, col.digits);
      }),
    ];
    return `<tr>${cells.join('')}</tr>`;
  });
  let html = `<div class="scroll"><table id="results-table"><thead><tr>${head.join('')}</tr></thead><tbody>\n${body.join('\n')}\n</tbody></table></div>`;
  if (reasons.length) html += `<ol class="note">${reasons.map((r) => `<li>${esc(r)}</li>`).join('')}</ol>`;
  html += `<p class="note">Every column of the printed table, none left out to fit a terminal; hover over a header for its metric path, or see <a href="#definitions">the definitions</a>. All metrics of every run are in ${fileLink('results.json')} and ${fileLink('runs.csv')}.</p>`;
  if ((out?.seedSummary ?? []).length > 0) {
    html += `<h3>Over seeds</h3><pre>${esc(renderSeedSummary(rows, out!.seedSummary, 'box'))}</pre>`;
    for (const m of out!.seedSummary) c.shown.set(m, 'min / mean / max over seeds');
  }
  return html;
}

/** The metric path a column shows (catalogue ids map through `COLUMN_METRICS`; config columns are paths). */
function columnPath(c: Context, col: Column): { path: string; shown?: string } | undefined {
  const cat = COLUMN_METRICS[c.family][col.id];
  if (cat) return cat;
  if (col.id.startsWith('rel:')) {
    const rel = c.loaded.results.config.output?.relative;
    return {
      path: col.id,
      shown: `this run’s ${col.id.slice(4)} / the value of ${rel?.baseline ?? 'the baseline'} at the same sweep point and seed (output.relative)`,
    };
  }
  return { path: col.id };
}

/** A metric's definition; `rel:<metric>` (a column of `output.relative`) is defined by its metric, as a ratio. */
function defOf(p: string, family: Family): MetricDef | undefined {
  if (!p.startsWith('rel:')) return metricDef(p, family);
  const d = metricDef(p.slice(4), family);
  return d ? { def: d.def, unit: 'ratio' } : undefined;
}

/** A plot of the page: markup Vega rendered in this process, or a file of the folder shown as an image. */
type PlotOut = { readonly title: string; readonly caption: string } & (
  | { readonly svg: string }
  | { readonly foreign: Buffer }
);

/** SVG files larger than this are linked, not embedded (a page of hundreds of MB helps no one). */
const MAX_FOREIGN_SVG_BYTES = 8 * 1024 * 1024;

/**
 * The overview drawn when the config asks for no plot: key metrics by policy, or along the first
 * numeric swept value (else the first swept value), one panel per value of a second one; anything
 * else that varies (a third swept value, seeds) is averaged, and the caption says so.
 */
function overviewPlots(c: Context): { specs: PlotSpec[]; averaged: string[] } {
  const ys =
    c.family === 'serving'
      ? ['metrics.ttftMs.p50', 'metrics.tpotMs.p50', 'metrics.throughputTokPerS', 'metrics.bufferHitRate']
      : ['metrics.throughputTokPerS', 'metrics.decodeTokPerS', 'metrics.gpuBusyFrac', 'metrics.h2dUtil'];
  const sweep = c.varying.find((k) => k !== 'case' && c.runs.every((r) => typeof r.params[k] === 'number'));
  const x = sweep ?? c.varying[0] ?? 'policy';
  const kind = sweep ? 'line' : 'bar';
  const others = c.varying.filter((k) => k !== x);
  const facet = others[0];
  const averaged = [...others.slice(1), ...(c.multiSeed ? ['seed'] : [])];
  const specs = ys
    .filter((y) => c.runs.some((r) => typeof metricAt(r.metrics, y.slice('metrics.'.length)) === 'number'))
    .map((y) => {
      const metric = y.slice('metrics.'.length);
      const d = metricDef(metric, c.family);
      return PlotSchema.parse({
        name: `overview-${metric}`,
        title: `${metric}${d?.unit ? ` (${d.unit})` : ''}`,
        x,
        y,
        kind,
        ...(facet ? { facet } : {}),
      });
    });
  return { specs, averaged };
}

/** The plots of the page; `overview` says they were drawn by the report, and whether two fit side by side. */
async function plots(c: Context): Promise<{ list: PlotOut[]; overview: 'grid' | 'wide' | undefined }> {
  const { loaded } = c;
  const specs = loaded.results.config.output?.plots ?? [];
  const list: PlotOut[] = [];
  const used = new Set<string>();
  // The config's plots are drawn again from the results' numbers, never read back from the folder:
  // only markup this process rendered is inlined.
  for (const spec of specs) {
    const file = `${spec.name}.svg`;
    used.add(file);
    const where = loaded.files.includes(file)
      ? `drawn from results.json (as ${file})`
      : `drawn from results.json (${file} was not in the folder)`;
    list.push({
      title: spec.title ?? spec.name,
      caption: `${spec.y} against ${spec.x}, by ${spec.series}${spec.facet ? `, one panel per ${spec.facet}` : ''} — ${where}`,
      svg: await renderPlot(spec, c.plotRuns),
    });
  }
  // Other drawings in the folder (e.g. written by an experiment's own plotting script): images only.
  for (const file of loaded.files) {
    if (!file.toLowerCase().endsWith('.svg') || used.has(file)) continue;
    const full = path.join(loaded.dir, file);
    const st = statSync(full, { throwIfNoEntry: false });
    if (!st?.isFile() || st.size > MAX_FOREIGN_SVG_BYTES) continue;
    list.push({
      title: file.slice(0, -4),
      caption: `${file} (a file of the results folder, not one of the config’s output.plots; shown as an image)`,
      foreign: readFileSync(full),
    });
  }
  if (list.length > 0 || c.runs.length === 0) return { list, overview: undefined };
  const overview = overviewPlots(c);
  const mean = overview.averaged.length ? `; the mean over ${overview.averaged.join(', ')}` : '';
  for (const spec of overview.specs) {
    list.push({
      title: spec.title!,
      caption: `${spec.y} by ${spec.x}${spec.facet ? `, one panel per ${spec.facet}` : ''}${mean}: an overview drawn by the report (the config has no output.plots)`,
      svg: await renderPlot(spec, c.plotRuns),
    });
    c.shown.set(spec.y.slice('metrics.'.length), undefined);
  }
  return { list, overview: overview.specs.some((s) => s.facet) ? 'wide' : 'grid' };
}

function plotsSection(list: readonly PlotOut[], overview: 'grid' | 'wide' | undefined): string {
  if (list.length === 0)
    return '<p class="note">No plots: the config has no <code>output.plots</code> and the folder has no SVG.</p>';
  const figures = list.map((p, i) => {
    const html = 'svg' in p ? inlineRenderedSvg(p.svg, `plot${i}`) : foreignSvgImage(p.foreign, p.title);
    return `<figure>${html}<figcaption>${esc(p.caption)}</figcaption></figure>`;
  });
  const lead = overview
    ? '<p class="note">The config asks for no plots (<code>output.plots</code>); these overview charts are drawn by the report with the same Vega-Lite renderer.</p>'
    : '';
  return `${lead}<div class="plots${overview === 'grid' ? ' grid' : ''}">${figures.join('\n')}</div>`;
}

/** A small key/value table of numbers per run. */
interface PerRunColumn {
  readonly label: string;
  readonly path?: string;
  /** Shown × 100 with two decimals (a fraction as a percentage). */
  readonly percent?: boolean;
}

function perRunTable(
  c: Context,
  rows: readonly { run: ReportRun; cells: readonly unknown[] }[],
  headers: readonly PerRunColumn[],
): string {
  const head = [
    '<th>run</th>',
    ...headers.map((h) => `<th${h.path ? ` title="${esc(h.path)}"` : ''}>${headerHtml(h.label)}</th>`),
  ].join('');
  for (const h of headers) if (h.path) c.shown.set(h.path, h.percent ? 'shown × 100, in %' : undefined);
  const cell = (h: PerRunColumn, v: unknown): string => (h.percent && typeof v === 'number' ? td(v * 100, 2) : td(v));
  const body = rows
    .map(
      ({ run, cells }) =>
        `<tr><td class="policy">${esc(runLabel(c, run))}</td>${cells.map((v, i) => cell(headers[i]!, v)).join('')}</tr>`,
    )
    .join('\n');
  return `<div class="scroll"><table><thead><tr>${head}</tr></thead><tbody>\n${body}\n</tbody></table></div>`;
}

function boundsSection(c: Context): string {
  const parts: string[] = [];
  const num = (v: unknown): number | undefined => (typeof v === 'number' ? v : undefined);
  // MoE-Lens (and any self-scheduling policy): its analytic model beside the simulated throughput.
  const lens = c.runs.filter((r) => r.metrics.analytic !== null && typeof r.metrics.analytic === 'object');
  if (lens.length > 0) {
    const a = (r: ReportRun, k: string): unknown => (r.metrics.analytic as Record<string, unknown>)[k];
    parts.push('<h3>Analytic model (MoE-Lens, Eqs. 2–14)</h3>');
    parts.push(
      '<p class="note">The policy computes its analytic model beside every run. <code>t</code> (Eq. 14) is the model’s generation throughput; <code>tMaxGenTokPerS</code> the Stage-1 upper bound (memory- or GPU-bound, Eq. 4) as generation throughput.</p>',
    );
    const keys = [
      'simulatedTokPerS',
      't',
      'simulatedOverT',
      'tMaxGenTokPerS',
      'simulatedOverTMaxGen',
      'tMemTokPerS',
      'stage2Regime',
    ];
    parts.push(
      perRunTable(
        c,
        lens.map((run) => ({ run, cells: keys.map((k) => a(run, k)) })),
        keys.map((k) => ({ label: k, path: `analytic.${k}` })),
      ),
    );
    const all = lens.map((run) => {
      const entries = Object.entries(run.metrics.analytic as Record<string, unknown>);
      for (const [k] of entries) c.shown.set(`analytic.${k}`, undefined);
      const rows = entries.map(([k, v]) => `<tr><td><code>${esc(k)}</code></td>${td(v)}</tr>`).join('');
      return `<details><summary>${esc(runLabel(c, run))}: every term of the model</summary><table><tbody>${rows}</tbody></table></details>`;
    });
    parts.push(all.join('\n'));
  }
  // Throughput policies that search a configuration: the predicted pass time against the simulated one.
  const search = c.runs.filter(
    (r) =>
      num(metricAt(r.metrics, 'search.predictedPassS')) !== undefined &&
      num(metricAt(r.metrics, 'search.simulatedPassS')) !== undefined,
  );
  if (search.length > 0) {
    parts.push('<h3>Predicted against simulated pass time</h3>');
    parts.push(
      '<p class="note">The policy’s search predicts a pass’s time as the critical path of its task graph under expected routing, without contention; the simulated pass of the same shape has sampled routing and shares links and host DRAM, so it is usually as long or longer.</p>',
    );
    parts.push(
      perRunTable(
        c,
        search.map((run) => {
          const p = metricAt(run.metrics, 'search.predictedPassS') as number;
          const s = metricAt(run.metrics, 'search.simulatedPassS') as number;
          return { run, cells: [p, s, p > 0 ? s / p : undefined] };
        }),
        [
          { label: 'predicted pass s', path: 'search.predictedPassS' },
          { label: 'simulated pass s', path: 'search.simulatedPassS' },
          { label: 'simulated / predicted' },
        ],
      ),
    );
  }
  // MoE-CAP: fractions of the hardware's peak (at most 1) and cost.
  const cap = c.runs.filter((r) => r.metrics.cap !== null && typeof r.metrics.cap === 'object');
  if (cap.length > 0) {
    const keys = [
      'cap.sMbu',
      'cap.sMfu',
      'cap.mbu',
      'cap.mfu',
      'cap.sMbuCpu',
      'cap.sMfuCpu',
      'cap.mbuOverSMbu',
      'cost.usdPerMTok',
    ].filter((k) => cap.some((r) => num(metricAt(r.metrics, k)) !== undefined));
    parts.push('<h3>MoE-CAP: use of the hardware’s peak, and cost</h3>');
    parts.push(
      '<p class="note">S-MBU and S-MFU count what the runs activated, as fractions of the datasheet peak: at most 100 %, a bound the simulator enforces. The dense MBU/MFU count every expert in every pass, bytes and FLOPs a sparse model does not spend, so they over-rate it and can exceed 100 %. Simplifications are listed in <code>sim/metrics/cap.ts</code>.</p>',
    );
    const label: Readonly<Record<string, string>> = {
      'cap.sMbu': 'S-MBU %',
      'cap.sMfu': 'S-MFU %',
      'cap.mbu': 'dense MBU %',
      'cap.mfu': 'dense MFU %',
      'cap.sMbuCpu': 'CPU S-MBU %',
      'cap.sMfuCpu': 'CPU S-MFU %',
      'cap.mbuOverSMbu': 'MBU / S-MBU',
      'cost.usdPerMTok': 'US$ per M tokens',
    };
    const cols = keys.map((k) => ({ label: label[k] ?? k, path: k, percent: label[k]?.endsWith('%') ?? false }));
    parts.push(
      perRunTable(
        c,
        cap.map((run) => ({ run, cells: keys.map((k) => metricAt(run.metrics, k)) })),
        cols,
      ),
    );
  }
  if (parts.length === 0)
    return '<p class="note">No run of this experiment carries an analytic model or bound (MoE-Lens’s <code>metrics.analytic</code>, a searched configuration’s predicted pass time, or MoE-CAP’s <code>metrics.cap</code>).</p>';
  return parts.join('\n');
}

function definitionsSection(c: Context): string {
  const rows = [...c.shown.entries()].map(([p, shown]) => {
    const d = defOf(p, c.family);
    const def = d ? d.def : 'no definition recorded (see the metric code in sim/metrics/)';
    return `<tr><td><code>${esc(p)}</code></td><td>${esc(def)}${shown ? `<br><span class="note">${esc(shown)}</span>` : ''}</td><td>${esc(d?.unit ?? '')}</td></tr>`;
  });
  return `<div class="scroll"><table><thead><tr><th>metric path</th><th>definition</th><th>unit</th></tr></thead><tbody>\n${rows.join('\n')}\n</tbody></table></div><p class="note">Definitions from the metric code: <code>sim/metrics/serving-metrics.ts</code>, <code>throughput-metrics.ts</code>, <code>cap.ts</code>, and <code>sim/lens/analytic.ts</code>. Fractions are of the makespan unless said otherwise; GB is 10⁹ bytes.</p>`;
}

function timelinesSection(c: Context): string {
  const timelines = c.loaded.files
    .filter((f) => /^timeline-.*\.json$/.test(f))
    .sort(
      (a, b) =>
        Number(/^timeline-(\d+)/.exec(a)?.[1] ?? 0) - Number(/^timeline-(\d+)/.exec(b)?.[1] ?? 0) || a.localeCompare(b),
    );
  if (timelines.length === 0)
    return '<p class="note">No timelines in this folder. Run the experiment with <code>--timeline</code> to write one Perfetto (Chrome-trace) timeline per run.</p>';
  const items = timelines.map((f) => {
    const index = Number(/^timeline-(\d+)/.exec(f)?.[1]);
    const run = c.runs.find((r) => r.index === index);
    return `<li>${fileLink(f)}${run ? ` — ${esc(runLabel(c, run))}` : ''}</li>`;
  });
  return `<ul>${items.join('\n')}</ul><p class="note">To open one: go to <a href="https://ui.perfetto.dev">ui.perfetto.dev</a>, choose “Open trace file” and pick the file (or drag it onto the page); Perfetto reads it in the browser, nothing is uploaded. The links here open the JSON itself: a browser does not let a local page hand a file to another site. Tracks: GPU streams and the GPU’s blocked time, H2D/D2H packets, CPU cores, memory counters per pool and category.</p>`;
}

/** A link to the paper's comparison when the folder is an experiment of a reproduction (`reproduction/<paper>/<exp>/`). */
export function paperLink(dir: string): string {
  return existsSync(path.join(dir, '..', 'COMPARISON.html'))
    ? '<a href="../COMPARISON.html">Paper vs ours (the reproduction’s comparison)</a>'
    : '';
}

/** The report of a loaded results folder, as one HTML page. */
export async function renderReport(loaded: LoadedResults): Promise<string> {
  const { results } = loaded;
  const runs = results.runs;
  const family: Family =
    results.config.executor?.kind === 'throughput' || runs.some((r) => 'feasible' in r.metrics)
      ? 'throughput'
      : 'serving';
  const plotRuns = runs.map((r) => ({
    ...r,
    relative: Object.fromEntries(Object.entries(r.relative ?? {}).filter((e): e is [string, number] => e[1] !== null)),
  }));
  const c: Context = {
    loaded,
    runs,
    family,
    varying: varyingParams(runs),
    multiSeed: new Set(runs.map((r) => r.seed)).size > 1,
    shown: new Map(),
    plotRuns,
  };
  const name = results.name;
  const description = results.config.description;
  const distinct = (k: string) => [...new Set(runs.map((r) => fmt(r.params[k])).filter((v) => v !== '–'))];
  const models = distinct('model');
  const hardware = distinct('hardware');
  const policies = [...new Set(runs.map((r) => r.policy))];
  const seeds = [...new Set(runs.map((r) => r.seed))];
  const wall = [...loaded.timing.values()].reduce((a, t) => a + t.wallS, 0);
  const table = runs.length > 0 ? resultsTable(c) : '<p class="warning">This results file has no runs.</p>';
  const { list, overview } = await plots(c);
  const plotHtml = plotsSection(list, overview);
  const bounds = boundsSection(c);
  const timelines = timelinesSection(c);
  const defs = definitionsSection(c);
  const facts: [string, string][] = [
    ['runs', `${runs.length}${c.varying.length ? ` (swept: ${c.varying.join(', ')})` : ''}`],
    ['policies', policies.join(', ')],
    ...(models.length ? [['model', models.join(', ')] as [string, string]] : []),
    ...(hardware.length ? [['hardware', hardware.join(', ')] as [string, string]] : []),
    ['seeds', seeds.join(', ')],
    ['executor', family],
    ...(loaded.timing.size ? [['wall time', `${wall.toFixed(2)} s (timing.json)`] as [string, string]] : []),
  ];
  const configYaml = YAML.stringify(loaded.rawConfig ?? {}, { lineWidth: 0 });
  const sections: [string, string, string][] = [
    ['results', 'Results', table],
    ['plots', 'Plots', plotHtml],
    ['bounds', 'Analytic models and bounds', bounds],
    ['timelines', 'Timelines', timelines],
    ['definitions', 'Metric definitions', defs],
    [
      'config',
      'Config',
      `<pre><code>${esc(configYaml)}</code></pre><p class="note">The resolved config as stored in ${fileLink('results.json')} (defaults filled in).</p>`,
    ],
  ];
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; base-uri 'none'">
<meta name="referrer" content="no-referrer">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="moesim report">
<title>${esc(name)} — moesim report</title>
<style>${STYLE}</style>
</head>
<body>
<main>
<header>
<h1>${esc(name)}</h1>
${description ? `<p class="description">${esc(description)}</p>` : ''}
${results.complete ? '' : '<p class="warning">Incomplete: the experiment stopped before every run finished; only the runs that finished are shown.</p>'}
<dl class="facts">${facts.map(([k, v]) => `<dt>${esc(k)}</dt><dd>${esc(v)}</dd>`).join('')}</dl>
<nav class="toc">${sections.map(([id, title]) => `<a href="#${id}">${esc(title)}</a>`).join('')}${paperLink(loaded.dir)}</nav>
</header>
${sections.map(([id, title, html]) => `<section id="${id}">\n<h2>${esc(title)}</h2>\n${html}\n</section>`).join('\n')}
<footer><p class="note">Written by <code>moesim report</code> from ${fileLink('results.json')}${loaded.timing.size ? `, ${fileLink('timing.json')}` : ''} and the SVG files of this folder. Simulated quantities only, except wall time.</p></footer>
</main>
</body>
</html>
`;
}

/**
 * Writes `report.html` into the results folder `dir` (atomically) and returns its path.
 * @throws UserError for a missing folder, a missing or malformed results.json, or a folder that cannot be written
 */
export async function writeReport(dir: string): Promise<string> {
  const loaded = loadResultsDir(dir);
  const html = await renderReport(loaded);
  const target = path.join(dir, REPORT_FILE);
  try {
    await writeFileAtomic(target, html);
  } catch (err) {
    throw new UserError(`cannot write the report (${(err as NodeJS.ErrnoException).code ?? String(err)})`, target);
  }
  return target;
}
