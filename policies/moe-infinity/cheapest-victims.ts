/**
 * The `limit` first victims in eviction order (`victim-order.ts`: outside the ranked set first,
 * by lowest priority, then least recently used, then lowest key; ranked ones after them, by
 * their priority −rank, same ties), selected in one walk: a max-heap of at most `limit`
 * items keeps the worst of the best on top, and a candidate that does not beat it is dropped on
 * one comparison. An admission round hands out at most as many victims as it has prefetches to
 * admit, usually a handful, while a large buffer holds a thousand candidates: ordering all of
 * them (a binary heap over every candidate, this code's earlier form) cost a heap build per
 * round; the executor's queries on one set of candidates take a few victims too. The order is
 * total (keys are unique), so the first `limit` are the same whatever order they come in.
 */
export class CheapestVictims {
  private key = new Int32Array(64);
  private ranked = new Uint8Array(64);
  private prio = new Float64Array(64);
  private used = new Float64Array(64);
  /** Items held (a max-heap while collecting; sorted ascending after `finish`). */
  private n = 0;
  /** The most victims this selection keeps (`clear`). */
  limit = 0;
  /** Whether the walk offered only some kinds of victims (`copyFrom`): more may exist however many it kept. */
  private partial = false;
  /** Position of the next victim after `finish`. */
  private next = 0;

  /** Starts a selection of at most `limit` victims. */
  clear(limit: number): void {
    this.n = 0;
    this.next = 0;
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
    this.next = 0;
    this.limit = other.limit;
    this.partial = true;
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
      this.siftUp(n, key, r, prio, used);
      this.n = n + 1;
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
    this.siftDown(0, n, key, r, prio, used);
  }

  /**
   * A priority above which an unranked victim offered now cannot be kept (Infinity until full;
   * a walk skips the call to `offer` for those): the worst held's, when it is unranked.
   */
  unrankedBound(): number {
    return this.n >= this.limit && this.n > 0 && this.ranked[0] === 0 ? this.prio[0]! : Infinity;
  }

  /** Sorts the victims held into eviction order (heap sort in place: the worst goes last). */
  finish(): void {
    for (let end = this.n - 1; end > 0; end--) {
      const k = this.key[end]!;
      const r = this.ranked[end]!;
      const p = this.prio[end]!;
      const u = this.used[end]!;
      this.move(end, 0);
      this.siftDown(0, end, k, r, p, u);
    }
    this.next = 0;
  }

  /** Whether the walk may have left victims out: it kept as many as its limit. */
  mayHoldMore(): boolean {
    return this.partial || this.n >= this.limit;
  }

  /** Position of the next victim (after `finish`), or −1 when none is left. */
  peek(): number {
    return this.next < this.n ? this.next : -1;
  }
  /** Removes the next victim. */
  pop(): void {
    this.next++;
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

  /** Places the item in the hole at `j` and moves it up to its place (the last in order on top). */
  private siftUp(j: number, key: number, ranked: number, prio: number, used: number): void {
    while (j > 0) {
      const parent = (j - 1) >> 1;
      if (
        !goesAfter(
          ranked,
          prio,
          used,
          key,
          this.ranked[parent]!,
          this.prio[parent]!,
          this.used[parent]!,
          this.key[parent]!,
        )
      )
        break;
      this.move(j, parent);
      j = parent;
    }
    this.put(j, key, ranked, prio, used);
  }

  /** Places the item in the hole at `j` of a heap of `size` and moves it down to its place. */
  private siftDown(j: number, size: number, key: number, ranked: number, prio: number, used: number): void {
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
