/**
 * A set of expert keys in insertion order, as a `Set<number>` iterates them, kept as an array
 * plus a membership byte per key: MoEpic's per-layer lists of cached tops are read on every
 * whole-expert use (the LCP victim walk) and changed on most, and a layer holds at most its
 * experts, so an array walk and an order-keeping removal cost less than hashing.
 */
export class OrderedKeys implements Iterable<number> {
  private readonly list: number[] = [];
  private readonly member: Uint8Array;

  /** Keys are 0 … keyCount − 1. */
  constructor(keyCount: number) {
    this.member = new Uint8Array(keyCount);
  }

  get size(): number {
    return this.list.length;
  }

  /** The keys in insertion order (read-only: a view of the set's own array). */
  get keys(): readonly number[] {
    return this.list;
  }

  has(key: number): boolean {
    return this.member[key] === 1;
  }

  /** Adds `key` at the end unless present (a present key keeps its place, as in a Set). */
  add(key: number): void {
    if (this.member[key] === 1) return;
    this.member[key] = 1;
    this.list.push(key);
  }

  /** Removes `key`, keeping the others' order; false when it was absent. */
  delete(key: number): boolean {
    if (this.member[key] !== 1) return false;
    this.member[key] = 0;
    const list = this.list;
    const n = list.length - 1;
    for (let i = list.indexOf(key); i < n; i++) list[i] = list[i + 1]!;
    list.pop();
    return true;
  }

  clear(): void {
    for (const k of this.list) this.member[k] = 0;
    this.list.length = 0;
  }

  [Symbol.iterator](): IterableIterator<number> {
    return this.list.values();
  }
}
