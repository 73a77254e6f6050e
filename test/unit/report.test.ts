/**
 * `moesim report` (experiments/outputs/report.ts), on a tiny experiment whose name, description
 * and a policy label are hostile HTML (`report-fixture.ts`):
 * - the page has the name, description, results table, the plot inline as SVG, the MoE-CAP
 *   bounds, definitions of the metrics shown, the config as YAML and relative links to the
 *   timelines; the same folder gives the same bytes twice;
 * - escaping: no `<script` at all in the page (it has none of its own), the hostile strings
 *   appear escaped, and a Content-Security-Policy forbids scripts;
 * - plots: re-rendered from `output.plots` when the SVG file is gone, an overview when the config
 *   has none, the config's plots drawn from results.json (never the file read back), and every
 *   other SVG file of the folder shown only as an image;
 * - MoE-Lens's `metrics.analytic` becomes the analytic-model table;
 * - bad input (no folder, no results.json, invalid JSON, a malformed field, an unknown schema
 *   version) is a one-line UserError naming the path and field, and leaves no report.html;
 * - every column of the printed table has a metric path with a definition;
 * - the CLI: `moesim report` on a missing folder exits 2 with one line; `experiment --report`
 *   writes report.html.
 */
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UserError } from '../../sim/kernel/errors.ts';
import { REPORT_FILE, writeReport } from '../../experiments/outputs/report.ts';
import { COLUMN_METRICS, metricDef } from '../../experiments/outputs/report/metric-defs.ts';
import { inlineRenderedSvg } from '../../experiments/outputs/report/html.ts';
import { SERVING_COLUMNS, THROUGHPUT_COLUMNS } from '../../experiments/outputs/table.ts';
import { pooled, runCliAsync, tempDir, type CliResult } from '../helpers/cli.ts';
import {
  escaped,
  HOSTILE_DESCRIPTION,
  HOSTILE_LABEL,
  HOSTILE_NAME,
  runTinyExperiment,
  writeTinyConfig,
} from './report-fixture.ts';

const dir = tempDir('report');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let out: string;
let html: string;
let cliMissing: CliResult;
let cliExperiment: CliResult;
const cliOut = path.join(dir, 'cli-out');

beforeAll(async () => {
  const cliDir = path.join(dir, 'cli');
  mkdirSync(cliDir);
  const config = writeTinyConfig(cliDir);
  // The CLI runs overlap the in-process run.
  const cli = pooled(
    [
      () => runCliAsync(['report', path.join(dir, 'no-such-folder')]),
      () => runCliAsync(['experiment', config, '--out', cliOut, '--report']),
    ],
    2,
  );
  out = await runTinyExperiment(dir);
  html = readFileSync(await writeReport(out), 'utf8');
  const r = await cli;
  [cliMissing, cliExperiment] = [r[0]!, r[1]!];
}, 300_000);

/** A copy of the results folder, changed by `edit`, for one test. */
function variant(name: string, edit: (folder: string) => void): string {
  const folder = path.join(dir, name);
  cpSync(out, folder, { recursive: true });
  rmSync(path.join(folder, REPORT_FILE), { force: true });
  edit(folder);
  return folder;
}

const results = (folder: string): Record<string, any> =>
  JSON.parse(readFileSync(path.join(folder, 'results.json'), 'utf8'));
const writeResults = (folder: string, r: unknown): void =>
  writeFileSync(path.join(folder, 'results.json'), JSON.stringify(r));

describe('the report of a tiny experiment', () => {
  it('has the name, description, table, plot, bounds, definitions, config and timeline links', () => {
    expect(html.startsWith('<!DOCTYPE html>')).toBe(true);
    expect(html).toContain(`<h1>${escaped(HOSTILE_NAME)}</h1>`);
    expect(html).toContain(escaped(HOSTILE_DESCRIPTION));
    expect(html).toContain('<table id="results-table">');
    // One row per run, the hostile label escaped in its policy cell.
    expect(html).toContain(`<td class="policy">${escaped(HOSTILE_LABEL)}</td>`);
    expect(html).toContain('<td class="policy">on-demand</td>');
    // The plot written by the run, inline (Vega's SVG, titled by the config, escaped by Vega).
    expect(html).toMatch(/<figure><svg [^>]*class="marks"/);
    expect(html).toContain('TPOT &lt;script&gt;alert(4)&lt;/script&gt;');
    expect(html).toContain('— drawn from results.json (as tpot.svg)</figcaption>');
    // MoE-CAP bounds (every serving run has them).
    expect(html).toContain('MoE-CAP: use of the hardware’s peak');
    expect(html).toContain('S-MBU %');
    // Definitions of the columns shown, by metric path.
    expect(html).toContain('<td><code>tpotMs.p50</code></td><td>median (p50) of: time per output token');
    expect(html).toContain('<td><code>cap.sMbu</code></td>');
    // The config as YAML, its strings escaped.
    expect(html).toMatch(/<pre><code>schemaVersion|<pre><code>name: /);
    expect(html).toContain(`model: olmoe`);
    // Relative links to both timelines, which exist beside the report, and how to open them.
    const links = [...html.matchAll(/href="\.\/(timeline-[^"]+)"/g)].map((m) => decodeURIComponent(m[1]!));
    expect(links).toHaveLength(2);
    for (const l of links) expect(existsSync(path.join(out, l))).toBe(true);
    expect(html).toContain('ui.perfetto.dev');
  });

  it('escapes every string from the config and the trace: no script anywhere, and a CSP that forbids scripts', () => {
    expect(html.toLowerCase()).not.toContain('<script');
    expect(html).not.toContain('<img id="injected"');
    expect(html).not.toContain(HOSTILE_NAME);
    expect(html).toContain(
      `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; base-uri 'none'">`,
    );
  });

  it('is the same bytes when written again from the same folder', async () => {
    expect(readFileSync(await writeReport(out), 'utf8')).toBe(html);
  });
});

describe('an interrupted experiment', () => {
  it('says that the results are incomplete', async () => {
    const folder = variant('incomplete', (f) => {
      const r = results(f);
      writeResults(f, { ...r, complete: false, runs: r.runs.slice(0, 1) });
    });
    const page = readFileSync(await writeReport(folder), 'utf8');
    expect(page).toContain('<p class="warning">Incomplete: the experiment stopped before every run finished');
    expect(page.match(/<td class="policy">/g)?.length).toBeGreaterThanOrEqual(1);
    expect(page).not.toContain('<td class="policy">on-demand</td>');
  });
});

describe('plots', () => {
  it('re-renders a plot of output.plots whose SVG is not in the folder', async () => {
    const folder = variant('no-svg', (f) => unlinkSync(path.join(f, 'tpot.svg')));
    const page = readFileSync(await writeReport(folder), 'utf8');
    expect(page).toMatch(/<figure><svg [^>]*class="marks"/);
    expect(page).toContain('drawn from results.json (tpot.svg was not in the folder)');
  });

  it('draws an overview with Vega-Lite when the config has no plots', async () => {
    const folder = variant('no-plots', (f) => {
      unlinkSync(path.join(f, 'tpot.svg'));
      const r = results(f);
      r.config.output.plots = [];
      writeResults(f, r);
    });
    const page = readFileSync(await writeReport(folder), 'utf8');
    expect(page).toContain('these overview charts are drawn by the report');
    expect(page.match(/<figure><svg /g)?.length).toBe(4);
    expect(page).toContain('<td><code>throughputTokPerS</code></td>');
  });

  it('shows every SVG file of the folder only as an image, never inline', async () => {
    // A plain drawing, a scripted one, and the config's own plot file replaced by a hostile one.
    const plain = '<svg xmlns="http://www.w3.org/2000/svg"><rect width="5" height="5"/></svg>';
    const evil = `<svg xmlns="http://www.w3.org/2000/svg"><script>alert(5)</script><rect onclick="alert(6)" width="5" height="5"/></svg>`;
    const breakout = '<svg></svg></figure><meta http-equiv="refresh" content="0;url=./notes.html"><svg>';
    const folder = variant('evil-svg', (f) => {
      writeFileSync(path.join(f, 'plain.svg'), plain);
      writeFileSync(path.join(f, 'evil.svg'), evil);
      writeFileSync(path.join(f, 'tpot.svg'), breakout);
    });
    const page = readFileSync(await writeReport(folder), 'utf8');
    expect(page.toLowerCase()).not.toContain('<script');
    expect(page).not.toContain('onclick');
    expect(page).not.toContain('refresh');
    expect(page).toContain(`<img alt="evil" src="data:image/svg+xml;base64,${Buffer.from(evil).toString('base64')}">`);
    expect(page).toContain(
      `<img alt="plain" src="data:image/svg+xml;base64,${Buffer.from(plain).toString('base64')}">`,
    );
    expect(page).toContain(
      'evil.svg (a file of the results folder, not one of the config’s output.plots; shown as an image)',
    );
    // The config's plot is drawn from results.json: exactly one inline SVG, Vega's.
    expect(page.match(/<svg /g)?.length).toBe(1);
    expect(page).toMatch(/<figure><svg [^>]*class="marks"/);
  });

  it('gives each inline SVG its own ids (two plots never share a clip path)', () => {
    const svg =
      '<svg class="marks"><defs><clipPath id="clip1"><rect/></clipPath></defs><g clip-path="url(#clip1)"><use href="#clip1"/></g></svg>';
    expect(inlineRenderedSvg(svg, 'plot3')).toBe(
      '<svg class="marks"><defs><clipPath id="plot3-clip1"><rect/></clipPath></defs><g clip-path="url(#plot3-clip1)"><use href="#plot3-clip1"/></g></svg>',
    );
  });
});

describe('analytic models and bounds', () => {
  it('shows MoE-Lens’s metrics.analytic beside the simulated throughput', async () => {
    const folder = variant('lens', (f) => {
      const r = results(f);
      r.runs[0].metrics.analytic = {
        simulatedTokPerS: 726.288,
        t: 731.8,
        simulatedOverT: 0.992469,
        tMaxGenTokPerS: 981.1,
        simulatedOverTMaxGen: 0.74,
        tMemTokPerS: 3994.1,
        stage2Regime: 'memory<b>',
        deltaS: 4.76,
      };
      writeResults(f, r);
    });
    const page = readFileSync(await writeReport(folder), 'utf8');
    expect(page).toContain('Analytic model (MoE-Lens, Eqs. 2–14)');
    expect(page).toContain(
      `<tr><td class="policy">${escaped(HOSTILE_LABEL)}</td><td class="num">726.3</td><td class="num">731.8</td><td class="num">0.992</td>`,
    );
    expect(page).toContain('<td>memory&lt;b&gt;</td>');
    expect(page).toContain('<td><code>analytic.t</code></td><td>Eq. 14: the analytic generation throughput');
    expect(page).toContain('<td><code>deltaS</code></td><td class="num">4.76</td>');
  });
});

describe('bad input', () => {
  const failure = async (folder: string): Promise<UserError> => {
    const err = await writeReport(folder).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(UserError);
    expect(existsSync(path.join(folder, REPORT_FILE))).toBe(false);
    return err as UserError;
  };

  it('a missing folder', async () => {
    const missing = path.join(dir, 'missing');
    expect((await failure(missing)).oneLine()).toBe(`${missing}: no such results folder`);
  });

  it('a folder without results.json', async () => {
    const empty = path.join(dir, 'empty');
    mkdirSync(empty);
    expect((await failure(empty)).oneLine()).toMatch(new RegExp(`^${empty}: no results\\.json in this folder`));
  });

  it('results.json that is not JSON', async () => {
    const folder = variant('not-json', (f) => writeFileSync(path.join(f, 'results.json'), '{"runs": ['));
    expect((await failure(folder)).oneLine()).toMatch(
      new RegExp(`^${path.join(folder, 'results.json')}: not valid JSON: `),
    );
  });

  it('a malformed field, named by its path', async () => {
    const folder = variant('bad-metrics', (f) => {
      const r = results(f);
      r.runs[1].metrics = 5;
      writeResults(f, r);
    });
    const line = (await failure(folder)).oneLine();
    expect(line).toMatch(new RegExp(`^${path.join(folder, 'results.json')}: runs\\[1\\]\\.metrics: .*\\(got 5\\)$`));
    expect(line).not.toContain('\n');
  });

  it('a malformed plot spec in the stored config', async () => {
    const folder = variant('bad-plot', (f) => {
      const r = results(f);
      r.config.output.plots[0].kind = 'pie';
      writeResults(f, r);
    });
    expect((await failure(folder)).oneLine()).toMatch(
      /results\.json: config\.output\.plots\[0\]\.kind: .*\(got "pie"\)$/,
    );
  });

  it('an unknown schema version', async () => {
    const folder = variant('v2', (f) => writeResults(f, { ...results(f), schemaVersion: 2 }));
    expect((await failure(folder)).oneLine()).toMatch(/results\.json: schemaVersion: .* \(got 2\)$/);
  });
});

describe('metric definitions', () => {
  it('every column of the printed table (both families) names a metric path with a definition', () => {
    for (const [family, columns] of [
      ['serving', SERVING_COLUMNS],
      ['throughput', THROUGHPUT_COLUMNS],
    ] as const) {
      for (const c of columns) {
        const m = COLUMN_METRICS[family][c.id];
        expect(
          m,
          `${family} column '${c.id}': add it to COLUMN_METRICS in experiments/outputs/report/metric-defs.ts`,
        ).toBeDefined();
        expect(metricDef(m!.path, family), `${family} column '${c.id}': no definition for ${m!.path}`).toBeDefined();
      }
    }
  });

  it('distribution statistics and family-specific definitions', () => {
    expect(metricDef('ttftQueueMs.p99')?.def).toBe(
      'p99 of: queueing part of TTFT: admission − arrival (waiting for the batcher, a batch slot or KV room)',
    );
    expect(metricDef('decodeTokPerS', 'throughput')?.def).toBe('tokens generated by decode passes / decode time');
    expect(metricDef('cap.decode.sMbu')?.def).toMatch(/over the decode passes alone$/);
    expect(metricDef('no.such.metric')).toBeUndefined();
  });
});

describe('the command line', () => {
  it('`moesim report` on a missing folder: one line, exit 2', () => {
    expect(cliMissing.status).toBe(2);
    expect(cliMissing.stderr).toBe(`moesim: ${path.join(dir, 'no-such-folder')}: no such results folder\n`);
  });

  it('`moesim experiment --report` writes report.html beside results.json', () => {
    expect(cliExperiment.status, cliExperiment.stderr).toBe(0);
    expect(cliExperiment.stderr).toContain(`moesim: wrote ${path.join(cliOut, REPORT_FILE)}`);
    const page = readFileSync(path.join(cliOut, REPORT_FILE), 'utf8');
    expect(page).toContain('<table id="results-table">');
    expect(page.toLowerCase()).not.toContain('<script');
  });
});
