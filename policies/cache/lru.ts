/**
 * lru — least-recently-used expert cache, no prefetch.
 *
 * Reproduces: the LRU expert cache of Mixtral-Offloading (per layer) and the cache baselines of
 * MoE-Infinity and MoEpic. Experts are fetched on demand after routing; after use they stay in
 * the GPU buffer; when a slot is needed the least recently used resident expert is evicted.
 *
 * Capacity: `capacitySlots` (global), or `capacityBytes` (converted to whole slots), sets the
 * executor's expert buffer; `perLayerSlots` makes it one LRU cache per MoE layer (Mixtral-
 * Offloading keeps 4 of 8 experts per layer): a miss at layer l evicts layer l's own least
 * recent expert (see `victims.ts`), and a layer that overshot its cap (more activated experts
 * than slots) gives back its least recent ones as soon as it has computed. Without any, the buffer is
 * `executor.bufferSlots`.
 * LRU is a stack algorithm: its hit rate never falls as the capacity grows (tested).
 */
import { z } from 'zod';
import type { ExpertKey, ServingPolicy } from '../../sim/serving/policy.ts';
import { definePolicy } from '../types.ts';
import type { ModelProfile } from '../../hardware-profiles/types.ts';
import { evictable, firstBy, firstEvictableVictimBy, trimToCaps, type CapOf } from './victims.ts';

export const LruParams = z
  .object({
    capacitySlots: z.number().int().positive().optional(),
    capacityBytes: z.number().int().positive().optional(),
    perLayerSlots: z.number().int().positive().optional(),
  })
  .strict();
export type LruParams = z.infer<typeof LruParams>;

/**
 * An LRU order over expert keys. Stamps (when each key was last touched) live in an array
 * indexed by key; with `ordered`, a Map also keeps the keys in recency order (delete + set
 * moves a key to the most-recent end, the first key is the least recent) for `oldest`/`keys` —
 * a global cache needs that order, a per-layer cache compares stamps only.
 */
export class LruOrder {
  private readonly order: Map<ExpertKey, number> | null;
  private readonly stamps: number[] = [];
  private clock = 0;
  constructor(ordered = true) {
    this.order = ordered ? new Map() : null;
  }
  touch(key: ExpertKey): void {
    const stamp = ++this.clock;
    this.stamps[key] = stamp;
    if (this.order) {
      this.order.delete(key);
      this.order.set(key, stamp);
    }
  }
  /** When `key` was last touched (larger is more recent); 0 if never (or removed). */
  stampOf(key: ExpertKey): number {
    return this.stamps[key] ?? 0;
  }
  remove(key: ExpertKey): void {
    this.stamps[key] = 0;
    this.order?.delete(key);
  }
  keys(): IterableIterator<ExpertKey> {
    return this.ordered().keys();
  }
  /** Least recently used key satisfying `ok`. */
  oldest(ok: (k: ExpertKey) => boolean): ExpertKey | undefined {
    for (const k of this.ordered().keys()) if (ok(k)) return k;
    return undefined;
  }
  private ordered(): Map<ExpertKey, number> {
    if (!this.order) throw new Error('LruOrder built without order: use stampOf');
    return this.order;
  }
}

/**
 * Buffer slots implied by the capacity parameters, if any. A per-layer cache also gets top-k
 * staging slots (Mixtral-Offloading's `buffer_size`): a layer whose cache is full still needs
 * somewhere to load its misses before it gives back its least recent experts, and without the
 * staging slots that load would evict another layer's cached expert.
 */
export function lruSlots(
  p: LruParams,
  model: Pick<ModelProfile, 'moeLayers' | 'topK' | 'derived'>,
): number | undefined {
  if (p.capacitySlots !== undefined) return p.capacitySlots;
  if (p.capacityBytes !== undefined) return Math.max(1, Math.floor(p.capacityBytes / model.derived.bytesPerExpert));
  if (p.perLayerSlots !== undefined) return p.perLayerSlots * model.moeLayers + model.topK;
  return undefined;
}

export function createLru(name: string, p: LruParams): ServingPolicy {
  const capOf: CapOf | undefined = p.perLayerSlots !== undefined ? () => p.perLayerSlots! : undefined;
  // Per-layer caches compare stamps (`oldestOf`); only the global cache walks the recency order.
  const lru = new LruOrder(capOf === undefined);
  // Least recently used first; keys never touched (absent from the order) first of all.
  const leastRecentFirst = (a: ExpertKey, b: ExpertKey): number => lru.stampOf(a) - lru.stampOf(b) || a - b;
  const oldestOf = (pool: readonly ExpertKey[]): ExpertKey => firstBy(pool, leastRecentFirst)!;
  return {
    name,
    onLayerRouted(view, routing) {
      // Touch in the order the executor computes them (expert order), so the last computed is the most recent.
      for (const e of routing.activated) lru.touch(view.keyOf(routing.layer, e));
    },
    onLayerDone(view, layer) {
      // Per-layer caches: once a layer has computed, if it is over its cap (it activated more
      // experts than its slots) it gives back its least recent experts. Other layers were
      // trimmed when they finished.
      if (capOf) return { evict: trimToCaps(view, capOf, oldestOf, layer) };
    },
    chooseVictim(view, q) {
      if (capOf) return firstEvictableVictimBy(view, q, capOf, leastRecentFirst);
      // Global: candidates are exactly the resident, unpinned entries; test that directly
      // instead of building a set.
      const v = lru.oldest((k) => evictable(view.buffer, k)) ?? q.candidates[0];
      // Evicted keys leave the order (they re-enter when routed again), which keeps the scan short.
      if (v !== undefined) lru.remove(v);
      return v;
    },
  };
}

export const lru = definePolicy({
  name: 'lru',
  family: 'serving',
  summary: 'LRU expert cache (global or per-layer capacity), on-demand fetches, no prefetch',
  params: LruParams,
  bufferSlots: (p, model) => lruSlots(p, model),
  create: (p) => createLru('lru', p),
});
