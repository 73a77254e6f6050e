/**
 * `roundToTotal` (the aggregate router's rounding of expected counts to whole token-slots),
 * worked by hand: floors, then the missing units by largest fraction (ties by index), surplus
 * units taken by smallest fraction, entries past `n` untouched, and its scratch (kept between
 * calls) never leaking one call's order or fractions into the next.
 */
import { describe, expect, it } from 'vitest';
import { roundToTotal } from '../../workloads/aggregate-router.ts';

describe('roundToTotal', () => {
  it('hands the missing units out by largest fraction, ties by index', () => {
    // Floors [0, 1, 2, 0] = 3; fractions 0.5, 0.7, 0.2, 0.6: units to 1, then 3.
    const x = new Float64Array([0.5, 1.7, 2.2, 0.6]);
    roundToTotal(x, 4, 5, 10);
    expect([...x]).toEqual([0, 2, 2, 1]);
    // Equal fractions: by index.
    const y = new Float64Array([0.5, 0.5, 0.5]);
    roundToTotal(y, 3, 2, 10);
    expect([...y]).toEqual([1, 1, 0]);
  });

  it('takes surplus units by smallest fraction, after clamping to [0, cap]', () => {
    // Clamped to [1, 1, 0.4] (cap 1): floors 2, one too many; fractions 0, 0, 0.4: from entry 0.
    const x = new Float64Array([1.5, 1.5, 0.4]);
    roundToTotal(x, 3, 1, 1);
    expect([...x]).toEqual([0, 1, 0]);
    // A negative entry counts as 0 (fraction 0): floors [0, 2], the missing unit to entry 1.
    const y = new Float64Array([-2, 2.5]);
    roundToTotal(y, 2, 3, 10);
    expect([...y]).toEqual([0, 3]);
  });

  it('cycles when more units must move than entries can take once', () => {
    // Floors 0; 5 units over 2 entries (cap 3): 3 rounds, 0.9 first.
    const x = new Float64Array([0.1, 0.9]);
    roundToTotal(x, 2, 5, 3);
    expect([...x]).toEqual([2, 3]);
  });

  it('leaves entries past n alone, whatever an earlier call left in its scratch', () => {
    // A first call over 300 entries (more than the first scratch holds): the 10 largest
    // fractions are the last ten.
    const big = Float64Array.from({ length: 300 }, (_, i) => i / 1000);
    roundToTotal(big, 300, 10, 1);
    expect([...big].map((v, i) => (v === 1 ? i : -1)).filter((i) => i >= 0)).toEqual([
      290, 291, 292, 293, 294, 295, 296, 297, 298, 299,
    ]);
    expect([...big].reduce((a, b) => a + b)).toBe(10);
    // Then 4 of 6 entries: fractions 0.5, 0.7, 0.2, 0.6; 4 units go to 1, 3, 0, 2 and never to 4 or 5.
    const x = new Float64Array([0.5, 1.7, 2.2, 0.6, 9.5, 9.5]);
    roundToTotal(x, 4, 7, 10);
    expect([...x]).toEqual([1, 2, 3, 1, 9.5, 9.5]);
  });
});
