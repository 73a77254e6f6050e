/**
 * Property: the synthetic router's measured adjacent-token statistics track its knobs. With flat
 * popularity over many experts, no request skew, no shared tokens and no cross-layer paths, a
 * token continues the previous one with probability τ and then copies each slot with
 * probability ρ, so the shared fraction is τρ plus chance overlap (≤ k/E per slot) and
 * P(any shared) is τ(1 − (1 − ρ)^k) plus chance.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { statsOf } from '../../workloads/stats/trace-stats.ts';
import { SyntheticModel } from '../../workloads/synthetic/model.ts';
import { SyntheticRouting } from '../../workloads/synthetic/router.ts';
import { KnobsSchema } from '../../workloads/synthetic/profile.ts';
import type { TraceRequest } from '../../workloads/trace/format.ts';

const seed = process.env['MOESIM_FC_SEED'] ? Number(process.env['MOESIM_FC_SEED']) : undefined;

describe('router overlap tracks τ and ρ', () => {
  it('shared fraction ≈ τρ and P(any shared) ≈ τ(1 − (1 − ρ)^k)', () => {
    fc.assert(
      fc.property(
        fc.double({ min: 0, max: 1, noNaN: true }),
        fc.double({ min: 0.01, max: 1, noNaN: true }),
        fc.integer({ min: 1, max: 4 }),
        (tau, rho, k) => {
          const E = 256;
          const L = 2;
          const knobs = KnobsSchema.parse({
            popularity: { zipfExponent: 0 },
            requestConcentration: null,
            temporalReuse: tau,
            temporalDepth: rho,
            crossLayer: 0,
            taskConcentration: null,
          });
          const routing = new SyntheticRouting(new SyntheticModel({ moeLayers: L, experts: E, topK: k }, knobs), 'p');
          const T = 60;
          const reqs: TraceRequest[] = Array.from({ length: 60 }, (_, i) => {
            const out = new Int32Array(T * L * k);
            routing.create(i, undefined).generateAll(T, out);
            return {
              id: String(i),
              line: 0,
              promptTokens: 0,
              prefillRecorded: false,
              tokens: T,
              outputTokens: T,
              experts: out,
            };
          });
          const s = statsOf({ moeLayers: L, experts: E, topK: k }, reqs);
          const chance = k / E;
          // 7,080 pairs: the standard error of either statistic is below 0.006.
          expect(Math.abs(s.temporalReusedShare! - tau * rho)).toBeLessThan(0.03 + chance);
          expect(Math.abs(s.temporalLocality! - tau * (1 - (1 - rho) ** k))).toBeLessThan(0.03 + k * chance);
        },
      ),
      { numRuns: 25, ...(seed !== undefined ? { seed } : {}) },
    );
  });
});
