/**
 * `EvictableSet`: a buffer's resident, unpinned entries as dense keys with last uses — the
 * buffer's own arrays where it keeps them (the executor's `ExpertBuffer`), else gathered from
 * its entries (hand-built views).
 */
import { describe, expect, it } from 'vitest';
import { EvictableSet } from '../../policies/cache/evictable-set.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import { MemoryPool } from '../../sim/resources/memory-pool.ts';
import { ExpertBuffer } from '../../sim/serving/expert-buffer.ts';
import type { BufferEntryView } from '../../sim/serving/policy.ts';
import { fakeBuffer } from './buffer-fakes.ts';

const listed = (s: EvictableSet): number[] =>
  Array.from({ length: s.count }, (_, i) => s.keys[i]!).sort((a, b) => a - b);

describe('EvictableSet', () => {
  it('gathers the resident, unpinned entries of a view without dense keys, with their last uses', () => {
    const s = new EvictableSet().of(
      fakeBuffer({ 3: { lastUsedNs: 7 }, 40: { lastUsedNs: 2 }, 5: { pinned: true }, 6: { state: 'loading' }, 2: {} }),
    );
    expect(listed(s)).toEqual([2, 3, 40]);
    expect([s.lastUsed[2], s.lastUsed[3], s.lastUsed[40]]).toEqual([0, 7, 2]);
    // Past its first scratch (16 keys), then a smaller set on the next read.
    const many: Record<number, Partial<BufferEntryView>> = {};
    for (let k = 0; k < 40; k++) many[k] = { lastUsedNs: k };
    expect(listed(s.of(fakeBuffer(many)))).toEqual(Array.from({ length: 40 }, (_, k) => k));
    expect(s.lastUsed[39]).toBe(39);
    expect(listed(s.of(fakeBuffer({ 9: {} })))).toEqual([9]);
  });

  it("reads an ExpertBuffer's own dense set, in place", () => {
    const clock = { now: 0 as Ns };
    const b = new ExpertBuffer(4, 100, new MemoryPool('vram', 1000, clock), clock);
    b.occupy(3, 'prefetch');
    b.arrived(3);
    b.occupy(7, 'prefetch');
    const s = new EvictableSet().of(b);
    expect(s.keys).toBe(b.evictableKeys());
    expect(s.lastUsed).toBe(b.lastUsedByKey());
    expect(listed(s)).toEqual([3]);
  });
});
