/** Summary statistics used by every metric. */

export interface Distribution {
  readonly mean: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
}

/** Linear-interpolation percentile (numpy's default) of sorted values; `q` in [0, 1]. */
export function percentileSorted(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return 0;
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  const a = sorted[lo]!;
  const b = sorted[hi]!;
  return a + (b - a) * (pos - lo);
}

/** mean / p50 / p90 / p99 of `values` (all 0 when empty). */
export function distribution(values: readonly number[]): Distribution {
  if (values.length === 0) return { mean: 0, p50: 0, p90: 0, p99: 0 };
  const sorted = [...values].sort((x, y) => x - y);
  let sum = 0;
  for (const v of sorted) sum += v;
  return {
    mean: sum / sorted.length,
    p50: percentileSorted(sorted, 0.5),
    p90: percentileSorted(sorted, 0.9),
    p99: percentileSorted(sorted, 0.99),
  };
}

/** Rounds to 6 significant digits so results are stable and readable (simulated values only). */
export function round6(x: number): number {
  if (!Number.isFinite(x) || x === 0) return x;
  return Number(x.toPrecision(6));
}

export const safeDiv = (a: number, b: number): number => (b > 0 ? a / b : 0);
