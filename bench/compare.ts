/**
 * Before/after figures of `npm run bench -- --vs <rev>` (see `vs.ts`): the bench records of
 * several rounds per side (the base revision, the working tree), paired by benchmark name and
 * figure.
 *
 * - Each figure's value per side is the median of its rounds (a shared machine's load only
 *   ever moves one run; the median of two is their mean).
 * - Figures equal in every round of both sides are context (a workload's request count, a
 *   goal) and left out of the rows; a figure that changes but has no better direction (events,
 *   simulated seconds, a hit rate) is kept: if the simulated behaviour changed, that is the
 *   first thing to see.
 * - `better` says which way is better for the figures whose name says it (rates up; times,
 *   shares of wall time and memory down); `verdict` is `better` or `worse` only when every
 *   round of one side beats every round of the other (ranges apart), else `overlap`, and `—`
 *   for figures without a direction. One round per side always has ranges apart: use two or
 *   more to see the noise.
 */
import type { BenchRecord } from './serving-bench.ts';

export type Better = 'higher' | 'lower';

/** Which way a figure is better, from its name; undefined for figures that only describe the run. */
export function betterWay(figure: string): Better | undefined {
  if (/(PerS|PerWallS|PerCpuS)$/.test(figure) || figure === 'medianRatio' || figure === 'ratio') return 'higher';
  if (/(ShareOfWall|RssBytes|WallS|CpuS|BuildS)$/.test(figure)) return 'lower';
  if (
    /^(wallS|cpuS|runS|setupMs)$/.test(figure) ||
    /^(ns|us|ms)Per[A-Z]/.test(figure) ||
    /^(cpu|wall)Ratio_/.test(figure)
  )
    return 'lower';
  return undefined;
}

export interface ComparedFigure {
  readonly name: string;
  readonly figure: string;
  /** Every round's value, per side (a side lacking the record or figure has none). */
  readonly base: number[];
  readonly head: number[];
  /** Medians per side (NaN where a side has no value). */
  readonly baseMedian: number;
  readonly headMedian: number;
  /** headMedian / baseMedian (NaN where undefined). */
  readonly ratio: number;
  readonly better: Better | undefined;
  readonly verdict: 'better' | 'worse' | 'overlap' | '—';
}

export function median(xs: readonly number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** Values of `figure` in the record `name` of every round (records of a round found by name). */
function valuesOf(rounds: readonly (readonly BenchRecord[])[], name: string, figure: string): number[] {
  const out: number[] = [];
  for (const records of rounds) {
    const v = records.find((r) => r.name === name)?.[figure];
    if (typeof v === 'number' && Number.isFinite(v)) out.push(v);
  }
  return out;
}

/**
 * Pairs the rounds of both sides: one row per (benchmark, numeric figure) found on either side,
 * in the order they first appear (base first, then records new at head), context figures left
 * out; `figures` (a pattern on figure names) keeps only the matching ones.
 */
export function compareRounds(
  base: readonly (readonly BenchRecord[])[],
  head: readonly (readonly BenchRecord[])[],
  figures?: RegExp,
): ComparedFigure[] {
  const keys: [string, string][] = [];
  const seen = new Set<string>();
  for (const rounds of [base, head]) {
    for (const records of rounds) {
      for (const r of records) {
        for (const [figure, v] of Object.entries(r)) {
          if (figure === 'name' || typeof v !== 'number') continue;
          const id = `${String(r.name)}\u0000${figure}`;
          if (seen.has(id)) continue;
          seen.add(id);
          keys.push([String(r.name), figure]);
        }
      }
    }
  }
  const out: ComparedFigure[] = [];
  for (const [name, figure] of keys) {
    if (figures && !figures.test(figure)) continue;
    const b = valuesOf(base, name, figure);
    const h = valuesOf(head, name, figure);
    const all = [...b, ...h];
    if (b.length > 0 && h.length > 0 && all.every((v) => v === all[0])) continue;
    const baseMedian = median(b);
    const headMedian = median(h);
    const better = betterWay(figure);
    let verdict: ComparedFigure['verdict'] = '—';
    if (better && b.length > 0 && h.length > 0) {
      const hi = better === 'higher';
      const headWorst = hi ? Math.min(...h) : Math.max(...h);
      const baseBest = hi ? Math.max(...b) : Math.min(...b);
      const headBest = hi ? Math.max(...h) : Math.min(...h);
      const baseWorst = hi ? Math.min(...b) : Math.max(...b);
      const beats = (x: number, y: number) => (hi ? x > y : x < y);
      verdict = beats(headWorst, baseBest) ? 'better' : beats(baseWorst, headBest) ? 'worse' : 'overlap';
    }
    out.push({
      name,
      figure,
      base: b,
      head: h,
      baseMedian,
      headMedian,
      ratio: headMedian / baseMedian,
      better,
      verdict,
    });
  }
  return out;
}

/** A figure's value for the table: 4 significant digits, integers as they are. */
export function formatValue(v: number): string {
  if (!Number.isFinite(v)) return '—';
  return Number.isInteger(v) ? String(v) : v.toPrecision(4);
}
