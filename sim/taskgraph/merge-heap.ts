/**
 * The dispatch pass's merge (`dispatcher.ts`): a binary min-heap of the lists it walks, ordered
 * by their heads. Its array is kept between passes and never shrinks (a pass runs at almost
 * every instant with a completion; a heap or list emptied by `length = 0` gives its storage
 * back and is grown again from nothing at the next pass). Its order is a total one (two lists
 * never share a head task), so the pops are the same as any other heap's.
 */
export class MergeHeap<T> {
  private readonly items: T[] = [];
  private n = 0;

  constructor(private readonly less: (a: T, b: T) => number) {}

  get size(): number {
    return this.n;
  }

  push(x: T): void {
    const items = this.items;
    let i = this.n++;
    if (i === items.length) items.push(x);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = items[parent]!;
      if (this.less(x, p) >= 0) break;
      items[i] = p;
      i = parent;
    }
    items[i] = x;
  }

  /** The least item, removed; undefined when empty. */
  pop(): T | undefined {
    if (this.n === 0) return undefined;
    const items = this.items;
    const top = items[0]!;
    const last = items[--this.n]!;
    const n = this.n;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && this.less(items[r]!, items[l]!) < 0 ? r : l;
      if (this.less(items[c]!, last) >= 0) break;
      items[i] = items[c]!;
      i = c;
    }
    if (n > 0) items[i] = last;
    return top;
  }

  /** Empties the heap (its slots are kept; stale ones are never read). */
  clear(): void {
    this.n = 0;
  }
}
