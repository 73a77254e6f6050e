/**
 * `CheapestVictims` (MoE-Infinity's first few victims, selected in one walk): hand-computed
 * orders with ties broken by last use then key, ranked victims after the others, the bound a
 * walk skips by, and when more victims may exist than were kept.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CheapestVictims } from '../../policies/moe-infinity/cheapest-victims.ts';

// (key, ranked, priority or −rank, last use)
const OFFERS: [number, boolean, number, number][] = [
  [5, false, 0.5, 10],
  [3, false, 0.5, 10],
  [7, true, -1, 0],
  [1, false, 0.2, 99],
  [9, false, 0.5, 5],
  [8, true, -3, 50],
];

function take(limit: number): { keys: number[]; more: boolean } {
  const c = new CheapestVictims();
  c.clear(limit);
  for (const [k, r, p, u] of OFFERS) c.offer(k, r, p, u);
  c.finish();
  const keys: number[] = [];
  for (let v = c.peek(); v >= 0; v = c.peek()) {
    keys.push(c.keyAt(v));
    c.pop();
  }
  return { keys, more: c.mayHoldMore() };
}

describe('CheapestVictims', () => {
  it('keeps the first victims in eviction order: priority, then last use, then key; ranked ones last, by −rank', () => {
    // 1 (0.2); at 0.5: 9 (used 5), then 3 and 5 (used 10, lower key first); ranked: 8 (−3), 7 (−1).
    expect(take(10)).toEqual({ keys: [1, 9, 3, 5, 8, 7], more: false });
    expect(take(3)).toEqual({ keys: [1, 9, 3], more: true });
    expect(take(1)).toEqual({ keys: [1], more: true });
    expect(take(6)).toEqual({ keys: [1, 9, 3, 5, 8, 7], more: true });
    expect(take(0)).toEqual({ keys: [], more: true });
  });

  it('bounds what a walk offers once full, and a copy may hold fewer than exist', () => {
    const c = new CheapestVictims();
    c.clear(2);
    expect(c.unrankedBound()).toBe(Infinity);
    c.offer(4, false, 0.7, 0);
    c.offer(6, false, 0.3, 0);
    // Full: the worst held (0.7) bounds the next offers.
    expect(c.unrankedBound()).toBe(0.7);
    c.offer(2, false, 0.1, 0);
    expect(c.unrankedBound()).toBe(0.3);
    c.finish();
    const copy = new CheapestVictims();
    copy.copyFrom(c);
    expect([copy.keyAt(copy.peek()), copy.prioAt(copy.peek())]).toEqual([2, 0.1]);
    copy.pop();
    copy.pop();
    expect(copy.peek()).toBe(-1);
    expect(copy.mayHoldMore()).toBe(true);
    // A ranked worst bounds nothing for unranked offers.
    const r = new CheapestVictims();
    r.clear(1);
    r.offer(1, true, -2, 0);
    expect(r.unrankedBound()).toBe(Infinity);
  });

  it('a copy made after some were handed out hands out all of them again, from the first', () => {
    const c = new CheapestVictims();
    c.clear(10);
    for (const [k, r, p, u] of OFFERS) c.offer(k, r, p, u);
    c.finish();
    // Two handed out (1 and 9), then copied.
    c.pop();
    c.pop();
    expect(c.keyAt(c.peek())).toBe(3);
    const copy = new CheapestVictims();
    copy.copyFrom(c);
    const keys: number[] = [];
    for (let v = copy.peek(); v >= 0; v = copy.peek()) {
      keys.push(copy.keyAt(v));
      copy.pop();
    }
    expect(keys).toEqual([1, 9, 3, 5, 8, 7]);
    // The original goes on where it was.
    expect(c.keyAt(c.peek())).toBe(3);
  });

  it('hands out the first `limit` of any offers in eviction order (a sort of all of them), and so does a copy', () => {
    const offer = fc.record({
      ranked: fc.boolean(),
      prio: fc.constantFrom(-3, -1, 0, 0.25, 0.5),
      used: fc.integer({ min: 0, max: 4 }),
    });
    let grown = 0;
    fc.assert(
      fc.property(
        // Up to 150 offers: past the 64 items the arrays start with (they grow, and so do a copy's).
        fc.array(offer, { maxLength: 150, size: 'max' }),
        fc.integer({ min: 0, max: 160 }),
        fc.nat({ max: 20 }),
        (offers, limit, handed) => {
          // Keys not in offer order (the selection must not depend on the order of the offers).
          const items = offers.map((o, i) => ({ key: (i * 37) % 151, ...o }));
          const c = new CheapestVictims();
          c.clear(limit);
          for (const it of items) c.offer(it.key, it.ranked, it.prio, it.used);
          c.finish();
          const want = [...items]
            .sort((a, b) => Number(a.ranked) - Number(b.ranked) || a.prio - b.prio || a.used - b.used || a.key - b.key)
            .slice(0, limit)
            .map((i) => i.key);
          // Some handed out, then a copy: it holds every one of them again, from the first.
          for (let j = 0; j < handed; j++) c.pop();
          const copy = new CheapestVictims();
          copy.copyFrom(c);
          const drain = (v: CheapestVictims): number[] => {
            const got: number[] = [];
            for (let p = v.peek(); p >= 0; p = v.peek()) {
              got.push(v.keyAt(p));
              v.pop();
            }
            return got;
          };
          expect(drain(c)).toEqual(want.slice(handed));
          expect(drain(copy)).toEqual(want);
          expect(c.mayHoldMore()).toBe(items.length >= limit);
          expect(copy.mayHoldMore()).toBe(true);
          if (want.length > 64) grown++;
        },
      ),
    );
    // The generator reaches selections past the arrays' first size.
    expect(grown).toBeGreaterThan(5);
  });
});
