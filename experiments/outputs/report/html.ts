/**
 * HTML building blocks of the report: escaping (every string that comes from a config, a trace or
 * a results file goes through `esc`), inlining the SVG plots this process rendered, and showing
 * SVG files found in the folder only as images (never as markup: a regex over markup is not a
 * sanitiser, and a foreign SVG inlined can run script or navigate the page).
 */

const ESCAPES: Readonly<Record<string, string>> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
};

/** Escapes text for HTML content and for double- or single-quoted attribute values. */
export const esc = (text: unknown): string => String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]!);

/** A relative link to a file of the results folder (the name URL-encoded, the text escaped). */
export const fileLink = (name: string, text: string = name): string =>
  `<a href="./${esc(encodeURIComponent(name))}">${esc(text)}</a>`;

/** Header text: escaped, `\n` a line break, and a break allowed after each dot of a metric path. */
export const headerHtml = (text: string): string =>
  text
    .split('\n')
    .map((l) => esc(l).replace(/\./g, '.<wbr>'))
    .join('<br>');

/**
 * A plot this process has just rendered with Vega from the report's own spec and the results'
 * numbers (never a file read from the folder), placed inline. Vega escapes every text and
 * attribute it writes. Its ids are prefixed with `prefix` so that two plots in one page cannot
 * share a clip path or gradient.
 */
export function inlineRenderedSvg(svg: string, prefix: string): string {
  return svg
    .replace(/^\s*<\?xml[^>]*\?>\s*/i, '')
    .replace(/\bid="([^"]*)"/g, (_m, id: string) => `id="${prefix}-${id}"`)
    .replace(/url\(#([^)]*)\)/g, (_m, id: string) => `url(#${prefix}-${id})`)
    .replace(/\bhref="#([^"]*)"/g, (_m, id: string) => `href="#${prefix}-${id}"`);
}

/**
 * A file from the results folder (anyone may have put it there), shown as an image: an SVG
 * loaded through `<img>` runs no script, loads nothing and cannot navigate the page. Its bytes
 * are base64 in a data URL, so no character of it reaches the page's markup.
 */
export function foreignSvgImage(bytes: Buffer | string, alt: string): string {
  const b64 = Buffer.from(bytes).toString('base64');
  return `<img alt="${esc(alt)}" src="data:image/svg+xml;base64,${b64}">`;
}

/** The page's style sheet (no external resources: the report is one self-contained file). */
export const STYLE = `
:root { color-scheme: light; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: #1d2430; margin: 0; background: #f6f7f9; }
main { max-width: 1200px; margin: 0 auto; padding: 24px 32px 48px; background: #fff; }
h1 { font-size: 26px; margin: 0 0 4px; word-break: break-word; }
h2 { font-size: 20px; margin: 36px 0 10px; padding-bottom: 4px; border-bottom: 1px solid #dde1e6; }
h3 { font-size: 16px; margin: 22px 0 8px; }
p.description { font-size: 16px; color: #3a4556; margin: 4px 0 14px; }
.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 8px 0; }
.facts dt { color: #5b6676; }
.facts dd { margin: 0; }
.warning { background: #fff4d6; border: 1px solid #e6c35c; padding: 8px 12px; border-radius: 4px; }
.note { color: #5b6676; font-size: 13.5px; }
nav.toc { font-size: 14px; margin: 12px 0 0; }
nav.toc a { margin-right: 14px; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: 6px 0 10px; font-size: 14px; }
th, td { border: 1px solid #d5dae1; padding: 4px 9px; text-align: left; vertical-align: top; }
thead th { background: #eef1f5; font-weight: 600; }
tbody tr:nth-child(even) { background: #f8f9fb; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.policy { font-weight: 600; white-space: nowrap; }
td.param { white-space: nowrap; }
code, pre { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 13px; }
pre { background: #f4f6f8; border: 1px solid #e1e5ea; padding: 10px 12px; overflow-x: auto; border-radius: 4px; }
figure { margin: 14px 0 22px; }
figure svg, figure img { max-width: 100%; height: auto; }
figcaption { font-size: 13.5px; color: #5b6676; }
.plots { display: flex; flex-wrap: wrap; gap: 8px 28px; }
.plots.grid figure { width: calc(50% - 14px); margin: 6px 0 14px; }
details { margin: 6px 0; }
summary { cursor: pointer; color: #27466e; }
`;
