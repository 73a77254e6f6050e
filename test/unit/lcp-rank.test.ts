/**
 * LCP's fast ranking (insertion sort from the previous order, cached ρ^(ν/ω)) equals the plain
 * definition: sort by P = μ·ρ^(ν/ω) descending, then most recent, then lowest id — on random
 * activation histories, including ties.
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { LcpScores } from '../../policies/cache/lcp.ts';

function naiveRanked(s: LcpScores, layer: number): number[] {
  const base = layer * s.experts;
  const p = (e: number) => {
    const key = base + e;
    const mu = s.mu[key]!;
    return mu === 0 ? 0 : mu * Math.pow(s.rho, s.nu(key) / s.omega);
  };
  return Array.from({ length: s.experts }, (_, e) => e).sort(
    (a, b) => p(b) - p(a) || s.last[base + b]! - s.last[base + a]! || a - b,
  );
}

describe('LcpScores ranking', () => {
  it('rankInto / ranked equal the definition after every step', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 12 }),
        fc.array(
          fc.tuple(fc.nat(1), fc.array(fc.nat(3), { minLength: 12, maxLength: 12 }), fc.integer({ min: 1, max: 4 })),
          { maxLength: 60 },
        ),
        fc.constantFrom(128, 3),
        (E, steps, omega) => {
          const s = new LcpScores(2, E, omega, 0.25);
          const rankOf = new Int32Array(E);
          for (const [layer, counts, tokens] of steps) {
            s.observe(layer, counts.slice(0, E), tokens);
            const want = naiveRanked(s, layer);
            expect(s.ranked(layer)).toEqual(want);
            s.rankInto(layer, rankOf);
            want.forEach((e, i) => expect(rankOf[e]).toBe(i));
            for (let e = 0; e < E; e++) {
              const key = layer * E + e;
              expect(s.priority(key)).toBe(s.mu[key] === 0 ? 0 : s.mu[key]! * Math.pow(s.rho, s.nu(key) / s.omega));
            }
          }
        },
      ),
      { seed: 9, numRuns: 200 },
    );
  });
});
