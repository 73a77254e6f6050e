/**
 * The cache-curve part of `moesim trace stats` / `trace compare`: loads a trace's routing
 * (all of it: Belady needs the future and the shuffled control needs every request), routes
 * the same request shapes with a profile for the synthetic twin, formats the report as text
 * and plots the curves as SVG with the repository's plot library.
 */
import { RngStreams } from '../../sim/kernel/rng.ts';
import { renderPlot, type PlotRun } from '../../experiments/outputs/plot.ts';
import { TraceReader } from '../trace/reader.ts';
import { SyntheticModel } from '../synthetic/model.ts';
import { SyntheticRouting } from '../synthetic/router.ts';
import { generateRequests, shapeOf, type RequestShape } from '../synthetic/generate.ts';
import type { Profile } from '../synthetic/profile.ts';
import { seedFrom } from '../random/hash-rng.ts';
import type { TraceHeader } from '../trace/format.ts';
import { cacheReport, type CacheReport, type CacheTrace, type CurveOptions } from './cache-curves.ts';

export interface LoadedTrace extends CacheTrace {
  readonly header: TraceHeader;
  readonly shapes: RequestShape[];
  readonly ids: string[];
}

export async function loadCacheTrace(path: string): Promise<LoadedTrace> {
  const reader = await TraceReader.open(path, { scores: false, predictions: false });
  const m = reader.header.model;
  const requests: { tokens: number; experts: Int32Array }[] = [];
  const shapes: RequestShape[] = [];
  const ids: string[] = [];
  for await (const r of reader) {
    requests.push({ tokens: r.tokens, experts: r.experts });
    shapes.push(shapeOf(r));
    ids.push(r.id);
  }
  return { header: reader.header, L: m.moeLayers, E: m.experts, k: m.topK, requests, shapes, ids };
}

/** The same request shapes routed by a profile (seeded like `trace compare`'s twin). */
export function twinTrace(profile: Profile, shapes: readonly RequestShape[], seed = 1): CacheTrace {
  const streams = new RngStreams(seed);
  const routing = new SyntheticRouting(
    new SyntheticModel(profile.model, profile.knobs),
    `synthetic:${seedFrom(streams.stream('routing'))}`,
  );
  const requests = [...generateRequests(routing, shapes)].map((r) => ({ tokens: r.tokens, experts: r.experts }));
  return { L: profile.model.moeLayers, E: profile.model.experts, k: profile.model.topK, requests };
}

const pct = (v: number): string => (100 * v).toFixed(1);

/** Reports side by side (one column block per report). */
export function formatCacheReports(cols: readonly { title: string; report: CacheReport }[]): string {
  const r0 = cols[0]!.report;
  const out: string[] = [];
  out.push(
    `cache hit rate (%) vs experts per layer, caches ${r0.reset === 'request' ? 'emptied at every request' : 'kept across requests'}, ` +
      `${r0.granularity === 'access' ? 'one expert access at a time' : "a token's k experts at once"}; shuffled = tokens permuted within requests, requests permuted`,
  );
  const head = [
    'experts/layer',
    ...cols.flatMap((c) => [`${c.title} LRU`, 'Belady', ...(c.report.shuffled ? ['LRU shuf', 'Belady shuf'] : [])]),
  ];
  const rows = r0.sizes.map((s, i) => [
    String(s),
    ...cols.flatMap((c) => [
      pct(c.report.all.lru[i]!),
      pct(c.report.all.belady[i]!),
      ...(c.report.shuffled ? [pct(c.report.shuffled.all.lru[i]!), pct(c.report.shuffled.all.belady[i]!)] : []),
    ]),
  ]);
  out.push(table(head, rows));
  out.push('\nby layer group (LRU / Belady %, then shuffled LRU / Belady)');
  const gHead = ['layers', ...r0.sizes.map(String)];
  for (const c of cols) {
    const gRows = c.report.groups.map((g, gi) => [
      `${c.title} ${g.layers[0]}–${g.layers[1]}`,
      ...r0.sizes.map((_, i) => {
        const sh = c.report.shuffled?.groups[gi];
        return `${pct(g.lru[i]!)}/${pct(g.belady[i]!)}${sh ? ` (${pct(sh.lru[i]!)}/${pct(sh.belady[i]!)})` : ''}`;
      }),
    ]);
    out.push(table(gHead, gRows));
  }
  const keys = [...new Set(cols.flatMap((c) => Object.keys(c.report.reuseDistance)))];
  out.push('\nreuse distance (distinct experts of the layer used since the last use): share of accesses (%)');
  out.push(
    table(
      ['distance', ...cols.map((c) => c.title)],
      keys.map((k) => [k, ...cols.map((c) => pct(c.report.reuseDistance[k] ?? 0))]),
    ),
  );
  out.push('');
  out.push(
    table(
      ['', ...cols.map((c) => c.title)],
      [
        ['global popularity entropy / log2 E', ...cols.map((c) => c.report.popularity.globalEntropy.toFixed(3))],
        ['per-request entropy / log2 E', ...cols.map((c) => c.report.popularity.requestEntropy.toFixed(3))],
        [`global top-${r0.popularity.topC} share %`, ...cols.map((c) => pct(c.report.popularity.globalTopShare))],
        [`per-request top-${r0.popularity.topC} share %`, ...cols.map((c) => pct(c.report.popularity.requestTopShare))],
        ['next-token reuse |S_t ∩ S_t−1|/k', ...cols.map((c) => c.report.nextTokenReuse.toFixed(3))],
      ],
    ),
  );
  return out.join('\n');
}

function table(head: string[], rows: string[][]): string {
  const w = head.map((_, i) => Math.max(...[head, ...rows].map((r) => (r[i] ?? '').length)));
  const line = (r: string[]): string => r.map((c, i) => (i === 0 ? c.padEnd(w[i]!) : c.padStart(w[i]!))).join('  ');
  return [line(head), w.map((x) => '-'.repeat(x)).join('  '), ...rows.map(line)].join('\n');
}

/** LRU and Belady curves (and the shuffled control) of each report as one SVG. */
export async function plotCacheReports(
  cols: readonly { title: string; report: CacheReport }[],
  title: string,
): Promise<string> {
  const runs: PlotRun[] = [];
  for (const c of cols) {
    const add = (name: string, ys: number[]): void =>
      c.report.sizes.forEach((s, i) =>
        runs.push({
          policy: `${c.title} ${name}`,
          seed: 0,
          params: { 'experts per layer': s },
          metrics: { hit: 100 * ys[i]! },
        }),
      );
    add('LRU', c.report.all.lru);
    add('Belady', c.report.all.belady);
    if (c.report.shuffled) {
      add('LRU shuffled', c.report.shuffled.all.lru);
      add('Belady shuffled', c.report.shuffled.all.belady);
    }
  }
  return renderPlot(
    {
      name: 'cache-curves',
      title,
      x: 'experts per layer',
      y: 'metrics.hit',
      series: 'policy',
      kind: 'line',
      logX: false,
      logY: false,
    },
    runs,
  );
}

export { cacheReport, type CurveOptions };
