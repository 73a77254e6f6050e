/**
 * rnd — random-eviction expert cache, no prefetch.
 *
 * Reproduces: the RND cache baseline of MoEpic's cache study (and the classic random
 * replacement of the caching literature). Experts are fetched on demand after routing and kept
 * after use; when a slot is needed a uniformly random evictable expert is dropped.
 *
 * Randomness comes only from the policy's own stream (`ctx.rng`, `policy:<label>`), so a run is
 * deterministic for a seed and adding this policy perturbs nothing else.
 *
 * Capacity: the same parameters as `lru` — `capacitySlots` or `capacityBytes` (global), or
 * `perLayerSlots` (a full layer evicts a random expert of its own; see
 * `policies/prefetch/victims.ts`). Without any, the executor's `bufferSlots`.
 *
 * When to use: the floor any informed cache should beat; with uniform routing every policy
 * without future knowledge is about as good as it. Known gaps: none beyond the executor's.
 */
import { z } from 'zod';
import { UserError } from '../../sim/kernel/errors.ts';
import type { ExpertKey, ServingPolicy } from '../../sim/serving/policy.ts';
import type { Rng } from '../../sim/kernel/rng.ts';
import { trimToCaps, victimPool, type CapOf } from './victims.ts';
import { definePolicy } from '../types.ts';
import { LruParams, lruSlots } from './lru.ts';

export const RndParams = LruParams.extend({
  /**
   * `evict` (default): random replacement, as above. `static`: a fixed random set of
   * `perLayerSlots` experts per layer (drawn once from the policy stream) is cached — a miss
   * outside it is fetched, used and released — so the hit rate is ≈ the cached fraction C/N
   * whatever the routing (MoEpic's Table 1 "RND": "randomly selecting cached experts", whose
   * rates track C/60). Requires `perLayerSlots`.
   */
  mode: z.enum(['evict', 'static']).default('evict'),
}).strict();
export type RndParams = z.infer<typeof RndParams>;

export function createRnd(name: string, p: RndParams, rng: Rng): ServingPolicy {
  const capOf: CapOf | undefined = p.perLayerSlots !== undefined ? () => p.perLayerSlots! : undefined;
  const choose = (pool: readonly ExpertKey[]): ExpertKey => pool[rng.int(pool.length)]!;
  if (p.mode === 'static') {
    if (p.perLayerSlots === undefined)
      throw new UserError('rnd mode static needs perLayerSlots', undefined, 'mode', 'static');
    let cached = new Uint8Array(0);
    return {
      name,
      init(shape) {
        cached = new Uint8Array(shape.moeLayers * shape.experts);
        for (let l = 0; l < shape.moeLayers; l++) {
          const ids = Array.from({ length: shape.experts }, (_, e) => e);
          for (let i = 0; i < Math.min(p.perLayerSlots!, shape.experts); i++) {
            const j = i + rng.int(ids.length - i);
            [ids[i], ids[j]] = [ids[j]!, ids[i]!];
            cached[l * shape.experts + ids[i]!] = 1;
          }
        }
      },
      afterUse: (_view, key) => cached[key] === 1,
      chooseVictim(view, q) {
        const pool = q.candidates.filter((c) => cached[c] !== 1);
        return pool.length > 0
          ? pool[0]
          : q.reason === 'demand'
            ? choose(victimPool(view, q.candidates, q.forKey, capOf))
            : undefined;
      },
    };
  }
  return {
    name,
    onLayerRouted(view) {
      if (capOf) return { evict: trimToCaps(view, capOf, choose) };
    },
    chooseVictim(view, q) {
      const pool = victimPool(view, q.candidates, q.forKey, capOf);
      return pool.length > 0 ? choose(pool) : undefined;
    },
  };
}

export const rnd = definePolicy({
  name: 'rnd',
  family: 'serving',
  summary: 'random-eviction expert cache (global or per-layer capacity; seeded policy stream), no prefetch',
  params: RndParams,
  bufferSlots: (p, model) => lruSlots(p, model),
  create: (p, ctx) => createRnd('rnd', p, ctx.rng),
});
