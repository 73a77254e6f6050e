/**
 * `moesim reproduce`'s tables (experiments/cli/reproduce/):
 * - the committed tables are the generated ones: every generated section of a paper's
 *   FIDELITY.md (MoE-CAP: README.md) and its reproduction/<paper>/COMPARISON.md equal what the
 *   paper's comparison module makes of the committed reproduction/<paper>/tables-input.json
 *   (the stored input: simulating every experiment here would take minutes). Regenerate with
 *   `npm run reproduce -- all --tables`;
 * - the kit: bands, the ⚠ marker on a paper value beyond its bound, splicing generated sections
 *   (an unknown section id is refused), and the stored input keeping exactly what was read.
 * - bad input (an unknown paper, `--jobs 0`) is one line, exit 2, before anything is written.
 * Nothing here asserts a judged figure: only that the printed tables are the code's.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  cells,
  comparisonHtml,
  keepPaths,
  metric,
  recording,
  tableMarkdown,
  type Run,
  type Table,
} from '../../experiments/cli/reproduce/kit.ts';
import { PAPERS, REPRODUCTION_DIR, ROOT } from '../../experiments/cli/reproduce/papers.ts';
import {
  experimentLinks,
  generatedSections,
  portable,
  spliceSections,
  staleTables,
  TABLES_INPUT,
  unverifiedSections,
} from '../../experiments/cli/reproduce/tables.ts';
import { paperLink } from '../../experiments/outputs/report.ts';
import { runCliAsync, tempDir } from '../helpers/cli.ts';

describe('committed comparison tables are the generated ones', () => {
  for (const paper of PAPERS) {
    const dir = path.join(REPRODUCTION_DIR, paper);
    it.runIf(existsSync(path.join(dir, TABLES_INPUT)))(`${paper}: FIDELITY sections and COMPARISON.md`, async () => {
      expect(await staleTables(paper, dir)).toEqual([]);
    });
    it(`${paper}: every generated section names a table of the comparison`, async () => {
      const { comparisonOf, fidelityFile } = await import('../../experiments/cli/reproduce/papers.ts');
      const c = await comparisonOf(paper);
      const f = fidelityFile(paper);
      for (const id of generatedSections(readFileSync(f, 'utf8'), f).keys())
        expect(Object.keys(c.sources), `${f}: ${id}`).toContain(id);
      // Sections whose experiment is not reproduced in this checkout yet are printed, not failed.
      const unverified = await unverifiedSections(paper, dir);
      if (unverified.length > 0) console.log(`${paper}: not checked (no stored results yet): ${unverified.join(', ')}`);
    });
  }
});

const table = (rows: Table['rows'], band?: string): Table => ({
  id: 't',
  title: 'T',
  keyHeads: ['k'],
  digits: 1,
  rows,
  ...(band ? { band } : {}),
});

describe('comparison kit', () => {
  it('shows the band over the readings and ours / paper under the default reading', () => {
    const [head, row] = cells(table([{ keys: ['a'], paper: 10, ours: 12, readings: [12, 9] }], 'x / y'));
    expect(head).toEqual(['k', 'paper', 'ours', 'ours / paper', 'band (x / y)']);
    expect(row).toEqual(['a', '10.0', '12.0', '1.20', '9.0–12.0']);
  });

  it('marks a paper value beyond its bound, and only then', () => {
    const t = table([
      { keys: ['over'], paper: 50, ours: 10, bound: { value: 14, sense: 'max', what: 'PCIe' } },
      { keys: ['under'], paper: 5, ours: 4, bound: { value: 14, sense: 'max', what: 'PCIe' } },
      { keys: ['below min'], paper: 5, ours: 40, bound: { value: 30, sense: 'min', what: 'oracle' } },
    ]);
    const [, over, under, below] = cells(t);
    expect(over!.slice(0, 2)).toEqual(['over', '50.0 ⚠']);
    expect(over![4]).toBe('≤ 14.0 (PCIe)');
    expect(under![1]).toBe('5.0');
    expect(below![1]).toBe('5.0 ⚠');
    expect(tableMarkdown(t)).toMatch(/⚠: the paper’s value is beyond/);
  });

  it('appends extra columns after the standard ones, and a grid shows only keys and extras', () => {
    const withExtra: Table = {
      ...table([{ keys: ['a'], paper: 2, ours: 3, extra: ['7', 'why'] }]),
      extraHeads: ['B', 'mechanism'],
    };
    expect(cells(withExtra)).toEqual([
      ['k', 'paper', 'ours', 'ours / paper', 'B', 'mechanism'],
      ['a', '2.0', '3.0', '1.50', '7', 'why'],
    ]);
    const grid: Table = {
      ...table([{ keys: ['a'], extra: ['1'] }, { keys: ['b'] }]),
      extraHeads: ['x', 'words'],
      wordHeads: ['words'],
      grid: true,
    };
    expect(cells(grid)).toEqual([
      ['k', 'x', 'words'],
      ['a', '1', '–'],
      ['b', '–', '–'],
    ]);
    // Keys and word columns align left, figures right.
    expect(tableMarkdown(grid).split('\n')).toContain('| --- | ---: | --- |');
  });

  it('splices generated sections and refuses one no table has', () => {
    const t = table([{ keys: ['a'], paper: 1, ours: 2 }]);
    const doc = 'prose\n<!-- BEGIN GENERATED t: regenerate -->\nold\n<!-- END GENERATED t -->\nmore prose\n';
    const next = spliceSections(doc, [t], 'F.md');
    expect(next.startsWith('prose\n<!-- BEGIN GENERATED t: regenerate -->\n**T**')).toBe(true);
    expect(next.endsWith('<!-- END GENERATED t -->\nmore prose\n')).toBe(true);
    expect(generatedSections(next, 'F.md').get('t')).toBe(`${tableMarkdown(t)}\n`);
    expect(() => spliceSections(doc.replaceAll(' t', ' u'), [t], 'F.md')).toThrow(/names no table/);
    // A known table not made (its experiment has no results): the section keeps its text.
    expect(spliceSections(doc.replaceAll(' t', ' u'), [t], 'F.md', ['t', 'u'])).toBe(doc.replaceAll(' t', ' u'));
  });

  it('keeps in the stored input exactly the metrics that were read', () => {
    const runs: Run[] = [
      {
        index: 0,
        policy: 'p',
        params: { case: 'c' },
        seed: 1,
        metrics: { a: { b: 2, c: 3 }, d: 4 },
        relative: { a: 0.5, z: 1 },
      },
    ];
    const { paths } = recording(() => metric(runs[0], 'a.b'));
    expect([...paths]).toEqual(['metrics.a.b']);
    expect(keepPaths(runs, paths)).toEqual([
      { index: 0, policy: 'p', params: { case: 'c' }, seed: 1, metrics: { a: { b: 2 } } },
    ]);
  });
});

describe('links between the comparison and the experiments’ reports', () => {
  it('COMPARISON.html links each experiment with results (its report.html when written), and a report links back', () => {
    const dir = tempDir('reproduce-links');
    mkdirSync(path.join(dir, 'a'));
    mkdirSync(path.join(dir, 'b'));
    mkdirSync(path.join(dir, 'c'));
    writeFileSync(path.join(dir, 'a', 'results.json'), '{}');
    writeFileSync(path.join(dir, 'a', 'report.html'), '');
    writeFileSync(path.join(dir, 'b', 'results.json'), '{}');
    const links = experimentLinks(dir, ['a', 'b', 'c']);
    expect(links).toEqual([
      { name: 'a', href: 'a/report.html' },
      { name: 'b', href: 'b/results.json' },
    ]);
    const c = { paper: 'p', title: 'P', reads: [], sources: {}, tables: () => [] };
    expect(comparisonHtml(c, [], links)).toContain('<li><a href="a/report.html">a</a></li>');
    expect(paperLink(path.join(dir, 'a'))).toBe('');
    writeFileSync(path.join(dir, 'COMPARISON.html'), '');
    expect(paperLink(path.join(dir, 'a'))).toContain('href="../COMPARISON.html"');
  });
});

describe('stored tables input', () => {
  it('keeps a file path inside the checkout relative (the committed input does not name this machine)', () => {
    const inside = path.join(ROOT, 'experiments', 'moe-lens', 'a40-xeon8380-lens.json');
    const p = portable({ hardware: inside, other: '/elsewhere/x.json', case: 'c', n: 3 });
    expect(p).toEqual({
      hardware: 'experiments/moe-lens/a40-xeon8380-lens.json',
      other: '/elsewhere/x.json',
      case: 'c',
      n: 3,
    });
  });
});

describe('moesim reproduce: bad input', () => {
  it('an unknown paper or a bad --jobs: one line, exit 2, nothing written', async () => {
    const out = path.join(tempDir('reproduce-bad'), 'out');
    const [paper, jobs] = await Promise.all([
      runCliAsync(['reproduce', 'moe-nothing', '--out', out]),
      runCliAsync(['reproduce', 'moe-cap', '--jobs', '0', '--out', out]),
    ]);
    expect(paper.status).toBe(2);
    expect(paper.stderr.trim().split('\n')).toHaveLength(1);
    expect(paper.stderr).toMatch(/paper.*moe-infinity, moepic, moe-gen, moe-lens, moe-cap, all.*moe-nothing/);
    expect(jobs.status).toBe(2);
    expect(jobs.stderr).toMatch(/--jobs/);
    expect(existsSync(out)).toBe(false);
  }, 240_000);
});
