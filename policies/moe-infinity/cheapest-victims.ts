/**
 * The `limit` first victims in eviction order (`victim-order.ts`: outside the ranked set first,
 * by lowest priority, then least recently used, then lowest key; ranked ones after them, by
 * their priority −rank, same ties), selected in one walk and handed out lazily. While
 * collecting, items are appended until `limit` are held, then kept as a max-heap (the worst of
 * the best on top: a candidate that does not beat it is dropped on one comparison). `finish`
 * turns what is held into a min-heap (the first victim on top, O(n)), and each `pop` takes one
 * off (O(log n)): a round hands out a few victims (3–4 at a thousand slots) while a walk may
 * keep a hundred, and sorting all of them (this code's earlier form: a heap sort per walk) cost
 * more than the walk. The order is total (keys are unique), so the first `limit` and the order
 * they are handed out in are the same whatever order they come in.
 */
export class CheapestVictims {
  private key = new Int32Array(64);
  private ranked = new Uint8Array(64);
  private prio = new Float64Array(64);
  private used = new Float64Array(64);
  /**
   * Items held: appended while fewer than `limit`, then a max-heap (worst on top) while
   * collecting; after `finish`, [0, heap) a min-heap of those not handed out (first on top) and
   * [heap, n) the ones handed out, the first handed out last.
   */
  private n = 0;
  /** Items not handed out yet (after `finish`). */
  private heap = 0;
  /** The most victims this selection keeps (`clear`). */
  limit = 0;
  /** Whether the walk offered only some kinds of victims (`copyFrom`): more may exist however many it kept. */
  private partial = false;
  /** Starts a selection of at most `limit` victims. */
  clear(limit: number): void {
    this.n = 0;
    this.heap = 0;
    this.limit = limit;
    this.partial = false;
  }

  /**
   * Holds `other`'s victims, from its first (handed out or not), as the first victims of a
   * walk that may have left others out (`other`'s walk offered no ranked ones).
   */
  copyFrom(other: CheapestVictims): void {
    const n = other.n;
    while (this.key.length < n) this.grow();
    // By index: `set(subarray(…))` allocated four views per call, on every admission walk.
    for (let i = 0; i < n; i++) {
      this.key[i] = other.key[i]!;
      this.ranked[i] = other.ranked[i]!;
      this.prio[i] = other.prio[i]!;
      this.used[i] = other.used[i]!;
    }
    this.n = n;
    this.limit = other.limit;
    this.partial = true;
    // Every item again, as one min-heap: the order is total, so it hands them out in `other`'s order.
    this.heap = n;
    this.heapifyFirst();
  }

  /**
   * Offers a victim: `ranked` when in the ranked set; `prio` its cache priority (0 for LRU), or
   * −rank when ranked; `used` its last use.
   */
  offer(key: number, ranked: boolean, prio: number, used: number): void {
    const n = this.n;
    const r = ranked ? 1 : 0;
    if (n < this.limit) {
      if (n === this.key.length) this.grow();
      this.put(n, key, r, prio, used);
      this.n = n + 1;
      if (n + 1 === this.limit) this.heapifyWorst();
      return;
    }
    if (n === 0) return;
    // Full: it replaces the worst held (the top) only if it goes before it.
    const tr = this.ranked[0]!;
    if (r !== tr) {
      if (r > tr) return;
    } else {
      const tp = this.prio[0]!;
      if (prio > tp) return;
      if (prio === tp) {
        const tu = this.used[0]!;
        if (used > tu || (used === tu && key > this.key[0]!)) return;
      }
    }
    this.siftDownWorst(0, n, key, r, prio, used);
  }

  /**
   * A priority above which an unranked victim offered now cannot be kept (Infinity until full;
   * a walk skips the call to `offer` for those): the worst held's, when it is unranked.
   */
  unrankedBound(): number {
    return this.n >= this.limit && this.n > 0 && this.ranked[0] === 0 ? this.prio[0]! : Infinity;
  }

  /** Ends the collection: the first victim is on top (`peek`) and `pop` hands them out in eviction order. */
  finish(): void {
    this.heap = this.n;
    this.heapifyFirst();
  }

  /** Whether the walk may have left victims out: it kept as many as its limit. */
  mayHoldMore(): boolean {
    return this.partial || this.n >= this.limit;
  }

  /** Position of the next victim (after `finish`), or −1 when none is left. */
  peek(): number {
    return this.heap > 0 ? 0 : -1;
  }
  /** Removes the next victim (it moves to the end of the held items). */
  pop(): void {
    const end = this.heap - 1;
    if (end < 0) return;
    const k = this.key[end]!;
    const r = this.ranked[end]!;
    const p = this.prio[end]!;
    const u = this.used[end]!;
    this.move(end, 0);
    this.heap = end;
    this.siftDownFirst(0, end, k, r, p, u);
  }
  keyAt(i: number): number {
    return this.key[i]!;
  }
  rankedAt(i: number): boolean {
    return this.ranked[i] === 1;
  }
  prioAt(i: number): number {
    return this.prio[i]!;
  }

  /** Whether the item at position `i` goes after the item (`rb`, `pb`, `ub`, `kb`). */
  private after(i: number, rb: number, pb: number, ub: number, kb: number): boolean {
    return goesAfter(this.ranked[i]!, this.prio[i]!, this.used[i]!, this.key[i]!, rb, pb, ub, kb);
  }

  private put(j: number, key: number, ranked: number, prio: number, used: number): void {
    this.key[j] = key;
    this.ranked[j] = ranked;
    this.prio[j] = prio;
    this.used[j] = used;
  }

  private move(to: number, from: number): void {
    this.put(to, this.key[from]!, this.ranked[from]!, this.prio[from]!, this.used[from]!);
  }

  /** Makes the items held a max-heap (the last in eviction order on top). */
  private heapifyWorst(): void {
    const n = this.n;
    for (let j = (n >> 1) - 1; j >= 0; j--)
      this.siftDownWorst(j, n, this.key[j]!, this.ranked[j]!, this.prio[j]!, this.used[j]!);
  }

  /** Makes [0, heap) a min-heap (the first in eviction order on top). */
  private heapifyFirst(): void {
    const n = this.heap;
    for (let j = (n >> 1) - 1; j >= 0; j--)
      this.siftDownFirst(j, n, this.key[j]!, this.ranked[j]!, this.prio[j]!, this.used[j]!);
  }

  /** Places the item in the hole at `j` of a max-heap of `size` and moves it down to its place. */
  private siftDownWorst(j: number, size: number, key: number, ranked: number, prio: number, used: number): void {
    for (;;) {
      const l = 2 * j + 1;
      if (l >= size) break;
      let m = l;
      const r = l + 1;
      if (r < size && this.after(r, this.ranked[l]!, this.prio[l]!, this.used[l]!, this.key[l]!)) m = r;
      if (!this.after(m, ranked, prio, used, key)) break;
      this.move(j, m);
      j = m;
    }
    this.put(j, key, ranked, prio, used);
  }

  /** Places the item in the hole at `j` of a min-heap of `size` and moves it down to its place. */
  private siftDownFirst(j: number, size: number, key: number, ranked: number, prio: number, used: number): void {
    for (;;) {
      const l = 2 * j + 1;
      if (l >= size) break;
      let m = l;
      const r = l + 1;
      if (r < size && !this.after(r, this.ranked[l]!, this.prio[l]!, this.used[l]!, this.key[l]!)) m = r;
      if (this.after(m, ranked, prio, used, key)) break;
      this.move(j, m);
      j = m;
    }
    this.put(j, key, ranked, prio, used);
  }

  private grow(): void {
    const n = this.key.length * 2;
    const k = new Int32Array(n);
    k.set(this.key);
    const r = new Uint8Array(n);
    r.set(this.ranked);
    this.ranked = r;
    const p = new Float64Array(n);
    p.set(this.prio);
    const u = new Float64Array(n);
    u.set(this.used);
    this.key = k;
    this.prio = p;
    this.used = u;
  }
}

/** Whether victim a (ranked, priority, last use, key) goes after victim b in eviction order. */
function goesAfter(
  ra: number,
  pa: number,
  ua: number,
  ka: number,
  rb: number,
  pb: number,
  ub: number,
  kb: number,
): boolean {
  if (ra !== rb) return ra > rb;
  if (pa !== pb) return pa > pb;
  if (ua !== ub) return ua > ub;
  return ka > kb;
}
