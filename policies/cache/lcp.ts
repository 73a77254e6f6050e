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
import { firstBy, trimToCaps, victimPool, type CapOf } from './victims.ts';

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

  /** P = μ · ρ^(ν/ω) (Eq. 4). */
  priority(key: ExpertKey): number {
    const mu = this.mu[key]!;
    return mu === 0 ? 0 : mu * Math.pow(this.rho, this.nu(key) / this.omega);
  }

  /** Eviction order: lowest priority first, then least recently activated, then lowest key. */
  readonly evictFirst = (a: ExpertKey, b: ExpertKey): number => this.priority(a) - this.priority(b) || this.last[a]! - this.last[b]! || a - b;

  /** The experts of `layer`, highest priority first (ties: most recent, then lowest id). */
  ranked(layer: number): number[] {
    const base = layer * this.experts;
    const p = new Float64Array(this.experts);
    for (let e = 0; e < this.experts; e++) p[e] = this.priority(base + e);
    return Array.from({ length: this.experts }, (_, e) => e).sort((a, b) => p[b]! - p[a]! || this.last[base + b]! - this.last[base + a]! || a - b);
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
      return firstBy(victimPool(view, q.candidates, q.forKey, capOf), scores.evictFirst);
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
