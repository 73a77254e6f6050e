/**
 * The comparison tables of a reproduction, written from its results:
 * - `reproduction/<paper>/COMPARISON.md` and `COMPARISON.html`: every table of the paper's
 *   comparison module;
 * - `reproduction/<paper>/tables-input.json`: the runs the tables read, keeping of each run only
 *   the metrics the module read (small, committed: the test that checks FIDELITY.md regenerates
 *   the tables from it, since simulating every experiment in a test would take minutes);
 * - the generated sections of the paper's FIDELITY.md (between `<!-- BEGIN GENERATED id -->`
 *   and `<!-- END GENERATED id -->`), each the table of that id.
 *
 * `npm run reproduce -- <paper> --tables` rewrites all of them from the stored results without
 * simulating. Tables made from tables-input.json must equal those made from the full results:
 * checked every time the input is written.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { UserError } from '../../../sim/kernel/errors.ts';
import { toJson, writeFileAtomic } from '../../outputs/atomic.ts';
import { comparisonHtml, comparisonMarkdown, keepPaths, readResults, recording, tableMarkdown } from './kit.ts';
import type { ExperimentLink, PaperComparison, Results, Table } from './kit.ts';
import { comparisonOf, experimentsOf, fidelityFile, type Paper, ROOT } from './papers.ts';

export const TABLES_INPUT = 'tables-input.json';

/** The stored input of a paper's tables: experiment → results with only what the tables read. */
export interface TablesInput {
  readonly paper: string;
  readonly experiments: Record<string, Results>;
}

export function readTablesInput(file: string): Map<string, Results> {
  const j = JSON.parse(readFileSync(file, 'utf8')) as TablesInput;
  return new Map(Object.entries(j.experiments));
}

const BEGIN = /<!-- BEGIN GENERATED ([\w.-]+)[^>]*-->\n/g;
const endOf = (id: string): string => `<!-- END GENERATED ${id} -->`;

/** The generated sections of a markdown text: id → the text between its markers. */
export function generatedSections(text: string, file: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of text.matchAll(BEGIN)) {
    const id = m[1]!;
    const start = m.index + m[0].length;
    const end = text.indexOf(endOf(id), start);
    if (end < 0) throw new UserError(`generated section '${id}' has no end marker (${endOf(id)})`, file);
    out.set(id, text.slice(start, end));
  }
  return out;
}

/** What a generated section holds for `t`. */
export const sectionText = (t: Table): string => `${tableMarkdown(t)}\n`;

/**
 * `text` with every generated section replaced by its table. A section of a table the comparison
 * can make (`known`) but did not (its experiment has no results) is left as it is; a section no
 * table of the comparison has is refused.
 */
export function spliceSections(
  text: string,
  tables: readonly Table[],
  file: string,
  known: readonly string[] = tables.map((t) => t.id),
): string {
  const byId = new Map(tables.map((t) => [t.id, t]));
  for (const id of generatedSections(text, file).keys()) {
    if (!byId.has(id) && !known.includes(id)) {
      throw new UserError(`generated section '${id}' names no table of the comparison (${known.join(', ')})`, file);
    }
  }
  const section = /(<!-- BEGIN GENERATED ([\w.-]+)[^>]*-->\n)([\s\S]*?)(<!-- END GENERATED \2 -->)/g;
  return text.replace(section, (_m, begin: string, id: string, body: string, end: string) => {
    const t = byId.get(id);
    return `${begin}${t ? sectionText(t) : body}${end}`;
  });
}

/** Params with a file path inside the checkout (a testbed file) made relative to it: the stored input is portable. */
export function portable(params: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(params)) {
    const inside = typeof v === 'string' && path.isAbsolute(v) && v.startsWith(`${ROOT}${path.sep}`);
    out[k] = inside ? path.relative(ROOT, v).split(path.sep).join('/') : v;
  }
  return out;
}

/** The experiments of `dir` that have results, each linked to its report.html (else its results.json). */
export function experimentLinks(dir: string, names: readonly string[]): ExperimentLink[] {
  return names
    .filter((n) => existsSync(path.join(dir, n, 'results.json')))
    .map((n) => ({
      name: n,
      href: `${n}/${existsSync(path.join(dir, n, 'report.html')) ? 'report.html' : 'results.json'}`,
    }));
}

/** Tables from the full results, and the stored input that gives the same tables. */
function tablesAndInput(c: PaperComparison, results: Map<string, Results>): { tables: Table[]; input: TablesInput } {
  const { value: tables, paths } = recording(() => c.tables(results));
  const experiments: Record<string, Results> = {};
  for (const [name, r] of results) {
    const runs = keepPaths(r.runs, paths).map((run) => ({ ...run, params: portable(run.params) }));
    experiments[name] = { name: r.name, complete: r.complete, runs };
  }
  const input: TablesInput = { paper: c.paper, experiments };
  const again = c.tables(new Map(Object.entries(experiments)));
  if (toJson(again) !== toJson(tables)) {
    const why = 'a comparison read a metric without metric()/relativeOf()';
    throw new Error(`${c.paper}: the tables from ${TABLES_INPUT} differ from those of the full results (${why})`);
  }
  return { tables, input };
}

/**
 * Writes a paper's COMPARISON.md/.html and FIDELITY sections. From the full results in `dir` when
 * they are there (then tables-input.json is rewritten too), else from its tables-input.json.
 * Returns the files written.
 */
export async function writeTables(paper: Paper, dir: string, o: { fidelity: boolean }): Promise<string[]> {
  const c = await comparisonOf(paper);
  const names = experimentsOf(paper).map((e) => e.name);
  // Only finished experiments make tables (a partial one is listed as missing).
  const full = new Map([...readResults(dir, names)].filter(([, r]) => r.complete));
  const inputFile = path.join(dir, TABLES_INPUT);
  let tables: Table[];
  const written: string[] = [];
  if (full.size > 0) {
    const made = tablesAndInput(c, full);
    tables = made.tables;
    await writeFileAtomic(inputFile, toJson(made.input));
    written.push(inputFile);
  } else if (existsSync(inputFile)) {
    tables = c.tables(readTablesInput(inputFile));
  } else {
    throw new UserError(`no results to make tables from: run \`npm run reproduce -- ${paper}\` first`, dir);
  }
  const have = full.size > 0 ? full : readTablesInput(inputFile);
  const missing = names.filter((n) => !have.has(n));
  await writeFileAtomic(path.join(dir, 'COMPARISON.md'), comparisonMarkdown(c, tables, missing));
  await writeFileAtomic(path.join(dir, 'COMPARISON.html'), comparisonHtml(c, tables, experimentLinks(dir, names)));
  written.push(path.join(dir, 'COMPARISON.md'), path.join(dir, 'COMPARISON.html'));
  if (o.fidelity) {
    const f = fidelityFile(paper);
    const text = readFileSync(f, 'utf8');
    const next = spliceSections(text, tables, f, Object.keys(c.sources));
    if (next !== text) {
      await writeFileAtomic(f, next);
      written.push(f);
    }
  }
  return written;
}

/**
 * How a paper's committed tables differ from what the code makes of its stored input
 * (`reproduction/<paper>/tables-input.json`): one line per generated section of FIDELITY.md
 * that differs, and for COMPARISON.md. Empty when they agree. A section whose experiment is not
 * in the stored input (not reproduced yet) cannot be checked: see `unverifiedSections`.
 */
export async function staleTables(paper: Paper, dir: string): Promise<string[]> {
  const c = await comparisonOf(paper);
  const input = readTablesInput(path.join(dir, TABLES_INPUT));
  const tables = c.tables(input);
  const byId = new Map(tables.map((t) => [t.id, t]));
  const out: string[] = [];
  const f = fidelityFile(paper);
  for (const [id, text] of generatedSections(readFileSync(f, 'utf8'), f)) {
    const t = byId.get(id);
    const source = c.sources[id];
    if (source === undefined) out.push(`${f}: section '${id}' names no table`);
    else if (!t && input.has(source)) out.push(`${f}: section '${id}': no table made from ${source}'s stored results`);
    else if (t && text !== sectionText(t)) out.push(`${f}: section '${id}' differs from the generated table`);
  }
  const missing = experimentsOf(paper)
    .map((e) => e.name)
    .filter((n) => !input.has(n));
  const cmp = path.join(dir, 'COMPARISON.md');
  if (!existsSync(cmp) || readFileSync(cmp, 'utf8') !== comparisonMarkdown(c, tables, missing)) {
    out.push(`${cmp} differs from the generated comparison`);
  }
  return out;
}

/** The generated sections of a paper's FIDELITY.md whose experiment has no stored results. */
export async function unverifiedSections(paper: Paper, dir: string): Promise<string[]> {
  const c = await comparisonOf(paper);
  const file = path.join(dir, TABLES_INPUT);
  const input = existsSync(file) ? readTablesInput(file) : new Map<string, Results>();
  const f = fidelityFile(paper);
  const ids = [...generatedSections(readFileSync(f, 'utf8'), f).keys()];
  return ids.filter((id) => c.sources[id] !== undefined && !input.has(c.sources[id]!));
}
