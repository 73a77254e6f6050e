/**
 * dependency-prefetch — DeepSpeed-Inference-style layer prefetch: while MoE layer l computes,
 * prefetch the WHOLE next MoE layer l+1 (every expert, whatever the router will choose).
 *
 * Reproduces: the dependency-based prefetch baseline of MoE-Infinity and MoEpic (DeepSpeed-
 * Inference / ZeRO-Infinity fetch the parameters of the next module in execution order), and
 * Pre-gated MoE's "SE-MoE / MoE-Prefetch" baseline (`fetch_all`). The first MoE layer of each
 * iteration (`view.firstLayer`: the first decoder MoE layer of an encoder-decoder model in decode)
 * is prefetched when the iteration starts (during its attention). Transfers go in expert order at
 * one priority; nothing is ever cancelled: moving whole layers is the point of this baseline
 * (PCIe bytes ≈ layers × experts × expert bytes per iteration, at most).
 *
 * `cache`:
 * - `none` (default): no expert cache — an expert is released after use; experts of a layer
 *   that the router did not activate are released when the layer routes, or when their
 *   transfer lands after that. The buffer needs about two layers of slots (the layer computing
 *   and the next) to overlap fully; with fewer, prefetches that find no free slot are dropped
 *   (and fetched on demand if needed).
 * - `lru`: experts are kept after use in an LRU cache; a prefetch may evict the least recently
 *   used expert (prefetched experts count as just used), never one of the layer it loads.
 * Capacity: `capacitySlots` or `capacityBytes` sets the expert buffer; else the executor's.
 *
 * When to use: the "prefetch everything next" upper bound on bandwidth use, against which
 * predictive prefetchers show their PCIe savings. Known gaps: DeepSpeed fetches the dense
 * parameters too (here dense weights stay on the GPU, as in every serving-family run) and its
 * fetch of a module is synchronous (the layer waits for all of it), while here a layer computes
 * as soon as its activated experts are resident and the rest keep loading behind on-demand
 * fetches; ZeRO's parameter partitioning and multi-GPU gather are absent.
 */
import { z } from 'zod';
import type { ExpertKey, PrefetchRequest, ServingPolicy, ServingView } from '../../sim/serving/policy.ts';
import { lruSlots } from '../cache/lru.ts';
import { definePolicy } from '../types.ts';
import { evictable } from '../cache/victims.ts';
import { EvictableSet } from '../cache/evictable-set.ts';

export const DependencyPrefetchParams = z
  .object({
    cache: z.enum(['none', 'lru']).default('none'),
    capacitySlots: z.number().int().positive().optional(),
    capacityBytes: z.number().int().positive().optional(),
    /**
     * Each new plan replaces the prefetch queue: loading prefetches of the layer that just routed
     * which it did not choose are cancelled (an in-flight packet still lands). This is the engine
     * MoE-Infinity's paper ran every prefetching strategy in (`replace_cache_candidates` clears the
     * queued prefetch tasks on every new prediction, reference-facts §1a.5): the paper's Table 3
     * "dependency" row moves 1.4–2.4× on-demand's bytes, not whole layers. Default false (DeepSpeed
     * itself keeps fetching the whole module).
     */
    replaceQueue: z.boolean().default(false),
  })
  .strict();
export type DependencyPrefetchParams = z.infer<typeof DependencyPrefetchParams>;

export function createDependencyPrefetch(name: string, p: DependencyPrefetchParams): ServingPolicy {
  const keep = p.cache === 'lru';
  /** Recency stamps per key (0 = never): touched on use and when prefetched. */
  let stamp = new Float64Array(0);
  let tick = 0;
  const evictableSet = new EvictableSet();
  const wholeLayer = (view: ServingView, layer: number): PrefetchRequest[] => {
    const out: PrefetchRequest[] = [];
    for (let e = 0; e < view.experts; e++) {
      const key = view.keyOf(layer, e);
      if (view.buffer.has(key)) continue;
      stamp[key] = ++tick;
      out.push({ key, priority: 1 });
    }
    return out;
  };
  return {
    name,
    init(shape) {
      stamp = new Float64Array(shape.moeLayers * shape.experts);
    },
    onIterationStart(view) {
      if (view.moeLayers > 0) return { prefetch: wholeLayer(view, view.firstLayer) };
    },
    onLayerRouted(view, routing) {
      const l = routing.layer;
      for (const e of routing.activated) stamp[view.keyOf(l, e)] = ++tick;
      const evict: ExpertKey[] = [];
      const cancel: ExpertKey[] = [];
      if (p.replaceQueue) {
        // The router has spoken for layer l: its unchosen prefetches still queued are stale.
        for (const ent of view.buffer.entries())
          if (ent.state === 'loading' && !ent.pinned && view.layerOf(ent.key) <= l) cancel.push(ent.key);
      }
      if (!keep) {
        // No cache: whatever is resident and not being computed is garbage, except the next layer.
        for (const ent of view.buffer.entries())
          if (evictable(view.buffer, ent.key) && view.layerOf(ent.key) !== l + 1) evict.push(ent.key);
      }
      return { evict, cancel, prefetch: l + 1 < view.moeLayers ? wholeLayer(view, l + 1) : [] };
    },
    afterUse: () => keep,
    onPrefetchDone(view, key) {
      // Landed after its layer routed (and not needed, or it would be pinned): drop it.
      if (!keep && view.layer >= 0 && view.layerOf(key) <= view.layer) return { evict: [key] };
    },
    chooseVictim(view, q) {
      // The oldest stamp, then the lowest key (a total order: any walk order gives the same victim),
      // over the candidates (a prefetch: outside its own layer). When they are the buffer's whole
      // evictable set (the executor's queries), read from its dense set, so none is listed (a whole
      // layer's prefetches each ask, on a buffer of hundreds of slots).
      const target = view.layerOf(q.forKey);
      const own = q.reason === 'prefetch';
      const dense = q.allEvictable ? evictableSet.of(view.buffer) : null;
      const keys: ArrayLike<ExpertKey> = dense ? dense.keys : q.candidates;
      const n = dense ? dense.count : q.candidates.length;
      let best = -1;
      for (let i = 0; i < n; i++) {
        const k = keys[i]!;
        if (own && view.layerOf(k) === target) continue;
        if (best < 0 || stamp[k]! < stamp[best]! || (stamp[k] === stamp[best] && k < best)) best = k;
      }
      return best < 0 ? undefined : best;
    },
  };
}

export const dependencyPrefetch = definePolicy({
  name: 'dependency-prefetch',
  family: 'serving',
  summary: 'DeepSpeed-style: prefetch the whole next MoE layer; no cache (release after use) or LRU cache',
  params: DependencyPrefetchParams,
  bufferSlots: (p, model) => lruSlots(p, model),
  create: (p) => createDependencyPrefetch('dependency-prefetch', p),
});
