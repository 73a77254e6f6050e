/**
 * oracle-prefetch — the oracle prefetcher: it knows the run's future expert needs and
 * prefetches them in need order into free slots, never wasting a byte. It is the upper bound
 * of prefetching (up to the gaps below), as `belady` is the upper bound of caching.
 *
 * The future it knows: the same record-and-replay as `belady` (`oracle: 'needs'`). The world
 * builder first runs the same run spec with `on-demand` and records every (iteration, MoE
 * layer, activated experts); that `NeedTrace` comes as `ctx.oracle`. Needs are numbered in
 * execution order: steps (iteration, then MoE layer), and within a step ascending expert.
 *
 * Caching disabled (`executor.releaseAfterUse: true`, MoE-Infinity's prefetch experiments):
 * the prefetch-only bound. The executor releases every expert after use, so every need is one
 * load. At every hook where slots may have become free (iteration start, layer routed, layer
 * done, prefetch done, iteration end) it scans the needs after the current step in order, each
 * expert once, at its first need in the scan:
 * - present in the buffer (resident or loading): nothing to do — it serves that need, or (an
 *   expert the current layer is using) it is released after use and its next need is loaded
 *   after that release, at a later hook;
 * - absent: prefetch it into a free slot, at priority 1 + its need's number, so the H2D queue
 *   serves needs in order (a later issue of an earlier need overtakes at a packet boundary);
 * - no free slot: stop (the rest is needed later than everything in the buffer). A resident
 *   prefetch needed later than this need would be evicted for it (Belady-style, never one
 *   needed sooner), but with an exact recording that never happens.
 * Nothing is prefetched while an expert of the current layer waits for a slot (it comes first).
 *
 * Caching enabled (the executor keeps what `afterUse` keeps: an expert needed again): the
 * bound of prefetching + caching, two modes (`caching`):
 * - `conservative` (default): Cao, Felten, Karlin and Li's "conservative" integrated
 *   prefetching and caching (SIGMETRICS'95). Belady's MIN is computed over the recording (the
 *   fewest possible fetches: every fetch with its victim, the expert needed furthest in the
 *   future; ties, e.g. several never needed again, the one whose last use is earliest), and
 *   each of MIN's fetches is issued as soon as its victim's last use before it is over (or a
 *   free slot exists), in place of that victim, at its need-number priority. It moves exactly
 *   belady's bytes and keeps belady's cache hits; every fetch only starts earlier, so it blocks
 *   no longer than belady (property-tested), and with the link as bottleneck (the usual case
 *   for offloading) fewer fetches is what matters most.
 * - `aggressive`: their "aggressive" rule — the need-order scan above, where with no free slot
 *   the resident expert needed furthest is evicted if that is after the need. It prefetches
 *   further ahead at the price of extra fetches: better when compute hides loads, worse when
 *   the link is the bottleneck (cache.yaml's Mixtral case, 39 slots: no cache hits left,
 *   every need fetched, more blocking than belady).
 * Neither is optimal for stall time (Cao et al. bound each within a small factor of the
 * optimum). MIN's model needs every layer's experts to fit the buffer at once; a layer needing
 * more experts than slots (a big batch, few slots) streams them through the buffer in expert
 * order, which experts stay depends on that order, and those fetches are left to the
 * executor's on-demand path (`stats.overflow`).
 * The executor's mode is not visible to a policy: it is detected at the first expert `afterUse`
 * keeps (still in the buffer at the next hook ⇔ caching). Until then both modes agree: fill
 * free slots in need order.
 * After use an expert is kept iff it is needed again; demand fetches (a layer needing more
 * experts than slots, or a wrong recording) evict the furthest next use (`chooseVictim`).
 *
 * Why the prefetch-only rule is a bound, and where it is not one. With caching disabled every
 * need is one load of one expert's bytes (the same bytes as on-demand), all loads share one
 * serial link, and a load holds its slot from its issue until its use ends. Exchange argument:
 * two loads taken out of need order can swap link intervals with no use delayed and the same
 * slot occupancy, so loading in need order, each as early as link and slots allow, minimises
 * every need's arrival time, and with it the GPU's blocked time. The greedy above is that
 * schedule except for three gaps (the first two worked out in test/unit/oracle-prefetch.test.ts,
 * "known gaps"):
 * - Within a layer the recording carries no tokens per expert (compute time), so a layer's
 *   experts load in expert order. Their best order is Johnson's rule for a two-stage flow shop
 *   (link, then GPU): longest computation first. A policy that happens to load a layer in a
 *   better order blocks less. The gap vanishes when a layer's experts compute equally long
 *   (batch-1 decode: one token each).
 * - The executor has no hook when it releases an expert after use, so a slot freed mid-layer
 *   is refilled only at the next hook (layer done, or an unpinned prefetch landing). Every
 *   policy has the same hooks.
 * - A later need issued while an earlier need's expert is still present (it can be loaded
 *   again only after the use that releases it) may delay that earlier load by one packet,
 *   the link's overtaking granularity.
 * So it is a bound up to those gaps, not a theorem; the property test (test/property/oracle-
 * prefetch.test.ts: random small worlds, offline arrivals, static batching, caching disabled)
 * checks that its blocked time never exceeds any built-in serving policy's, and that it wastes
 * nothing (precision 1, zero wasted bytes, one load per need).
 *
 * Exactness: the recording is the run's true future when needs do not depend on timing —
 * offline arrivals (all at t = 0) with static batching (or static batching so overloaded that
 * every batch is full). Otherwise (Poisson or bursty arrivals, continuous batching) the run's
 * needs may differ from the recording and it is a heuristic with an approximately known
 * future: at every hook it re-synchronises on the live (iteration, layer) (the first recorded
 * step after it; `stats` counts routed layers that matched the recording), wrong prefetches
 * are used late or wasted (counted), missing experts are fetched on demand, and after a
 * mismatched layer its unactivated experts that the recording never needs again are dropped
 * (cancelled if still loading).
 *
 * Simplified: the future is the need sequence only (no token counts, no timing); need order is
 * fixed (expert order within a layer); priorities are need numbers, so an earlier need issued
 * later overtakes at a packet boundary; it acts only at the executor's hooks.
 *
 * Capacity: `capacitySlots` or `capacityBytes` sets the expert buffer; else the executor's.
 */
import { z } from 'zod';
import type {
  ExpertKey,
  PolicyDecision,
  PrefetchRequest,
  ServingPolicy,
  ServingView,
} from '../../sim/serving/policy.ts';
import { lruSlots } from '../cache/lru.ts';
import { definePolicy, type NeedTrace } from '../types.ts';
import { NeedIndex } from './belady.ts';
import { type MinPlan, minPlan } from './min-plan.ts';

export const OraclePrefetchParams = z
  .object({
    /**
     * With caching (no `releaseAfterUse`): `conservative` (default) fetches exactly what Belady's
     * MIN fetches, each as early as its victim allows; `aggressive` fetches the next missing need
     * whenever a resident expert is needed later than it.
     */
    caching: z.enum(['conservative', 'aggressive']).default('conservative'),
    capacitySlots: z.number().int().positive().optional(),
    capacityBytes: z.number().int().positive().optional(),
  })
  .strict();
export type OraclePrefetchParams = z.infer<typeof OraclePrefetchParams>;

export interface OraclePrefetchStats {
  /** Routed layers seen, and how many matched the recorded step at the same (iteration, layer). */
  routed: number;
  matched: number;
  /** What the executor does with a kept expert, once seen: 'release' (releaseAfterUse) or 'cache'. */
  mode: 'unknown' | 'release' | 'cache';
  /** Conservative caching: fetches in the MIN plan, and those of them left to the executor's on-demand fetches (a layer needing more experts than slots). */
  planned: number;
  overflow: number;
}

export interface OraclePrefetchPolicy extends ServingPolicy {
  readonly stats: Readonly<OraclePrefetchStats>;
}

export { minPlan, type MinPlan } from './min-plan.ts';

export function createOraclePrefetch(
  name: string,
  trace: NeedTrace,
  experts: number,
  moeLayers: number,
  caching: OraclePrefetchParams['caching'] = 'conservative',
): OraclePrefetchPolicy {
  const keys = moeLayers * experts;
  const index = new NeedIndex(trace, experts, keys);
  const steps = trace.steps;
  const n = steps.length;
  /** Need number of the first expert of each step (priority = 1 + need number). */
  const firstNeed = new Float64Array(n + 1);
  for (let i = 0; i < n; i++) firstNeed[i + 1] = firstNeed[i]! + steps[i]!.experts.length;
  const priorityOf = (pos: number, key: ExpertKey): number => {
    const ex = steps[pos]!.experts;
    return 1 + firstNeed[pos]! + Math.max(0, ex.indexOf(key % experts));
  };
  /** Distinct experts needed at or after each step: a scan that has looked at that many can stop. */
  const distinctFrom = new Int32Array(n + 1);
  {
    const seen = new Uint8Array(keys);
    let count = 0;
    for (let i = n - 1; i >= 0; i--) {
      const s = steps[i]!;
      for (const e of s.experts) {
        const k = s.layer * experts + e;
        if (!seen[k]) {
          seen[k] = 1;
          count++;
        }
      }
      distinctFrom[i] = count;
    }
  }
  const stats: OraclePrefetchStats = { routed: 0, matched: 0, mode: 'unknown', planned: 0, overflow: 0 };
  /** Scan marks: mark[key] === epoch when the current scan has looked at key. */
  const mark = new Int32Array(keys);
  let epoch = 0;
  /** Experts of the current routed layer not computed yet. */
  const pending = new Set<ExpertKey>();
  let cursor = 0;
  /**
   * Set when the need-order scan could decide something new: a slot freed outside a hook
   * (release after use, a demand eviction), a use (next uses moved), a divergence, the mode
   * found. Otherwise a later scan repeats the last one: needs are absolute positions, and a
   * start further on only skips needs already served.
   */
  let dirty = true;
  /** Where the last scan ran out of slots and victims (+∞: it did not). */
  let lastStopPos = Infinity;
  /** An expert `afterUse` asked to keep: still in the buffer at the next hook ⇔ the executor caches. */
  let probe = -1;
  let plan: MinPlan | null = null;
  let planNext = 0;
  /** Plan entries whose victim's last use is over (or that need a free slot), not issued yet, in need order. */
  let ready: number[] = [];

  /** The step of the live (iteration, layer), by the cursor (advanced by one in the common case) or a search. */
  const stepOf = (iteration: number, layer: number): number => {
    if (index.isAt(cursor, iteration, layer)) return cursor;
    if (index.isAt(cursor + 1, iteration, layer)) return ++cursor;
    cursor = index.lowerBound(iteration, layer);
    return cursor;
  };
  /** First step after the current one (between iterations: the next iteration's first step). */
  const startOf = (view: ServingView): number => {
    if (view.layer < 0) return index.lowerBound(view.iteration, 0);
    const cur = stepOf(view.iteration, view.layer);
    return index.isAt(cur, view.iteration, view.layer) ? cur + 1 : cur;
  };
  const detect = (view: ServingView): void => {
    if (probe < 0) return;
    stats.mode = view.buffer.has(probe) ? 'cache' : 'release';
    probe = -1;
    dirty = true;
  };
  const waiting = (view: ServingView): boolean => {
    for (const k of pending) if (!view.buffer.has(k)) return true;
    return false;
  };

  /**
   * Need-order scan: every expert first needed in the scan that is absent is prefetched into a
   * free slot, or (`evictions`) in place of the resident expert needed furthest, if later.
   */
  const scan = (view: ServingView, start: number, evictions: boolean): PolicyDecision | undefined => {
    dirty = false;
    lastStopPos = Infinity;
    if (waiting(view)) return undefined; // a current need waits for a slot: it comes first
    let free = view.slots - view.buffer.occupied;
    const prefetch: PrefetchRequest[] = [];
    const evict: ExpertKey[] = [];
    /** Resident unpinned experts, furthest next use first (built when first needed). */
    let victims: { key: ExpertKey; next: number }[] | null = null;
    let vi = 0;
    if (++epoch === 0x7fffffff) {
      mark.fill(0);
      epoch = 1;
    }
    const target = distinctFrom[Math.min(start, n)]!;
    let looked = 0;
    for (let pos = start; pos < n && looked < target; pos++) {
      const s = steps[pos]!;
      const ex = s.experts;
      for (let j = 0; j < ex.length; j++) {
        const key = s.layer * experts + ex[j]!;
        if (mark[key] === epoch) continue;
        mark[key] = epoch;
        looked++;
        if (view.buffer.has(key)) continue;
        if (free === 0) {
          if (evictions && victims === null) {
            // Only experts the scan has not met yet can be needed later than this need.
            victims = [];
            for (const e of view.buffer.entries()) {
              if (e.state === 'resident' && !e.pinned && mark[e.key] !== epoch)
                victims.push({ key: e.key, next: index.nextUse(e.key, start) });
            }
            victims.sort((a, b) => b.next - a.next || a.key - b.key);
          }
          const v = victims?.[vi];
          if (v === undefined || !(v.next > pos)) {
            lastStopPos = pos;
            return decision(prefetch, evict);
          }
          vi++;
          evict.push(v.key);
          free++;
        }
        prefetch.push({ key, priority: 1 + firstNeed[pos]! + j });
        free--;
      }
    }
    return decision(prefetch, evict);
  };

  /** Conservative caching: issue MIN's fetches whose victims are done with, in need order. */
  const planned = (view: ServingView, start: number): PolicyDecision | undefined => {
    if (plan === null) {
      plan = minPlan(index, keys, view.slots);
      stats.planned = plan.step.length;
      stats.overflow = plan.overflow.reduce((a, b) => a + b, 0);
    }
    const pl = plan;
    let added = false;
    while (planNext < pl.byReady.length && pl.readyAt[pl.byReady[planNext]!]! <= start) {
      ready.push(pl.byReady[planNext++]!);
      added = true;
    }
    if (ready.length === 0 || waiting(view)) return undefined;
    if (added) ready.sort((a, b) => a - b);
    let free = view.slots - view.buffer.occupied;
    const prefetch: PrefetchRequest[] = [];
    const evict: ExpertKey[] = [];
    const keep: number[] = [];
    for (const i of ready) {
      const pos = pl.step[i]!;
      const key = pl.key[i]!;
      // Left to the executor, its need already passed (fetched by the scan before the mode was known, or on demand), or already there.
      if (pl.overflow[i] || pos < start || view.buffer.has(key)) continue;
      const v = pl.victim[i]!;
      const ve = v >= 0 ? view.buffer.entry(v) : undefined;
      if (ve) {
        // The victim must be done with: resident, not in use, not needed before this fetch's need.
        if (ve.state !== 'resident' || ve.pinned || pending.has(v) || !(index.nextUse(v, start) > pos)) {
          keep.push(i);
          continue;
        }
        evict.push(v);
      } else if (free > 0) {
        free--;
      } else {
        keep.push(i);
        continue;
      }
      prefetch.push({ key, priority: priorityOf(pos, key) });
    }
    ready = keep;
    return decision(prefetch, evict);
  };

  const decide = (view: ServingView, start: number, force = false): PolicyDecision | undefined => {
    detect(view);
    if (stats.mode === 'cache' && caching === 'conservative') return planned(view, start);
    if (!dirty && !force) return undefined;
    // Unknown mode (before the first expert kept after use): free slots only, which both modes agree on.
    return scan(view, start, stats.mode !== 'unknown');
  };
  const hook = (view: ServingView): PolicyDecision | undefined => decide(view, startOf(view));

  return {
    name,
    stats,
    onIterationStart(view) {
      pending.clear();
      return hook(view);
    },
    onLayerRouted(view, routing) {
      detect(view);
      stats.routed++;
      const cur = stepOf(view.iteration, routing.layer);
      const at = index.isAt(cur, view.iteration, routing.layer);
      const rec = steps[cur];
      pending.clear();
      for (const e of routing.activated) pending.add(view.keyOf(routing.layer, e));
      const start = at ? cur + 1 : cur;
      if (at && rec !== undefined && sameExperts(rec.experts, routing.activated)) {
        stats.matched++;
        return decide(view, start);
      }
      // Diverged from the recording: drop this layer's unactivated experts the recording never needs again.
      const cancel: ExpertKey[] = [];
      const evict: ExpertKey[] = [];
      for (const e of view.buffer.entries()) {
        if (e.pinned || view.layerOf(e.key) !== routing.layer || index.nextUse(e.key, start) !== Infinity) continue;
        (e.state === 'loading' ? cancel : evict).push(e.key);
      }
      if (cancel.length + evict.length === 0) return decide(view, start);
      // The drops apply before this decision's prefetches; the freed slots are used at the next hook.
      dirty = true;
      return { cancel, evict };
    },
    onLayerDone(view) {
      pending.clear();
      return hook(view);
    },
    onPrefetchDone(view, key) {
      detect(view);
      const start = startOf(view);
      if (stats.mode === 'cache' && caching === 'conservative') {
        // A landing makes no victim ready (a loading expert has its uses ahead), but newly ready entries may wait.
        if (
          ready.length === 0 &&
          !(plan && planNext < plan.byReady.length && plan.readyAt[plan.byReady[planNext]!]! <= start)
        )
          return undefined;
        return planned(view, start);
      }
      // If nothing else changed, an arrival only matters as a victim needed later than where the last scan stopped.
      return decide(view, start, index.nextUse(key, start) > lastStopPos);
    },
    onIterationEnd(view) {
      pending.clear();
      return hook(view);
    },
    afterUse(view, key) {
      detect(view);
      pending.delete(key);
      dirty = true;
      // Keep it iff it is needed again (ignored when the executor releases after use).
      const keep = index.nextUse(key, startOf(view)) !== Infinity;
      if (keep && stats.mode === 'unknown') probe = key;
      return keep;
    },
    chooseVictim(view, q) {
      detect(view);
      dirty = true;
      const start = startOf(view);
      // Furthest next use; ties: least recently used, then lowest key (as the MIN plan).
      let best: ExpertKey | undefined;
      let bestNext = -1;
      let bestUsed = 0;
      for (const k of q.candidates) {
        const next = index.nextUse(k, start);
        const used = view.buffer.entry(k)?.lastUsedNs ?? -1;
        if (
          best === undefined ||
          next > bestNext ||
          (next === bestNext && (used < bestUsed || (used === bestUsed && k < best)))
        ) {
          best = k;
          bestNext = next;
          bestUsed = used;
        }
      }
      if (q.reason === 'prefetch' && !(bestNext > index.nextUse(q.forKey, start))) return undefined;
      return best;
    },
  };
}

function decision(prefetch: PrefetchRequest[], evict: ExpertKey[]): PolicyDecision | undefined {
  if (prefetch.length === 0 && evict.length === 0) return undefined;
  return evict.length > 0 ? { evict, prefetch } : { prefetch };
}

function sameExperts(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

export const oraclePrefetch = definePolicy({
  name: 'oracle-prefetch',
  family: 'serving',
  summary:
    "oracle prefetcher: the run's recorded future needs prefetched in need order, no waste (caching: Belady's MIN fetches, each as early as possible)",
  params: OraclePrefetchParams,
  oracle: 'needs',
  bufferSlots: (p, model) => lruSlots(p, model),
  create: (p, ctx) => {
    if (!ctx.oracle) {
      throw new Error(
        "oracle-prefetch needs the recorded need sequence (ctx.oracle): build it through experiments/world.ts, which records it for definitions with oracle: 'needs'",
      );
    }
    return createOraclePrefetch('oracle-prefetch', ctx.oracle, ctx.model.experts, ctx.model.moeLayers, p.caching);
  },
});
