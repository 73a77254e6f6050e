/**
 * Aggregate routing for huge batches (throughput family): per-expert token counts of a layer
 * for `tokens` tokens, in O(E) per call, statistically equivalent to routing the tokens one by
 * one.
 *
 * Reference model: the tokens are independent; each selects k distinct experts with the
 * layer's inclusion probabilities q_e (Σ_e q_e = k, q_e ≤ 1) — a decode batch of many
 * independent requests. (Request-level skew concentrates the tokens of *one* request; use the
 * per-request routers for a few long prompts.)
 *
 * Sampling:
 * - n·k ≤ `perTokenLimit` (default 2048 token-slots): exactly as the reference model, token by
 *   token, with the source's own per-token sampler.
 * - Above: the n·k token-slots as a multinomial with probabilities π_e = q_e/k, drawn as
 *   sequential conditional binomials c_e ~ Bin(remaining, π_e / π_rest) — exact — where each
 *   binomial is drawn exactly by inversion when min(mp, m(1−p)) < 30 and by a rounded normal
 *   N(mp, mp(1−p)) above (skewness < 0.19). The multinomial has the exact means n·q_e but
 *   marginal variances n·q_e(1 − q_e/k), whereas k *distinct* experts per token give
 *   Binomial(n, q_e), variance n·q_e(1 − q_e); so each count's deviation from its mean is scaled
 *   by √((1 − q_e)/(1 − q_e/k)), then counts are rounded back to integers summing to n·k
 *   (largest remainders) and capped at n. Means are then exact, marginal variances match
 *   the per-token model up to rounding, and covariances are those of the multinomial scaled
 *   alike (−n·q_e·q_f/k times the two factors: Hájek's approximation of the per-token ones).
 * `test/property/workloads-aggregate.test.ts` checks means and variances against per-token
 * sampling with a chi-square test and a variance-ratio test.
 */
import type { Rng } from '../sim/kernel/rng.ts';
import type { AggregateRouter } from '../sim/workload.ts';

/** Fills out[0 … k) with one token's k distinct experts at `layer`. */
export type TokenSampler = (layer: number, rng: Rng, out: Int32Array) => void;

export class InclusionAggregateRouter implements AggregateRouter {
  private readonly pi: Float64Array;
  private readonly scale: Float64Array;
  private readonly token: Int32Array;
  private readonly x: Float64Array;
  private readonly perTokenLimit: number;

  /**
   * @param inclusion L×E inclusion probabilities (each layer sums to k)
   * @param sampler   the per-token sampler whose inclusion probabilities these are
   */
  constructor(
    readonly moeLayers: number,
    readonly experts: number,
    readonly topK: number,
    readonly inclusion: Float64Array,
    private readonly sampler: TokenSampler,
    private readonly rng: Rng,
    opts: { perTokenLimit?: number } = {},
  ) {
    const E = experts;
    const k = topK;
    this.pi = new Float64Array(inclusion.length);
    this.scale = new Float64Array(inclusion.length);
    for (let l = 0; l < moeLayers; l++) {
      let s = 0;
      for (let e = 0; e < E; e++) s += inclusion[l * E + e]!;
      for (let e = 0; e < E; e++) {
        const q = Math.min(1, s > 0 ? (inclusion[l * E + e]! * k) / s : k / E);
        this.pi[l * E + e] = q / k;
        this.scale[l * E + e] = k > 1 && q < 1 ? Math.sqrt((1 - q) / (1 - q / k)) : 1;
      }
    }
    this.token = new Int32Array(k);
    this.x = new Float64Array(E);
    this.perTokenLimit = opts.perTokenLimit ?? 2048;
  }

  counts(layer: number, tokens: number, out: Float64Array): void {
    const { experts: E, topK: k, rng } = this;
    if (!(layer >= 0 && layer < this.moeLayers) || !(tokens >= 0) || !Number.isInteger(tokens) || out.length < E) {
      throw new RangeError(`counts(layer ${layer}, tokens ${tokens}) with out of length ${out.length}: bad arguments`);
    }
    if (tokens === 0) return;
    if (tokens * k <= this.perTokenLimit) {
      for (let t = 0; t < tokens; t++) {
        this.sampler(layer, rng, this.token);
        for (let j = 0; j < k; j++) out[this.token[j]!]!++;
      }
      return;
    }
    const off = layer * E;
    const slots = tokens * k;
    const x = this.x;
    let remaining = slots;
    let piRest = 1;
    for (let e = 0; e < E; e++) {
      const p = this.pi[off + e]!;
      let c: number;
      if (e === E - 1 || piRest <= 0) c = remaining;
      else c = binomial(remaining, Math.min(1, Math.max(0, p / piRest)), rng);
      remaining -= c;
      piRest -= p;
      const mean = slots * p;
      x[e] = mean + (c - mean) * this.scale[off + e]!;
    }
    roundToTotal(x, E, slots, tokens);
    for (let e = 0; e < E; e++) out[e]! += x[e]!;
  }
}

/** `roundToTotal`'s scratch (fractions, order), grown to the largest n seen: one call at a time, no callback inside. */
let roundFrac = new Float64Array(256);
let roundIdx = new Int32Array(256);

/**
 * Rounds x[0 … n) in place to integers in [0, cap] summing to `total` (requires n·cap ≥ total):
 * floors, then hands out the missing units by largest fractional part (or takes surplus units
 * by smallest), cycling if more units than entries must move.
 */
export function roundToTotal(x: Float64Array, n: number, total: number, cap: number): void {
  if (n > roundFrac.length) {
    roundFrac = new Float64Array(n);
    roundIdx = new Int32Array(n);
  }
  const frac = roundFrac;
  // A view of the scratch order (its comparators are total, so any sort gives the same order).
  const idx = roundIdx.subarray(0, n);
  for (let i = 0; i < n; i++) idx[i] = i;
  let sum = 0;
  for (let i = 0; i < n; i++) {
    const v = Math.min(cap, Math.max(0, x[i]!));
    const f = Math.floor(v);
    frac[i] = v - f;
    x[i] = f;
    sum += f;
  }
  let diff = total - sum;
  if (diff > 0) {
    idx.sort((a, b) => frac[b]! - frac[a]! || a - b);
    for (let moved = true; diff > 0 && moved; ) {
      moved = false;
      for (const i of idx) {
        if (diff === 0) break;
        if (x[i]! < cap) {
          x[i]!++;
          diff--;
          moved = true;
        }
      }
    }
  } else if (diff < 0) {
    idx.sort((a, b) => frac[a]! - frac[b]! || a - b);
    for (let moved = true; diff < 0 && moved; ) {
      moved = false;
      for (const i of idx) {
        if (diff === 0) break;
        if (x[i]! > 0) {
          x[i]!--;
          diff++;
          moved = true;
        }
      }
    }
  }
}

/** Binomial(n, p) from `rng` (see `Rng.binomial`). */
export const binomial = (n: number, p: number, rng: Rng): number => rng.binomial(n, p);

/** Inclusion probabilities of a per-token sampler, estimated from `samples` tokens per layer. */
export function estimateInclusion(
  L: number,
  E: number,
  k: number,
  sampler: TokenSampler,
  rng: Rng,
  samples = 65536,
): Float64Array {
  const q = new Float64Array(L * E);
  const tok = new Int32Array(k);
  for (let l = 0; l < L; l++) {
    for (let s = 0; s < samples; s++) {
      sampler(l, rng, tok);
      for (let j = 0; j < k; j++) q[l * E + tok[j]!]!++;
    }
    for (let e = 0; e < E; e++) q[l * E + e] = q[l * E + e]! / samples;
  }
  return q;
}

/**
 * Inclusion probabilities of successive sampling: k distinct experts drawn one after another
 * with probability ∝ w among those not yet drawn (what the routers' alias-and-reject draws do).
 * Exact up to quadrature error (< 1e-6 absolute, checked against Monte Carlo in the tests):
 * with independent exponential clocks X_f of rates w_f, the first k to ring are such a sample,
 * so q_e = ∫ w_e e^{−w_e t} P(fewer than k of the other clocks rang by t) dt; the inner
 * Poisson-binomial probability comes from prefix/suffix dynamic programs (leave-one-out
 * without division), the integral by Gauss–Legendre panels on ln t. O(panels·nodes·E·k²).
 */
export function successiveInclusion(weights: ArrayLike<number>, k: number, nodes = 8): Float64Array {
  // A pure function of its inputs, memoised per process (thread) on their exact bits: every run
  // of a sweep on the same synthetic profile asks for the same layers' shares (its predictor's
  // popularity order, its aggregate router), each ~1 ms of quadrature (Qwen: 24 layers × 60).
  const bits = Float64Array.from(weights);
  const key = `${k}:${nodes}:${Buffer.from(bits.buffer).toString('base64')}`;
  let q = inclusionMemo.get(key);
  if (q === undefined) {
    q = successiveInclusionOf(bits, k, nodes);
    if (inclusionMemo.size >= INCLUSION_MEMO_CAP) inclusionMemo.delete(inclusionMemo.keys().next().value!);
    inclusionMemo.set(key, q);
  }
  return q.slice();
}

/** Memo of `successiveInclusion` (oldest dropped past the cap: a bound on memory, not a tuned figure). */
const inclusionMemo = new Map<string, Float64Array>();
const INCLUSION_MEMO_CAP = 4096;

/** `successiveInclusion` computed (no memo): the reference the memo is checked against. */
export function successiveInclusionOf(weights: ArrayLike<number>, k: number, nodes = 8): Float64Array {
  const E = weights.length;
  const q = new Float64Array(E);
  let total = 0;
  for (let e = 0; e < E; e++) total += Math.max(0, weights[e]!);
  const w = Float64Array.from({ length: E }, (_, e) => (total > 0 ? Math.max(0, weights[e]!) / total : 1 / E));
  const positive = w.reduce((a, x) => a + (x > 0 ? 1 : 0), 0);
  if (k >= positive) {
    // Every expert with weight is drawn; the rest fill uniformly.
    for (let e = 0; e < E; e++) q[e] = w[e]! > 0 ? 1 : (k - positive) / Math.max(1, E - positive);
    return q;
  }
  if (k === 1) return w;
  // Quadrature on s = ln t (the integrand spans the time scales of hot and cold experts):
  // panels of width 1 in s, `nodes` Gauss–Legendre points each, from t_min to t_max; the part
  // below t_min (where every clock is almost surely silent) is w_e·t_min.
  let wMax = 0;
  let wMin = Infinity;
  for (const v of w) {
    if (v > wMax) wMax = v;
    if (v > 0 && v < wMin) wMin = v;
  }
  const tMin = 1e-6 / wMax;
  const tMax = 50 / wMin;
  const sLo = Math.log(tMin);
  const panels = Math.ceil(Math.log(tMax) - sLo);
  const { x, wt } = gaussLegendre01(nodes);
  for (let e = 0; e < E; e++) q[e] = w[e]! * tMin;
  const pre = new Float64Array((E + 1) * k);
  const suf = new Float64Array((E + 1) * k);
  const p = new Float64Array(E);
  for (let panel = 0; panel < panels; panel++) {
    for (let i = 0; i < x.length; i++) {
      const sv = sLo + panel + x[i]!;
      const t = Math.exp(sv);
      const dt = t; // dt = t ds
      for (let f = 0; f < E; f++) p[f] = -Math.expm1(-w[f]! * t);
      // pre[i][j]: P(j of experts 0…i−1 rang), j < k; suf[i][j]: the same for experts i…E−1.
      pre.fill(0);
      suf.fill(0);
      pre[0] = 1;
      for (let f = 0; f < E; f++) {
        const a = f * k;
        const b = (f + 1) * k;
        for (let j = 0; j < k; j++) pre[b + j] = pre[a + j]! * (1 - p[f]!) + (j > 0 ? pre[a + j - 1]! * p[f]! : 0);
      }
      suf[E * k] = 1;
      for (let f = E - 1; f >= 0; f--) {
        const a = (f + 1) * k;
        const b = f * k;
        for (let j = 0; j < k; j++) suf[b + j] = suf[a + j]! * (1 - p[f]!) + (j > 0 ? suf[a + j - 1]! * p[f]! : 0);
      }
      for (let e = 0; e < E; e++) {
        if (w[e] === 0) continue;
        let cdf = 0;
        const a = e * k;
        const b = (e + 1) * k;
        for (let j = 0; j < k; j++) for (let m = 0; m <= j; m++) cdf += pre[a + m]! * suf[b + j - m]!;
        q[e]! += wt[i]! * w[e]! * Math.exp(-w[e]! * t) * cdf * dt;
      }
    }
  }
  // Remove the (tiny) quadrature error so that Σ q = k exactly.
  const s = q.reduce((acc, v) => acc + v, 0);
  for (let e = 0; e < E; e++) q[e] = Math.min(1, (q[e]! * k) / s);
  return q;
}

/** Gauss–Legendre nodes and weights on [0, 1]. */
function gaussLegendre01(n: number): { x: Float64Array; wt: Float64Array } {
  const x = new Float64Array(n);
  const wt = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    let z = Math.cos((Math.PI * (i + 0.75)) / (n + 0.5));
    let dp = 0;
    for (let it = 0; it < 100; it++) {
      let p0 = 1;
      let p1 = z;
      for (let j = 2; j <= n; j++) {
        const p2 = ((2 * j - 1) * z * p1 - (j - 1) * p0) / j;
        p0 = p1;
        p1 = p2;
      }
      dp = (n * (z * p1 - p0)) / (z * z - 1);
      const dz = p1 / dp;
      z -= dz;
      if (Math.abs(dz) < 1e-15) break;
    }
    x[i] = (1 - z) / 2;
    wt[i] = 1 / ((1 - z * z) * dp * dp);
  }
  return { x, wt };
}
