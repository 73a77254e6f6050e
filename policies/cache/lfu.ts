/**
 * lfu — least-frequently-used expert cache, no prefetch.
 *
 * Reproduces: the LFU expert-cache baseline of MoEpic's cache study (RND / LRU / LFU / LCP at
 * 10–50 cached experts per layer) and the default policy of Pre-gated MoE's optional expert
 * "arena" cache; MoE-Infinity's 2025 on-demand dispatcher also evicts the lowest visit count.
 * Experts are fetched on demand after routing and kept after use; when a slot is needed the
 * resident expert with the fewest uses is evicted.
 *
 * Counts (`counts`): a *use* is one need — an (iteration, MoE layer) whose router activated the
 * expert, however many tokens it got.
 * - `since-start` (default): uses since the start of the run, kept across evictions ("perfect
 *   LFU"). This is what makes LFU useful for MoE: it captures the long-tail popularity of
 *   experts, which a count reset at every eviction forgets (a newly loaded expert would always be
 *   the first victim).
 * - `in-buffer`: uses since the expert last entered the buffer (classic in-cache LFU; the
 *   executor's `entry.uses`).
 * Ties: least recently used first (never used before used), then the lowest key.
 *
 * Capacity: the same parameters as `lru` — `capacitySlots` or `capacityBytes` (global), or
 * `perLayerSlots` (the buffer is partitioned by layer; a full layer evicts its own least-used
 * expert; see `policies/prefetch/victims.ts`). Without any, the executor's `bufferSlots`.
 *
 * When to use: against LRU when expert popularity is skewed and stable (long tail), and as a
 * component of frequency-based systems. Known gaps: Pre-gated MoE resets its counts when its
 * encoder-decoder model switches from encoder to decoder (no encoder-decoder models here); no
 * count ageing (MoEpic's LCP adds it).
 */
import { z } from 'zod';
import type { ExpertKey, ServingPolicy, ServingView } from '../../sim/serving/policy.ts';
import { firstBy, firstEvictableVictimBy, trimToCaps, type CapOf } from './victims.ts';
import { definePolicy } from '../types.ts';
import { LruParams, lruSlots } from './lru.ts';

export const LfuParams = LruParams.extend({
  counts: z.enum(['since-start', 'in-buffer']).default('since-start'),
}).strict();
export type LfuParams = z.infer<typeof LfuParams>;

export function createLfu(name: string, p: LfuParams): ServingPolicy {
  let counts = new Float64Array(0);
  const capOf: CapOf | undefined = p.perLayerSlots !== undefined ? () => p.perLayerSlots! : undefined;
  const countOf =
    p.counts === 'since-start'
      ? (_view: ServingView, k: ExpertKey) => counts[k] ?? 0
      : (view: ServingView, k: ExpertKey) => view.buffer.entry(k)?.uses ?? 0;
  const order = (view: ServingView) => (a: ExpertKey, b: ExpertKey) =>
    countOf(view, a) - countOf(view, b) ||
    (view.buffer.entry(a)?.lastUsedNs ?? -1) - (view.buffer.entry(b)?.lastUsedNs ?? -1) ||
    a - b;
  return {
    name,
    init(shape) {
      counts = new Float64Array(shape.moeLayers * shape.experts);
    },
    onLayerRouted(view, routing) {
      for (const e of routing.activated) counts[view.keyOf(routing.layer, e)]!++;
      if (!capOf) return;
      const cmp = order(view);
      return { evict: trimToCaps(view, capOf, (pool) => firstBy(pool, cmp)!) };
    },
    chooseVictim(view, q) {
      return firstEvictableVictimBy(view, q, capOf, order(view));
    },
  };
}

export const lfu = definePolicy({
  name: 'lfu',
  family: 'serving',
  summary:
    'LFU expert cache (uses since start or since entering the buffer; global or per-layer capacity), no prefetch',
  params: LfuParams,
  bufferSlots: (p, model) => lruSlots(p, model),
  create: (p) => createLfu('lfu', p),
});
