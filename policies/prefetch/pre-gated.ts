/**
 * pre-gated — Pre-gated MoE (Hwang et al., ISCA'24; ranggihwang/Pregated_MoE, `PREFETCH` mode):
 * the gate computed in block l selects the experts of block l+1, whose fetch is issued at once
 * and overlaps block l's expert compute; no expert cache (experts are released after use).
 *
 * Here the pre-gate is the workload's predictor: after MoE layer l routes, the top `prefetchK`
 * (default the model's top-k) experts `view.predict(l+1)` ranks for the batch are prefetched,
 * in rank order. The first MoE layer of each iteration fetches on demand with its own routing
 * (the released code's `first_time`). A predicted expert the router then does not activate is
 * released when its layer routes (cancelled if still loading: its bytes are not needed); a
 * true expert that was not predicted is fetched on demand and the GPU waits.
 *
 * Buffer: `capacitySlots` (default the executor's `bufferSlots`); the released code double-
 * buffers, 2 × max active experts — `capacitySlots: 2 × topK` reproduces that footprint for
 * batch-1 decoding (a bigger batch activates more experts per layer and then waits for slots).
 *
 * When to use: the minimal-memory speculative baseline. Known gaps: in the original, the
 * pre-gate *is* the routing (fine-tuned), so it is never wrong and costs accuracy instead; here
 * prediction accuracy is the predictor's profile, and mispredictions cost on-demand fetches.
 * The optional LFU/LRU "arena" cache (`use_cache`, off by default) is not modelled (use `lfu`
 * for a cache study); Switch-Transformer encoder-decoder specifics are absent.
 */
import { z } from 'zod';
import type { ExpertKey, PrefetchRequest, ServingPolicy } from '../../sim/serving/policy.ts';
import { definePolicy } from '../types.ts';

export const PreGatedParams = z
  .object({
    /** Predicted experts prefetched per layer (default: the model's top-k). */
    prefetchK: z.number().int().positive().optional(),
    capacitySlots: z.number().int().positive().optional(),
    /**
     * V_e, MoEpic's unified budget (§4.1): accepted so one sweep sizes every system, but
     * Pre-gated caches nothing, so it only fixes the buffer at the released code's double buffer
     * (2 × top-k, unless `capacitySlots` is given): flat in the budget, as the paper's Fig 7.
     */
    budgetExperts: z.number().int().nonnegative().optional(),
  })
  .strict();
export type PreGatedParams = z.infer<typeof PreGatedParams>;

/**
 * What a pre-gated run's simulation reads of its parameters: `budgetExperts` only through whether
 * it is given (`bufferSlots` below: 2 × top-k whatever its value; `createPreGated` never reads it).
 * Runs whose parameters map to the same value simulate the same (`moesim reproduce` shares them).
 */
export const preGatedSimulatedParams = (p: PreGatedParams): unknown =>
  p.budgetExperts === undefined ? p : { ...p, budgetExperts: 'given' };

export function createPreGated(name: string, p: PreGatedParams, topK: number): ServingPolicy {
  const k = p.prefetchK ?? topK;
  return {
    name,
    onLayerRouted(view, routing) {
      const l = routing.layer;
      // No cache: everything not being computed is released, except what was prefetched for later layers.
      const evict: ExpertKey[] = [];
      const cancel: ExpertKey[] = [];
      for (const ent of view.buffer.entries()) {
        if (ent.pinned || view.layerOf(ent.key) > l) continue;
        (ent.state === 'resident' ? evict : cancel).push(ent.key);
      }
      const prefetch: PrefetchRequest[] = [];
      if (l + 1 < view.moeLayers) {
        view
          .predict(l + 1)
          .slice(0, k)
          .forEach((e, rank) => prefetch.push({ key: view.keyOf(l + 1, e), priority: 1 + rank }));
      }
      return { evict, cancel, prefetch };
    },
    afterUse: () => false,
    onPrefetchDone(view, key) {
      // Landed after its layer routed without it (stale from an earlier iteration's plan, or a race).
      if (view.layer >= 0 && view.layerOf(key) <= view.layer) return { evict: [key] };
    },
    chooseVictim(view, q) {
      // Only stale experts (of layers already routed in this iteration) are worth evicting for a
      // prefetch; a demand fetch takes any slot, stale ones first.
      const stale = q.candidates.filter((c) => view.layerOf(c) <= view.layer);
      if (stale.length > 0) return stale[0];
      return q.reason === 'demand' ? q.candidates[0] : undefined;
    },
  };
}

export const preGated = definePolicy({
  name: 'pre-gated',
  family: 'serving',
  summary: 'Pre-gated MoE: prefetch the predicted experts of the next layer, no cache (release after use)',
  params: PreGatedParams,
  bufferSlots: (p, model) => p.capacitySlots ?? (p.budgetExperts !== undefined ? 2 * model.topK : undefined),
  create: (p, ctx) => createPreGated('pre-gated', p, ctx.model.topK),
});
