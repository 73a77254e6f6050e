/**
 * Text rendering of trace statistics: one column per trace, so real and synthetic traces can
 * be read side by side; and a compact JSON formatter for profiles (number arrays on one line).
 */
import type { ExtendedTraceStats } from './trace-stats.ts';
import type { AggregateStats, CorpusStats } from '../trace/aggregate-file.ts';

export interface StatsColumn {
  readonly title: string;
  readonly stats: ExtendedTraceStats;
}

const f3 = (x: number | null | undefined): string => (x === null || x === undefined ? '—' : x.toFixed(3));
const mean = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);

/** A table with one row per statistic and one column per trace. */
export function formatStatsTable(columns: readonly StatsColumn[]): string {
  if (columns.length === 0) return '';
  const first = columns[0]!.stats;
  const cs = Object.keys(first.requestSkew);
  const bs = ['1', '2', '4', '8', '16', '32'];
  const rows: [string, (s: ExtendedTraceStats) => string][] = [
    ['requests', (s) => String(s.requests)],
    ['tokens (prefill / decode)', (s) => `${s.tokens} (${s.prefillTokens} / ${s.decodeTokens})`],
    ['MoE layers × experts, top-k', (s) => `${s.layers} × ${s.experts}, top-${s.topk}`],
    ['missing (token, layer) entries', (s) => String(s.missingEntries)],
    [
      'popularity entropy: mean (min–max)',
      (s) =>
        `${f3(mean(s.popularityEntropy))} (${f3(Math.min(...s.popularityEntropy))}–${f3(Math.max(...s.popularityEntropy))})`,
    ],
    ['popularity Gini: mean', (s) => f3(mean(s.popularityGini))],
    ["top-10 % experts' share: mean", (s) => f3(mean(s.popularityTop10Share))],
    ["hottest expert's share: mean", (s) => f3(mean(s.hottestExpertShare))],
    ...cs.map((c): [string, (s: ExtendedTraceStats) => string] => [
      `request skew top-${c}: request / pooled`,
      (s) => (s.requestSkew[c] ? `${f3(s.requestSkew[c].request)} / ${f3(s.requestSkew[c].pooled)}` : '—'),
    ]),
    [
      'cross-layer predictability',
      (s) => `${f3(s.crossLayerPredictability)} (uniform ${f3(s.baselines.uniformCrossLayer)})`,
    ],
    [
      'temporal locality P(reuse)',
      (s) => `${f3(s.temporalLocality)} (uniform ${f3(s.baselines.uniformTemporalLocality)})`,
    ],
    ['temporal reused share', (s) => f3(s.temporalReusedShare)],
    [
      `activation ratio b=${bs.join('/')}`,
      (s) => bs.map((b) => (s.activationRatioByBatch[b] ?? 0).toFixed(2)).join(' '),
    ],
    [
      'task similarity within / across',
      (s) =>
        s.taskClusterSimilarity
          ? `${f3(s.taskClusterSimilarity.within)} / ${f3(s.taskClusterSimilarity.across)}`
          : '— (no task labels)',
    ],
    [
      'tasks',
      (s) =>
        Object.entries(s.tasks)
          .map(([t, n]) => `${t} ${n}`)
          .join(', ') || '—',
    ],
  ];
  const table = [
    ['statistic', ...columns.map((c) => c.title)],
    ...rows.map(([label, fn]) => [label, ...columns.map((c) => fn(c.stats))]),
  ];
  const widths = table[0]!.map((_, i) => Math.max(...table.map((r) => r[i]!.length)));
  const line = (r: string[]): string =>
    r.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ');
  const out = [line(table[0]!), widths.map((w) => '-'.repeat(w)).join('  '), ...table.slice(1).map(line)];
  return `${out.join('\n')}\n`;
}

/** JSON with 2-space indentation, but arrays of numbers/strings/null kept on one line. */
export function formatJson(value: unknown, indent = ''): string {
  if (Array.isArray(value)) {
    if (value.every((v) => v === null || typeof v !== 'object'))
      return `[${value.map((v) => JSON.stringify(v)).join(', ')}]`;
    const inner = indent + '  ';
    return `[\n${value.map((v) => inner + formatJson(v, inner)).join(',\n')}\n${indent}]`;
  }
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value).filter(([, v]) => v !== undefined);
    if (entries.length === 0) return '{}';
    const inner = indent + '  ';
    return `{\n${entries.map(([k, v]) => `${inner}${JSON.stringify(k)}: ${formatJson(v, inner)}`).join(',\n')}\n${indent}}`;
  }
  return JSON.stringify(value);
}

/** A table of aggregate statistics (per corpus and pooled), one column per source. */
export function formatAggregateTable(columns: readonly { title: string; stats: AggregateStats }[]): string {
  if (columns.length === 0) return '';
  const first = columns[0]!.stats;
  const layers = first.layers.join('/');
  const rows: [string, (s: AggregateStats) => string][] = [];
  const f = (xs: readonly number[]): string => xs.map((x) => x.toFixed(3)).join(' / ');
  for (const corpus of [...Object.keys(first.corpora), 'pooled']) {
    const get = (s: AggregateStats): CorpusStats | undefined => (corpus === 'pooled' ? s.pooled : s.corpora[corpus]);
    rows.push([`${corpus}: entropy L${layers}`, (s) => (get(s) ? f(get(s)!.entropy) : '—')]);
    rows.push([`${corpus}: top-10 % share L${layers}`, (s) => (get(s) ? f(get(s)!.top10Share) : '—')]);
    rows.push([
      `${corpus}: rank-aligned successor ${Object.keys(first.pooled.rankAligned).join(', ')}`,
      (s) => (get(s) ? f(Object.values(get(s)!.rankAligned)) : '—'),
    ]);
  }
  const table = [
    ['statistic', ...columns.map((c) => c.title)],
    ...rows.map(([label, fn]) => [label, ...columns.map((c) => fn(c.stats))]),
  ];
  const widths = table[0]!.map((_, i) => Math.max(...table.map((r) => r[i]!.length)));
  const line = (r: string[]): string =>
    r.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ');
  return `${[line(table[0]!), widths.map((w) => '-'.repeat(w)).join('  '), ...table.slice(1).map(line)].join('\n')}\n`;
}
