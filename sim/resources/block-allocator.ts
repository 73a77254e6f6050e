/**
 * A paged block allocator (for KV caches) on top of a memory pool.
 *
 * At construction it reserves `totalBlocks × blockBytes` from the pool as one allocation of
 * its category (like vLLM's preallocated KV pool), then hands out blocks to owners
 * (sequences). `ensure(owner, tokens)` grows an owner to hold `tokens` token slots,
 * atomically: either every needed block is granted or nothing changes. `release(owner)` frees
 * all of an owner's blocks. `used ≤ total` always.
 */
import type { Allocation, MemoryCategory, MemoryPool } from './memory-pool.ts';

export class BlockAllocator {
  private readonly blocksOf = new Map<number, number>();
  private used = 0;
  private peak = 0;
  private readonly reservation: Allocation;

  constructor(
    readonly pool: MemoryPool,
    readonly blockTokens: number,
    readonly blockBytes: number,
    readonly totalBlocks: number,
    category: MemoryCategory = 'kvCache',
  ) {
    if (!(blockTokens >= 1) || !Number.isInteger(blockTokens))
      throw new RangeError(`blockTokens must be an integer ≥ 1, got ${blockTokens}`);
    if (!(blockBytes >= 0) || !Number.isInteger(blockBytes))
      throw new RangeError(`blockBytes must be a non-negative integer, got ${blockBytes}`);
    if (!(totalBlocks >= 0) || !Number.isInteger(totalBlocks))
      throw new RangeError(`totalBlocks must be a non-negative integer, got ${totalBlocks}`);
    this.reservation = pool.allocate(totalBlocks * blockBytes, category, 'block allocator');
  }

  get usedBlocks(): number {
    return this.used;
  }
  get freeBlocks(): number {
    return this.totalBlocks - this.used;
  }
  get peakBlocks(): number {
    return this.peak;
  }
  blocksHeldBy(owner: number): number {
    return this.blocksOf.get(owner) ?? 0;
  }
  get owners(): number {
    return this.blocksOf.size;
  }

  /** Blocks needed to hold `tokens` token slots. Throws RangeError unless `tokens` is finite and ≥ 0. */
  blocksFor(tokens: number): number {
    // Without this, ensure(owner, NaN) would store NaN blocks and turn `used` into NaN.
    if (!(tokens >= 0) || !Number.isFinite(tokens))
      throw new RangeError(`token count must be finite and ≥ 0, got ${tokens}`);
    return Math.ceil(tokens / this.blockTokens);
  }

  /** True if `owner` could grow to `tokens` slots now. */
  canEnsure(owner: number, tokens: number): boolean {
    return this.blocksFor(tokens) - this.blocksHeldBy(owner) <= this.freeBlocks;
  }

  /** Grows `owner` to hold `tokens` slots. Returns false (and changes nothing) if blocks are short. */
  ensure(owner: number, tokens: number): boolean {
    const have = this.blocksHeldBy(owner);
    const need = this.blocksFor(tokens) - have;
    if (need <= 0) return true;
    if (need > this.freeBlocks) return false;
    this.blocksOf.set(owner, have + need);
    this.used += need;
    if (this.used > this.peak) this.peak = this.used;
    return true;
  }

  /** Frees every block of `owner`; returns how many. */
  release(owner: number): number {
    const n = this.blocksOf.get(owner) ?? 0;
    this.blocksOf.delete(owner);
    this.used -= n;
    return n;
  }

  /** Returns the reserved bytes to the pool (end of life). */
  dispose(): void {
    if (!this.reservation.freed) this.pool.free(this.reservation);
  }
}
