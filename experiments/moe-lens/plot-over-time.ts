/**
 * Draws MoE-Lens's over-time figure from results/moe-lens-over-time/results.json (written by
 * `npm run experiment -- experiments/moe-lens/over-time.yaml`): generation throughput, prefill
 * throughput (tokens/s per window) and KV-page occupancy over simulated time, one SVG with three
 * stacked panels. Usage: npx tsx experiments/moe-lens/plot-over-time.ts [results.json] [out.svg]
 */
import { readFileSync, writeFileSync } from 'node:fs';

const inPath = process.argv[2] ?? 'results/moe-lens-over-time/results.json';
const outPath = process.argv[3] ?? 'results/moe-lens-over-time/over-time.svg';
const doc = JSON.parse(readFileSync(inPath, 'utf8')) as {
  runs: { metrics: { schedule?: { timeline: number[][]; pages: number } } }[];
};
const sched = doc.runs.find((r) => r.metrics.schedule)?.metrics.schedule;
if (!sched) throw new Error(`${inPath}: no run with metrics.schedule.timeline`);
const tl = sched.timeline;
const rows: { t: number; gen: number; pre: number; occ: number; preempt: number }[] = [];
for (let i = 1; i < tl.length; i++) {
  const [t0, , g0, p0, e0] = tl[i - 1]!;
  const [t1, pg, g1, p1, e1] = tl[i]!;
  const dt = t1! - t0!;
  if (dt <= 0) continue;
  rows.push({ t: t1!, gen: (g1! - g0!) / dt, pre: (p1! - p0!) / dt, occ: pg! / sched.pages, preempt: e1! - e0! });
}
const W = 900,
  H = 200,
  M = 50;
const tMax = Math.max(...rows.map((r) => r.t));
const panel = (k: number, title: string, ys: number[], color: string, marks = false): string => {
  const yMax = Math.max(1e-9, ...ys);
  const y0 = k * (H + 30) + 30;
  const pts = rows
    .map((r, i) => `${(M + (r.t / tMax) * (W - 2 * M)).toFixed(1)},${(y0 + H - (ys[i]! / yMax) * H).toFixed(1)}`)
    .join(' ');
  const ticks = marks
    ? rows
        .filter((r) => r.preempt > 0)
        .map(
          (r) =>
            `<line x1="${(M + (r.t / tMax) * (W - 2 * M)).toFixed(1)}" y1="${y0 + H}" x2="${(M + (r.t / tMax) * (W - 2 * M)).toFixed(1)}" y2="${y0 + H - 6}" stroke="#c00"/>`,
        )
        .join('')
    : '';
  return `<text x="${M}" y="${y0 - 6}" font-size="12">${title} (max ${yMax.toPrecision(4)})</text><rect x="${M}" y="${y0}" width="${W - 2 * M}" height="${H}" fill="none" stroke="#999"/><polyline fill="none" stroke="${color}" points="${pts}"/>${ticks}`;
};
const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${3 * (H + 30) + 40}" font-family="sans-serif">
${panel(
  0,
  'generation throughput, tokens/s',
  rows.map((r) => r.gen),
  '#1f77b4',
)}
${panel(
  1,
  'prefill throughput, prompt tokens/s (red ticks: preemptions)',
  rows.map((r) => r.pre),
  '#2ca02c',
  true,
)}
${panel(
  2,
  'KV-page occupancy (fraction of pages)',
  rows.map((r) => r.occ),
  '#ff7f0e',
)}
<text x="${M}" y="${3 * (H + 30) + 30}" font-size="12">simulated time, 0 … ${tMax.toFixed(0)} s</text>
</svg>
`;
writeFileSync(outPath, svg);
console.log(`wrote ${outPath} (${rows.length} windows)`);
