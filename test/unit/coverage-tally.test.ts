/** The binomial lower tail behind `CoverageTally.check` with random worlds (hand-computed). */
import { describe, expect, it } from 'vitest';
import { binomialLowerTail } from '../helpers/coverage.ts';

describe('binomialLowerTail', () => {
  it('sums the binomial terms up to k', () => {
    // n = 4, p = 1/2: P(X ≤ 1) = (1 + 4) / 16.
    expect(binomialLowerTail(1, 4, 0.5)).toBeCloseTo(5 / 16, 12);
    // n = 3, p = 1/4: P(X = 0) = 27/64; P(X ≤ 1) = (27 + 27) / 64.
    expect(binomialLowerTail(0, 3, 0.25)).toBeCloseTo(27 / 64, 12);
    expect(binomialLowerTail(1, 3, 0.25)).toBeCloseTo(54 / 64, 12);
    expect(binomialLowerTail(3, 3, 0.25)).toBe(1);
    expect(binomialLowerTail(-1, 3, 0.25)).toBe(0);
  });

  it('stays exact where (1 − p)^n underflows alone', () => {
    // n = 5 000, p = 1/4: the mean is 1 250; 0.75^5000 ≈ 1e-625 underflows, the tail near the mean does not.
    const atMean = binomialLowerTail(1250, 5000, 0.25);
    expect(atMean).toBeGreaterThan(0.5);
    expect(atMean).toBeLessThan(0.51);
    expect(binomialLowerTail(1100, 5000, 0.25)).toBeLessThan(1e-6);
  });

  it('judges 20 % of 25 worlds plausible at a true 25 %, and 2 of 100 not', () => {
    expect(binomialLowerTail(5, 25, 0.25)).toBeGreaterThan(0.001);
    expect(binomialLowerTail(2, 100, 0.25)).toBeLessThan(0.001);
  });
});
