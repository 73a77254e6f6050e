/**
 * A per-thread memo of values shared by the runs of a sweep (warm-ups, routing tapes,
 * predictions), bounded by a number of entries and by a total size: least recently used entries
 * are forgotten first. A value's size may grow after it is kept (a tape or a prediction list
 * filled as runs ask): it grows through `reserve`, which refuses growth past the bound, and an
 * entry forgotten gives back its size as `sizeOf` reads it then. Speed only: a forgotten or
 * refused value is built again by its caller, with the same result.
 */
export class BoundedMemo<V> {
  private readonly map = new Map<string, V>();
  /** The values in `map` (a value forgotten is no longer here). */
  private readonly kept = new Set<V>();
  /** Size held by every entry (as `sizeOf` and `reserve` counted it). */
  private total = 0;

  constructor(
    /** Entries kept at most. */
    private readonly maxEntries: number,
    /** Total size kept at most (bytes, elements: the caller's unit). */
    private readonly maxSize: number,
    /** An entry's size now. */
    private readonly sizeOf: (value: V) => number,
  ) {}

  /** The value under `key` (now the most recently used), or undefined. */
  get(key: string): V | undefined {
    const v = this.map.get(key);
    if (v === undefined) return undefined;
    this.map.delete(key);
    this.map.set(key, v);
    return v;
  }

  /** The value under `key` (now the most recently used), made by `make` and kept when there is none. */
  getOrMake(key: string, make: () => V): V {
    const got = this.get(key);
    if (got !== undefined) return got;
    const made = make();
    this.set(key, made);
    return made;
  }

  /**
   * Keeps `value` under `key` (replacing none: call after a missed `get`), forgetting the least
   * recently used entries while either bound would be passed. False, and nothing kept, when the
   * value alone is larger than the bound.
   */
  set(key: string, value: V): boolean {
    const size = this.sizeOf(value);
    if (size > this.maxSize) return false;
    while (this.map.size > 0 && (this.map.size >= this.maxEntries || this.total + size > this.maxSize)) {
      const [oldest, old] = this.map.entries().next().value!;
      this.map.delete(oldest);
      this.kept.delete(old);
      this.total -= this.sizeOf(old);
    }
    this.map.set(key, value);
    this.kept.add(value);
    this.total += size;
    return true;
  }

  /**
   * Room for `value` to grow by `size`: true (counted) if it is still kept and the bound allows,
   * else false. A forgotten value (still used by its run) is refused: its growth would be counted
   * and never given back, shrinking the room of every later value for the thread's life.
   */
  reserve(value: V, size: number): boolean {
    if (this.total + size > this.maxSize || !this.kept.has(value)) return false;
    this.total += size;
    return true;
  }

  /** The values kept, least recently used first. */
  values(): IterableIterator<V> {
    return this.map.values();
  }

  /** Forgets everything (tests). */
  clear(): void {
    this.map.clear();
    this.kept.clear();
    this.total = 0;
  }
}
