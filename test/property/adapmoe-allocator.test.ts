/**
 * AdapMoE's size allocator: `allocateSlots` (fills only the cells on some path to the total)
 * returns exactly the sizes of the full-table reference `allocateSlotsFull`, on random costs —
 * integer costs with many ties (where the tie-break decides), fractional costs, and
 * non-increasing costs (as AdapMoE's miss curves are: the bounded search runs on them), integer
 * with ties or fractional — over layer counts, size bounds and totals from the smallest feasible
 * to beyond layers · maxSlots.
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { allocateSlots, allocateSlotsFull, LayerStats } from '../../policies/prefetch/adapmoe-allocator.ts';

describe('allocateSlots', () => {
  it('equals the full-table DP (allocateSlotsFull) size for size', () => {
    let interior = 0;
    let tied = 0;
    let monotone = 0;
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 7 }),
        fc.integer({ min: 0, max: 2 }),
        fc.integer({ min: 1, max: 9 }),
        fc.integer({ min: 0, max: 80 }),
        fc.boolean(),
        fc.boolean(),
        fc.array(fc.integer({ min: 0, max: 1000 }), { minLength: 7 * 10, maxLength: 7 * 10 }),
        (L, minSlots, span, extra, ties, decreasing, raw) => {
          const maxSlots = minSlots + span;
          const total = L * minSlots + extra;
          const cost = Array.from({ length: L }, (_, l) =>
            Float64Array.from({ length: maxSlots + 1 }, (_, s) => {
              const r = raw[l * 10 + s]!;
              return ties ? r % 4 : r / 7 - s;
            }),
          );
          if (decreasing) {
            // Non-increasing: a running sum of the steps downwards (integer steps of 0–3 with ties).
            for (const f of cost) {
              for (let s = 1; s < f.length; s++) f[s] = f[s - 1]! - Math.abs(f[s]!) / (ties ? 1 : 3);
            }
          }
          const want = allocateSlotsFull(cost, total, minSlots, maxSlots);
          expect(Array.from(allocateSlots(cost, total, minSlots, maxSlots))).toEqual(Array.from(want));
          if (total > L * minSlots && total < L * maxSlots && L > 1) {
            interior++;
            if (ties) tied++;
            if (decreasing) monotone++;
          }
        },
      ),
      { numRuns: 1000 },
    );
    expect(interior).toBeGreaterThan(200);
    expect(tied).toBeGreaterThan(80);
    expect(monotone).toBeGreaterThan(100);
  });
});

/** The allocating `observe` the in-place one replaced (the reference). */
class ReferenceStats {
  private readonly recency: number[][];
  readonly missHist: Float64Array[];
  readonly stepMaxHist: Float64Array[];
  readonly predictedNeeds: Float64Array;
  readonly predictedHits: Float64Array;
  constructor(
    layers: number,
    readonly experts: number,
  ) {
    this.recency = Array.from({ length: layers }, () => []);
    this.missHist = Array.from({ length: layers }, () => new Float64Array(experts + 1));
    this.stepMaxHist = Array.from({ length: layers }, () => new Float64Array(experts + 1));
    this.predictedNeeds = new Float64Array(layers);
    this.predictedHits = new Float64Array(layers);
  }
  observe(layer: number, activated: readonly number[], predicted: readonly number[] | null): void {
    const order = this.recency[layer]!;
    const E = this.experts;
    const hist = this.missHist[layer]!;
    let maxD = 0;
    const dist = activated.map((e) => {
      const i = order.indexOf(e);
      const d = i < 0 ? E : i;
      hist[d]!++;
      if (d > maxD) maxD = d;
      return d;
    });
    if (predicted) {
      this.stepMaxHist[layer]![maxD]!++;
      for (const e of activated) {
        this.predictedNeeds[layer]!++;
        if (predicted.includes(e)) this.predictedHits[layer]!++;
      }
    }
    const used = activated.map((e, i) => ({ e, d: dist[i]! })).sort((a, b) => a.d - b.d || a.e - b.e);
    const set = new Set(activated);
    this.recency[layer] = [...used.map((u) => u.e), ...order.filter((e) => !set.has(e))];
  }
}

describe('LayerStats.observe', () => {
  it('in place gives the histograms and accuracy of the allocating reference, step for step', () => {
    let steps = 0;
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 1, max: 9 }),
        fc.array(
          fc.tuple(
            fc.nat(),
            fc.uniqueArray(fc.nat({ max: 8 }), { minLength: 1, maxLength: 4 }),
            fc.option(fc.array(fc.nat({ max: 8 }), { maxLength: 3 })),
          ),
          { minLength: 10, maxLength: 60 },
        ),
        (layers, E, stream) => {
          const got = new LayerStats(layers, E);
          const want = new ReferenceStats(layers, E);
          for (const [rawLayer, rawAct, predicted] of stream) {
            const l = rawLayer % layers;
            const act = [...new Set(rawAct.map((e) => e % E))].sort((a, b) => a - b);
            got.observe(l, act, predicted);
            want.observe(l, act, predicted);
            steps++;
          }
          for (let l = 0; l < layers; l++) {
            expect(Array.from(got.missHist[l]!)).toEqual(Array.from(want.missHist[l]!));
            expect(Array.from(got.stepMaxHist[l]!)).toEqual(Array.from(want.stepMaxHist[l]!));
          }
          expect(Array.from(got.predictedNeeds)).toEqual(Array.from(want.predictedNeeds));
          expect(Array.from(got.predictedHits)).toEqual(Array.from(want.predictedHits));
        },
      ),
      { numRuns: 300 },
    );
    expect(steps).toBeGreaterThan(3000);
  });
});
