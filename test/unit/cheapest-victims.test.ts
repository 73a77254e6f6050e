/**
 * `CheapestVictims` (MoE-Infinity's first few victims, selected in one walk): hand-computed
 * orders with ties broken by last use then key, ranked victims after the others, the bound a
 * walk skips by, and when more victims may exist than were kept.
 */
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
});
