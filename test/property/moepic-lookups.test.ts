/**
 * MoEpic's faster lookups against what they replaced, over random operation sequences:
 * - `OrderedKeys` (the policy's per-layer top lists) iterates, counts and answers `has` as a
 *   `Set<number>` given the same adds, deletes and clears;
 * - `IndexedTopSegmentCache` (the executor's segment cache with array lookups) answers `entry`,
 *   `topFraction`, `topState`, `topPinned`, `keys` and `size` as the Map-based `TopSegmentCache`
 *   given the same adds, arrivals, pins and releases (the operations that would throw are skipped).
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { OrderedKeys } from '../../policies/moepic/ordered-keys.ts';
import { TopSegmentCache } from '../../sim/serving/expert-buffer.ts';
import { IndexedTopSegmentCache } from '../../sim/serving/parts/split-residency.ts';
import { MemoryPool } from '../../sim/resources/memory-pool.ts';
import type { Ns } from '../../sim/kernel/time.ts';

const KEYS = 12;
const op = fc.tuple(fc.integer({ min: 0, max: 9 }), fc.nat({ max: KEYS - 1 }), fc.integer({ min: 1, max: 10 }));

describe('OrderedKeys', () => {
  it('behaves as a Set<number> (order, size, membership)', () => {
    let readds = 0;
    let deletes = 0;
    fc.assert(
      fc.property(fc.array(op, { minLength: 30, maxLength: 80 }), (ops) => {
        const got = new OrderedKeys(KEYS);
        const want = new Set<number>();
        for (const [kind, key] of ops) {
          if (kind === 0) {
            got.clear();
            want.clear();
          } else if (kind <= 4) {
            if (want.has(key)) readds++;
            got.add(key);
            want.add(key);
          } else {
            if (want.has(key)) deletes++;
            expect(got.delete(key)).toBe(want.delete(key));
          }
          expect([...got]).toEqual([...want]);
          expect(got.keys).toEqual([...want]);
          expect(got.size).toBe(want.size);
          for (let k = 0; k < KEYS; k++) expect(got.has(k)).toBe(want.has(k));
        }
      }),
      { numRuns: 120 },
    );
    expect(readds).toBeGreaterThan(300);
    expect(deletes).toBeGreaterThan(300);
  });
});

describe('IndexedTopSegmentCache', () => {
  it('answers every lookup as the Map-based TopSegmentCache', () => {
    let releases = 0;
    let hits = 0;
    fc.assert(
      fc.property(fc.array(op, { minLength: 30, maxLength: 80 }), (ops) => {
        const make = <C extends TopSegmentCache>(
          Kind: new (...a: ConstructorParameters<typeof TopSegmentCache>) => C,
        ) => new Kind(500, 100, KEYS, new MemoryPool('vram', 10_000, { now: 0 as Ns }), { now: 0 as Ns });
        const got = make(IndexedTopSegmentCache);
        const want = make(TopSegmentCache);
        for (const [kind, key, tenth] of ops) {
          const t = want.entry(key);
          if (kind <= 4 && !t && want.topBytes(tenth / 10) <= want.freeBytes) {
            got.add(key, tenth / 10, kind <= 1);
            want.add(key, tenth / 10, kind <= 1);
          } else if (kind <= 6 && t?.state === 'loading') {
            got.arrived(key);
            want.arrived(key);
          } else if (kind === 7 && t) {
            got.entry(key)!.pinned = !t.pinned;
            t.pinned = !t.pinned;
          } else if (t && !t.pinned) {
            got.release(key);
            want.release(key);
            releases++;
          }
          for (let k = 0; k < KEYS; k++) {
            if (want.entry(k)) hits++;
            expect(got.entry(k)).toEqual(want.entry(k));
            expect(got.topFraction(k)).toBe(want.topFraction(k));
            expect(got.topState(k)).toBe(want.topState(k));
            expect(got.topPinned(k)).toBe(want.topPinned(k));
          }
          expect([...got.keys()]).toEqual([...want.keys()]);
          expect(got.size).toBe(want.size);
          expect(got.usedBytes).toBe(want.usedBytes);
        }
      }),
      { numRuns: 80 },
    );
    expect(releases).toBeGreaterThan(300);
    expect(hits).toBeGreaterThan(5_000);
  });
});
