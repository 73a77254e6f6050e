/**
 * MoE-Infinity's EAMC insertions from the matchers' dot products (policy.ts `flushHints`,
 * eam-collection.ts `EamcDots`), end to end in the serving executor: on random small worlds
 * (batch 1 to 4, per-batch and per-request matching, static and continuous batching, a full
 * EAMC with most-similar replacement), the run with insertion hints equals, bit for bit, the
 * run where every insertion recomputes its dot products in full — the outcome (times, counters,
 * requests) and the final contents of both collections. Not vacuous: hints are used, for
 * prefill and decode EAMs, and some are refused (poisoned by a shared group).
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadHardware } from '../../hardware-profiles/load.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import { Rng } from '../../sim/kernel/rng.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import { ServingExecutor } from '../../sim/serving/serving-executor.ts';
import { EamCollection, type EamcDots } from '../../policies/moe-infinity/eam-collection.ts';
import { MoeInfinityParams, MoeInfinityPolicy } from '../../policies/moe-infinity/policy.ts';
import { CoverageTally } from '../helpers/coverage.ts';
import { servingWorldFields, smallModel, smallWorkload } from '../helpers/moe-infinity-world.ts';

const worldArb = fc.record({
  ...servingWorldFields({ min: 2, max: 14 }),
  seed: fc.integer({ min: 0, max: 10_000 }),
  eamcCapacity: fc.integer({ min: 1, max: 6 }),
  topMatches: fc.integer({ min: 1, max: 3 }),
  // Batches of 2+ matched per batch more often: where hints get refused (a shared group).
  maxBatchSize: fc.integer({ min: 2, max: 4 }),
  batchMatching: fc.constantFrom(
    'per-request' as const,
    'per-batch' as const,
    'per-batch' as const,
    'per-batch' as const,
  ),
  warm: fc.integer({ min: 0, max: 8 }),
});

type World = typeof worldArb extends fc.Arbitrary<infer T> ? T : never;

const counts = { hinted: 0, refused: 0, prefill: 0, decode: 0 };

function runWorld(w: World, hints: boolean): string {
  const k = Math.min(w.k, w.E);
  const model = smallModel('mixtral-8x7b', w.L, w.E, k);
  const hardware = loadHardware('a5000-pcie4-1tb');
  const workload = smallWorkload(w);
  const params = MoeInfinityParams.parse({
    eamcCapacity: w.eamcCapacity,
    topMatches: w.topMatches,
    batchMatching: w.batchMatching,
    eamcReplacement: 'most-similar',
  });
  const policy = new MoeInfinityPolicy('moe-infinity', params, model);
  // Warm the collections with EAMs of other requests (so the first requests already replace).
  const wrng = new Rng(`warm-${w.seed}`);
  for (let i = 0; i < w.warm; i++) {
    for (const phase of ['prefill', 'decode'] as const) {
      const m = new Float64Array(w.L * w.E);
      for (let j = 0; j < m.length; j++) if (wrng.next() < 0.4) m[j] = 1 + wrng.int(6);
      policy.preload(phase, [m]);
    }
  }
  // Every hint that is valid is completed (however many entries went stale): the path under test.
  policy.collections.prefill.hintStaleLimit = 1;
  policy.collections.decode.hintStaleLimit = 1;
  const all = w.L * w.E;
  const executor = new ServingExecutor({
    model,
    hardware,
    cost: createCostModel(model, hardware, () => {}),
    workload,
    policy,
    config: {
      batching: w.batching,
      maxBatchSize: w.maxBatchSize,
      maxWaitNs: 1_000_000 as Ns,
      maxBatchTokens: 256,
      bufferSlots: Math.max(1, Math.floor(all / 2)),
      packetBytes: Math.ceil(model.derived.bytesPerExpert / 4),
      preloadAllExperts: false,
    },
  });
  const proto = EamCollection.prototype;
  const fromHint = proto.similaritiesFromHint;
  proto.similaritiesFromHint = function (
    this: EamCollection,
    eam: ArrayLike<number>,
    hint: EamcDots,
    out: Float64Array,
  ): boolean {
    if (!hints) return false;
    const ok = fromHint.call(this, eam, hint, out);
    if (ok) {
      counts.hinted++;
      if (this === policy.collections.prefill) counts.prefill++;
      else counts.decode++;
    } else counts.refused++;
    return ok;
  };
  try {
    const o = executor.run();
    const entries = (c: EamCollection) => Array.from({ length: c.size }, (_, n) => [...c.entry(n)]);
    return JSON.stringify({
      endNs: o.endNs,
      events: o.events,
      counters: o.counters,
      requests: o.requests,
      prefill: entries(policy.collections.prefill),
      decode: entries(policy.collections.decode),
    });
  } finally {
    proto.similaritiesFromHint = fromHint;
  }
}

describe('EAMC insertion hints in the serving executor', () => {
  it('give the same run and the same collections as full recomputation, bit for bit', () => {
    const tally = new CoverageTally('eamc insertion hints', ['prefillHint', 'decodeHint', 'refusedHint']);
    fc.assert(
      fc.property(worldArb, (w) => {
        const before = { ...counts };
        expect(runWorld(w, true)).toBe(runWorld(w, false));
        tally.record({
          prefillHint: counts.prefill > before.prefill,
          decodeHint: counts.decode > before.decode,
          refusedHint: counts.refused > before.refused,
        });
      }),
      { numRuns: 120 },
    );
    tally.check();
  });
});
