/**
 * flash-moe — the three-tier expert cache of danveloper/flash-moe's CUDA port (ssubbotin, PR #7;
 * `paper/flash_moe_cuda_arxiv.tex` §3.2–3.3): VRAM slots → the OS page cache → NVMe.
 *
 * An activated expert missing from VRAM is fetched on demand into a slot; the fetch reads its
 * file through the page cache (a `pread()`: a hit in host DRAM, else an NVMe read) before the
 * copy to VRAM. No prefetch (the paper found 0.8 % cross-layer correlation). When a slot is
 * needed the victim is the resident expert with the lowest frequency-weighted LRU score
 *   score = uses × W + last use,
 * with `last use` a clock that ticks once per expert access (the paper's "each access is worth
 * W clock ticks of recency", W = 10). W = 0 is pure LRU.
 *
 * Capacity: `capacityGB` (10^9 B, converted to whole slots) or `executor.bufferSlots`. The SSD
 * tier's page cache and read parallelism are `ssd` (policies/engine/ssd-params.ts).
 */
import { z } from 'zod';
import type { ExpertKey, ServingPolicy } from '../../sim/serving/policy.ts';
import { definePolicy } from '../types.ts';
import { SsdParams, ssdSpec } from './ssd-params.ts';

export const FlashMoeParams = z
  .object({
    /** Frequency weight W (paper default 10). */
    weight: z.number().nonnegative().default(10),
    capacityGB: z.number().positive().optional(),
    ssd: SsdParams.default(SsdParams.parse({})),
  })
  .strict();
export type FlashMoeParams = z.infer<typeof FlashMoeParams>;

/** Pure: the index of the lowest score uses × W + last among `candidates` (first on ties). */
export function lowestScore(
  candidates: readonly ExpertKey[],
  uses: ArrayLike<number>,
  last: ArrayLike<number>,
  w: number,
): ExpertKey {
  let best = candidates[0]!;
  let bestScore = Number.POSITIVE_INFINITY;
  for (const k of candidates) {
    const s = (uses[k] ?? 0) * w + (last[k] ?? 0);
    if (s < bestScore) {
      best = k;
      bestScore = s;
    }
  }
  return best;
}

export const flashMoe = definePolicy({
  name: 'flash-moe',
  family: 'serving',
  summary: 'three tiers (VRAM slots, OS page cache, NVMe) with a frequency-weighted LRU (flash-moe)',
  params: FlashMoeParams,
  bufferSlots: (p, model) =>
    p.capacityGB === undefined
      ? undefined
      : Math.max(1, Math.floor((p.capacityGB * 1e9) / model.derived.bytesPerExpert)),
  create: (p, ctx): ServingPolicy => {
    const keys = ctx.model.moeLayers * ctx.model.experts;
    const uses = new Float64Array(keys);
    const last = new Float64Array(keys);
    let clock = 0;
    return {
      name: 'flash-moe',
      ssdTier: ssdSpec(p.ssd),
      onLayerRouted: (view, routing) => {
        for (const e of routing.activated) {
          const k = view.keyOf(routing.layer, e);
          uses[k] = (uses[k] ?? 0) + 1;
          last[k] = ++clock;
        }
      },
      chooseVictim: (_view, q) => lowestScore(q.candidates, uses, last, p.weight),
    };
  },
});
