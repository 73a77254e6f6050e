/**
 * model-tracing — model-level activation tracing (BrainStorm / DeepUM style): prefetch and
 * cache experts by how often they have been activated, over all requests since the start.
 *
 * Reproduces: the "model-level tracing" baseline of MoE-Infinity (§6): one L × E table of
 * activation counts accumulated over every request (no per-request context — that is what
 * MoE-Infinity's request-level EAMs add), used both to prefetch and as cache priority.
 * - Counts: after each routed layer, `countBy: 'tokens'` (default) adds the tokens routed to
 *   each expert; `'needs'` adds 1 per activated expert.
 * - Prefetch: after layer l routes (and at the iteration start, for layers 0 .. horizon−1), for
 *   each layer l+1 .. l+`horizon` the `prefetchPerLayer` experts with the highest counts (never
 *   one with count 0; ties: lowest expert), nearest layer first, then by rank.
 * - Cancel: a loading prefetch is cancelled (no further bytes move, its slot is freed) once it
 *   is found unnecessary — its layer has routed without activating it, or it fell out of the
 *   ranking of the layers still ahead.
 * - Cache: experts are kept after use; the victim is the lowest count (ties: least recently
 *   used, then lowest key), preferring experts not in the current prefetch plan; a prefetch
 *   never evicts an expert whose count is at least its own (it is dropped instead).
 * Capacity: `capacitySlots` or `capacityBytes` sets the expert buffer; else the executor's.
 *
 * When to use: the frequency-based baseline for prefetching studies; strong when expert
 * popularity is skewed and stable, weak when requests differ (task clusters, workload shifts),
 * where request-level tracing wins. Known gaps: BrainStorm/DeepUM trace at operator / page
 * granularity in their own runtimes; no count decay; prefetches do not wrap around from the
 * last layer to the next iteration's first layers (those are issued at the iteration start).
 */
import { z } from 'zod';
import type { ExpertKey, PrefetchRequest, ServingPolicy, ServingView } from '../../sim/serving/policy.ts';
import { lruSlots } from '../cache/lru.ts';
import { definePolicy } from '../types.ts';

export const ModelTracingParams = z
  .object({
    /** Layers ahead to prefetch (1: the next MoE layer only). */
    horizon: z.number().int().positive().default(1),
    /** Experts prefetched per layer (default: the model's top-k). */
    prefetchPerLayer: z.number().int().positive().optional(),
    countBy: z.enum(['tokens', 'needs']).default('tokens'),
    capacitySlots: z.number().int().positive().optional(),
    capacityBytes: z.number().int().positive().optional(),
  })
  .strict();
export type ModelTracingParams = z.infer<typeof ModelTracingParams>;

export interface ModelTracingPolicy extends ServingPolicy {
  /** Activation counts per key (layer × experts + expert), read-only for tests and reports. */
  readonly counts: () => Float64Array;
}

export function createModelTracing(name: string, p: ModelTracingParams, topK: number): ModelTracingPolicy {
  const budget = p.prefetchPerLayer ?? topK;
  let counts = new Float64Array(0);
  /** Keys of the current prefetch plan (the ranking of the layers ahead). */
  const planned = new Set<ExpertKey>();

  /** Top `budget` experts of `layer` by count (count > 0), best first. */
  const ranking = (view: ServingView, layer: number): ExpertKey[] =>
    topByCount(counts, layer * view.experts, view.experts, budget);

  /** Plan layers [from, from + horizon), cancel loading prefetches that are no longer needed. */
  const plan = (view: ServingView, from: number, routedUpTo: number) => {
    planned.clear();
    const prefetch: PrefetchRequest[] = [];
    for (let d = 0; d < p.horizon && from + d < view.moeLayers; d++) {
      const ranked = ranking(view, from + d);
      for (let rank = 0; rank < ranked.length; rank++) {
        const key = ranked[rank]!;
        planned.add(key);
        if (!view.buffer.isResident(key)) prefetch.push({ key, priority: 1 + d * budget + rank });
      }
    }
    const cancel: ExpertKey[] = [];
    // The loading entries (in the buffer's order: the same cancellations, in the same order).
    for (const ent of view.buffer.loadingEntries?.() ?? view.buffer.entries()) {
      if (ent.state !== 'loading' || ent.pinned || ent.origin !== 'prefetch') continue;
      // Its layer has routed without it (an activated one would be pinned), or it left the ranking.
      if (view.layerOf(ent.key) <= routedUpTo || !planned.has(ent.key)) cancel.push(ent.key);
    }
    return { cancel, prefetch };
  };

  return {
    name,
    counts: () => counts,
    init(shape) {
      counts = new Float64Array(shape.moeLayers * shape.experts);
    },
    onIterationStart(view) {
      return plan(view, view.firstLayer, view.firstLayer - 1);
    },
    onLayerRouted(view, routing) {
      const base = routing.layer * view.experts;
      for (const e of routing.activated) counts[base + e]! += p.countBy === 'tokens' ? routing.tokensPerExpert[e]! : 1;
      return plan(view, routing.layer + 1, routing.layer);
    },
    chooseVictim(view, q) {
      // One pass, nothing allocated: the first candidate by lowest count, then least recently
      // used, then lowest key, among the unplanned ones and among all (last uses read on ties only).
      const buffer = view.buffer;
      let all: ExpertKey | undefined;
      let unplanned: ExpertKey | undefined;
      for (const k of q.candidates) {
        if (all === undefined || evictsBefore(counts, buffer, k, all)) all = k;
        if (!planned.has(k) && (unplanned === undefined || evictsBefore(counts, buffer, k, unplanned))) unplanned = k;
      }
      if (q.reason === 'prefetch')
        return unplanned !== undefined && counts[unplanned]! < counts[q.forKey]! ? unplanned : undefined;
      return unplanned ?? all;
    },
  };
}

/** Whether `a` is evicted before `b`: lower count, then least recently used, then lower key. */
function evictsBefore(counts: Float64Array, buffer: ServingView['buffer'], a: ExpertKey, b: ExpertKey): boolean {
  const d = counts[a]! - counts[b]!;
  if (d !== 0) return d < 0;
  const du = (buffer.entry(a)?.lastUsedNs ?? -1) - (buffer.entry(b)?.lastUsedNs ?? -1);
  return du !== 0 ? du < 0 : a < b;
}

/**
 * The best `budget` keys of [base, base + experts) by count (count > 0), best first, kept in
 * order by insertion (budget is a few, experts up to hundreds): keys grow along the scan, so a
 * later key tied with a kept one ranks after it (a lower key is a lower expert).
 */
function topByCount(counts: Float64Array, base: number, experts: number, budget: number): ExpertKey[] {
  const keys: number[] = [];
  for (let k = base; k < base + experts; k++) {
    const c = counts[k]!;
    if (!(c > 0)) continue;
    if (keys.length === budget && !(c > counts[keys[budget - 1]!]!)) continue;
    let i = keys.length === budget ? budget - 1 : keys.length;
    while (i > 0 && c > counts[keys[i - 1]!]!) {
      keys[i] = keys[i - 1]!;
      i--;
    }
    keys[i] = k;
  }
  return keys;
}

export const modelTracing = definePolicy({
  name: 'model-tracing',
  family: 'serving',
  summary:
    'BrainStorm/DeepUM-style: prefetch and cache by activation counts since start; cancels unnecessary prefetches',
  params: ModelTracingParams,
  bufferSlots: (p, model) => lruSlots(p, model),
  create: (p, ctx) => createModelTracing('model-tracing', p, ctx.model.topK),
});
