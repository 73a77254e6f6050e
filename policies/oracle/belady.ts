/**
 * belady — the offline-optimal expert cache (Belady's MIN): on a miss with a full buffer,
 * evict the resident expert whose next use lies furthest in the future; no prefetch.
 *
 * Reproduces: the "Belady / ideal" upper bound on cache hit rate of DESIGN §8 (MoEpic and
 * MoE-Infinity compare their caches against it). When to use: as the ceiling of a cache study —
 * no cache of the same capacity gets more buffer hits on the same need sequence (tested).
 *
 * The future it knows — record and replay. The executor's batches depend on timing, and timing
 * depends on the policy, so the future cannot be read off the workload alone. The definition
 * asks for `oracle: 'needs'`: the world builder first runs the same run spec with `on-demand`,
 * recording every (iteration, MoE layer, activated experts), and passes that `NeedTrace` as
 * `ctx.oracle`. During the run a cursor into the trace advances as layers are routed; at each
 * decision it is synchronised on the live (iteration, layer) — the first recorded step at or
 * after it — so a diverged run re-aligns instead of drifting. The next use of an expert is its
 * first recorded need at or after the cursor (the current layer's needs count as "now"); never
 * again is +∞. Victim: furthest next use; ties (e.g. several never used again): lowest key.
 *
 * Exactness: the recorded needs are the run's true future when they do not depend on timing —
 * offline arrivals (all at t = 0) with static batching: batches are then formed in arrival order
 * independently of how fast each one runs. With Poisson arrivals or continuous batching the
 * batch composition depends on timing, the recording (made under on-demand's timing) diverges,
 * and belady is a heuristic with an (approximately) known future, not a bound. `stats` counts
 * the routed layers whose experts matched the recording.
 *
 * Capacity: the same parameters as `lru` (`capacitySlots`, `capacityBytes`, or `perLayerSlots`:
 * Belady within each layer's partition). Known gaps: optimal for hits only (not for latency:
 * it ignores when a fetch would be overlapped); with a shared routing stream whose draws depend
 * on call order (uniform routing), any divergence also changes every later token's routing.
 */
import type { z } from 'zod';
import type { ExpertKey, ServingPolicy, ServingView } from '../../sim/serving/policy.ts';
import { LruParams, lruSlots } from '../cache/lru.ts';
import { firstBy, trimToCaps, victimPool, type CapOf } from '../cache/victims.ts';
import { definePolicy, type NeedTrace } from '../types.ts';

export const BeladyParams = LruParams;
export type BeladyParams = z.infer<typeof BeladyParams>;

/**
 * A recorded need sequence indexed for next-use queries: per expert key, the ascending step
 * positions at which it is needed; positions of (iteration, layer) by binary search.
 */
export class NeedIndex {
  private readonly occurrences: Int32Array[];
  private readonly iterations: Int32Array;
  private readonly layers: Int32Array;

  constructor(
    readonly trace: NeedTrace,
    readonly experts: number,
    keys: number,
  ) {
    const steps = trace.steps;
    this.iterations = Int32Array.from(steps, (s) => s.iteration);
    this.layers = Int32Array.from(steps, (s) => s.layer);
    const n = new Int32Array(keys);
    for (const s of steps) for (const e of s.experts) n[s.layer * experts + e]!++;
    this.occurrences = Array.from(n, (c) => new Int32Array(c));
    n.fill(0);
    steps.forEach((s, pos) => {
      for (const e of s.experts) {
        const k = s.layer * experts + e;
        this.occurrences[k]![n[k]!++] = pos;
      }
    });
  }

  get length(): number {
    return this.iterations.length;
  }

  /** The first step at or after (iteration, layer) in execution order (length if none). */
  lowerBound(iteration: number, layer: number): number {
    let lo = 0;
    let hi = this.iterations.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const it = this.iterations[mid]!;
      if (it < iteration || (it === iteration && this.layers[mid]! < layer)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Whether step `pos` is exactly (iteration, layer). */
  isAt(pos: number, iteration: number, layer: number): boolean {
    return pos < this.iterations.length && this.iterations[pos] === iteration && this.layers[pos] === layer;
  }

  /** The first step ≥ `pos` that needs `key`, or +∞. */
  nextUse(key: ExpertKey, pos: number): number {
    const occ = this.occurrences[key];
    if (!occ || occ.length === 0) return Infinity;
    let lo = 0;
    let hi = occ.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (occ[mid]! < pos) lo = mid + 1;
      else hi = mid;
    }
    return lo < occ.length ? occ[lo]! : Infinity;
  }
}

export interface BeladyStats {
  /** Routed layers seen, and how many matched the recorded step at the same (iteration, layer). */
  routed: number;
  matched: number;
}

export interface BeladyPolicy extends ServingPolicy {
  readonly stats: Readonly<BeladyStats>;
}

export function createBelady(
  name: string,
  p: BeladyParams,
  trace: NeedTrace,
  experts: number,
  moeLayers: number,
): BeladyPolicy {
  const index = new NeedIndex(trace, experts, moeLayers * experts);
  const capOf: CapOf | undefined = p.perLayerSlots !== undefined ? () => p.perLayerSlots! : undefined;
  const stats: BeladyStats = { routed: 0, matched: 0 };
  let cursor = 0;
  /** The cursor, synchronised on the live (iteration, layer): advanced by one step in the common case, re-found by search otherwise. */
  const sync = (view: ServingView): number => {
    const layer = Math.max(0, view.layer);
    if (index.isAt(cursor, view.iteration, layer)) return cursor;
    if (index.isAt(cursor + 1, view.iteration, layer)) return ++cursor;
    cursor = index.lowerBound(view.iteration, layer);
    return cursor;
  };
  const furthestFirst = (pos: number) => (a: ExpertKey, b: ExpertKey) => {
    const na = index.nextUse(a, pos);
    const nb = index.nextUse(b, pos);
    return na === nb ? a - b : na > nb ? -1 : 1;
  };
  return {
    name,
    stats,
    onLayerRouted(view, routing) {
      const pos = sync(view);
      stats.routed++;
      const rec = trace.steps[pos];
      if (
        index.isAt(pos, view.iteration, routing.layer) &&
        rec !== undefined &&
        sameExperts(rec.experts, routing.activated)
      )
        stats.matched++;
      if (!capOf) return;
      const cmp = furthestFirst(pos);
      return { evict: trimToCaps(view, capOf, (pool) => firstBy(pool, cmp)!) };
    },
    chooseVictim(view, q) {
      return firstBy(victimPool(view, q.candidates, q.forKey, capOf), furthestFirst(sync(view)));
    },
  };
}

function sameExperts(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

export const belady = definePolicy({
  name: 'belady',
  family: 'serving',
  summary:
    "oracle cache: evict the expert used furthest in the future (record-and-replay of the run's needs), no prefetch",
  params: BeladyParams,
  oracle: 'needs',
  bufferSlots: (p, model) => lruSlots(p, model),
  create: (p, ctx) => {
    if (!ctx.oracle) {
      throw new Error(
        "belady needs the recorded need sequence (ctx.oracle): build it through experiments/world.ts, which records it for definitions with oracle: 'needs'",
      );
    }
    return createBelady('belady', p, ctx.oracle, ctx.model.experts, ctx.model.moeLayers);
  },
});
