/**
 * moe-infinity properties:
 * - incremental matching equals brute-force cosine over the rows seen so far, on random
 *   integer matrices, rows arriving in any order, and its best matches are the best;
 * - the batch scores equal the brute-force sum of each group's row-normalised matches;
 * - the heap ranking equals a full sort;
 * - the serving executor keeps every invariant with the policy (random small worlds, random
 *   switches), checked from the outside by `InvariantChecker`, and the same world gives the
 *   same outcome.
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadHardware } from '../../hardware-profiles/load.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import { Rng } from '../../sim/kernel/rng.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import { ServingExecutor } from '../../sim/serving/serving-executor.ts';
import { cosineSimilarity } from '../../policies/moe-infinity/eam.ts';
import { EamCollection, IncrementalMatcher } from '../../policies/moe-infinity/eam-collection.ts';
import { MoeInfinityParams, MoeInfinityPolicy } from '../../policies/moe-infinity/policy.ts';
import { RankScratch, ScoreAccumulator, rankPrefetch, selectPrefetch } from '../../policies/moe-infinity/prefetcher.ts';
import { CoverageTally } from '../helpers/coverage.ts';
import { InvariantChecker } from '../helpers/invariant-checker.ts';
import { servingWorldFields, smallModel, smallWorkload } from '../helpers/moe-infinity-world.ts';

const matrixArb = (L: number, E: number) =>
  fc
    .array(
      fc.oneof({ weight: 3, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.integer({ min: 1, max: 9 }) }),
      { minLength: L * E, maxLength: L * E },
    )
    .map((a) => Float64Array.from(a));

const matchCaseArb = fc
  .record({
    L: fc.integer({ min: 1, max: 6 }),
    E: fc.integer({ min: 1, max: 9 }),
    n: fc.integer({ min: 1, max: 24 }),
    M: fc.integer({ min: 1, max: 6 }),
  })
  .chain(({ L, E, n, M }) =>
    fc.record({
      L: fc.constant(L),
      E: fc.constant(E),
      M: fc.constant(M),
      stored: fc.array(matrixArb(L, E), { minLength: n, maxLength: n }),
      cur: matrixArb(L, E),
      order: fc.shuffledSubarray(
        Array.from({ length: L }, (_, i) => i),
        { minLength: 1 },
      ),
      capacity: fc.integer({ min: 1, max: 30 }),
    }),
  );

describe('incremental EAM matching', () => {
  it('equals brute-force cosine over the rows seen so far, and keeps the best matches', () => {
    fc.assert(
      fc.property(matchCaseArb, ({ L, E, M, stored, cur, order, capacity }) => {
        const coll = new EamCollection({ layers: L, experts: E }, capacity, 'most-similar');
        for (const m of stored) coll.insert(m);
        const n = coll.size;
        const matcher = new IncrementalMatcher({ layers: L, experts: E }, M);
        matcher.reset(coll);
        const seen: number[] = [];
        for (const l of order) {
          matcher.addRow(l, cur.subarray(l * E, (l + 1) * E));
          seen.push(l);
          const brute = Array.from({ length: n }, (_, i) => cosineSimilarity(cur, coll.entry(i), E, seen));
          for (let i = 0; i < n; i++) expect(Math.abs(matcher.similarity(i) - brute[i]!)).toBeLessThan(1e-12);
          // The best matches: sorted, positive, and nothing left out is better.
          const top = [...matcher.top.subarray(0, matcher.topCount)];
          const positive = brute.filter((s) => s > 0).length;
          expect(top.length).toBe(Math.min(M, positive));
          for (let j = 0; j < top.length; j++) {
            expect(Math.abs(matcher.topScore[j]! - brute[top[j]!]!)).toBeLessThan(1e-12);
            if (j > 0) expect(brute[top[j]!]!).toBeLessThanOrEqual(brute[top[j - 1]!]! + 1e-12);
          }
          const worst = top.length > 0 ? brute[top[top.length - 1]!]! : 0;
          for (let i = 0; i < n; i++) if (!top.includes(i)) expect(brute[i]!).toBeLessThanOrEqual(worst + 1e-12);
        }
      }),
      { numRuns: 300 },
    );
  });

  it("batch scores equal the brute-force sum of each group's row-normalised matches × its tokens", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 5 }).chain((L) =>
          fc.record({
            L: fc.constant(L),
            E: fc.integer({ min: 1, max: 5 }),
            from: fc.integer({ min: 0, max: L - 1 }),
            groups: fc.array(
              fc.tuple(
                fc.boolean(),
                fc.uniqueArray(fc.integer({ min: 0, max: 7 }), { maxLength: 4 }),
                fc.integer({ min: 1, max: 9 }),
              ),
              {
                maxLength: 6,
              },
            ),
            seed: fc.integer(),
          }),
        ),
        ({ L, E, from, groups, seed }) => {
          const rng = new Rng(`agg-${seed}`);
          const colls = [0, 1].map(() => {
            const c = new EamCollection({ layers: L, experts: E }, 8, 'most-similar');
            for (let i = 0; i < 8; i++)
              c.insert(Float64Array.from({ length: L * E }, () => rng.int(4) + (i === 0 ? 1 : 0)));
            return c;
          });
          const gs = groups.map(([second, top, weight]) => ({
            collection: colls[second ? 1 : 0]!,
            top: top.filter((n) => n < colls[second ? 1 : 0]!.size),
            weight,
          }));
          const matched = gs.map((g) => ({ ...g, count: g.top.length }));
          const out = new Float64Array(L * E).fill(-7);
          const acc = new ScoreAccumulator({ layers: L, experts: E });
          acc.compute(matched, from, L, out);
          // Row bounds hold, and ranking row by row with pruning selects what full scores select.
          for (let i = from; i < L; i++)
            for (let e = 0; e < E; e++) expect(out[i * E + e]!).toBeLessThanOrEqual(acc.bound(i) * (1 + 1e-12));
          const layer = from - 1;
          if (layer >= 0) {
            for (const budget of [1, 2, 5, 100]) {
              const o = { layers: L, experts: E, horizon: L, proximity: true, order: 'nearest-first' as const };
              const full = selectPrefetch(out, layer, budget, o, new RankScratch());
              const lazy = selectPrefetch(new Float64Array(L * E), layer, budget, o, new RankScratch(), acc);
              expect([...lazy.keys.subarray(0, lazy.count)]).toEqual([...full.keys.subarray(0, full.count)]);
              expect([...lazy.urgency.subarray(0, lazy.count)]).toEqual([...full.urgency.subarray(0, full.count)]);
            }
          }
          for (let i = 0; i < from * E; i++) expect(out[i]).toBe(-7);
          for (let i = from; i < L; i++) {
            for (let e = 0; e < E; e++) {
              let want = 0;
              for (const g of matched) {
                const tot = g.top.reduce((a, n) => a + g.collection.rowSum(n, i), 0);
                if (tot > 0)
                  want += (g.weight * g.top.reduce((a, n) => a + g.collection.entry(n)[i * E + e]!, 0)) / tot;
              }
              expect(Math.abs(out[i * E + e]! - want)).toBeLessThan(1e-9 * (1 + want));
            }
          }
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('prefetch ranking', () => {
  it('the heap selection equals a full sort', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 6 }).chain((L) =>
          fc.record({
            L: fc.constant(L),
            E: fc.integer({ min: 1, max: 8 }),
            layer: fc.integer({ min: 0, max: L - 1 }),
            budget: fc.integer({ min: 0, max: 20 }),
            horizon: fc.integer({ min: 1, max: 6 }),
            proximity: fc.boolean(),
            order: fc.constantFrom('nearest-first' as const, 'score' as const),
            values: fc.array(fc.integer({ min: 0, max: 4 }), { minLength: 48, maxLength: 48 }),
          }),
        ),
        ({ L, E, layer, budget, horizon, proximity, order, values }) => {
          const scores = Float64Array.from({ length: L * E }, (_, i) => values[i % values.length]! / 4);
          const got = rankPrefetch(scores, layer, budget, { layers: L, experts: E, horizon, proximity, order });
          const cells: { key: number; s: number }[] = [];
          for (let i = layer + 1; i < Math.min(L, layer + 1 + horizon); i++) {
            for (let e = 0; e < E; e++) {
              const raw = scores[i * E + e]!;
              if (raw > 0) cells.push({ key: i * E + e, s: raw * (proximity ? 1 - (i - layer) / L : 1) });
            }
          }
          cells.sort((a, b) => b.s - a.s || a.key - b.key);
          const picked = cells.slice(0, budget);
          if (order === 'nearest-first')
            picked.sort((a, b) => Math.floor(a.key / E) - Math.floor(b.key / E) || b.s - a.s || a.key - b.key);
          expect(got).toEqual(picked.map((c) => c.key));
          // The selection's urgencies (the H2D priorities) follow the exact queue order.
          const sel = selectPrefetch(
            scores,
            layer,
            budget,
            { layers: L, experts: E, horizon, proximity, order },
            new RankScratch(),
          );
          const u = new Map<number, number>();
          for (let j = 0; j < sel.count; j++) u.set(sel.keys[j]!, sel.urgency[j]!);
          expect(u.size).toBe(got.length);
          for (let j = 1; j < got.length; j++) expect(u.get(got[j]!)!).toBeGreaterThanOrEqual(u.get(got[j - 1]!)!);
          for (const v of u.values()) expect(v).toBeGreaterThanOrEqual(1);
        },
      ),
      { numRuns: 300 },
    );
  });
});

// ---------------------------------------------------------------------------- executor worlds

const BASES = ['mixtral-8x7b', 'qwen1.5-moe-a2.7b'] as const;

const worldArb = fc.record({
  base: fc.constantFrom(...BASES),
  ...servingWorldFields({ min: 2, max: 10 }),
  // At least two layers (prefetches target later layers) and whole-percent buffer fractions
  // (fc.double draws mostly edge values: one slot, where nothing can be prefetched).
  L: fc.integer({ min: 2, max: 4 }),
  slotsFraction: fc.integer({ min: 0, max: 100 }).map((p) => p / 100),
  packets: fc.integer({ min: 1, max: 16 }),
  seed: fc.integer({ min: 0, max: 10_000 }),
  params: fc.record(
    {
      requestTracing: fc.boolean(),
      fixedPrefetchExperts: fc.integer({ min: 1, max: 8 }),
      eamcCapacity: fc.integer({ min: 1, max: 6 }),
      eamcReplacement: fc.constantFrom('most-similar', 'lfu-access'),
      topMatches: fc.integer({ min: 1, max: 4 }),
      batchMatching: fc.constantFrom('per-request', 'per-batch'),
      multiLayerPrefetch: fc.boolean(),
      prefetchLayers: fc.integer({ min: 1, max: 4 }),
      layerProximity: fc.boolean(),
      queueOrder: fc.constantFrom('nearest-first', 'score'),
      queueJump: fc.boolean(),
      cachePriorities: fc.boolean(),
      initialLayerBoost: fc.double({ min: 0, max: 3, noNaN: true }),
      prefetchBudget: fc.integer({ min: 0, max: 8 }),
      prefetchAdmission: fc.constantFrom('priority', 'always'),
    },
    { requiredKeys: [] },
  ),
});

type World = typeof worldArb extends fc.Arbitrary<infer T> ? T : never;

function runWorld(w: World): { json: string; violations: string[]; cancelled: number; prefetchesUsed: number } {
  const k = Math.min(w.k, w.E);
  const model = smallModel(w.base, w.L, w.E, k);
  const hardware = loadHardware('a5000-pcie4-1tb');
  const workload = smallWorkload(w);
  const policy = new MoeInfinityPolicy('moe-infinity', MoeInfinityParams.parse(w.params), model);
  const checker = new InvariantChecker({ experts: w.E, bytesPerExpert: model.derived.bytesPerExpert });
  const all = w.L * w.E;
  const executor = new ServingExecutor({
    model,
    hardware,
    cost: createCostModel(model, hardware, () => {}),
    workload,
    policy,
    sink: checker,
    config: {
      batching: w.batching,
      maxBatchSize: w.maxBatchSize,
      maxWaitNs: 1_000_000 as Ns,
      maxBatchTokens: 256,
      // More slots than a layer pins (top-k per token, up to every expert), so prefetches find room.
      bufferSlots: Math.max(Math.min(all, k + 1), 1 + Math.floor(w.slotsFraction * (all - 1))),
      packetBytes: Math.ceil(model.derived.bytesPerExpert / w.packets),
      preloadAllExperts: false,
    },
  });
  const o = executor.run();
  const violations = checker.finish(o);
  const h2d = o.resources.h2d;
  expect(h2d.bytesMoved).toBe(h2d.completedBytes + h2d.cancelledSentBytes);
  for (const r of o.requests) expect(r.emittedTokens).toBe(r.outputTokens);
  expect(policy.requestEams.size).toBe(0);
  return {
    json: JSON.stringify({ endNs: o.endNs, events: o.events, counters: o.counters, requests: o.requests }),
    violations,
    cancelled: o.counters.prefetchesCancelled,
    prefetchesUsed: o.counters.prefetchesUsed,
  };
}

describe('moe-infinity in the serving executor', () => {
  it('keeps every executor invariant on random small worlds, deterministically', () => {
    const tally = new CoverageTally('moe-infinity serving', ['cancel', 'prefetchUsed']);
    fc.assert(
      fc.property(worldArb, (w) => {
        const a = runWorld(w);
        expect(a.violations).toEqual([]);
        expect(runWorld(w).json).toBe(a.json);
        tally.record({ cancel: a.cancelled > 0, prefetchUsed: a.prefetchesUsed > 0 });
      }),
      { numRuns: 150 },
    );
    // Not vacuous: the worlds exercise cancellation and prefetches that were then needed.
    tally.check();
  });
});
