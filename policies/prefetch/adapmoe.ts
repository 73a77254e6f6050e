/**
 * adapmoe — AdapMoE (Zhong et al., ICCAD'24; PKU-SEC-Lab/AdapMoE): speculative prefetch of one
 * predicted next-layer expert plus per-layer LRU caches whose sizes are chosen adaptively.
 *
 * From the released code (reference facts §1d):
 * - Prefetch: at layer l, in decoding (`decodeOnly`, default true), the next layer's predicted
 *   top `predictTop` experts (default the model's top-k; the code applies layer l+1's gate to
 *   layer l's hidden state and takes its top-2) are examined and the first `maxPrefetch`
 *   (default 1: exactly one) that are not in the buffer are prefetched into a spare slot
 *   (`spareSlots`, default 1). A prefetched expert the next layer does not select is released
 *   (cancelled if still loading); if selected, it joins the layer's cache, evicting that layer's
 *   least recently used expert. A prefetch never evicts a cached expert (no spare slot: no
 *   prefetch). Predictions come from `view.predict`.
 * - Cache: per-layer LRU, layer l keeping s_l experts, Σ s_l = `totalSlots` (default top-k ×
 *   MoE layers: AdapMoE's `--size 64` for Mixtral's 32 layers × top-2), s_l ≥ 1. The buffer is
 *   `totalSlots + spareSlots` slots.
 * - Sizes: AdapMoE's DP (`adapmoe-allocator.ts`), minimising the expected on-demand loads
 *   Σ f(l, s_l). Simplification: instead of uniform-routing combinatorics with hard-coded Mixtral
 *   accuracies, f is estimated online from each layer's observed LRU miss curve (stack
 *   distances) and observed prediction accuracy, and the DP is re-run every
 *   `reallocateEveryIterations` iterations (AdapMoE runs it once, offline). Sizes start equal
 *   (the remainder to the first layers); `adaptive: false` keeps them equal (ablation).
 *
 * When to use: single-user decoding on a small GPU, as AdapMoE evaluates it. Known gaps:
 * adaptive gating (dropping the second expert when its weight is below a per-layer threshold)
 * changes the model's routing and is not modelled; the cache starts empty (AdapMoE preloads the
 * experts with index ≥ E − s_l); the released code's swap semantics (victim copied D2H) and HQQ
 * 2-bit experts are not part of this policy (see mixtral-offloading).
 */
import { z } from 'zod';
import { UserError } from '../../sim/kernel/errors.ts';
import type { ExpertKey, PrefetchRequest, ServingPolicy, ServingView } from '../../sim/serving/policy.ts';
import { definePolicy } from '../types.ts';
import { allocateSlots, equalSlots, LayerStats } from './adapmoe-allocator.ts';
import { firstBy, firstEvictableVictimBy, trimToCaps } from '../cache/victims.ts';

export const AdapMoeParams = z
  .object({
    /** Σ of the per-layer cache sizes (default top-k × MoE layers); at least one per layer. */
    totalSlots: z.number().int().positive().optional(),
    /**
     * V_e, MoEpic's unified budget (§4.1: total cached experts across layers, the same for every
     * system of its Fig 7/8): Σ s_l = V_e (the DP's total, each layer ≥ 1), and the spare slots
     * default to the paper's K-expert buffer U_b (top-k) instead of 1. Exclusive with `totalSlots`.
     */
    budgetExperts: z.number().int().nonnegative().optional(),
    /** Free slots beside the caches for the prefetch (and staging of misses): default 1, or top-k with `budgetExperts`. */
    spareSlots: z.number().int().nonnegative().optional(),
    predictTop: z.number().int().positive().optional(),
    maxPrefetch: z.number().int().nonnegative().default(1),
    decodeOnly: z.boolean().default(true),
    adaptive: z.boolean().default(true),
    reallocateEveryIterations: z.number().int().positive().default(16),
  })
  .strict();
export type AdapMoeParams = z.infer<typeof AdapMoeParams>;

const totalOf = (p: AdapMoeParams, moeLayers: number, topK: number): number => {
  if (p.budgetExperts !== undefined && p.totalSlots !== undefined)
    throw new UserError(
      'adapmoe takes either totalSlots or budgetExperts, not both',
      undefined,
      'budgetExperts',
      p.budgetExperts,
    );
  const field = p.budgetExperts !== undefined ? 'budgetExperts' : 'totalSlots';
  const total = p.budgetExperts ?? p.totalSlots ?? topK * moeLayers;
  if (total < moeLayers)
    throw new UserError(`adapmoe needs at least one cache slot per MoE layer (${moeLayers})`, undefined, field, total);
  return total;
};

/** Spare slots: `spareSlots`, else top-k (the paper's U_b) with `budgetExperts`, else 1 (AdapMoE's one prefetch slot). */
export const adapMoeSpare = (p: AdapMoeParams, topK: number): number =>
  p.spareSlots ?? (p.budgetExperts !== undefined ? topK : 1);

export interface AdapMoePolicy extends ServingPolicy {
  /** Current per-layer cache sizes (read-only view for tests and reports). */
  readonly sizes: () => Int32Array;
  readonly stats: LayerStats;
}

export function createAdapMoe(
  name: string,
  p: AdapMoeParams,
  moeLayers: number,
  experts: number,
  topK: number,
): AdapMoePolicy {
  const total = totalOf(p, moeLayers, topK);
  const top = p.predictTop ?? topK;
  const stats = new LayerStats(moeLayers, experts);
  let sizes = equalSlots(moeLayers, total, experts);
  const capOf = (l: number) => sizes[l]!;
  const stamp = new Float64Array(moeLayers * experts);
  let tick = 0;
  let iterations = 0;
  /** Per layer: the list predicted for it one layer earlier in this iteration, or null. */
  const predictedFor: (readonly number[] | null)[] = new Array<readonly number[] | null>(moeLayers).fill(null);
  /** Unused prefetched experts go first, then least recently used, then lowest key. */
  const order = (view: ServingView) => (a: ExpertKey, b: ExpertKey) => {
    const pa = view.buffer.entry(a)?.origin === 'prefetch' ? 0 : 1;
    const pb = view.buffer.entry(b)?.origin === 'prefetch' ? 0 : 1;
    return pa - pb || stamp[a]! - stamp[b]! || a - b;
  };
  return {
    name,
    sizes: () => sizes,
    stats,
    onIterationStart() {
      predictedFor.fill(null);
    },
    onLayerRouted(view, routing) {
      const l = routing.layer;
      stats.observe(l, routing.activated, predictedFor[l] ?? null);
      for (const e of routing.activated) stamp[view.keyOf(l, e)] = ++tick;
      // A prefetch the layer did not select is released (an activated one is pinned). The loading
      // entries are the buffer's entries in the same order with the resident ones left out.
      const cancel: ExpertKey[] = [];
      for (const ent of view.buffer.loadingEntries?.() ?? view.buffer.entries()) {
        if (ent.state === 'loading' && !ent.pinned && ent.origin === 'prefetch' && view.layerOf(ent.key) <= l)
          cancel.push(ent.key);
      }
      const cmp = order(view);
      const evict = trimToCaps(view, capOf, (pool) => firstBy(pool, cmp)!);
      const prefetch: PrefetchRequest[] = [];
      const next = l + 1;
      if (next < view.moeLayers && (!p.decodeOnly || view.batch.every((r) => r.phase === 'decode'))) {
        const predicted = view.predict(next).slice(0, top);
        predictedFor[next] = predicted;
        for (const e of predicted) {
          if (prefetch.length >= p.maxPrefetch) break;
          const key = view.keyOf(next, e);
          if (!view.buffer.has(key)) prefetch.push({ key, priority: 1 + prefetch.length });
        }
      }
      return { cancel, evict, prefetch };
    },
    afterUse: () => true,
    onPrefetchDone(view, key) {
      // Landed after its layer routed without selecting it: release the spare slot.
      if (view.layer >= 0 && view.layerOf(key) <= view.layer) return { evict: [key] };
    },
    chooseVictim(view, q) {
      // Prefetches only use free (spare) slots: they never evict a cached expert.
      if (q.reason === 'prefetch') return undefined;
      return firstEvictableVictimBy(view, q, capOf, order(view));
    },
    onIterationEnd(view) {
      iterations++;
      if (!p.adaptive || iterations % p.reallocateEveryIterations !== 0) return;
      sizes = allocateSlots(
        Array.from({ length: moeLayers }, (_, l) => stats.cost(l)),
        total,
        1,
        experts,
      );
      const cmp = order(view);
      return { evict: trimToCaps(view, capOf, (pool) => firstBy(pool, cmp)!) };
    },
  };
}

export const adapMoe = definePolicy({
  name: 'adapmoe',
  family: 'serving',
  summary:
    'AdapMoE: one speculative next-layer prefetch + per-layer LRU with DP-allocated sizes from online statistics',
  params: AdapMoeParams,
  bufferSlots: (p, model) => totalOf(p, model.moeLayers, model.topK) + adapMoeSpare(p, model.topK),
  create: (p, ctx) => createAdapMoe('adapmoe', p, ctx.model.moeLayers, ctx.model.experts, ctx.model.topK),
});
