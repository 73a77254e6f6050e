/**
 * A buffer's evictable set (resident, unpinned entries) as dense arrays, for the victim walks of
 * policies whose eviction order is total (any walk order gives the same victim): the buffer's own
 * dense keys and last uses where it keeps them (the executor's `ExpertBuffer`), else gathered
 * from `entries()` into this object's scratch (views without them: test doubles, plugins' own).
 * One place for that choice: MoE-Infinity's admission and executor walks, and
 * dependency-prefetch's victim, read the set through it.
 */
import type { BufferView, ExpertKey } from '../../sim/serving/policy.ts';

export class EvictableSet {
  /** Evictable keys: the first `count`, in no particular order. */
  keys: ArrayLike<ExpertKey> = new Int32Array(0);
  count = 0;
  /** Last use by key (the entries' `lastUsedNs`), valid for the keys listed. */
  lastUsed: ArrayLike<number> = new Float64Array(0);
  private ownKeys: Int32Array = new Int32Array(16);
  private ownUsed: Float64Array = new Float64Array(16);

  /** Reads `buffer`'s evictable set into `keys` / `count` / `lastUsed` (valid until the buffer changes); returns this. */
  of(buffer: BufferView): this {
    if (buffer.evictableKeys && buffer.lastUsedByKey) {
      this.keys = buffer.evictableKeys();
      this.count = buffer.evictableCount!;
      this.lastUsed = buffer.lastUsedByKey();
      return this;
    }
    let n = 0;
    for (const e of buffer.entries()) {
      if (e.state !== 'resident' || e.pinned) continue;
      const k = e.key;
      if (n === this.ownKeys.length) this.ownKeys = grownInt(this.ownKeys, n + 1);
      if (k >= this.ownUsed.length) this.ownUsed = grownFloat(this.ownUsed, k + 1);
      this.ownKeys[n++] = k;
      this.ownUsed[k] = e.lastUsedNs;
    }
    this.keys = this.ownKeys;
    this.count = n;
    this.lastUsed = this.ownUsed;
    return this;
  }
}

/** The length, at least `n`, of a grown scratch array (doubling). */
function grownLength(length: number, n: number): number {
  let size = Math.max(16, length);
  while (size < n) size *= 2;
  return size;
}

function grownInt(a: Int32Array, n: number): Int32Array {
  const b = new Int32Array(grownLength(a.length, n));
  b.set(a);
  return b;
}

function grownFloat(a: Float64Array, n: number): Float64Array {
  const b = new Float64Array(grownLength(a.length, n));
  b.set(a);
  return b;
}
