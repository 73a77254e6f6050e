/**
 * `npm run validation`: runs every case of `validation/cases/` whose mechanisms moesim models,
 * and prints per case the measured and simulated figures with the error (calibration figures
 * marked as such), the mechanisms exercised, then a support matrix (mechanism × model family ×
 * GPU class: validated / run / not modelled). Cases with an unbuilt mechanism print "not
 * modelled yet". Nothing here asserts a figure: this is a report. `--case <id>` runs one case.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { validateConfig } from '../experiments/config/load.ts';
import { runExperiment, type RunRecord } from '../experiments/runner.ts';
import { loadGpu } from '../hardware-profiles/load.ts';
import { loadCases, type Case, type Figure } from './case.ts';
import { isBuilt, MECHANISMS } from './mechanisms.ts';

/** A case whose judged figures' median |error| is at most this counts as validated in the matrix (a report, not a test). */
export const VALIDATED_MEDIAN_ERROR = 0.25;

export interface FigureResult {
  readonly figure: Figure;
  readonly role: 'calibrate' | 'judged';
  readonly simulated: number | null;
  readonly error: number | null;
}

export interface CaseResult {
  readonly case: Case;
  readonly runnable: boolean;
  readonly missing: readonly string[];
  readonly figures: readonly FigureResult[];
}

/** A case's runs as policy label → run record (first seed). */
async function simulate(c: Case): Promise<Map<string, RunRecord>> {
  const config = validateConfig(c.config, c.file);
  const loaded = { config, file: c.file, baseDir: path.dirname(c.file) };
  const res = await runExperiment(loaded, { jobs: 1, progress: false });
  const out = new Map<string, RunRecord>();
  for (const r of res.runs) if (!out.has(r.policy)) out.set(r.policy, r);
  return out;
}

function metricOf(r: RunRecord | undefined, f: Figure): number | null {
  if (!r) return null;
  const m = r.metrics as unknown as { tpotMs: { p50: number }; bufferHitRate: number };
  if (f.metric === 'tok/s') return m.tpotMs.p50 > 0 ? 1000 / m.tpotMs.p50 : null;
  if (f.metric === 'hit') return m.bufferHitRate;
  return null;
}

export async function runCase(c: Case): Promise<CaseResult> {
  const missing = c.mechanisms.filter((m) => !isBuilt(m));
  const all = [...c.calibrate.map((f) => ['calibrate', f] as const), ...c.judged.map((f) => ['judged', f] as const)];
  const unsimulated = (): FigureResult[] =>
    all.map(([role, figure]) => ({ role, figure, simulated: null, error: null }));
  if (missing.length > 0) {
    return { case: c, runnable: false, missing, figures: unsimulated() };
  }
  let runs: Map<string, RunRecord>;
  try {
    runs = await simulate(c);
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    return { case: c, runnable: false, missing: [`run failed: ${why}`], figures: unsimulated() };
  }
  const figures = all.map(([role, figure]) => {
    const simulated = figure.metric === 'info' ? null : metricOf(runs.get(figure.policy ?? ''), figure);
    const error = simulated === null || figure.measured === 0 ? null : (simulated - figure.measured) / figure.measured;
    return { role, figure, simulated, error };
  });
  return { case: c, runnable: true, missing, figures };
}

const fmt = (v: number | null, metric: string): string =>
  v === null ? '' : metric === 'hit' ? `${(100 * v).toFixed(1)} %` : metric === 'info' ? String(v) : v.toFixed(2);

/** The per-case table. */
export function formatCase(r: CaseResult): string {
  const c = r.case;
  const lines = [
    `## ${c.id}: ${c.title}`,
    `source: ${c.source.repo} ${c.source.ref} (${c.source.author}, ${c.source.date})`,
    `setup: ${c.setup.model} ${c.setup.format} | ${c.setup.gpu} ${c.setup.link} | ${c.setup.host} | ` +
      `${c.setup.engine} ${c.setup.flags} | prompt ${c.setup.promptTokens ?? '?'} gen ${c.setup.genTokens ?? '?'} ${c.setup.cache}`,
    `routing: ${c.routing.kind} — ${c.routing.note}`,
    `mechanisms: ${c.mechanisms.map((m) => (isBuilt(m) ? m : `${m} (not modelled)`)).join(', ')}`,
    ...r.missing.filter((m) => m.startsWith('run failed')),
  ];
  const w = Math.max(...r.figures.map((f) => f.figure.figure.length), 10);
  const row = (a: string, b: string, m: string, s: string, e: string): string =>
    `  ${a.padEnd(9)} ${b.padEnd(w)} ${m.padStart(10)} ${s.padStart(18)} ${e.padStart(8)}`;
  lines.push(row('role', 'figure', 'measured', 'simulated', 'error'));
  const failed = r.missing.some((m) => m.startsWith('run failed'));
  for (const f of r.figures) {
    let sim: string;
    if (!r.runnable) sim = failed ? 'run failed' : 'not modelled yet';
    else sim = f.figure.metric === 'info' ? '(info)' : fmt(f.simulated, f.figure.metric) || 'no run';
    const err = f.error === null ? '' : `${f.error >= 0 ? '+' : ''}${(100 * f.error).toFixed(0)} %`;
    lines.push(row(f.role, f.figure.figure, fmt(f.figure.measured, f.figure.metric), sim, err));
  }
  return lines.join('\n');
}

/** GPU class of a case, by VRAM. */
export function gpuClass(gpuId: string): string {
  let gib: number;
  try {
    gib = loadGpu(gpuId).vramBytes / 2 ** 30;
  } catch {
    return 'unknown GPU';
  }
  return gib <= 8 ? '≤8 GB' : gib <= 16 ? '12–16 GB' : gib <= 32 ? '24–32 GB' : '>32 GB';
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

/** mechanism × (family, GPU class) → validated / run / not modelled (best status over cases). */
export function supportMatrix(results: readonly CaseResult[]): string {
  const rank = { 'not modelled': 0, run: 1, validated: 2 } as const;
  type S = keyof typeof rank;
  const cols = [...new Set(results.map((r) => `${r.case.setup.family} @ ${gpuClass(r.case.setup.gpu)}`))].sort();
  const cell = new Map<string, S>();
  for (const r of results) {
    const judged = r.figures.filter((f) => f.role === 'judged' && f.error !== null).map((f) => Math.abs(f.error!));
    const good = judged.length > 0 && median(judged) <= VALIDATED_MEDIAN_ERROR;
    const s: S = !r.runnable ? 'not modelled' : good ? 'validated' : 'run';
    const col = `${r.case.setup.family} @ ${gpuClass(r.case.setup.gpu)}`;
    for (const m of r.case.mechanisms) {
      const k = `${m}|${col}`;
      const own: S = isBuilt(m) ? s : 'not modelled';
      const prev = cell.get(k);
      if (prev === undefined || rank[own] > rank[prev]) cell.set(k, own);
    }
  }
  const w0 = Math.max(...MECHANISMS.map((m) => m.id.length));
  const w = Math.max(...cols.map((c) => c.length), 12);
  const out = [`${'mechanism'.padEnd(w0)} | ${cols.map((c) => c.padEnd(w)).join(' | ')}`];
  for (const m of MECHANISMS) {
    const row = cols.map((c) => (cell.get(`${m.id}|${c}`) ?? '—').padEnd(w));
    out.push(`${m.id.padEnd(w0)} | ${row.join(' | ')}`);
  }
  out.push(
    `validated: a case that runs, median |error| of its judged figures ≤ ${100 * VALIDATED_MEDIAN_ERROR} %; ` +
      'run: it runs, errors larger; — : no case',
  );
  return out.join('\n');
}

/** The printed comparison as a markdown file (`--report <path>`; the notes per case are in README.md). */
function reportMarkdown(printed: string): string {
  return [
    '# Validation report',
    '',
    'Generated by `npm run validation -- --report validation/REPORT.md`; do not edit by hand. For each case,',
    'the mechanism behind its largest error is in the Cases table of validation/README.md.',
    '',
    '```text',
    printed.trimEnd(),
    '```',
    '',
  ].join('\n');
}

export async function main(argv: readonly string[]): Promise<number> {
  const only = argv.includes('--case') ? argv[argv.indexOf('--case') + 1] : undefined;
  const cases = loadCases().filter((c) => only === undefined || c.id === only);
  const report = argv.includes('--report') ? argv[argv.indexOf('--report') + 1] : undefined;
  const results: CaseResult[] = [];
  const text: string[] = [];
  for (const c of cases) {
    const r = await runCase(c);
    results.push(r);
    text.push(`${formatCase(r)}\n\n`);
    process.stdout.write(text[text.length - 1]!);
  }
  text.push(`## Support matrix (mechanism × model family @ GPU class)\n${supportMatrix(results)}\n`);
  process.stdout.write(text[text.length - 1]!);
  if (report) writeFileSync(report, reportMarkdown(text.join('')));
  return 0;
}

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(new URL(import.meta.url).pathname)) {
  process.exitCode = await main(process.argv.slice(2));
}
