/**
 * MemoryPool (byte-exact, categories, peaks, typed failure) and BlockAllocator (paged KV
 * blocks on top of a pool).
 */
import { describe, expect, it, vi } from 'vitest';
import { CapacityError, InvariantError } from '../../sim/kernel/errors.ts';
import { ns, type Ns } from '../../sim/kernel/time.ts';
import { BlockAllocator } from '../../sim/resources/block-allocator.ts';
import { MemoryPool } from '../../sim/resources/memory-pool.ts';
import { RecordingSink } from './resources-helpers.ts';

function clockAt(t: number): { now: Ns } {
  return { now: ns(t) };
}

function pool(capacityBytes: number, sink?: RecordingSink) {
  const clock = clockAt(0);
  return { clock, pool: new MemoryPool('vram', capacityBytes, clock, sink) };
}

describe('MemoryPool', () => {
  it('tracks used bytes per category and peaks in total and per category', () => {
    const { pool: p } = pool(1000);
    const kv = p.allocate(300, 'kvCache', 'seq 1');
    const ec = p.allocate(200, 'expertCache');
    expect([p.usedBytes, p.freeBytes, p.peakBytes, p.liveAllocations]).toEqual([500, 500, 500, 2]);
    p.free(kv);
    const kv2 = p.allocate(100, 'kvCache');
    expect(p.usedBy('kvCache')).toBe(100);
    expect(p.peakBy('kvCache')).toBe(300);
    expect(p.usedBy('expertCache')).toBe(200);
    expect(p.usedBy('activations')).toBe(0);
    expect(p.peakBy('activations')).toBe(0);
    expect(p.peakBytes).toBe(500);
    // peaks() lists only categories ever used, in MEMORY_CATEGORIES order.
    expect(p.peaks()).toEqual({ expertCache: 200, kvCache: 300 });
    expect(Object.keys(p.peaks())).toEqual(['expertCache', 'kvCache']);
    expect(kv2).toMatchObject({ bytes: 100, category: 'kvCache', label: '', freed: false });
    p.free(ec);
    p.free(kv2);
    expect([p.usedBytes, p.liveAllocations, p.peakBytes]).toEqual([0, 0, 500]);
  });

  it('fills to exactly the capacity, and not one byte more', () => {
    const { pool: p } = pool(1000);
    p.allocate(999, 'workspace');
    expect(p.canAllocate(1)).toBe(true);
    p.allocate(1, 'workspace');
    expect(p.canAllocate(1)).toBe(false);
    expect(p.canAllocate(0)).toBe(true);
    expect(p.tryAllocate(0, 'workspace')).not.toBeNull(); // zero bytes always fit
    expect(p.tryAllocate(1, 'workspace')).toBeNull();
  });

  it('allocate throws a CapacityError with the pool, request, free and capacity in the message', () => {
    const { pool: p, clock } = pool(1000);
    p.allocate(500, 'denseWeights');
    clock.now = ns(1234);
    let err: unknown;
    try {
      p.allocate(600, 'kvCache', 'seq 3');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(CapacityError);
    const ce = err as CapacityError;
    expect(ce.message).toBe('[t=1234ns vram] vram: cannot allocate 600 B for kvCache (seq 3): 500 B free of 1000');
    expect([ce.requestedBytes, ce.freeBytes, ce.simTimeNs, ce.origin]).toEqual([600, 500, 1234, 'vram']);
    expect(() => p.allocate(501, 'kvCache')).toThrow('cannot allocate 501 B for kvCache: 500 B free of 1000');
  });

  it('a failed tryAllocate / allocate changes nothing and reports nothing', () => {
    const sink = new RecordingSink();
    const { pool: p } = pool(1000, sink);
    p.allocate(700, 'expertCache');
    const before = {
      used: p.usedBytes,
      peak: p.peakBytes,
      peaks: p.peaks(),
      live: p.liveAllocations,
      records: sink.memory.length,
    };
    expect(p.tryAllocate(301, 'kvCache')).toBeNull();
    expect(() => p.allocate(400, 'kvCache')).toThrow(CapacityError);
    expect({
      used: p.usedBytes,
      peak: p.peakBytes,
      peaks: p.peaks(),
      live: p.liveAllocations,
      records: sink.memory.length,
    }).toEqual(before);
    expect(p.peakBy('kvCache')).toBe(0);
    // The id counter is not consumed either: ids stay dense.
    const a = p.allocate(300, 'kvCache');
    const b = p.allocate(0, 'kvCache');
    expect(b.id).toBe(a.id + 1);
  });

  it('double free throws an InvariantError and leaves the pool as it was', () => {
    const { pool: p } = pool(1000);
    const a = p.allocate(100, 'activations', 'hidden');
    p.allocate(50, 'activations');
    p.free(a);
    expect(a.freed).toBe(true);
    expect(() => p.free(a)).toThrow(InvariantError);
    expect(() => p.free(a)).toThrow(/double free of allocation \d+ \(hidden\)/);
    expect(p.usedBytes).toBe(50);
    expect(p.usedBy('activations')).toBe(50);
    expect(p.liveAllocations).toBe(1);
  });

  it('rejects negative, fractional and non-finite sizes, and bad capacities', () => {
    const { pool: p } = pool(1000);
    for (const bad of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => p.tryAllocate(bad, 'workspace')).toThrow(RangeError);
      expect(() => p.allocate(bad, 'workspace')).toThrow(RangeError);
    }
    expect(p.usedBytes).toBe(0);
    for (const bad of [-1, 0.5, Number.NaN, 2 ** 53])
      expect(() => new MemoryPool('x', bad, clockAt(0))).toThrow(RangeError);
    expect(new MemoryPool('empty', 0, clockAt(0)).capacityBytes).toBe(0);
  });

  it('reports every change to the sink with the time, category and totals', () => {
    const sink = new RecordingSink();
    const { pool: p, clock } = pool(1000, sink);
    const a = p.allocate(300, 'kvCache');
    clock.now = ns(50);
    p.allocate(200, 'expertCache');
    clock.now = ns(90);
    p.free(a);
    expect(sink.memory).toEqual([
      { pool: 'vram', category: 'kvCache', timeNs: 0, categoryUsedBytes: 300, usedBytes: 300, capacityBytes: 1000 },
      {
        pool: 'vram',
        category: 'expertCache',
        timeNs: 50,
        categoryUsedBytes: 200,
        usedBytes: 500,
        capacityBytes: 1000,
      },
      { pool: 'vram', category: 'kvCache', timeNs: 90, categoryUsedBytes: 0, usedBytes: 200, capacityBytes: 1000 },
    ]);
  });

  it('wakes waiters once, after the next free, when the bytes are already back', () => {
    const { pool: p } = pool(1000);
    const a = p.allocate(1000, 'kvCache');
    const b = p.allocate(0, 'kvCache');
    const seen: number[] = [];
    const waiter = vi.fn(() => seen.push(p.freeBytes));
    p.whenFreed(waiter);
    // A waiter that re-registers waits for the following free, not this one.
    const again = vi.fn();
    p.whenFreed(() => p.whenFreed(again));
    p.free(a);
    expect(waiter).toHaveBeenCalledTimes(1);
    expect(seen).toEqual([1000]);
    expect(again).not.toHaveBeenCalled();
    p.free(b);
    expect(waiter).toHaveBeenCalledTimes(1);
    expect(again).toHaveBeenCalledTimes(1);
  });
});

describe('BlockAllocator', () => {
  // Blocks of 16 token slots, 100 B each, 4 blocks: 400 B reserved from a 1000 B pool.
  function blocks(totalBlocks = 4) {
    const { pool: p } = pool(1000);
    return { p, b: new BlockAllocator(p, 16, 100, totalBlocks) };
  }

  it('reserves its bytes from the pool at construction, in its category', () => {
    const { p, b } = blocks();
    expect(p.usedBytes).toBe(400);
    expect(p.usedBy('kvCache')).toBe(400);
    expect(b.freeBlocks).toBe(4);
    const { pool: other } = pool(1000);
    new BlockAllocator(other, 16, 100, 2, 'prefetchBuffer');
    expect(other.usedBy('prefetchBuffer')).toBe(200);
    // Too big for the pool: the CapacityError of the pool.
    expect(() => new BlockAllocator(p, 16, 100, 7)).toThrow(CapacityError);
    expect(p.usedBytes).toBe(400);
  });

  it('ensure grows an owner to ⌈tokens / blockTokens⌉ blocks and never shrinks it', () => {
    const { b } = blocks();
    expect(b.blocksFor(0)).toBe(0);
    expect(b.blocksFor(1)).toBe(1);
    expect(b.blocksFor(16)).toBe(1);
    expect(b.blocksFor(17)).toBe(2);
    expect(b.ensure(1, 1)).toBe(true);
    expect(b.blocksHeldBy(1)).toBe(1);
    expect(b.ensure(1, 16)).toBe(true);
    expect(b.blocksHeldBy(1)).toBe(1);
    expect(b.ensure(1, 17)).toBe(true);
    expect(b.blocksHeldBy(1)).toBe(2);
    expect(b.ensure(1, 3)).toBe(true); // already enough: no change
    expect(b.blocksHeldBy(1)).toBe(2);
    expect([b.usedBlocks, b.freeBlocks, b.owners]).toEqual([2, 2, 1]);
    expect(b.ensure(2, 0)).toBe(true); // nothing needed, nothing held
    expect(b.blocksHeldBy(2)).toBe(0);
  });

  it('ensure is atomic: all needed blocks or nothing', () => {
    const { b } = blocks();
    expect(b.ensure(1, 48)).toBe(true); // 3 blocks
    expect(b.canEnsure(2, 33)).toBe(false); // 3 more, 1 free
    expect(b.ensure(2, 33)).toBe(false);
    expect([b.usedBlocks, b.blocksHeldBy(2), b.owners]).toEqual([3, 0, 1]);
    expect(b.canEnsure(1, 64)).toBe(true); // 1 more for owner 1
    expect(b.ensure(1, 65)).toBe(false); // would need 2 more
    expect(b.blocksHeldBy(1)).toBe(3);
    expect(b.ensure(2, 16)).toBe(true);
    expect(b.freeBlocks).toBe(0);
  });

  it('release frees all of an owner’s blocks; peak is kept', () => {
    const { b } = blocks();
    b.ensure(1, 20); // 2
    b.ensure(2, 30); // 2
    expect(b.peakBlocks).toBe(4);
    expect(b.release(1)).toBe(2);
    expect(b.release(1)).toBe(0); // unknown owner: nothing
    expect([b.usedBlocks, b.owners, b.peakBlocks]).toEqual([2, 1, 4]);
    expect(b.ensure(3, 32)).toBe(true);
    expect(b.peakBlocks).toBe(4);
  });

  it('dispose returns the reservation to the pool once', () => {
    const { p, b } = blocks();
    b.dispose();
    expect(p.usedBytes).toBe(0);
    b.dispose();
    expect(p.usedBytes).toBe(0);
  });

  it('rejects bad geometry and bad token counts', () => {
    const { pool: p } = pool(1000);
    expect(() => new BlockAllocator(p, 0, 100, 1)).toThrow(RangeError);
    expect(() => new BlockAllocator(p, 16, 1.5, 1)).toThrow(RangeError);
    expect(() => new BlockAllocator(p, 16, 100, -1)).toThrow(RangeError);
    expect(p.usedBytes).toBe(0);
    const { b } = blocks();
    for (const bad of [Number.NaN, -1, Number.POSITIVE_INFINITY]) {
      expect(() => b.ensure(1, bad)).toThrow(RangeError);
      expect(() => b.canEnsure(1, bad)).toThrow(RangeError);
    }
    expect([b.usedBlocks, b.owners]).toEqual([0, 0]);
  });
});
