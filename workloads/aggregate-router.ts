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

/**
 * Rounds x[0 … n) in place to integers in [0, cap] summing to `total` (requires n·cap ≥ total):
 * floors, then hands out the missing units by largest fractional part (or takes surplus units
 * by smallest), cycling if more units than entries must move.
 */
export function roundToTotal(x: Float64Array, n: number, total: number, cap: number): void {
  const frac = new Float64Array(n);
  const idx = Array.from({ length: n }, (_, i) => i);
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

/** Binomial(n, p): exact inversion for small means, rounded normal above. */
export function binomial(n: number, p: number, rng: Rng): number {
  if (n <= 0 || p <= 0) return 0;
  if (p >= 1) return n;
  if (p > 0.5) return n - binomial(n, 1 - p, rng);
  const mean = n * p;
  if (mean < 30) {
    // Inversion (BINV): walk the pmf from 0; expected O(mean) steps.
    const q = 1 - p;
    const s = p / q;
    const a = (n + 1) * s;
    let r = Math.pow(q, n);
    let u = rng.next();
    let x = 0;
    while (u > r) {
      u -= r;
      x++;
      if (x > n) return n;
      r *= a / x - s;
      if (r <= 0) break;
    }
    return Math.min(x, n);
  }
  const v = Math.round(mean + Math.sqrt(mean * (1 - p)) * rng.normal());
  return Math.min(n, Math.max(0, v));
}

/** Inclusion probabilities of a per-token sampler, estimated from `samples` tokens per layer. */
export function estimateInclusion(L: number, E: number, k: number, sampler: TokenSampler, rng: Rng, samples = 65536): Float64Array {
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
