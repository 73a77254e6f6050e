/**
 * Victim selection shared by the expert caches (`policies/cache/{lru,lfu,rnd}`), the prefetchers
 * and `policies/oracle/belady`: a "which first" rule applied to the executor's eviction
 * candidates, with optional per-layer capacities (the buffer partitioned by MoE layer, as in
 * Mixtral-Offloading's per-layer LRU and AdapMoE's per-layer cache sizes).
 *
 * Per-layer semantics (when `capOf` is given): a layer's *count* is its entries in the buffer,
 * loading or resident. When a slot is needed for an expert of layer l and layer l is full, it
 * evicts its own worst expert; otherwise layers over their cap give back first; only if there
 * is neither does the choice fall back to every candidate (the buffer then temporarily holds
 * more than a layer's cap, e.g. when one layer activates more experts than its cap).
 * `trimToCaps` gives the evictions that bring every layer back under its cap; caches call it
 * when layers route (pinned experts are never evicted, so an overshoot lives at most until the
 * layer's experts have been computed).
 */
import type { BufferView, EvictionQuery, ExpertKey, ServingView } from '../../sim/serving/policy.ts';

/** Per-layer cap in slots. */
export type CapOf = (layer: number) => number;

/** Picks one key of a non-empty pool. */
export type Choose = (pool: readonly ExpertKey[]) => ExpertKey;

/** Entries (loading + resident) per MoE layer. */
export function layerCounts(view: ServingView): Int32Array {
  const counts = new Int32Array(view.moeLayers);
  for (const e of view.buffer.entries()) counts[view.layerOf(e.key)]!++;
  return counts;
}

/**
 * The candidates a cache should choose its victim from: all of them for a global cache. With
 * per-layer caps: the candidates of `forKey`'s own layer when that layer is full (count + 1 >
 * cap: it replaces one of its own, the per-layer-cache case); else those of layers over their
 * cap (they give back what they overshot); else all of them — or none when `fallback` is false
 * (a prefetch that should not push another layer below its cap).
 */
export function victimPool(
  view: ServingView,
  candidates: readonly ExpertKey[],
  forKey: ExpertKey,
  capOf?: CapOf,
  fallback = true,
): readonly ExpertKey[] {
  if (!capOf || candidates.length === 0) return candidates;
  const count = layerCountOf(view);
  const forLayer = view.layerOf(forKey);
  if (count(forLayer) + 1 > capOf(forLayer)) {
    const own = candidates.filter((c) => view.layerOf(c) === forLayer);
    if (own.length > 0) return own;
  }
  const over = candidates.filter((c) => {
    const l = view.layerOf(c);
    return count(l) > capOf(l);
  });
  return over.length > 0 || !fallback ? over : candidates;
}

/**
 * `firstBy(victimPool(view, candidates, forKey, capOf, fallback), cmp)` in one pass over the
 * candidates, without building the pools (a cache's `chooseVictim` runs on every miss of a full
 * buffer). `cmp` must be a total order (ties broken by key), so the first minimum of a pool is
 * its minimum whatever its order.
 */
export function firstVictimBy(
  view: ServingView,
  candidates: readonly ExpertKey[],
  forKey: ExpertKey,
  capOf: CapOf | undefined,
  cmp: (a: ExpertKey, b: ExpertKey) => number,
  fallback = true,
): ExpertKey | undefined {
  if (!capOf || candidates.length === 0) return firstBy(candidates, cmp);
  const count = layerCountOf(view);
  const forLayer = view.layerOf(forKey);
  const ownFull = count(forLayer) + 1 > capOf(forLayer);
  let own: ExpertKey | undefined;
  let over: ExpertKey | undefined;
  let any: ExpertKey | undefined;
  for (let i = 0; i < candidates.length; i++) {
    const c = candidates[i]!;
    if (any === undefined || cmp(c, any) < 0) any = c;
    const l = view.layerOf(c);
    if (ownFull && l === forLayer && (own === undefined || cmp(c, own) < 0)) own = c;
    if (count(l) > capOf(l) && (over === undefined || cmp(c, over) < 0)) over = c;
  }
  if (own !== undefined) return own;
  return over !== undefined || !fallback ? over : any;
}

/**
 * `firstVictimBy(view, q.candidates, q.forKey, capOf, cmp, fallback)` for an executor's eviction
 * query, whose candidates are exactly the buffer's resident, unpinned entries in insertion order
 * (`EvictionQuery`), read from the buffer's per-layer index when it keeps one instead of walking
 * every candidate (a buffer of hundreds of experts, on every miss): when `forKey`'s layer is
 * full, its victim is the first minimum of that layer's own evictable entries (the index lists
 * them in the same order); else the minimum over the evictable entries of the layers over their
 * cap; only when there is none (and `fallback`) the minimum over every candidate. `cmp` must be a
 * total order (ties broken by key) once the own layer is passed: the layers over their cap are
 * visited layer by layer, not in candidate order, with the same minimum.
 */
export function firstEvictableVictimBy(
  view: ServingView,
  q: EvictionQuery,
  capOf: CapOf | undefined,
  cmp: (a: ExpertKey, b: ExpertKey) => number,
  fallback = true,
): ExpertKey | undefined {
  const buffer = view.buffer;
  if (!capOf || !q.allEvictable || !buffer.layerEntries || !buffer.layerCount)
    return firstVictimBy(view, q.candidates, q.forKey, capOf, cmp, fallback);
  const l = view.layerOf(q.forKey);
  if (buffer.layerCount(l) + 1 > capOf(l)) {
    let own: ExpertKey | undefined;
    for (const e of buffer.layerEntries(l)) {
      if (e.state === 'resident' && !e.pinned && (own === undefined || cmp(e.key, own) < 0)) own = e.key;
    }
    if (own !== undefined) return own;
  }
  let over: ExpertKey | undefined;
  for (let m = 0; m < view.moeLayers; m++) {
    if (!(buffer.layerCount(m) > capOf(m))) continue;
    for (const e of buffer.layerEntries(m)) {
      if (e.state === 'resident' && !e.pinned && (over === undefined || cmp(e.key, over) < 0)) over = e.key;
    }
  }
  return over !== undefined || !fallback ? over : firstBy(q.candidates, cmp);
}

/**
 * `firstBy(victimPool(view, q.candidates, q.forKey, capOf, false).filter((c) => !skip(c)), cmp)`
 * (a load that must not push another layer below its cap, and must not evict what `skip` names)
 * for an executor's eviction query, read from the buffer's per-layer index when it keeps one: the
 * own layer's evictable entries when it is full, else those of the layers over their cap —
 * instead of walks and filters over every candidate. `cmp` must be a total order (ties broken by
 * key): the pools are then visited in another order than the candidates' with the same minimum.
 */
export function firstEvictableCappedVictimBy(
  view: ServingView,
  q: EvictionQuery,
  capOf: CapOf,
  cmp: (a: ExpertKey, b: ExpertKey) => number,
  skip: (key: ExpertKey) => boolean,
): ExpertKey | undefined {
  const buffer = view.buffer;
  if (!q.allEvictable || !buffer.layerEntries || !buffer.layerCount) {
    return firstBy(
      victimPool(view, q.candidates, q.forKey, capOf, false).filter((c) => !skip(c)),
      cmp,
    );
  }
  const forLayer = view.layerOf(q.forKey);
  let best: ExpertKey | undefined;
  if (buffer.layerCount(forLayer) + 1 > capOf(forLayer)) {
    // The own layer's evictable entries are the pool when there is any, even if `skip` takes them all.
    let any = false;
    for (const e of buffer.layerEntries(forLayer)) {
      if (e.state !== 'resident' || e.pinned) continue;
      any = true;
      if (!skip(e.key) && (best === undefined || cmp(e.key, best) < 0)) best = e.key;
    }
    if (any) return best;
  }
  for (let l = 0; l < view.moeLayers; l++) {
    if (!(buffer.layerCount(l) > capOf(l))) continue;
    for (const e of buffer.layerEntries(l)) {
      if (e.state !== 'resident' || e.pinned || skip(e.key)) continue;
      if (best === undefined || cmp(e.key, best) < 0) best = e.key;
    }
  }
  return best;
}

/** Entries per layer: the buffer's own index when it keeps one, else counted once over all entries. */
function layerCountOf(view: ServingView): (layer: number) => number {
  const buffer = view.buffer;
  if (buffer.layerCount) return (l) => buffer.layerCount!(l);
  const counts = layerCounts(view);
  return (l) => counts[l]!;
}

/** The first key of `pool` under `cmp` (cmp(a, b) < 0: a is evicted before b). */
export function firstBy(
  pool: readonly ExpertKey[],
  cmp: (a: ExpertKey, b: ExpertKey) => number,
): ExpertKey | undefined {
  let best: ExpertKey | undefined;
  for (const k of pool) if (best === undefined || cmp(k, best) < 0) best = k;
  return best;
}

/** Resident, unpinned: what the executor lets a policy evict. */
export const evictable = (buffer: BufferView, key: ExpertKey): boolean => {
  const e = buffer.entry(key);
  return e !== undefined && e.state === 'resident' && !e.pinned;
};

/**
 * Evictions that bring every layer to at most its cap (resident, unpinned experts only; the
 * victim of each layer chosen by `choose` among that layer's evictable experts). With
 * `onlyLayer`, just that layer is trimmed (one pass over the buffer, no per-layer counts).
 */
export function trimToCaps(view: ServingView, capOf: CapOf, choose: Choose, onlyLayer?: number): ExpertKey[] {
  if (onlyLayer !== undefined) {
    // A layer within its cap gives nothing back (the common case of a cache with room).
    if (view.buffer.layerCount && view.buffer.layerCount(onlyLayer) <= capOf(onlyLayer)) return [];
    let count = 0;
    const pool: ExpertKey[] = [];
    // The layer's own entries when the buffer indexes them (the victim order does not depend on
    // the pool's order: `choose` is a total order).
    for (const e of view.buffer.layerEntries?.(onlyLayer) ?? view.buffer.entries()) {
      if (view.layerOf(e.key) !== onlyLayer) continue;
      count++;
      if (e.state === 'resident' && !e.pinned) pool.push(e.key);
    }
    const out: ExpertKey[] = [];
    for (let excess = count - capOf(onlyLayer); excess > 0 && pool.length > 0; excess--) {
      const v = choose(pool);
      pool.splice(pool.indexOf(v), 1);
      out.push(v);
    }
    return out;
  }
  const buffer = view.buffer;
  if (buffer.layerCount && buffer.layerEntries) return trimIndexed(view.moeLayers, buffer, capOf, choose);
  return trimByScan(view, capOf, choose);
}

/**
 * `trimToCaps` over every layer from the buffer's per-layer index: the same evictions as
 * `trimByScan` (each layer's pool is its resident, unpinned entries in buffer insertion order,
 * which is the index's order), in O(layers) when no layer is over its cap instead of a walk
 * over every entry (caches call it on every routed layer).
 */
function trimIndexed(moeLayers: number, buffer: BufferView, capOf: CapOf, choose: Choose): ExpertKey[] {
  const out: ExpertKey[] = [];
  for (let l = 0; l < moeLayers; l++) {
    let excess = buffer.layerCount!(l) - capOf(l);
    if (excess <= 0) continue;
    const pool: ExpertKey[] = [];
    for (const e of buffer.layerEntries!(l)) if (e.state === 'resident' && !e.pinned) pool.push(e.key);
    for (; excess > 0 && pool.length > 0; excess--) {
      const v = choose(pool);
      pool.splice(pool.indexOf(v), 1);
      out.push(v);
    }
  }
  return out;
}

/** `trimToCaps` over every layer by walks over all entries (the reference; buffers without a per-layer index). */
export function trimByScan(view: ServingView, capOf: CapOf, choose: Choose): ExpertKey[] {
  const counts = layerCounts(view);
  const out: ExpertKey[] = [];
  let byLayer: Map<number, ExpertKey[]> | null = null;
  for (let l = 0; l < view.moeLayers; l++) {
    let excess = counts[l]! - capOf(l);
    if (excess <= 0) continue;
    if (!byLayer) {
      byLayer = new Map();
      for (const e of view.buffer.entries()) {
        if (e.state !== 'resident' || e.pinned) continue;
        const el = view.layerOf(e.key);
        let list = byLayer.get(el);
        if (!list) byLayer.set(el, (list = []));
        list.push(e.key);
      }
    }
    const pool = byLayer.get(l);
    while (excess > 0 && pool && pool.length > 0) {
      const v = choose(pool);
      pool.splice(pool.indexOf(v), 1);
      out.push(v);
      excess--;
    }
  }
  return out;
}
