/**
 * lru — least-recently-used expert cache, no prefetch.
 *
 * Reproduces: the LRU expert cache of Mixtral-Offloading (per layer) and the cache baselines of
 * MoE-Infinity and MoEpic. Experts are fetched on demand after routing; after use they stay in
 * the GPU buffer; when a slot is needed the least recently used resident expert is evicted.
 *
 * Capacity: `capacitySlots` (global), or `capacityBytes` (converted to whole slots), sets the
 * executor's expert buffer; `perLayerSlots` additionally caps each MoE layer (Mixtral-
 * Offloading keeps 4 of 8 experts per layer) by evicting that layer's least recent expert when
 * a new one of the layer is routed. Without any, the buffer is `executor.bufferSlots`.
 * LRU is a stack algorithm: its hit rate never falls as the capacity grows (tested).
 */
import { z } from 'zod';
import type { ExpertKey, ServingPolicy } from '../../sim/serving/policy.ts';
import { definePolicy } from '../types.ts';

export const LruParams = z
  .object({
    capacitySlots: z.number().int().positive().optional(),
    capacityBytes: z.number().int().positive().optional(),
    perLayerSlots: z.number().int().positive().optional(),
  })
  .strict();
export type LruParams = z.infer<typeof LruParams>;

/**
 * An LRU order over expert keys: a Map keeps insertion order, so delete + set moves a key to
 * the most-recent end, and the first key is the least recent.
 */
export class LruOrder {
  private readonly order = new Map<ExpertKey, true>();
  touch(key: ExpertKey): void {
    this.order.delete(key);
    this.order.set(key, true);
  }
  remove(key: ExpertKey): void {
    this.order.delete(key);
  }
  /** Least recently used key satisfying `ok`. */
  oldest(ok: (k: ExpertKey) => boolean): ExpertKey | undefined {
    for (const k of this.order.keys()) if (ok(k)) return k;
    return undefined;
  }
}

/** Buffer slots implied by the capacity parameters, if any. */
export function lruSlots(p: LruParams, bytesPerExpert: number, moeLayers: number): number | undefined {
  if (p.capacitySlots !== undefined) return p.capacitySlots;
  if (p.capacityBytes !== undefined) return Math.max(1, Math.floor(p.capacityBytes / bytesPerExpert));
  if (p.perLayerSlots !== undefined) return p.perLayerSlots * moeLayers;
  return undefined;
}

export function createLru(name: string, p: LruParams): ServingPolicy {
  const lru = new LruOrder();
  return {
    name,
    onLayerRouted(view, routing) {
      for (const e of routing.activated) lru.touch(view.keyOf(routing.layer, e));
      if (p.perLayerSlots === undefined) return;
      let inLayer = 0;
      for (const ent of view.buffer.entries()) if (view.layerOf(ent.key) === routing.layer) inLayer++;
      const evict: ExpertKey[] = [];
      while (inLayer > p.perLayerSlots) {
        const v = lru.oldest((k) => {
          if (view.layerOf(k) !== routing.layer || evict.includes(k)) return false;
          const ent = view.buffer.entry(k);
          return ent !== undefined && ent.state === 'resident' && !ent.pinned;
        });
        if (v === undefined) break;
        evict.push(v);
        inLayer--;
      }
      return { evict };
    },
    chooseVictim(view, q) {
      // Candidates are exactly the resident, unpinned entries: test that directly instead of building a set.
      const v =
        lru.oldest((k) => {
          const e = view.buffer.entry(k);
          return e !== undefined && e.state === 'resident' && !e.pinned;
        }) ?? q.candidates[0];
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
  bufferSlots: (p, model) => lruSlots(p, model.derived.bytesPerExpert, model.moeLayers),
  create: (p) => createLru('lru', p),
});
