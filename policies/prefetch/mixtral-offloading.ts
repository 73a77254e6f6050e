/**
 * mixtral-offloading — per-layer LRU expert cache plus speculative prefetch of the next layer's
 * predicted experts (Eliseev & Mazur, "Fast Inference of Mixture-of-Experts Language Models
 * with Offloading", arXiv 2312.17238; dvmazur/mixtral-offloading).
 *
 * Cache (as in the released code, `src/expert_cache.py`): the buffer is partitioned by MoE layer,
 * each layer keeping at most `perLayerSlots` experts (default ⌊E/2⌋: 4 of Mixtral's 8, the
 * released demo's `offload_per_layer = 4`) in its own LRU order; a miss evicts the least recently
 * used expert of its own layer. The buffer is `perLayerSlots × moeLayers` slots. A layer can
 * exceed its cap only transiently: when a batch activates more experts than the cap, or when a
 * miss finds its layer's slots held by a mispredicted prefetch still in flight (the miss then
 * takes another layer's least recently used expert); the excess is trimmed (LRU first) at the
 * next routing.
 *
 * Speculative prefetch (`speculative`, default true) — from the tech report, NOT in the released
 * repository (its README lists "speculative expert prefetching" as future work; the repo only
 * loads the experts the router selected): after layer l routes, the top `prefetchK` (default
 * the model's top-k) experts that `view.predict(l+1)` ranks for the batch are prefetched into
 * layer l+1's partition (nearest rank first), each evicting that layer's least recently used
 * expert — never one of the predicted experts. Prefetched experts count as just used. There is
 * no prediction for the first MoE layer (no previous layer in the same forward pass). With no
 * predictor in the workload, no prefetch happens. `speculative: false` is the released code.
 *
 * When to use: the single-user, consumer-GPU setting it was built for (batch 1, Mixtral on a
 * 12–16 GB GPU). Known gaps: the released code swaps (each miss also copies the victim D2H into a
 * preallocated pinned host slot; here eviction is free because the host keeps every expert) and
 * pipelines at most `buffer_size − 1` swaps; HQQ 2/4-bit quantisation is a model-profile choice,
 * not part of this policy.
 */
import { z } from 'zod';
import { UserError } from '../../sim/kernel/errors.ts';
import type { ModelProfile } from '../../hardware-profiles/types.ts';
import type { ExpertKey, PrefetchRequest, ServingPolicy } from '../../sim/serving/policy.ts';
import { definePolicy } from '../types.ts';
import { firstBy, firstEvictableCappedVictimBy, firstEvictableVictimBy, trimToCaps } from '../cache/victims.ts';
import { lruSlots } from '../cache/lru.ts';

export const MixtralOffloadingParams = z
  .object({
    /** Experts each MoE layer keeps on the GPU (default ⌊experts / 2⌋, at least 1). */
    perLayerSlots: z.number().int().positive().optional(),
    /**
     * V_e, MoEpic's unified budget (§4.1: total cached experts across layers, the same for every
     * system of its Fig 7/8): each layer keeps ⌊V_e / moeLayers⌋ (rounded down: the remainder
     * V_e mod L is left unused, so the footprint never exceeds the budget); the buffer adds the
     * top-k staging slots (the paper's U_b = K). Exclusive with `perLayerSlots`.
     */
    budgetExperts: z.number().int().nonnegative().optional(),
    speculative: z.boolean().default(true),
    /** Predicted experts prefetched per layer (default: the model's top-k). */
    prefetchK: z.number().int().positive().optional(),
  })
  .strict();
export type MixtralOffloadingParams = z.infer<typeof MixtralOffloadingParams>;

export const defaultPerLayerSlots = (experts: number): number => Math.max(1, Math.floor(experts / 2));

/** Per-layer cache size: `perLayerSlots`, else ⌊budgetExperts / moeLayers⌋, else ⌊E/2⌋. */
export function mixtralOffloadingPerLayer(
  p: MixtralOffloadingParams,
  model: Pick<ModelProfile, 'moeLayers' | 'experts'>,
): number {
  if (p.budgetExperts === undefined) return p.perLayerSlots ?? defaultPerLayerSlots(model.experts);
  if (p.perLayerSlots !== undefined)
    throw new UserError(
      'mixtral-offloading takes either perLayerSlots or budgetExperts, not both',
      undefined,
      'budgetExperts',
      p.budgetExperts,
    );
  const per = Math.min(model.experts, Math.floor(p.budgetExperts / model.moeLayers));
  if (per < 1)
    throw new UserError(
      `mixtral-offloading needs at least one cached expert per MoE layer: budgetExperts ${p.budgetExperts} < ${model.moeLayers} layers`,
      undefined,
      'budgetExperts',
      p.budgetExperts,
    );
  return per;
}

export function createMixtralOffloading(
  name: string,
  p: MixtralOffloadingParams,
  experts: number,
  topK: number,
  moeLayers = 1,
): ServingPolicy {
  const cap = mixtralOffloadingPerLayer(p, { experts, moeLayers });
  const capOf = () => cap;
  const k = p.prefetchK ?? topK;
  let stamp = new Float64Array(0);
  let tick = 0;
  /** Predicted experts of the layer being prefetched: protected from the prefetches' evictions. */
  let predicted = new Set<ExpertKey>();
  const lruFirst = (a: ExpertKey, b: ExpertKey) => stamp[a]! - stamp[b]! || a - b;
  const isPredicted = (key: ExpertKey) => predicted.has(key);
  return {
    name,
    init(shape) {
      stamp = new Float64Array(shape.moeLayers * shape.experts);
    },
    onLayerRouted(view, routing) {
      const l = routing.layer;
      for (const e of routing.activated) stamp[view.keyOf(l, e)] = ++tick;
      const evict = trimToCaps(view, capOf, (pool) => firstBy(pool, lruFirst)!);
      const prefetch: PrefetchRequest[] = [];
      predicted = new Set();
      if (p.speculative && l + 1 < view.moeLayers) {
        view
          .predict(l + 1)
          .slice(0, k)
          .forEach((e, rank) => {
            const key = view.keyOf(l + 1, e);
            predicted.add(key);
            stamp[key] = ++tick;
            if (!view.buffer.has(key)) prefetch.push({ key, priority: 1 + rank });
          });
      }
      return { evict, prefetch };
    },
    chooseVictim(view, q) {
      if (q.reason === 'demand') return firstEvictableVictimBy(view, q, capOf, lruFirst);
      // A speculative load replaces the LRU expert of its own full layer (or one another layer
      // overshot), never a predicted one, and never pushes another layer below its cap.
      return firstEvictableCappedVictimBy(view, q, capOf, lruFirst, isPredicted);
    },
  };
}

export const mixtralOffloading = definePolicy({
  name: 'mixtral-offloading',
  family: 'serving',
  summary:
    'Mixtral-Offloading: per-layer LRU (default 4 of 8) + speculative prefetch of the predicted next-layer experts',
  params: MixtralOffloadingParams,
  // Per-layer caches plus top-k staging slots for a layer's misses (Mixtral-Offloading's buffer_size).
  bufferSlots: (p, model) => lruSlots({ perLayerSlots: mixtralOffloadingPerLayer(p, model) }, model),
  create: (p, ctx) =>
    createMixtralOffloading('mixtral-offloading', p, ctx.model.experts, ctx.model.topK, ctx.model.moeLayers),
});
