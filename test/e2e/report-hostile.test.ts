/**
 * A report over a hostile results folder, opened in headless Chromium over the DevTools protocol
 * (`cdp.ts`): no script runs, no frame navigates, no request leaves the page.
 * The folder holds the tiny experiment (hostile name, description and label) plus: the config's
 * own plot file replaced by a `</svg></figure><meta http-equiv="refresh">` break-out, SVG files
 * with `<script>`, onload handlers, a `jav&#x61;script:` form action, external `href`s, `<use>`,
 * `<image>`, `@import`, hostile file names (`"><img onerror>.svg`, a `timeline-` JSON with markup
 * in its name), an HTML page with a script (the refresh's target), and hostile swept values and
 * infeasible reasons written into results.json.
 * The page is checked twice: as written, and with its Content-Security-Policy removed (so that
 * what keeps it safe is that no foreign markup reaches the page, not only the CSP). A control
 * page that does run a script, navigate and fetch shows that the watcher sees all three.
 * Skipped, with the reason, where there is no Chromium (/usr/bin/chromium or MOESIM_CHROMIUM).
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeReport } from '../../experiments/outputs/report.ts';
import { tempDir } from '../helpers/cli.ts';
import { HOSTILE_NAME, runTinyExperiment } from '../unit/report-fixture.ts';
import { findChromium } from './chromium.ts';
import { watchPage, type PageWatch } from './cdp.ts';

const chromium = findChromium();
const skip = 'missing' in chromium ? `skipped: ${chromium.missing}` : '';
if (skip) process.stderr.write(`report-hostile.test.ts: ${skip}\n`);

const EXTERNAL = 'http://127.0.0.1:9';
const JS = `document.title='pwned';fetch('${EXTERNAL}/js')`;
/** SVG files (name → content) that try every way out we know of. */
const HOSTILE_SVG: Readonly<Record<string, string>> = {
  // The config's own plot (output.plots names `tpot`): the break-out of the issue.
  'tpot.svg': `<svg xmlns="http://www.w3.org/2000/svg"></svg></figure><meta http-equiv="refresh" content="0;url=./notes.html"><svg>`,
  'script.svg': `<svg xmlns="http://www.w3.org/2000/svg" onload="${JS}"><script>${JS}</script><rect width="9" height="9"/></svg>`,
  'form.svg': `<svg xmlns="http://www.w3.org/2000/svg"><foreignObject width="99" height="99"><form xmlns="http://www.w3.org/1999/xhtml" action="jav&#x61;script:${JS}"><button id="go">go</button></form></foreignObject></svg>`,
  'links.svg': `<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"><style>@import url(${EXTERNAL}/css);</style><image href="${EXTERNAL}/img" width="9" height="9"/><use xlink:href="${EXTERNAL}/use.svg#a"/><a href="javascript:${JS}"><text y="9">x</text></a><animate attributeName="href" to="javascript:${JS}"/><iframe src="${EXTERNAL}/frame"/></svg>`,
  'entity.svg': `<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY x "<script>${JS}</script>">]><svg xmlns="http://www.w3.org/2000/svg">&x;</svg>`,
  '"><img src=x onerror="document.title=1">.svg':
    '<svg xmlns="http://www.w3.org/2000/svg"><rect width="9" height="9"/></svg>',
};

describe.skipIf(skip !== '')(
  `a report over a hostile folder in Chromium (DevTools protocol)${skip ? ` (${skip})` : ''}`,
  () => {
    const dir = tempDir('report-hostile');
    afterAll(() => rmSync(dir, { recursive: true, force: true }));
    const watched: Record<'report' | 'noCsp' | 'control', PageWatch> = {} as never;
    const probe = `({ title: document.title, href: location.href,
    scripts: document.scripts.length,
    handlers: [...document.querySelectorAll('*')].filter((e) => [...e.attributes].some((a) => /^on/i.test(a.name))).length,
    forbidden: document.querySelectorAll('form, iframe, object, embed, foreignObject, body meta, base, link, use, image').length,
    svgInline: document.querySelectorAll('svg').length, images: document.querySelectorAll('img').length })`;

    beforeAll(async () => {
      const bin = (chromium as { bin: string }).bin;
      const out = await runTinyExperiment(dir);
      for (const [name, svg] of Object.entries(HOSTILE_SVG)) writeFileSync(path.join(out, name), svg);
      writeFileSync(path.join(out, 'notes.html'), `<script>${JS}</script>`);
      writeFileSync(path.join(out, 'timeline-1"><script>x<b onclick=x>.json'), '{}');
      const results = JSON.parse(readFileSync(path.join(out, 'results.json'), 'utf8'));
      results.runs[0].params['workload.<b onmouseover=x>'] = `<img src=x onerror="${JS}">`;
      results.runs[1].params['workload.<b onmouseover=x>'] = '</td></table><script>x</script>';
      results.runs[0].metrics.feasible = false;
      results.runs[0].metrics.infeasibleReason = `<svg onload="${JS}">`;
      writeFileSync(path.join(out, 'results.json'), JSON.stringify(results));
      const report = await writeReport(out);
      const noCsp = path.join(out, 'report-no-csp.html');
      writeFileSync(
        noCsp,
        readFileSync(report, 'utf8').replace(/<meta http-equiv="Content-Security-Policy"[^>]*>/, ''),
      );
      const control = path.join(out, 'control.html');
      writeFileSync(
        control,
        `<html><body><script>document.title='ran'</script><img src="${EXTERNAL}/ctl"><meta http-equiv="refresh" content="0;url=./notes.html"></body></html>`,
      );
      // One after the other: the machine is shared.
      watched.report = await watchPage(bin, report, probe);
      watched.noCsp = await watchPage(bin, noCsp, probe);
      watched.control = await watchPage(bin, control, probe);
    }, 240_000);

    it('the watcher sees a script, a navigation and a request in a page that has them', () => {
      expect(watched.control.scripts.length).toBeGreaterThan(0);
      expect(watched.control.navigations.length).toBeGreaterThan(0);
      expect(watched.control.requests.some((u) => u.startsWith(EXTERNAL))).toBe(true);
    });

    for (const which of ['report', 'noCsp'] as const) {
      it(`${which === 'report' ? 'the report' : 'the report without its CSP'}: no script, no navigation, no request`, () => {
        const w = watched[which];
        expect(w.scripts).toEqual([]);
        expect(w.navigations).toEqual([]);
        expect(w.requests).toEqual([]);
        const p = w.probe as Record<string, unknown>;
        expect(p.title).toBe(`${HOSTILE_NAME} — moesim report`);
        expect(p.href).toMatch(/report(-no-csp)?\.html$/);
        expect(p).toMatchObject({ scripts: 0, handlers: 0, forbidden: 0 });
        // The config's plot drawn by Vega inline; every SVG file of the folder an image.
        expect(p.svgInline).toBe(1);
        expect(p.images).toBe(Object.keys(HOSTILE_SVG).length - 1);
      });
    }
  },
);
