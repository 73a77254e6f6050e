/**
 * MoE-Infinity's activation-aware expert cache (DESIGN §8, "Cache").
 *
 * Every expert has a cache priority; when a slot is needed the resident, unpinned expert with
 * the lowest priority is evicted.
 * - Experts in the prefetcher's current ranked set (being prefetched, or resident and
 *   predicted for a coming layer) have maximal priority: a prefetch never evicts them (the
 *   executor never evicts a loading one anyway); an on-demand fetch evicts one only when
 *   nothing else is evictable.
 * - After use, or once known unused (its layer was routed in this iteration and did not pick
 *   it), an expert's priority resets to its frequency in the current request EAM: its count
 *   summed over the requests of the batch (prefill and decode together), divided by the tokens
 *   those requests have routed so far. Dividing by the tokens keeps priorities set in
 *   different iterations comparable (a long prompt's raw counts would otherwise outrank every
 *   later decode step for ever); within one reset it ranks exactly as the raw counts do.
 * - Initial-layer boost (the first layers benefit least from prefetching, DESIGN §8):
 *   priority = frequency × (1 + boost × (1 − layer / L)); boost 0 disables it. Multiplicative,
 *   so it re-weights used experts across layers without lifting an expert the request never
 *   used above one it did.
 * - Ties: least recently used first, then lowest key (deterministic).
 *
 * With `cachePriorities` off the cache is LRU (still never evicting the ranked set for a
 * prefetch) — the ablation "without activation-aware caching".
 */
import type { BufferView, EvictionQuery, ExpertKey } from '../../sim/serving/policy.ts';
import type { Phase, RequestEams } from './eam.ts';

const PHASES: readonly Phase[] = ['prefill', 'decode'];

export interface CachePriorityOptions {
  readonly layers: number;
  readonly experts: number;
  /** Request-EAM priorities (true) or LRU (false). */
  readonly requestPriorities: boolean;
  /** Boost of the first layers: priority × (1 + boost·(1 − layer/L)). */
  readonly initialLayerBoost: number;
}

export class CachePriorities {
  /** Priority per expert key (request-EAM frequency × boost), set at the last reset. */
  readonly priority: Float64Array;
  private readonly boostFactor: Float64Array;
  /** Keys of the prefetcher's current ranked set → rank (0 = most urgent): maximal priority. */
  protectedKeys: ReadonlyMap<ExpertKey, number> = new Map();

  constructor(private readonly o: CachePriorityOptions) {
    this.priority = new Float64Array(o.layers * o.experts);
    this.boostFactor = new Float64Array(o.layers);
    for (let l = 0; l < o.layers; l++) this.boostFactor[l] = 1 + o.initialLayerBoost * (1 - l / o.layers);
  }

  /** Multiplier of layer `layer`'s priorities. */
  boost(layer: number): number {
    return this.boostFactor[layer]!;
  }

  /** The priority (layer, expert) resets to now, for the requests `batchIds` of the batch. */
  valueFor(eams: RequestEams, batchIds: readonly number[], layer: number, expert: number): number {
    let count = 0;
    let tokens = 0;
    for (const id of batchIds) {
      count += eams.count(id, layer, expert);
      tokens += eams.tokens(id);
    }
    return tokens > 0 ? count * (this.boostFactor[layer]! / tokens) : 0;
  }

  /** Resets every expert of `layer` (its routing is known: each one is used or known unused). */
  resetLayer(eams: RequestEams, batchIds: readonly number[], layer: number): void {
    const E = this.o.experts;
    const base = layer * E;
    const p = this.priority;
    p.fill(0, base, base + E);
    let tokens = 0;
    for (const id of batchIds) {
      tokens += eams.tokens(id);
      for (const phase of PHASES) {
        const m = eams.get(id, phase);
        if (m) for (let e = 0; e < E; e++) p[base + e]! += m[base + e]!;
      }
    }
    const f = tokens > 0 ? this.boostFactor[layer]! / tokens : 0;
    for (let e = 0; e < E; e++) p[base + e]! *= f;
  }

  /** Resets one expert (after use). */
  resetKey(eams: RequestEams, batchIds: readonly number[], key: ExpertKey): void {
    const E = this.o.experts;
    this.priority[key] = this.valueFor(eams, batchIds, Math.floor(key / E), key % E);
  }

  /**
   * The victim for `q`: the lowest-priority candidate outside the ranked set, else (on-demand
   * only) the least urgent one inside it (highest rank). `undefined` declines a prefetch.
   */
  chooseVictim(buffer: BufferView, q: EvictionQuery): ExpertKey | undefined {
    let best: ExpertKey | undefined;
    let bestProt = true;
    let bestPrio = Infinity;
    let bestUsed = Infinity;
    for (const k of q.candidates) {
      const rank = this.protectedKeys.get(k);
      const prot = rank !== undefined;
      // Inside the ranked set the least urgent (highest rank) goes first.
      const prio = prot ? -rank : this.o.requestPriorities ? this.priority[k]! : 0;
      const used = buffer.entry(k)?.lastUsedNs ?? -1;
      const better =
        best === undefined ||
        (bestProt && !prot) ||
        (prot === bestProt && (prio < bestPrio || (prio === bestPrio && (used < bestUsed || (used === bestUsed && k < best)))));
      if (better) {
        best = k;
        bestProt = prot;
        bestPrio = prio;
        bestUsed = used;
      }
    }
    if (best !== undefined && bestProt && q.reason === 'prefetch') return undefined;
    return best;
  }
}
