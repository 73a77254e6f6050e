/**
 * A list of ready tasks kept sorted by (priority, seq), lower first: `seq` is the order in
 * which tasks were added to the executor, unique, so the order is total and deterministic.
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
  private items: T[] = [];

  get length(): number {
    return this.items.length;
  }

  /** The i-th most urgent item. */
  at(i: number): T | undefined {
    return this.items[i];
  }

  /** Inserts in order (binary search: O(log n) comparisons, O(n) move). */
  insert(item: T): void {
    let lo = 0;
    let hi = this.items.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (compareRanked(this.items[mid]!, item) < 0) lo = mid + 1;
      else hi = mid;
    }
    this.items.splice(lo, 0, item);
  }

  /** Keeps the items satisfying `keep`, in order. */
  retain(keep: (item: T) => boolean): void {
    this.items = this.items.filter(keep);
  }

  values(): readonly T[] {
    return this.items;
  }
}

