/**
 * The predictors' ranking (`Ranker.rank`, workloads/prediction.ts): an insertion sort over the
 * experts in popularity order. Property: it equals the plain definition — every expert id sorted
 * by score (highest first), then popularity (highest first), then id — for random popularities
 * (with ties) and random scores (vote counts with many zeros and ties, or arbitrary finite
 * doubles, negative ones included).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { RequestRouter, RoutingSource } from '../../sim/workload.ts';
import { Ranker } from '../../workloads/prediction.ts';

function source(layers: number, experts: number, popularity: Float64Array[]): RoutingSource {
  return {
    moeLayers: layers,
    experts,
    topK: 1,
    forRequest: (): RequestRouter => {
      throw new Error('not used');
    },
    popularity: (l) => popularity[l]!,
  };
}

/** The definition: ids by score (descending), then popularity (descending), then id. */
function reference(score: Float64Array, popularity: Float64Array): number[] {
  const ids = Array.from({ length: score.length }, (_, e) => e);
  return ids.sort((a, b) => score[b]! - score[a]! || popularity[b]! - popularity[a]! || a - b);
}

const case_ = fc
  .record({
    experts: fc.integer({ min: 1, max: 160 }),
    layers: fc.integer({ min: 1, max: 3 }),
    seed: fc.integer(),
    votes: fc.boolean(),
  })
  .chain(({ experts, layers, votes }) =>
    fc.record({
      experts: fc.constant(experts),
      layers: fc.constant(layers),
      // Popularity from a few levels, so ties between experts are common.
      popularity: fc.array(fc.array(fc.integer({ min: 1, max: 4 }), { minLength: experts, maxLength: experts }), {
        minLength: layers,
        maxLength: layers,
      }),
      layer: fc.integer({ min: 0, max: layers - 1 }),
      score: votes
        ? fc.array(fc.oneof(fc.constant(0), fc.constant(0), fc.integer({ min: 0, max: 6 })), {
            minLength: experts,
            maxLength: experts,
          })
        : fc.array(fc.oneof(fc.double({ min: -1e6, max: 1e6, noNaN: true }), fc.constant(0), fc.constant(1.5)), {
            minLength: experts,
            maxLength: experts,
          }),
    }),
  );

describe('Ranker.rank', () => {
  it('orders experts by score, then popularity, then id (the sort it replaces)', () => {
    fc.assert(
      fc.property(case_, ({ experts, layers, popularity, layer, score }) => {
        const pop = popularity.map((row) => Float64Array.from(row));
        const ranker = new Ranker(source(layers, experts, pop));
        const s = Float64Array.from(score);
        expect(ranker.rank(layer, s)).toEqual(reference(s, pop[layer]!));
      }),
      { numRuns: 400 },
    );
  });
});
