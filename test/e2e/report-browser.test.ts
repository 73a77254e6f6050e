/**
 * The report renders in a real browser: a tiny experiment whose name, description and a policy
 * label are hostile HTML (`test/unit/report-fixture.ts`) gets its report.html, which headless
 * Chromium opens.
 * - `--dump-dom`: the loaded page has the results table with a row per run, the hostile label as
 *   text, an inline `<svg>` plot, and no element from the data (no `<script>`, no injected
 *   `<img id="injected">`; the title is not the one an executed script would have set);
 * - `--screenshot`: a PNG is written and is not trivially small (a blank page is ~5 KB).
 * Skipped, with the reason, where there is no Chromium (/usr/bin/chromium or MOESIM_CHROMIUM).
 */
import { readFileSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeReport } from '../../experiments/outputs/report.ts';
import { tempDir } from '../helpers/cli.ts';
import { HOSTILE_LABEL, HOSTILE_NAME, runTinyExperiment } from '../unit/report-fixture.ts';
import { dumpDom, findChromium, screenshot } from './chromium.ts';

const chromium = findChromium();
const skip = 'missing' in chromium ? `skipped: ${chromium.missing}` : '';
if (skip) process.stderr.write(`report-browser.test.ts: ${skip}\n`);

describe.skipIf(skip !== '')(`report.html in headless Chromium${skip ? ` (${skip})` : ''}`, () => {
  const dir = tempDir('report-browser');
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  let report: string;
  let dom: string;
  const png = path.join(dir, 'report.png');

  beforeAll(async () => {
    const bin = (chromium as { bin: string }).bin;
    report = await writeReport(await runTinyExperiment(dir));
    // One after the other: the machine is shared.
    dom = await dumpDom(bin, report);
    await screenshot(bin, report, png);
  }, 240_000);

  /** Text as the DOM serialiser writes it (it escapes &, < and > in text, not quotes). */
  const asText = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

  it('renders the table, with a row per run and the hostile label as text', () => {
    const table = /<table id="results-table">([\s\S]*?)<\/table>/.exec(dom)?.[1];
    expect(table).toBeDefined();
    expect(table!.match(/<tr>/g)).toHaveLength(3); // header + 2 runs
    expect(table).toContain(`<td class="policy">${asText(HOSTILE_LABEL)}</td>`);
    expect(dom).toContain(`<h1>${asText(HOSTILE_NAME)}</h1>`);
  });

  it('renders the plot as inline SVG', () => {
    expect(dom).toMatch(/<figure><svg [^>]*class="marks"/);
  });

  it('no markup from the data became an element, and no script ran', () => {
    expect(dom.toLowerCase()).not.toContain('<script');
    expect(dom).not.toContain('<img id="injected"');
    expect(/<title>([^<]*)<\/title>/.exec(dom)?.[1]).toBe(`${asText(HOSTILE_NAME)} — moesim report`);
  });

  it('writes a screenshot that is not blank', () => {
    const bytes = readFileSync(png);
    expect(bytes.subarray(0, 8).toString('hex')).toBe('89504e470d0a1a0a');
    expect(statSync(png).size).toBeGreaterThan(50_000);
  });
});
