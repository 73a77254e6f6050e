/**
 * Aggregate routing is statistically equivalent to routing the tokens one by one: over many
 * draws, per-expert means pass a chi-square test against the exact means, and per-expert
 * variances match those of per-token sampling (marginally Binomial(n, q_e)).
 */
import { describe, expect, it } from 'vitest';
import { Rng } from '../../sim/kernel/rng.ts';
import {
  InclusionAggregateRouter,
  binomial,
  estimateInclusion,
  successiveInclusion,
  successiveInclusionOf,
  type TokenSampler,
} from '../../workloads/aggregate-router.ts';
import { AliasTables, aliasScratch } from '../../workloads/random/alias.ts';
import { drawDistinctUniform } from '../../workloads/uniform-router.ts';
import { SyntheticModel } from '../../workloads/synthetic/model.ts';
import { syntheticAggregate } from '../../workloads/synthetic/aggregate.ts';
import { drawDistinctAlias } from '../../workloads/trace-routing.ts';
import { KnobsSchema } from '../../workloads/synthetic/profile.ts';

/** Upper quantile of chi-square with `df` degrees of freedom (Wilson–Hilferty), for z = 3.29 (p = 0.0005). */
function chi2Upper(df: number, z = 3.29): number {
  const a = 2 / (9 * df);
  return df * (1 - a + z * Math.sqrt(a)) ** 3;
}

function moments(draws: Float64Array[], E: number): { mean: number[]; variance: number[] } {
  const R = draws.length;
  const mean = Array.from({ length: E }, (_, e) => draws.reduce((a, d) => a + d[e]!, 0) / R);
  const variance = Array.from(
    { length: E },
    (_, e) => draws.reduce((a, d) => a + (d[e]! - mean[e]!) ** 2, 0) / (R - 1),
  );
  return { mean, variance };
}

describe('aggregate routing vs per-token routing', () => {
  it('uniform top-4 of 16, 3 000 tokens: chi-square on means, variances n·q(1−q) within ±12 %', () => {
    const E = 16;
    const k = 4;
    const n = 3000;
    const q = new Float64Array(E).fill(k / E);
    const sampler: TokenSampler = (_l, r, out) => void drawDistinctUniform(r, E, k, out, 0);
    const agg = new InclusionAggregateRouter(1, E, k, q, sampler, new Rng('agg-uniform'));
    const R = 1500;
    const draws = Array.from({ length: R }, () => {
      const out = new Float64Array(E);
      agg.counts(0, n, out);
      return out;
    });
    const { mean, variance } = moments(draws, E);
    const expectMean = n * (k / E);
    const expectVar = n * (k / E) * (1 - k / E);
    // Standardised means: Σ z² ~ χ²(E−1) (one constraint: Σ counts = n·k).
    const chi2 = mean.reduce((a, m) => a + (m - expectMean) ** 2 / (expectVar / R), 0);
    expect(chi2).toBeLessThan(chi2Upper(E - 1));
    // The sample variance of R draws has relative s.d. ≈ √(2/R) ≈ 3.7 %.
    for (const v of variance) expect(Math.abs(v / expectVar - 1)).toBeLessThan(0.12);
    // The plain multinomial of n·k slots would give n·q(1 − q/k), 25 % more here: the test can tell.
    expect((n * (k / E) * (1 - 1 / E)) / expectVar - 1).toBeGreaterThan(0.12 * 2);
  });

  it('skewed synthetic layer (DeepSeek-like top-6 of 64): aggregate and per-token moments agree', () => {
    const knobs = KnobsSchema.parse({
      popularity: { zipfExponent: 0.8 },
      requestConcentration: null,
      temporalReuse: 0,
      crossLayer: 0,
      taskConcentration: null,
    });
    const model = new SyntheticModel({ moeLayers: 1, experts: 64, topK: 6 }, knobs);
    const agg = syntheticAggregate(model, new Rng('agg-syn'));
    const E = 64;
    const k = 6;
    const n = 2000;
    const R = 400;
    const viaAgg = Array.from({ length: R }, () => {
      const out = new Float64Array(E);
      agg.counts(0, n, out);
      return out;
    });
    const rng = new Rng('per-token');
    const tok = new Int32Array(k);
    const viaTokens = Array.from({ length: R }, () => {
      const out = new Float64Array(E);
      for (let t = 0; t < n; t++) {
        drawDistinctAlias(model.global.alias, 0, E, k, rng, tok, 0);
        for (const e of tok) out[e]!++;
      }
      return out;
    });
    const a = moments(viaAgg, E);
    const b = moments(viaTokens, E);
    // Two-sample chi-square on means (variances from the per-token sample).
    let chi2 = 0;
    for (let e = 0; e < E; e++) chi2 += (a.mean[e]! - b.mean[e]!) ** 2 / ((a.variance[e]! + b.variance[e]!) / R);
    expect(chi2).toBeLessThan(chi2Upper(E - 1));
    // Pooled variance ratio over experts with mean count ≥ 30 (where the normal regime applies).
    let va = 0;
    let vb = 0;
    for (let e = 0; e < E; e++) {
      if (b.mean[e]! < 30) continue;
      va += a.variance[e]!;
      vb += b.variance[e]!;
    }
    expect(Math.abs(va / vb - 1)).toBeLessThan(0.1);
  });

  it('small batches are routed token by token (exact)', () => {
    const E = 8;
    const k = 2;
    let calls = 0;
    const sampler: TokenSampler = (_l, r, out) => {
      calls++;
      drawDistinctUniform(r, E, k, out, 0);
    };
    const agg = new InclusionAggregateRouter(1, E, k, new Float64Array(E).fill(k / E), sampler, new Rng('x'));
    agg.counts(0, 100, new Float64Array(E));
    expect(calls).toBe(100);
    agg.counts(0, 5000, new Float64Array(E));
    expect(calls).toBe(100);
  });

  it('binomial sampler: exact mean and variance in both regimes', () => {
    const rng = new Rng('binom');
    for (const [n, p] of [
      [50, 0.1],
      [10_000, 0.3],
      [200, 0.9],
    ] as const) {
      const xs = Array.from({ length: 20_000 }, () => binomial(n, p, rng));
      const m = xs.reduce((a, b) => a + b, 0) / xs.length;
      const v = xs.reduce((a, x) => a + (x - m) ** 2, 0) / (xs.length - 1);
      expect(Math.abs(m - n * p) / Math.sqrt((n * p * (1 - p)) / xs.length)).toBeLessThan(4);
      expect(Math.abs(v / (n * p * (1 - p)) - 1)).toBeLessThan(0.05);
    }
  });

  it.each([
    [16, 4, 3],
    [64, 6, 0.8],
    [8, 2, 0],
  ])('successive-sampling inclusion (E=%i, k=%i, Zipf %s) matches 2^18 Monte Carlo tokens', (E, k, a) => {
    const w = Float64Array.from({ length: E }, (_, i) => Math.pow(i + 1, -a));
    const q = successiveInclusion(w, k);
    expect(q.reduce((x, y) => x + y, 0)).toBeCloseTo(k, 9);
    const table = new AliasTables(1, E);
    table.build(0, w, 0, aliasScratch(E));
    const N = 1 << 18;
    const mc = estimateInclusion(
      1,
      E,
      k,
      (_l, r, out) => drawDistinctAlias(table, 0, E, k, r, out, 0),
      new Rng(`mc${E}`),
      N,
    );
    for (let e = 0; e < E; e++) {
      const sd = Math.sqrt((q[e]! * (1 - q[e]!)) / N) || 1e-9;
      expect(Math.abs(mc[e]! - q[e]!) / sd).toBeLessThan(4.5);
    }
  });

  it('successive-sampling inclusion is memoised on its inputs: the same bits as computed, a fresh copy each call', () => {
    const rng = new Rng('inclusion-memo');
    const pool = Array.from({ length: 5 }, (_, j) =>
      Float64Array.from({ length: 8 + 13 * j }, () => (rng.next() < 0.1 ? 0 : rng.next() * 3)),
    );
    const seen = new Set<string>();
    let repeats = 0;
    for (let trial = 0; trial < 40; trial++) {
      const j = Math.floor(rng.next() * pool.length);
      const w = pool[j]!;
      const k = 1 + Math.floor(rng.next() * 4);
      if (seen.has(`${j}:${k}`)) repeats++;
      seen.add(`${j}:${k}`);
      const ref = successiveInclusionOf(w, k);
      const got = successiveInclusion(Array.from(w), k);
      expect(Buffer.from(got.buffer)).toEqual(Buffer.from(ref.buffer));
      got.fill(-1); // the caller's copy: the memo is not touched
      expect(Buffer.from(successiveInclusion(w, k).buffer)).toEqual(Buffer.from(ref.buffer));
    }
    expect(repeats).toBeGreaterThan(10);
  });

  it('estimated inclusion probabilities sum to k per layer', () => {
    const q = estimateInclusion(
      2,
      10,
      3,
      (_l, r, out) => void drawDistinctUniform(r, 10, 3, out, 0),
      new Rng('inc'),
      4096,
    );
    expect(q.subarray(0, 10).reduce((a, b) => a + b, 0)).toBeCloseTo(3, 9);
  });
});
