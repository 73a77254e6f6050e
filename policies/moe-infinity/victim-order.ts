/**
 * The eviction order of MoE-Infinity's cache (`cache-priority.ts`): victims outside the
 * prefetcher's ranked set first, by lowest priority, then least recently used, then lowest key;
 * ranked ones after them, by highest rank (their priority is −rank), same ties. Keys are unique,
 * so the order is total: a linear scan (`firstVictimByScan` over listed candidates,
 * `firstVictimInBuffer` over the buffer itself) and the binary heap (`VictimOrder`) find the same
 * first victim.
 *
 * A heap because one collection of victims may answer many queries: an admission round hands out
 * victims one by one, and in a large buffer the executor's prefetches of one decision evict one
 * victim each from the same candidates (a linear scan per query made these rounds quadratic in
 * the buffer). In a small buffer the candidates change between most queries: one walk is cheaper.
 */
import type { BufferView, ExpertKey } from '../../sim/serving/policy.ts';

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
 * `firstVictimByScan` over the executor's candidates (`EvictionQuery.candidates`: the resident,
 * unpinned entries of `buffer`) read from the buffer itself: the executor lists nothing, and a
 * tie reads the entry's last use in place. The order of eviction is total (keys are unique), so
 * the walk's order does not change the answer.
 */
export function firstVictimInBuffer(
  buffer: BufferView,
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
  for (const e of buffer.entries()) {
    if (e.state !== 'resident' || e.pinned) continue;
    const k = e.key;
    const prot = rankGen[k] === gen;
    const prio = prot ? -rank[k]! : priority ? priority[k]! : 0;
    if (best < 0 || (bestProt && !prot)) {
      // The first candidate, or the first one outside the ranked set.
    } else if (prot !== bestProt || !(prio <= bestPrio)) continue;
    else if (prio === bestPrio) {
      // Tied priority: least recently used, then lowest key.
      const used = e.lastUsedNs;
      if (!(used < bestUsed || (used === bestUsed && k < best))) continue;
    }
    best = k;
    bestProt = prot;
    bestPrio = prio;
    bestUsed = e.lastUsedNs;
  }
  out.key = best;
  out.ranked = bestProt;
  out.prio = bestPrio;
  return best >= 0;
}

export class VictimOrder {
  private key = new Int32Array(64);
  private prot = new Uint8Array(64);
  private prio = new Float64Array(64);
  private used = new Float64Array(64);
  /** Heap of positions into the arrays above (the next victim on top). */
  private heap = new Int32Array(64);
  /** Items added since `clear`. */
  private count = 0;
  /** Items still in the heap. */
  size = 0;

  clear(): void {
    this.count = 0;
    this.size = 0;
  }

  /** Adds a victim (`prio`: its cache priority, or −rank when `ranked`; `used`: its last use). */
  add(key: number, ranked: boolean, prio: number, used: number): void {
    const n = this.count;
    if (n === this.key.length) this.grow();
    this.key[n] = key;
    this.prot[n] = ranked ? 1 : 0;
    this.prio[n] = prio;
    this.used[n] = used;
    this.count = n + 1;
  }

  /**
   * Adds the first `n` of `keys` (candidates of the executor): ranked where `rankGen[k] === gen`
   * (ordered by −`rank`), else by `priority` (null: all 0, LRU); last use from `buffer`.
   */
  addAll(
    buffer: BufferView,
    keys: ArrayLike<number>,
    n: number,
    rankGen: Uint32Array,
    gen: number,
    rank: Float64Array,
    priority: Float64Array | null,
  ): void {
    for (let i = 0; i < n; i++) {
      const k = keys[i]!;
      const prot = rankGen[k] === gen;
      // Inside the ranked set the least urgent (highest rank) goes first.
      this.add(k, prot, prot ? -rank[k]! : priority ? priority[k]! : 0, buffer.entry(k)?.lastUsedNs ?? -1);
    }
  }

  /** Orders the victims added since `clear` (O(n)). */
  build(): void {
    this.size = this.count;
    for (let i = 0; i < this.size; i++) this.heap[i] = i;
    for (let j = (this.size >> 1) - 1; j >= 0; j--) this.siftDown(j, this.heap[j]!);
  }

  /** Position of the next victim, or −1 when none is left. */
  peek(): number {
    return this.size > 0 ? this.heap[0]! : -1;
  }

  /** Removes the next victim. */
  pop(): void {
    const n = --this.size;
    if (n > 0) this.siftDown(0, this.heap[n]!);
  }

  keyAt(i: number): number {
    return this.key[i]!;
  }
  rankedAt(i: number): boolean {
    return this.prot[i] === 1;
  }
  prioAt(i: number): number {
    return this.prio[i]!;
  }

  /** Whether position `a` goes before position `b` (the comparisons of the linear scan it replaces). */
  private before(a: number, b: number): boolean {
    const pa = this.prot[a]!;
    const pb = this.prot[b]!;
    if (pa !== pb) return pa < pb;
    const xa = this.prio[a]!;
    const xb = this.prio[b]!;
    if (xa !== xb) return xa < xb;
    const ua = this.used[a]!;
    const ub = this.used[b]!;
    if (ua !== ub) return ua < ub;
    return this.key[a]! < this.key[b]!;
  }

  /** Places position `x` in the hole at `j` and moves it down to its place. */
  private siftDown(j: number, x: number): void {
    const h = this.heap;
    const size = this.size;
    for (;;) {
      const l = 2 * j + 1;
      if (l >= size) break;
      let m = l;
      if (l + 1 < size && this.before(h[l + 1]!, h[l]!)) m = l + 1;
      if (!this.before(h[m]!, x)) break;
      h[j] = h[m]!;
      j = m;
    }
    h[j] = x;
  }

  private grow(): void {
    const n = this.key.length * 2;
    const k = new Int32Array(n);
    k.set(this.key);
    const p = new Uint8Array(n);
    p.set(this.prot);
    const x = new Float64Array(n);
    x.set(this.prio);
    const u = new Float64Array(n);
    u.set(this.used);
    this.key = k;
    this.prot = p;
    this.prio = x;
    this.used = u;
    this.heap = new Int32Array(n);
  }
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
