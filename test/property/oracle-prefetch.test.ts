/**
 * oracle-prefetch is the upper bound of prefetching (policies/oracle/oracle-prefetch.ts), on
 * random small worlds: real model profiles shrunk to a few layers and experts, large testbeds
 * (every buffer fits), small uniform-routing workloads with offline arrivals and static
 * batching (the need sequence does not depend on timing, so the recording pass is the exact
 * future), caching disabled (`releaseAfterUse`).
 *
 * 1. Its GPU blocked time is never above that of any other built-in serving policy in the same
 *    world at the same buffer size (on-demand, dependency-prefetch, model-tracing, moe-infinity,
 *    pre-gated and mixtral-offloading — no predictor in these workloads, so they fetch on
 *    demand — adapmoe and lru; some with random parameters), up to a few ns of rounding. It is
 *    not a theorem: the policy's header gives the gaps (a layer's experts load in expert order,
 *    not longest computation first; slots freed mid-layer wait for the next hook; a link packet
 *    is not preempted), and its unit test shows a hand-made policy beating it. No built-in
 *    policy exploited them in ~1500 worlds tried while writing this test (prompts up to 2000
 *    tokens, batches up to 8, whole-expert packets).
 * 2. It wastes nothing: prefetchWastedBytes (evicted, cancelled or never used) = 0, every
 *    prefetch is used (precision 1), its replay matches the recording at every routed layer,
 *    and it moves exactly the bytes on-demand moves (one load per need).
 * 3. The foundation invariants (InvariantChecker): no pool over capacity, no expert computed
 *    before it is resident, PCIe bytes = Σ transfers, every request emits exactly its tokens.
 * 4. With caching (no `releaseAfterUse`) and at least a layer's experts of slots, the default
 *    conservative mode fetches exactly what belady (Belady's MIN, on demand) fetches — the same
 *    bytes, the same cache hits, nothing wasted — and blocks the GPU no longer than belady at
 *    the same capacity; the aggressive mode wastes nothing and never fetches on demand.
 * A world whose buffer does not fit the GPU is refused with a UserError (skipped).
 *
 * Replay a failure: fast-check prints `{ seed, path }`; pass them to `fc.assert`.
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadHardware } from '../../hardware-profiles/load.ts';
import type { ModelProfile } from '../../hardware-profiles/types.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import { UserError } from '../../sim/kernel/errors.ts';
import { RngStreams } from '../../sim/kernel/rng.ts';
import { msToNs } from '../../sim/kernel/time.ts';
import { servingMetrics } from '../../sim/metrics/serving-metrics.ts';
import type { TraceSink } from '../../sim/observe/trace-sink.ts';
import type { ServingPolicy } from '../../sim/serving/policy.ts';
import { ServingExecutor, type ServingConfig, type ServingOutcome } from '../../sim/serving/serving-executor.ts';
import { builtinPolicy } from '../../policies/registry.ts';
import { recordNeeds } from '../../policies/oracle/need-recorder.ts';
import type { OraclePrefetchPolicy } from '../../policies/oracle/oracle-prefetch.ts';
import type { NeedTrace, PolicyDefinition } from '../../policies/types.ts';
import { buildWorkload, WorkloadSchema, type WorkloadConfig } from '../../workloads/config.ts';
import { InvariantChecker } from '../helpers/invariant-checker.ts';
import { shrinkModel, SHRINKABLE_MODELS, BIG_GPUS, lengthArb } from '../helpers/serving-world.ts';

interface World {
  readonly model: ModelProfile;
  readonly hardwareId: string;
  readonly workload: WorkloadConfig;
  readonly maxBatchSize: number;
  readonly maxBatchTokens: number;
  readonly packetBytes: number;
  readonly seed: number;
  readonly slots: number;
}

type AnyDef = PolicyDefinition<unknown>;
const def = (name: string): AnyDef => builtinPolicy(name)!;

/** Buffer slots a policy runs with in world `w`. */
const slotsOf = (w: World, d: AnyDef, raw: Record<string, unknown>): number =>
  d.bufferSlots?.(d.params.parse(raw), w.model) ?? w.slots;

/** Builds the executor as `experiments/world.ts` does, at `slots` buffer slots, caching disabled unless `caching`. */
async function build(
  w: World,
  d: AnyDef,
  raw: Record<string, unknown>,
  slots: number,
  o: { sink?: TraceSink; oracle?: NeedTrace; wrap?: (p: ServingPolicy) => ServingPolicy; caching?: boolean } = {},
) {
  const params = d.params.parse(raw);
  const hardware = loadHardware(w.hardwareId);
  const streams = new RngStreams(w.seed);
  const m = w.model;
  const workload = await buildWorkload(
    w.workload,
    { modelId: m.id, moeLayers: m.moeLayers, experts: m.experts, topK: m.topK },
    streams,
  );
  const created = d.create(params, {
    rng: streams.stream(`policy:${d.name}`),
    model: m,
    hardware,
    workload,
    ...(o.oracle ? { oracle: o.oracle } : {}),
  });
  const policy = o.wrap ? o.wrap(created) : created;
  const config: ServingConfig = {
    batching: 'static',
    maxBatchSize: w.maxBatchSize,
    maxWaitNs: msToNs(0),
    maxBatchTokens: w.maxBatchTokens,
    bufferSlots: slots,
    packetBytes: w.packetBytes,
    preloadAllExperts: false,
    releaseAfterUse: !o.caching,
  };
  const executor = new ServingExecutor({
    model: m,
    hardware,
    cost: createCostModel(m, hardware, () => {}),
    workload,
    policy,
    config,
    ...(o.sink ? { sink: o.sink } : {}),
  });
  return { executor, policy };
}

/** The recording pass (on-demand at the same buffer size). */
async function record(w: World, slots: number, caching = false): Promise<NeedTrace> {
  let trace: NeedTrace | undefined;
  const { executor } = await build(w, def('on-demand'), {}, slots, {
    caching,
    wrap: (p) => {
      const r = recordNeeds(p);
      trace = r.trace;
      return r.policy;
    },
  });
  executor.run();
  return trace!;
}

// ------------------------------------------------------------------ arbitraries

const MIB = 1024 * 1024;

const worldArb: fc.Arbitrary<World> = fc
  .record({
    model: fc
      .record({
        id: fc.constantFrom(...SHRINKABLE_MODELS),
        layers: fc.integer({ min: 1, max: 4 }),
        denseLeading: fc.integer({ min: 0, max: 1 }),
        experts: fc.integer({ min: 2, max: 10 }),
        topK: fc.integer({ min: 1, max: 3 }),
      })
      .map((s) =>
        shrinkModel(s.id, {
          layers: s.layers,
          denseLeading: s.denseLeading,
          experts: s.experts,
          topK: Math.min(s.topK, s.experts),
        }),
      ),
    hardwareId: fc.constantFrom(...BIG_GPUS),
    workload: fc
      .record({ requests: fc.integer({ min: 1, max: 6 }), promptTokens: lengthArb(24), outputTokens: lengthArb(8) })
      .map((w) => WorkloadSchema.parse({ ...w, arrival: { kind: 'offline' }, routing: { kind: 'uniform' } })),
    maxBatchSize: fc.integer({ min: 1, max: 4 }),
    maxBatchTokens: fc.constantFrom(16, 64, 8192),
    packetBytes: fc.constantFrom(MIB / 4, 4 * MIB, 64 * MIB, 512 * MIB),
    seed: fc.integer({ min: 0, max: 10_000 }),
    slotsFraction: fc.double({ min: 0, max: 1, noNaN: true }),
  })
  .map(({ slotsFraction, ...w }) => ({
    ...w,
    slots: 1 + Math.floor(slotsFraction * (w.model.moeLayers * w.model.experts - 1)),
  }));

/** Every other built-in serving policy that can run with caching disabled and no predictor, with some random parameters. */
const othersArb = (m: ModelProfile): fc.Arbitrary<[string, Record<string, unknown>][]> =>
  fc
    .record({
      mt: fc.record({
        horizon: fc.integer({ min: 1, max: 3 }),
        prefetchPerLayer: fc.integer({ min: 1, max: m.experts }),
      }),
      replaceQueue: fc.boolean(),
      eamcWarmup: fc.constantFrom(0, 20),
    })
    .map(({ mt, replaceQueue, eamcWarmup }) => [
      ['on-demand', {}],
      ['dependency-prefetch', { replaceQueue }],
      ['model-tracing', mt],
      ['moe-infinity', { eamcWarmup }],
      ['pre-gated', {}],
      ['mixtral-offloading', {}],
      ['adapmoe', {}],
      ['lru', {}],
    ]);

const refused = (err: unknown): boolean => {
  if (err instanceof UserError) return true;
  throw err;
};

/** Rounding slack: integer-ns durations summed over a handful of events. */
const TOLERANCE_NS = 4;

// ------------------------------------------------------------------ properties

describe('oracle-prefetch is the upper bound of prefetching (caching disabled)', () => {
  it('blocks the GPU no longer than any other built-in serving policy, wastes nothing, keeps every invariant', async () => {
    const arb = worldArb.chain((w) => fc.record({ w: fc.constant(w), others: othersArb(w.model) }));
    let compared = 0;
    let strictlyBetter = 0;
    let comparisons = 0;
    await fc.assert(
      fc.asyncProperty(arb, async ({ w, others }) => {
        /** The oracle's run per buffer size (policies with capacity parameters bring their own). */
        const oracleAt = new Map<number, ServingOutcome>();
        const oracleRun = async (slots: number): Promise<ServingOutcome> => {
          let o = oracleAt.get(slots);
          if (o) return o;
          const oracle = await record(w, slots);
          const m = w.model;
          const checker = new InvariantChecker({ experts: m.experts, bytesPerExpert: m.derived.bytesPerExpert });
          const { executor, policy } = await build(w, def('oracle-prefetch'), {}, slots, { oracle, sink: checker });
          o = executor.run();
          expect(checker.finish(o)).toEqual([]);
          expect(o.requests.every((r) => r.emittedTokens === r.outputTokens && r.finishNs >= r.firstTokenNs)).toBe(
            true,
          );
          expect(o.resources.vram.peakBytes).toBeLessThanOrEqual(o.resources.vram.capacityBytes);
          const h2d = o.resources.h2d;
          expect(h2d.bytesMoved).toBe(h2d.completedBytes + h2d.cancelledSentBytes);
          const stats = (policy as OraclePrefetchPolicy).stats;
          expect(stats.matched).toBe(stats.routed);
          expect(stats.routed).toBe(oracle.steps.length);
          const metrics = servingMetrics(o);
          expect(metrics.prefetchWastedBytes).toBe(0);
          expect(o.counters.prefetchesUsed).toBe(o.counters.prefetchesIssued);
          // One load per need: exactly what on-demand moves.
          expect(h2d.bytesMoved).toBe(o.counters.needs * m.derived.bytesPerExpert);
          oracleAt.set(slots, o);
          return o;
        };
        let any = false;
        for (const [name, raw] of others) {
          const d = def(name);
          const slots = slotsOf(w, d, raw);
          let best: ServingOutcome;
          let other: ServingOutcome;
          try {
            best = await oracleRun(slots);
            other = (await build(w, d, raw, slots)).executor.run();
          } catch (err) {
            refused(err);
            continue;
          }
          any = true;
          comparisons++;
          expect(other.counters.needs, name).toBe(best.counters.needs);
          expect(
            best.counters.blockedNs,
            `oracle-prefetch vs ${name} ${JSON.stringify(raw)} at ${slots} slots`,
          ).toBeLessThanOrEqual(other.counters.blockedNs + TOLERANCE_NS);
          if (best.counters.blockedNs < other.counters.blockedNs) strictlyBetter++;
        }
        if (any) compared++;
      }),
      { numRuns: 30 },
    );
    // Not vacuous: most worlds ran, and the oracle usually blocks strictly less.
    expect(compared).toBeGreaterThan(20);
    expect(strictlyBetter).toBeGreaterThan(comparisons / 2);
  });
});

describe('oracle-prefetch with caching (conservative) is belady prefetched', () => {
  it("moves belady's bytes, keeps its cache hits, wastes nothing and blocks no longer", async () => {
    let compared = 0;
    let strictlyBetter = 0;
    await fc.assert(
      // At least a layer's experts: every layer's needs fit the buffer at once (MIN's model).
      fc.asyncProperty(
        worldArb.chain((w) =>
          fc
            .integer({ min: w.model.experts, max: w.model.moeLayers * w.model.experts })
            .map((slots) => ({ ...w, slots })),
        ),
        async (w) => {
          let oracle: NeedTrace;
          try {
            oracle = await record(w, w.slots, true);
          } catch (err) {
            refused(err);
            return;
          }
          const m = w.model;
          const checker = new InvariantChecker({ experts: m.experts, bytesPerExpert: m.derived.bytesPerExpert });
          const { executor, policy } = await build(w, def('oracle-prefetch'), {}, w.slots, {
            oracle,
            sink: checker,
            caching: true,
          });
          const best = executor.run();
          expect(checker.finish(best)).toEqual([]);
          expect(best.requests.every((r) => r.emittedTokens === r.outputTokens)).toBe(true);
          expect(best.resources.vram.peakBytes).toBeLessThanOrEqual(best.resources.vram.capacityBytes);
          const stats = (policy as OraclePrefetchPolicy).stats;
          expect(stats.matched).toBe(stats.routed);
          const b = (await build(w, def('belady'), {}, w.slots, { oracle, caching: true })).executor.run();
          expect(best.counters.needs).toBe(b.counters.needs);
          expect(servingMetrics(best).prefetchWastedBytes).toBe(0);
          expect(best.counters.prefetchesUsed).toBe(best.counters.prefetchesIssued);
          // MIN's model holds when every layer's experts fit the buffer at once; a layer needing more
          // experts than slots computes them through the buffer in expert order, and which ones stay
          // depends on the order, not on the policy (see the header).
          const overflow = oracle.steps.some((st) => st.experts.length > w.slots);
          if (stats.planned > 0) expect(stats.overflow > 0).toBe(overflow);
          if (overflow) return;
          expect(best.resources.h2d.bytesMoved).toBe(b.resources.h2d.bytesMoved);
          expect(best.counters.cacheHits).toBe(b.counters.cacheHits);
          expect(best.counters.blockedNs, `oracle-prefetch vs belady at ${w.slots} slots`).toBeLessThanOrEqual(
            b.counters.blockedNs + TOLERANCE_NS,
          );
          compared++;
          if (best.counters.blockedNs < b.counters.blockedNs) strictlyBetter++;
          // The aggressive mode is no bound on belady (it trades extra fetches for lookahead), but it wastes nothing either.
          const agg = new InvariantChecker({ experts: m.experts, bytesPerExpert: m.derived.bytesPerExpert });
          const a = (
            await build(w, def('oracle-prefetch'), { caching: 'aggressive' }, w.slots, {
              oracle,
              sink: agg,
              caching: true,
            })
          ).executor.run();
          expect(agg.finish(a)).toEqual([]);
          expect(servingMetrics(a).prefetchWastedBytes).toBe(0);
          expect(a.counters.prefetchesUsed).toBe(a.counters.prefetchesIssued);
          expect(a.counters.demandFetches).toBe(0);
        },
      ),
      { numRuns: 30 },
    );
    expect(compared).toBeGreaterThan(20);
    expect(strictlyBetter).toBeGreaterThan(compared / 2);
  });
});
