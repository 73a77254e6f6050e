/**
 * `firstVictimBy` (one pass, no candidate pools built, for speed) chooses exactly what the reference
 * `firstBy(victimPool(…), cmp)` chooses, on random buffers, per-layer caps and orders — total
 * orders and orders with ties (where the first minimum in candidate order decides) — with and
 * without the buffer's per-layer index, with and without the fallback to every candidate; and
 * `trimToCaps` over every layer from the per-layer index gives exactly the evictions, in the same
 * order, of the reference walk over all entries (`trimByScan`), with a pool-order-dependent choice
 * too (as `rnd`'s seeded draw); `firstEvictableVictimBy` (the executor's query: candidates are
 * exactly the resident, unpinned entries) chooses what `firstVictimBy` chooses, and
 * `firstEvictableCappedVictimBy` what the filtered pool without fallback gives.
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ExpertKey, ServingView } from '../../sim/serving/policy.ts';
import {
  firstBy,
  firstEvictableCappedVictimBy,
  firstEvictableVictimBy,
  firstVictimBy,
  trimByScan,
  trimToCaps,
  victimPool,
} from '../../policies/cache/victims.ts';

const E = 4;

function fakeView(keys: readonly ExpertKey[], layers: number, indexed: boolean): ServingView {
  const counts = new Int32Array(layers);
  for (const k of keys) counts[Math.floor(k / E)]!++;
  const entries = keys.map((key) => ({ key, state: 'resident', pinned: false }));
  const buffer = {
    entries: () => entries.values(),
    ...(indexed ? { layerCount: (l: number) => counts[l]! } : {}),
  };
  return { moeLayers: layers, layerOf: (k: ExpertKey) => Math.floor(k / E), buffer } as unknown as ServingView;
}

describe('firstVictimBy', () => {
  it('equals firstBy(victimPool(...)) bit for bit', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 5 }),
        fc.uniqueArray(fc.integer({ min: 0, max: 5 * E - 1 }), { minLength: 0, maxLength: 14 }),
        fc.integer({ min: 0, max: 5 * E - 1 }),
        fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 5, maxLength: 5 }),
        fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 5 * E, maxLength: 5 * E }),
        fc.boolean(),
        fc.boolean(),
        fc.boolean(),
        fc.boolean(),
        (layers, rawKeys, rawFor, caps, score, indexed, withCaps, ties, fallback) => {
          const keys = rawKeys.filter((k) => k < layers * E);
          const forKey = rawFor % (layers * E);
          const view = fakeView(keys, layers, indexed);
          // Candidates: a subset of the entries in buffer order (the executor's evictable ones).
          const candidates = keys.filter((k) => score[k]! !== 0 || k % 2 === 0);
          const capOf = withCaps ? (l: number) => caps[l]! : undefined;
          // With ties: equal scores compare 0 (the first in pool order wins); else ties broken by key.
          const cmp = ties
            ? (a: ExpertKey, b: ExpertKey) => score[a]! - score[b]!
            : (a: ExpertKey, b: ExpertKey) => score[a]! - score[b]! || a - b;
          const want = firstBy(victimPool(view, candidates, forKey, capOf, fallback), cmp);
          expect(firstVictimBy(view, candidates, forKey, capOf, cmp, fallback)).toBe(want);
        },
      ),
      { numRuns: 500 },
    );
  });
});

/** A buffer of entries in insertion order, with states and pins, and its per-layer index. */
function stateView(keys: readonly ExpertKey[], flags: readonly number[], layers: number): ServingView {
  const entries = keys.map((key, i) => ({
    key,
    state: flags[i]! % 3 === 0 ? 'loading' : 'resident',
    pinned: flags[i]! % 4 === 1,
  }));
  const byLayer = Array.from({ length: layers }, (_, l) => entries.filter((e) => Math.floor(e.key / E) === l));
  const buffer = {
    entries: () => entries.values(),
    layerEntries: (l: number) => byLayer[l]!,
    layerCount: (l: number) => byLayer[l]!.length,
  };
  return { moeLayers: layers, layerOf: (k: ExpertKey) => Math.floor(k / E), buffer } as unknown as ServingView;
}

describe('trimToCaps', () => {
  it('from the per-layer index equals the walk over every entry (trimByScan)', () => {
    let trimmed = 0;
    let byPosition = 0;
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 5 }),
        fc.uniqueArray(fc.integer({ min: 0, max: 5 * E - 1 }), { minLength: 0, maxLength: 20 }),
        fc.array(fc.integer({ min: 0, max: 11 }), { minLength: 20, maxLength: 20 }),
        fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 5, maxLength: 5 }),
        fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 5 * E, maxLength: 5 * E }),
        fc.boolean(),
        (layers, rawKeys, flags, caps, score, positional) => {
          const keys = rawKeys.filter((k) => k < layers * E);
          const view = stateView(keys, flags, layers);
          const capOf = (l: number) => caps[l]!;
          // A total order, or a choice by position in the pool (its order must then match too).
          const choose = positional
            ? (pool: readonly ExpertKey[]) => pool[(pool.length * 7 + 3) % pool.length]!
            : (pool: readonly ExpertKey[]) => firstBy(pool, (a, b) => score[a]! - score[b]! || a - b)!;
          const want = trimByScan(view, capOf, choose);
          expect(trimToCaps(view, capOf, choose)).toEqual(want);
          if (want.length > 0) {
            trimmed++;
            if (positional) byPosition++;
          }
        },
      ),
      { numRuns: 500 },
    );
    expect(trimmed).toBeGreaterThan(100);
    expect(byPosition).toBeGreaterThan(30);
  });
});

describe('firstEvictableVictimBy', () => {
  it('equals firstVictimBy when the candidates are the evictable entries in buffer order', () => {
    let own = 0;
    let over = 0;
    let any = 0;
    let none = 0;
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 5 }),
        fc.uniqueArray(fc.integer({ min: 0, max: 5 * E - 1 }), { minLength: 0, maxLength: 20 }),
        fc.array(fc.integer({ min: 0, max: 11 }), { minLength: 20, maxLength: 20 }),
        fc.integer({ min: 0, max: 5 * E - 1 }),
        fc.array(fc.integer({ min: 0, max: 4 }), { minLength: 5, maxLength: 5 }),
        fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 5 * E, maxLength: 5 * E }),
        fc.boolean(),
        fc.boolean(),
        (layers, rawKeys, flags, rawFor, caps, score, ties, fallback) => {
          const keys = rawKeys.filter((k) => k < layers * E);
          const view = stateView(keys, flags, layers);
          const candidates = [...view.buffer.entries()]
            .filter((e) => e.state === 'resident' && !e.pinned)
            .map((e) => e.key);
          const forKey = rawFor % (layers * E);
          const capOf = (l: number) => caps[l]!;
          const cmp = ties
            ? (a: ExpertKey, b: ExpertKey) => score[a]! - score[b]!
            : (a: ExpertKey, b: ExpertKey) => score[a]! - score[b]! || a - b;
          const want = firstVictimBy(view, candidates, forKey, capOf, cmp, fallback);
          const q = { reason: 'demand', forKey, candidates, allEvictable: true } as const;
          const l = Math.floor(forKey / E);
          const ownFull = view.buffer.layerCount!(l) + 1 > caps[l]!;
          const fromOwn = ownFull && candidates.some((c) => Math.floor(c / E) === l);
          // Past the own layer the layers are visited one by one: only a total order gives the same minimum.
          if (ties && !fromOwn) return;
          expect(firstEvictableVictimBy(view, q, capOf, cmp, fallback)).toBe(want);
          if (want === undefined) none++;
          else if (fromOwn) own++;
          else if (view.buffer.layerCount!(Math.floor(want / E)) > caps[Math.floor(want / E)]!) over++;
          else any++;
        },
      ),
      // Each path is 5-25 % of the runs: 1 000 runs keep every count well above its floor.
      { numRuns: 1000 },
    );
    expect(own).toBeGreaterThan(100);
    expect(over).toBeGreaterThan(30);
    expect(any).toBeGreaterThan(10);
    expect(none).toBeGreaterThan(10);
  });
});

describe('firstEvictableCappedVictimBy', () => {
  it('equals firstBy(victimPool(…, no fallback) without the skipped keys) from the per-layer index', () => {
    let own = 0;
    let over = 0;
    let none = 0;
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 5 }),
        fc.uniqueArray(fc.integer({ min: 0, max: 5 * E - 1 }), { minLength: 0, maxLength: 20 }),
        fc.array(fc.integer({ min: 0, max: 11 }), { minLength: 20, maxLength: 20 }),
        fc.integer({ min: 0, max: 5 * E - 1 }),
        fc.array(fc.integer({ min: 0, max: 4 }), { minLength: 5, maxLength: 5 }),
        fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 5 * E, maxLength: 5 * E }),
        fc.array(fc.boolean(), { minLength: 5 * E, maxLength: 5 * E }),
        (layers, rawKeys, flags, rawFor, caps, score, skipped) => {
          const keys = rawKeys.filter((k) => k < layers * E);
          const view = stateView(keys, flags, layers);
          const candidates = [...view.buffer.entries()]
            .filter((e) => e.state === 'resident' && !e.pinned)
            .map((e) => e.key);
          const forKey = rawFor % (layers * E);
          const capOf = (l: number) => caps[l]!;
          const cmp = (a: ExpertKey, b: ExpertKey) => score[a]! - score[b]! || a - b;
          const skip = (k: ExpertKey) => skipped[k]!;
          const want = firstBy(
            victimPool(view, candidates, forKey, capOf, false).filter((c) => !skip(c)),
            cmp,
          );
          const q = { reason: 'prefetch', forKey, candidates, allEvictable: true } as const;
          expect(firstEvictableCappedVictimBy(view, q, capOf, cmp, skip)).toBe(want);
          if (want === undefined) none++;
          else if (Math.floor(want / E) === Math.floor(forKey / E)) own++;
          else over++;
        },
      ),
      // ~10 % of the runs end in a layer over its cap: 1 000 runs keep each count well above 50.
      { numRuns: 1000 },
    );
    expect(own).toBeGreaterThan(50);
    expect(over).toBeGreaterThan(50);
    expect(none).toBeGreaterThan(50);
  });
});
