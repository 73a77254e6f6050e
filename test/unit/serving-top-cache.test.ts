/**
 * MoEpic's top-segment cache (`TopSegmentCache`) by hand: the bytes of a top, the (0, 1] range of
 * a top fraction, duplicate and over-capacity adds, arrivals and releases with their residency
 * records under key + span, a fraction that rounds to the whole expert. A whole-set mutation sample found the fraction check unguarded, and
 * `ExpertBuffer.isLoading` (policy-view API no built-in code calls) never run.
 */
import { describe, expect, it } from 'vitest';
import type { ExpertKey } from '../../sim/serving/policy.ts';
import { ExpertBuffer, TopSegmentCache } from '../../sim/serving/expert-buffer.ts';
import { MemoryPool } from '../../sim/resources/memory-pool.ts';
import type { Ns } from '../../sim/kernel/time.ts';

function cache() {
  const clock = { now: 5 as Ns };
  const log: [number, boolean, number][] = [];
  const sink = { onExpertResidency: (k: number, on: boolean, t: number) => log.push([k, on, t]) };
  const vram = new MemoryPool('vram', 10_000, clock);
  // 300 B of top capacity, 100 B per expert, keys of the top reported at key + 1000.
  return { c: new TopSegmentCache(300, 100, 1000, vram, clock, sink), vram, log };
}
const k = (n: number) => n as ExpertKey;

describe('TopSegmentCache', () => {
  it('a top fraction must lie in (0, 1]', () => {
    const { c } = cache();
    for (const f of [0, -0.5, 1.5, Number.NaN])
      expect(() => c.add(k(1), f, true)).toThrow(`top fraction ${f} of expert 1 outside (0, 1]`);
    expect(c.size).toBe(0);
    expect(c.add(k(1), 1, true).bytes).toBe(100);
  });

  it('a fraction that rounds to every byte is the whole expert (no bottom of 0 bytes left to fetch)', () => {
    const { c } = cache();
    // 0.996 × 100 B rounds to 100 B: the top holds the whole expert, fraction 1.
    expect(c.add(k(1), 0.996, true)).toMatchObject({ fraction: 1, bytes: 100 });
    expect(c.topFraction(k(1))).toBe(1);
    // 0.994 × 100 B rounds to 99 B: a 1-byte bottom remains, the fraction as given.
    expect(c.add(k(2), 0.994, true)).toMatchObject({ fraction: 0.994, bytes: 99 });
  });

  it('bytes are the rounded share of an expert; duplicates and overflow throw', () => {
    const { c, vram, log } = cache();
    expect(c.add(k(1), 0.255, true).bytes).toBe(26);
    expect(c.add(k(2), 0.5, false)).toMatchObject({ state: 'loading', bytes: 50, pinned: false });
    expect(c.usedBytes).toBe(76);
    expect(vram.usedBytes).toBe(76);
    expect(c.freeBytes).toBe(224);
    expect(() => c.add(k(1), 0.1, true)).toThrow('top of expert 1 already cached');
    c.add(k(3), 1, true);
    c.add(k(4), 1, true);
    expect(() => c.add(k(5), 0.25, true)).toThrow('segment cache full (276 + 25 B > 300 B) adding the top of 5');
    expect(c.add(k(5), 0.24, true).bytes).toBe(24);
    expect(c.arrived(k(2)).state).toBe('resident');
    expect(() => c.arrived(k(2))).toThrow('arrival of top 2, which is not loading');
    c.release(k(1));
    expect(c.usedBytes).toBe(274);
    expect(vram.usedBytes).toBe(274);
    expect(c.topFraction(k(1))).toBe(0);
    expect(log).toEqual([
      [1001, true, 5],
      [1003, true, 5],
      [1004, true, 5],
      [1005, true, 5],
      [1002, true, 5],
      [1001, false, 5],
    ]);
  });
});

describe('ExpertBuffer state queries', () => {
  it('isLoading / isResident / has follow an entry from loading to resident to released', () => {
    const clock = { now: 0 as Ns };
    const buf = new ExpertBuffer(2, 100, new MemoryPool('vram', 1000, clock), clock);
    expect([buf.has(k(3)), buf.isLoading(k(3)), buf.isResident(k(3))]).toEqual([false, false, false]);
    buf.occupy(k(3), 'prefetch');
    expect([buf.has(k(3)), buf.isLoading(k(3)), buf.isResident(k(3))]).toEqual([true, true, false]);
    buf.arrived(k(3));
    expect([buf.has(k(3)), buf.isLoading(k(3)), buf.isResident(k(3))]).toEqual([true, false, true]);
    buf.release(k(3));
    expect([buf.has(k(3)), buf.isLoading(k(3)), buf.isResident(k(3))]).toEqual([false, false, false]);
  });
});
