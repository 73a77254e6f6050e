/**
 * The eviction order of MoE-Infinity's cache (`cache-priority.ts`): victims outside the
 * prefetcher's ranked set first, by lowest priority, then least recently used, then lowest key;
 * ranked ones after them, by highest rank (their priority is −rank), same ties. Keys are unique,
 * so the order is total: a linear scan (`firstVictimByScan` over listed candidates,
 * `firstVictimInBuffer` over the buffer itself) and the bounded selection of the first few
 * (`CheapestVictims`, for a collection of victims that answers several queries) agree.
 */
import type { BufferView, ExpertKey } from '../../sim/serving/policy.ts';
import type { EvictableSet } from '../cache/evictable-set.ts';

/** The first victim `firstVictimByScan` found: its key, whether it is ranked, its priority (−rank if ranked). */
export interface ScannedVictim {
  key: number;
  ranked: boolean;
  prio: number;
}

/**
 * The first of `cands` in eviction order by one linear scan (arguments as `VictimOrder.addAll`),
 * into `out`; false when `cands` is empty. For candidates asked about once, cheaper than ordering
 * them all: last uses are read only to break ties.
 */
export function firstVictimByScan(
  buffer: BufferView,
  cands: readonly number[],
  rankGen: Uint32Array,
  gen: number,
  rank: Float64Array,
  priority: Float64Array | null,
  out: ScannedVictim,
): boolean {
  let best = -1;
  let bestProt = true;
  let bestPrio = Infinity;
  // The last use of `best`, read from the buffer only when a tie needs it (NaN: not read yet).
  let bestUsed = Infinity;
  for (let i = 0; i < cands.length; i++) {
    const k = cands[i]!;
    const prot = rankGen[k] === gen;
    const prio = prot ? -rank[k]! : priority ? priority[k]! : 0;
    let better: boolean;
    if (best < 0 || (bestProt && !prot)) better = true;
    else if (prot !== bestProt) better = false;
    else if (prio !== bestPrio) better = prio < bestPrio;
    else {
      // Tied priority: least recently used, then lowest key.
      if (bestUsed !== bestUsed) bestUsed = buffer.entry(best)?.lastUsedNs ?? -1;
      const used = buffer.entry(k)?.lastUsedNs ?? -1;
      if (used < bestUsed || (used === bestUsed && k < best)) {
        best = k;
        bestPrio = prio;
        bestUsed = used;
      }
      continue;
    }
    if (better) {
      best = k;
      bestProt = prot;
      bestPrio = prio;
      bestUsed = NaN;
    }
  }
  out.key = best;
  out.ranked = bestProt;
  out.prio = bestPrio;
  return best >= 0;
}

/**
 * `firstVictimByScan` over the executor's candidates when they are the buffer's whole evictable
 * set (`EvictionQuery.allEvictable`), read from the buffer through `evictable`: the executor
 * lists nothing. The order of eviction is total (keys are unique), so the walk's order does not
 * change the answer.
 */
export function firstVictimInBuffer(
  buffer: BufferView,
  evictable: EvictableSet,
  rankGen: Uint32Array,
  gen: number,
  rank: Float64Array,
  priority: Float64Array | null,
  out: ScannedVictim,
): boolean {
  let best = -1;
  let bestProt = true;
  let bestPrio = Infinity;
  let bestUsed = Infinity;
  // The evictable keys, dense (the order is total: the walk's order does not change the answer).
  const set = evictable.of(buffer);
  const keys = set.keys;
  const usedBy = set.lastUsed;
  for (let i = 0, n = set.count; i < n; i++) {
    const k = keys[i]!;
    const prot = rankGen[k] === gen;
    const prio = prot ? -rank[k]! : priority ? priority[k]! : 0;
    if (best < 0 || (bestProt && !prot)) {
      // The first candidate, or the first one outside the ranked set.
    } else if (prot !== bestProt || !(prio <= bestPrio)) continue;
    else if (prio === bestPrio) {
      // Tied priority: least recently used, then lowest key.
      const used = usedBy[k]!;
      if (!(used < bestUsed || (used === bestUsed && k < best))) continue;
    }
    best = k;
    bestProt = prot;
    bestPrio = prio;
    bestUsed = usedBy[k]!;
  }
  out.key = best;
  out.ranked = bestProt;
  out.prio = bestPrio;
  return best >= 0;
}

/**
 * Removes `key` from the first `n` entries of `keys` (the executor evicts the victim handed out:
 * the next candidates are these without it), keeping their order; returns the new count.
 */
export function withoutKey(keys: Int32Array, n: number, key: ExpertKey): number {
  let i = 0;
  while (i < n && keys[i] !== key) i++;
  if (i === n) return n;
  keys.copyWithin(i, i + 1, n);
  return n - 1;
}
