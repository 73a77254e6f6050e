/**
 * lcp — Least Cache Priority expert cache (MoEpic §3.3, Eq. 4), no prefetch.
 *
 * Reproduces: MoEpic's cache manager, on its own (the LCP row of MoEpic's Table 1) and inside
 * `moepic`. Per expert (layer i, expert j) it keeps
 * - μ, the activation frequency: tokens routed to the expert since the start of the run (the
 *   paper: "the accumulated activation count of the expert");
 * - ν, the activation interval: tokens of its layer since the expert was last activated ("how
 *   many consecutive tokens have not activated this expert at present");
 * and its priority P = μ · ρ^(ν/ω), with ω = 128 (the observation window) and ρ = 0.25 (paper
 * §3.3 and §4.1 defaults). On a miss, the resident expert with the lowest P is evicted. A never
 * activated expert has P = 0. Ties: least recently activated first, then the lowest key.
 *
 * Token granularity: the executor routes a whole iteration at once; an expert activated by any
 * token of an iteration of n tokens gets μ += (tokens routed to it) and ν = 0 at the end of the
 * iteration, others ν += n (a prefill's internal order is not tracked).
 *
 * Capacity: as `lru` — `capacitySlots` / `capacityBytes` (global) or `perLayerSlots` (one cache
 * per MoE layer, Table 1's "cached experts per layer").
 *
 * When to use: skewed (long-tail) popularity with temporal locality; LCP sits between LFU
 * (ρ → 1) and LRU (ρ → 0). Known gaps: none beyond the token granularity above.
 */
import { z } from 'zod';
import type { ExpertKey, ServingPolicy, ServingView } from '../../sim/serving/policy.ts';
import { definePolicy } from '../types.ts';
import { LruParams, lruSlots } from './lru.ts';
import { firstBy, firstEvictableVictimBy, trimToCaps, type CapOf } from './victims.ts';

/** Paper §4.1: "we set the observation window ω and the balance control parameter ρ as 128 and 0.25 by default". */
export const LCP_OMEGA = 128;
export const LCP_RHO = 0.25;

export const LcpParams = LruParams.extend({
  omega: z.number().positive().default(LCP_OMEGA),
  rho: z.number().gt(0).lt(1).default(LCP_RHO),
}).strict();
export type LcpParams = z.infer<typeof LcpParams>;

/** μ and ν of every expert and its LCP priority (shared with `policies/moepic`). */
export class LcpScores {
  readonly mu: Float64Array;
  /** Layer token clock at the expert's last activation (−1: never). */
  readonly last: Float64Array;
  /** Tokens each layer has processed. */
  readonly clock: Float64Array;

  constructor(
    readonly layers: number,
    readonly experts: number,
    readonly omega = LCP_OMEGA,
    readonly rho = LCP_RHO,
  ) {
    this.mu = new Float64Array(layers * experts);
    this.last = new Float64Array(layers * experts).fill(-1);
    this.clock = new Float64Array(layers);
  }

  /** One routed iteration of `layer`: `tokens` tokens, `tokensPerExpert[e]` of them routed to e. */
  observe(layer: number, tokensPerExpert: ArrayLike<number>, tokens: number): void {
    const base = layer * this.experts;
    const now = this.clock[layer]! + tokens;
    for (let e = 0; e < this.experts; e++) {
      const n = tokensPerExpert[e]!;
      if (n > 0) {
        this.mu[base + e]! += n;
        this.last[base + e] = now;
      }
    }
    this.clock[layer] = now;
  }

  /** ν: tokens of its layer since the expert was last activated (all of them if never). */
  nu(key: ExpertKey): number {
    const layer = Math.floor(key / this.experts);
    const last = this.last[key]!;
    return last < 0 ? this.clock[layer]! : this.clock[layer]! - last;
  }

  /**
   * ρ^(ν/ω) by integer ν, computed once each (NaN: not yet): ν is a count of tokens, so the same
   * few thousand values recur; a cached value is the very result of the same `Math.pow` call.
   */
  private decay = new Float64Array(0);

  private decayOf(nu: number): number {
    if (nu < this.decay.length && Number.isInteger(nu)) {
      const d = this.decay[nu]!;
      if (d === d) return d;
      return (this.decay[nu] = Math.pow(this.rho, nu / this.omega));
    }
    if (Number.isInteger(nu) && nu >= 0 && nu < 1 << 22) {
      const grown = new Float64Array(Math.max(1024, 2 ** Math.ceil(Math.log2(nu + 1)))).fill(NaN);
      grown.set(this.decay);
      this.decay = grown;
      return (this.decay[nu] = Math.pow(this.rho, nu / this.omega));
    }
    return Math.pow(this.rho, nu / this.omega);
  }

  /** P = μ · ρ^(ν/ω) (Eq. 4). */
  priority(key: ExpertKey): number {
    const mu = this.mu[key]!;
    return mu === 0 ? 0 : mu * this.decayOf(this.nu(key));
  }

  /** Eviction order: lowest priority first, then least recently activated, then lowest key. */
  readonly evictFirst = (a: ExpertKey, b: ExpertKey): number =>
    this.priority(a) - this.priority(b) || this.last[a]! - this.last[b]! || a - b;

  /** Per layer: the experts in their last ranked order (the next ranking starts from it: nearly sorted). */
  private orders: Int32Array[] = [];
  private scratch = new Float64Array(0);

  /**
   * Sorts layer `layer`'s experts, highest priority first (ties: most recent, then lowest id), into
   * its kept order and returns that order (owned by the scores: copy it to keep it). Insertion
   * sort from the previous order: priorities move little between tokens, so it is nearly sorted;
   * the comparison is a strict total order, so the result is the one sorted order.
   */
  private sortLayer(layer: number): Int32Array {
    const E = this.experts;
    const base = layer * E;
    let order = this.orders[layer];
    if (!order) {
      order = Int32Array.from({ length: E }, (_, e) => e);
      this.orders[layer] = order;
    }
    if (this.scratch.length !== E) this.scratch = new Float64Array(E);
    const p = this.scratch;
    // `priority(base + e)`, with the layer's clock read once.
    const mu = this.mu;
    const clock = this.clock[layer]!;
    for (let e = 0; e < E; e++) {
      const m = mu[base + e]!;
      const l = this.last[base + e]!;
      p[e] = m === 0 ? 0 : m * this.decayOf(l < 0 ? clock : clock - l);
    }
    const last = this.last;
    for (let i = 1; i < E; i++) {
      const x = order[i]!;
      const px = p[x]!;
      const lx = last[base + x]!;
      let j = i - 1;
      while (j >= 0) {
        const y = order[j]!;
        // Does x go before y? Higher priority, then more recent, then lower id.
        const py = p[y]!;
        if (px > py || (px === py && (lx > last[base + y]! || (lx === last[base + y]! && x < y)))) {
          order[j + 1] = y;
          j--;
        } else break;
      }
      order[j + 1] = x;
    }
    return order;
  }

  /** The experts of `layer`, highest priority first (ties: most recent, then lowest id). */
  ranked(layer: number): number[] {
    return Array.from(this.sortLayer(layer));
  }

  /** `rankOf[e]` = the rank of expert e of `layer` in `ranked(layer)`, without allocating. */
  rankInto(layer: number, rankOf: Int32Array): void {
    const order = this.sortLayer(layer);
    for (let i = 0; i < order.length; i++) rankOf[order[i]!] = i;
  }
}

/** Tokens of the current iteration (the batch's). */
export const iterationTokens = (view: ServingView): number => {
  let n = 0;
  for (const r of view.batch) n += r.iterationTokens;
  return n;
};

export function createLcp(name: string, p: LcpParams): ServingPolicy & { readonly scores: () => LcpScores } {
  let scores = new LcpScores(0, 0, p.omega, p.rho);
  const capOf: CapOf | undefined = p.perLayerSlots !== undefined ? () => p.perLayerSlots! : undefined;
  return {
    name,
    scores: () => scores,
    init(shape) {
      scores = new LcpScores(shape.moeLayers, shape.experts, p.omega, p.rho);
    },
    onLayerRouted(view, routing) {
      scores.observe(routing.layer, routing.tokensPerExpert, iterationTokens(view));
      if (capOf) return { evict: trimToCaps(view, capOf, (pool) => firstBy(pool, scores.evictFirst)!) };
    },
    chooseVictim(view, q) {
      return firstEvictableVictimBy(view, q, capOf, scores.evictFirst);
    },
  };
}

export const lcp = definePolicy({
  name: 'lcp',
  family: 'serving',
  summary: 'MoEpic LCP cache: evict the lowest μ·ρ^(ν/ω) (ω 128, ρ 0.25; global or per-layer capacity), no prefetch',
  params: LcpParams,
  bufferSlots: (p, model) => lruSlots(p, model),
  create: (p) => createLcp('lcp', p),
});
