/**
 * A list of ready tasks kept sorted by (priority, seq), lower first: `seq` is the order in
 * which tasks were added to the executor, unique, so the order is total and deterministic.
 *
 * The executor takes tasks from the front (a dispatch pass removes the prefix it went
 * through), so the front is an offset into the array, compacted now and then: removing a
 * prefix costs O(1) amortised, not a copy of the whole list per pass.
 */
export interface Ranked {
  readonly priority: number;
  readonly seq: number;
}

/** Negative if `a` goes first. Never 0 for two different tasks (seq is unique). */
export function compareRanked(a: Ranked, b: Ranked): number {
  return a.priority - b.priority || a.seq - b.seq;
}

export class ReadyList<T extends Ranked> {
  /**
   * Items `head` … `end` − 1 in order. The array is kept when the list empties (a lane empties
   * at almost every dispatch pass, and a new array would be grown again from nothing); slots
   * past `end` are stale and never read.
   */
  private items: T[] = [];
  private head = 0;
  private end = 0;

  get length(): number {
    return this.end - this.head;
  }

  /** The i-th most urgent item. */
  at(i: number): T | undefined {
    return i >= 0 && this.head + i < this.end ? this.items[this.head + i] : undefined;
  }

  /** Inserts in order (binary search; O(n) move, O(1) at either end). */
  insert(item: T): void {
    const items = this.items;
    let lo = this.head;
    let hi = this.end;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (compareRanked(items[mid]!, item) < 0) lo = mid + 1;
      else hi = mid;
    }
    if (lo === this.head && this.head > 0) {
      items[--this.head] = item;
      return;
    }
    // One more slot at the end (pushed while the array is no longer: it never has holes).
    if (this.end === items.length) items.push(item);
    // Shift the tail up by one in place (`splice` would allocate the array it returns).
    for (let i = this.end; i > lo; i--) items[i] = items[i - 1]!;
    items[lo] = item;
    this.end++;
  }

  /** Removes the `k` most urgent items. */
  removeFirst(k: number): void {
    if (!(k >= 0 && k <= this.length)) throw new RangeError(`cannot remove ${k} of ${this.length} items`);
    this.head += k;
    if (this.head === this.end) {
      this.head = 0;
      this.end = 0;
    } else if (this.head >= 1024 && this.head * 2 >= this.end) {
      const items = this.items;
      for (let i = this.head; i < this.end; i++) items[i - this.head] = items[i]!;
      this.end -= this.head;
      this.head = 0;
    }
  }

  /** A copy of the items, most urgent first. */
  values(): T[] {
    return this.items.slice(this.head, this.end);
  }
}
