/**
 * oracle-prefetch on tiny hand-made worlds: a model with 1 MB experts, a 1 GB/s zero-latency
 * link (one expert = 1 ms = 1 000 000 ns), stub kernel times (attention 10 µs, router 1 µs,
 * LM head 5 µs, expert `expertNs`), hand-made routing, offline arrivals and static batching,
 * so the recording pass (on-demand) is the run's exact future.
 */
import { describe, expect, it } from 'vitest';
import type { CostModel, Operation } from '../../sim/cost/types.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import { servingMetrics } from '../../sim/metrics/serving-metrics.ts';
import type { ServingPolicy } from '../../sim/serving/policy.ts';
import { ServingExecutor, type ServingConfig, type ServingOutcome } from '../../sim/serving/serving-executor.ts';
import type { RequestSpec, Workload } from '../../sim/workload.ts';
import {
  createOraclePrefetch,
  minPlan,
  oraclePrefetch,
  type OraclePrefetchPolicy,
} from '../../policies/oracle/oracle-prefetch.ts';
import { BeladyParams, createBelady, NeedIndex } from '../../policies/oracle/belady.ts';
import { recordNeeds } from '../../policies/oracle/need-recorder.ts';
import { createDependencyPrefetch, DependencyPrefetchParams } from '../../policies/prefetch/dependency-prefetch.ts';
import { builtinPolicy } from '../../policies/registry.ts';
import type { NeedTrace } from '../../policies/types.ts';
import { buildServingWorld } from '../../experiments/world.ts';
import type { RunSpec } from '../../experiments/config/expand.ts';
import { ServingExecutorSchema } from '../../experiments/config/schema.ts';
import { WorkloadSchema } from '../../workloads/config.ts';
import { MB, tinyHardware, tinyModel } from '../helpers/tiny-world.ts';
import { InvariantChecker } from '../helpers/invariant-checker.ts';

const ATTENTION = 10_000;
const ROUTER = 1_000;
const LM_HEAD = 5_000;
const LOAD = 1_000_000; // one 1 MB expert over 1 GB/s

/** Kernel times; an expert's may depend on its token count. */
function stubCost(expertNs: number | ((tokens: number) => number)): CostModel {
  // Every other kind of operation takes no time.
  const ns: Partial<Record<Operation['kind'], number>> = {
    attention: ATTENTION,
    router: ROUTER,
    expert: typeof expertNs === 'number' ? expertNs : 0,
    lmHead: LM_HEAD,
  };
  const of = (op: Operation): number =>
    op.kind === 'expert' && typeof expertNs === 'function' ? expertNs(op.tokens) : (ns[op.kind] ?? 0);
  return { estimate: (op) => ({ ns: of(op) as Ns, bound: 'flops', source: 'roofline', flops: 0, bytes: 0 }) };
}

interface Tiny {
  readonly layers: number;
  readonly experts: number;
  readonly topK?: number;
  /** Experts (topK of them) of (request, layer, token). */
  readonly route: (request: number, layer: number, token: number) => readonly number[];
  readonly requests?: readonly Partial<RequestSpec>[];
  readonly slots: number;
  readonly expertNs: number | ((tokens: number) => number);
  readonly releaseAfterUse: boolean;
  readonly maxBatchSize?: number;
}

function workloadOf(w: Tiny): Workload {
  const requests = (w.requests ?? [{}]).map((r, id) => ({
    id,
    arrivalNs: 0 as Ns,
    promptTokens: 1,
    outputTokens: 4,
    ...r,
  }));
  return {
    requests,
    routing: {
      moeLayers: w.layers,
      experts: w.experts,
      topK: w.topK ?? 1,
      forRequest: (spec) => ({
        route(layer, fromToken, toToken, out) {
          let o = 0;
          for (let t = fromToken; t < toToken; t++) for (const e of w.route(spec.id, layer, t)) out[o++] = e;
        },
      }),
    },
    describe: 'hand-made',
  };
}

function run(w: Tiny, policy: ServingPolicy): { outcome: ServingOutcome; violations: string[] } {
  const checker = new InvariantChecker({ experts: w.experts, bytesPerExpert: MB, allowPreload: false });
  const config: ServingConfig = {
    batching: 'static',
    maxBatchSize: w.maxBatchSize ?? 1,
    maxWaitNs: 0 as Ns,
    maxBatchTokens: 8192,
    bufferSlots: w.slots,
    packetBytes: 256 * 1024,
    preloadAllExperts: false,
    releaseAfterUse: w.releaseAfterUse,
  };
  const executor = new ServingExecutor({
    model: tinyModel(w.layers, w.experts, w.topK ?? 1),
    hardware: tinyHardware(),
    cost: stubCost(w.expertNs),
    workload: workloadOf(w),
    policy,
    config,
    sink: checker,
    maxEvents: 500_000,
  });
  const outcome = executor.run();
  return { outcome, violations: checker.finish(outcome) };
}

const onDemand = (): ServingPolicy => builtinPolicy('on-demand')!.create({ keep: false }, undefined as never);

/** The recording pass the world builder makes: on-demand in the same world. */
function record(w: Tiny): NeedTrace {
  const r = recordNeeds(onDemand());
  run(w, r.policy);
  return r.trace;
}

function runOracle(
  w: Tiny,
  trace: NeedTrace = record(w),
): { outcome: ServingOutcome; violations: string[]; policy: OraclePrefetchPolicy } {
  const policy = createOraclePrefetch('oracle-prefetch', trace, w.experts, w.layers);
  return { ...run(w, policy), policy };
}

// 1 request, prompt 1 token, 2 output tokens (2 iterations), 2 MoE layers of 4 experts, top-1,
// expert (l, token t) = (t + l) mod 4: needs M0E0, M1E1 | M0E1, M1E2 — keys 0, 5, 1, 6.
const fourNeeds = (expertNs: number, slots: number): Tiny => ({
  layers: 2,
  experts: 4,
  route: (_r, l, t) => [(t + l) % 4],
  requests: [{ outputTokens: 2 }],
  slots,
  expertNs,
  releaseAfterUse: true,
});

describe('oracle-prefetch: prefetch-only (releaseAfterUse)', () => {
  it('long experts, 2 slots: only the first load is exposed — blocking 989 µs by hand (on-demand 4 ms)', () => {
    // Expert compute 2 ms > one load (1 ms). t = 0: prefetch M0E0 (need 0) and M1E1 (need 1),
    // both slots. Layer 0 routes at 11 µs (attention 10 + router 1) and waits for M0E0 until
    // 1000 µs: blocked 989 µs. M1E1 lands at 2000 (during M0E0's compute, 1000–3000). At 3000
    // M0E0 is released; layer done → prefetch M0E1 (3000–4000). Layer 1 routes at 3011: M1E1
    // resident, computes 3011–5011; then M1E2 is prefetched at 5011 (lands 6011), M0E1 is
    // resident when iteration 1 routes layer 0 at 5027, M1E2 when it routes layer 1 at 7038.
    const w = fourNeeds(2_000_000, 2);
    const { outcome, violations, policy } = runOracle(w);
    expect(violations).toEqual([]);
    expect(outcome.counters.blockedNs).toBe(LOAD - ATTENTION - ROUTER);
    expect(outcome.counters).toMatchObject({
      needs: 4,
      demandFetches: 0,
      prefetchesIssued: 4,
      prefetchesUsed: 4,
      prefetchHits: 3,
      prefetchWastedBytes: 0,
      prefetchesCancelled: 0,
    });
    expect(outcome.endNs).toBe(7038_000 + 2_000_000 + LM_HEAD);
    expect(policy.stats).toMatchObject({ routed: 4, matched: 4 });
    const m = servingMetrics(outcome);
    expect(m.prefetchPrecision).toBe(1);
    expect(m.prefetchWastedBytes).toBe(0);
    expect(m.h2dBytes).toBe(4 * MB);
    // On-demand: every need is a 1 ms fetch after its router.
    expect(run(w, onDemand()).outcome.counters.blockedNs).toBe(4 * LOAD);
  });

  it('short experts: the link is the bottleneck, blocking = makespan − compute (3651 µs by hand)', () => {
    // Expert compute 100 µs ≪ 1 ms: the link runs back to back from t = 0 (loads land at 1, 2,
    // 3, 4 ms). Routers at 11, 1111, 2116, 3111 µs wait for 1000, 2000, 3000, 4000:
    // 989 + 889 + 884 + 889 = 3651 µs. The last load cannot land before 4 ms: optimal.
    const w = fourNeeds(100_000, 2);
    const { outcome, violations } = runOracle(w);
    expect(violations).toEqual([]);
    expect(outcome.counters.blockedNs).toBe(3_651_000);
    expect(outcome.endNs).toBe(4 * LOAD + 100_000 + LM_HEAD);
    expect(outcome.counters.prefetchWastedBytes).toBe(0);
  });

  it('one slot: it never prefetches into a slot it would have to take back (nothing to overlap)', () => {
    // 1 slot: M0E0 prefetched at t = 0; each next need is prefetched when the previous expert's
    // layer is done (the slot is free only then, never taken back from a prefetch). Each router
    // runs 11 µs after its load started (attention + router): 989 µs blocked, except iteration
    // 1's first layer, whose load also overlaps the LM head (5 µs): 984 µs.
    const { outcome, violations } = runOracle(fourNeeds(2_000_000, 1));
    expect(violations).toEqual([]);
    expect(outcome.counters.blockedNs).toBe(4 * (LOAD - ATTENTION - ROUTER) - 5_000 * 1);
    expect(outcome.counters).toMatchObject({ demandFetches: 0, prefetchWastedBytes: 0, prefetchesIssued: 4 });
  });

  it('an expert needed at consecutive steps is reloaded after its release, never twice at once', () => {
    // One MoE layer, every token routes to expert 0: each iteration needs key 0, released after
    // use. Iteration 0 waits 989 µs; each later one's load starts at the previous layer done,
    // overlapping LM head + attention + router (16 µs): 984 µs each.
    const w: Tiny = {
      layers: 1,
      experts: 2,
      route: () => [0],
      requests: [{ outputTokens: 3 }],
      slots: 3,
      expertNs: 100_000,
      releaseAfterUse: true,
    };
    const { outcome, violations } = runOracle(w);
    expect(violations).toEqual([]);
    expect(outcome.counters.blockedNs).toBe(989_000 + 2 * 984_000);
    expect(outcome.counters).toMatchObject({
      needs: 3,
      demandFetches: 0,
      prefetchesIssued: 3,
      prefetchesUsed: 3,
      prefetchWastedBytes: 0,
    });
  });

  it('batches, top-2, more needs per layer than slots: zero waste, precision 1, blocking ≤ on-demand and dependency-prefetch', () => {
    const w: Tiny = {
      layers: 3,
      experts: 6,
      topK: 2,
      route: (r, l, t) => [(r + 2 * l + t) % 6, (r + 2 * l + t + 3) % 6],
      requests: [{ promptTokens: 3, outputTokens: 5 }, { promptTokens: 2, outputTokens: 3 }, { outputTokens: 4 }],
      maxBatchSize: 2,
      slots: 3,
      expertNs: 300_000,
      releaseAfterUse: true,
    };
    const { outcome, violations, policy } = runOracle(w);
    expect(violations).toEqual([]);
    expect(policy.stats.matched).toBe(policy.stats.routed);
    const m = servingMetrics(outcome);
    expect(m.prefetchWastedBytes).toBe(0);
    expect(m.prefetchPrecision).toBe(1);
    expect(outcome.requests.every((r) => r.emittedTokens === r.outputTokens)).toBe(true);
    const od = run(w, onDemand()).outcome;
    const dp = run(w, createDependencyPrefetch('dp', DependencyPrefetchParams.parse({}))).outcome;
    expect(outcome.counters.needs).toBe(od.counters.needs);
    expect(outcome.counters.blockedNs).toBeLessThan(od.counters.blockedNs);
    expect(outcome.counters.blockedNs).toBeLessThanOrEqual(dp.counters.blockedNs);
    // Every need is one load: the same bytes as on-demand.
    expect(m.h2dBytes).toBe(od.resources.h2d.bytesMoved);
  });
});

describe('oracle-prefetch: known gaps (where it is not a bound)', () => {
  it('a layer loads in expert order and a slot freed mid-layer waits for the next hook: a longest-compute-first policy blocks less', () => {
    // One MoE layer of 4 experts, 2 slots, expert compute 100 µs + 1400 µs per token beyond the
    // first. Prompt of 3 tokens: token 0 → E0 (1 token, 100 µs), tokens 1–2 → E1 (2 tokens,
    // 1500 µs); the decode token → E2. Needs: {E0, E1} | {E2}.
    const w: Tiny = {
      layers: 1,
      experts: 4,
      route: (_r, _l, t) => [t === 0 ? 0 : t < 3 ? 1 : 2],
      requests: [{ promptTokens: 3, outputTokens: 2 }],
      slots: 2,
      expertNs: (tokens) => 100_000 + 1_400_000 * (tokens - 1),
      releaseAfterUse: true,
    };
    // Oracle: E0 loads 0–1000, E1 1000–2000. Router at 11: waits for E0 (989), computes it
    // 1000–1100, waits for E1 (900), computes it 2000–3500. E0's slot, free since 1100, gets
    // no hook until the layer is done (3500): E2 loads 3500–4500; iteration 1 routes at 3516
    // (LM head, attention, router) and waits 984. Total 989 + 900 + 984 = 2873 µs.
    const oracle = runOracle(w).outcome;
    expect(oracle.counters.blockedNs).toBe(2_873_000);
    // Longest computation first (Johnson's rule): E1 loads 0–1000, E0 1000–2000. Router at 11
    // waits 989; E1 computes 1000–2500, E0 (landed at 2000) 2500–2600; E2 loads 2600–3600,
    // routed at 2616: waits 984. Total 1973 µs. The recording has no tokens per expert, so
    // the oracle cannot order a layer this way; with a hook at release (E2 loading 2000–3000)
    // it would not have waited the last 984 µs either.
    const johnson: ServingPolicy = {
      name: 'longest-first',
      onIterationStart: (v) =>
        v.iteration === 0
          ? {
              prefetch: [
                { key: 1, priority: 1 },
                { key: 0, priority: 2 },
              ],
            }
          : undefined,
      onLayerDone: () => ({ prefetch: [{ key: 2, priority: 1 }] }),
    };
    const other = run(w, johnson);
    expect(other.violations).toEqual([]);
    expect(other.outcome.counters.blockedNs).toBe(1_973_000);
  });
});

describe('oracle-prefetch: with caching', () => {
  it('keeps an expert needed again and releases one never needed again', () => {
    // Every token routes to expert 0 of the single layer: loaded once (989 µs exposed), then a
    // cache hit at every later iteration.
    const w: Tiny = {
      layers: 1,
      experts: 2,
      route: () => [0],
      requests: [{ outputTokens: 3 }],
      slots: 2,
      expertNs: 100_000,
      releaseAfterUse: false,
    };
    const { outcome, violations } = runOracle(w);
    expect(violations).toEqual([]);
    expect(outcome.counters).toMatchObject({
      needs: 3,
      cacheHits: 2,
      prefetchesIssued: 1,
      demandFetches: 0,
      blockedNs: 989_000,
    });
    const p = createOraclePrefetch('oracle-prefetch', record(w), 2, 1);
    const view = { layer: 0, iteration: 2 } as never;
    expect(p.afterUse?.(view, 0)).toBe(false); // last need of key 0
  });

  // One layer of 4 experts, 2 slots, expert compute 2 ms (a load is 1 ms), needs (one per
  // iteration, steps 0–5): 0, 1, 0, 2, 1, 0. Belady's MIN fetches 4 times: 0, 1, then 2 at step 3
  // in place of 0 (next uses 5 vs 1's 4), then 0 at step 5 in place of 2 (1 and 2 are both
  // never needed again; 2's last use is earlier). Each router runs 11 µs after its layer
  // starts, or 16 µs after the previous layer's end (LM head 5 + attention 10 + router 1).
  const belady6 = (): Tiny => {
    const seq = [0, 1, 0, 2, 1, 0];
    return {
      layers: 1,
      experts: 4,
      route: (_r, _l, t) => [seq[t]!],
      requests: [{ outputTokens: seq.length }],
      slots: 2,
      expertNs: 2_000_000,
      releaseAfterUse: false,
    };
  };

  it("conservative (default): exactly Belady's fetches, each issued once its victim is done with", () => {
    // 0 and 1 prefetched at t = 0; step 0 waits 989 µs. Step 1 is a prefetch hit, step 2 a cache
    // hit. 0 is MIN's victim for 2 and its last use before step 3 is step 2: 2 is fetched when
    // step 2 is done, loads during step 3's LM head, attention and router, and step 3 waits
    // 1000 − 16 = 984 µs. 2 is never needed again: released after step 3, and 0 (whose victim
    // is 2) is prefetched at once, under step 4's compute (a cache hit of 1): step 5 is a
    // prefetch hit. Blocking 989 + 984 µs.
    const w = belady6();
    const { outcome, violations, policy } = runOracle(w);
    expect(violations).toEqual([]);
    expect(policy.stats).toMatchObject({ mode: 'cache', planned: 4, overflow: 0 });
    expect(outcome.counters).toMatchObject({
      needs: 6,
      cacheHits: 2,
      prefetchHits: 2,
      demandFetches: 0,
      prefetchesIssued: 4,
      prefetchWastedBytes: 0,
    });
    expect(outcome.counters.blockedNs).toBe(989_000 + 984_000);
    // Belady moves the same bytes, each on demand: 4 × 1000 µs blocked.
    const belady = run(w, createBelady('belady', BeladyParams.parse({}), record(w), 4, 1)).outcome;
    expect(belady.resources.h2d.bytesMoved).toBe(outcome.resources.h2d.bytesMoved);
    expect(belady.counters.blockedNs).toBe(4 * LOAD);
  });

  it('aggressive: fetches the next missing need in place of any expert needed later — more bytes, less blocking when compute dominates', () => {
    // t = 0: prefetch 0 and 1; 2 (step 3) has no slot while both are needed sooner. After step
    // 1, 1's next use is step 4 > 3: evict 1 for 2. After step 2, 0's next use is 5 > 4: evict 0
    // for 1. After step 3, 2 is released (never needed again) and 0 is prefetched into its
    // slot. 5 fetches (one more than MIN), each used; every load after the first hides under a
    // 2 ms computation: blocking 989 µs.
    const w = belady6();
    const policy = createOraclePrefetch('oracle-prefetch', record(w), 4, 1, 'aggressive');
    const { outcome, violations } = run(w, policy);
    expect(violations).toEqual([]);
    expect(outcome.counters).toMatchObject({
      needs: 6,
      cacheHits: 1,
      prefetchHits: 4,
      demandFetches: 0,
      prefetchWastedBytes: 0,
      prefetchesIssued: 5,
    });
    expect(outcome.counters.blockedNs).toBe(989_000);
  });

  it("the MIN plan: Belady's fetches, victims and when each victim is done with", () => {
    const trace: NeedTrace = { steps: [0, 1, 0, 2, 1, 0].map((e, i) => ({ iteration: i, layer: 0, experts: [e] })) };
    const plan = minPlan(new NeedIndex(trace, 4, 4), 4, 2);
    expect(Array.from(plan.step)).toEqual([0, 1, 3, 5]);
    expect(Array.from(plan.key)).toEqual([0, 1, 2, 0]);
    expect(Array.from(plan.victim)).toEqual([-1, -1, 0, 2]);
    expect(Array.from(plan.readyAt)).toEqual([0, 0, 3, 4]);
    // A step needing more experts than slots overflows: the extra fetch is left to the executor.
    const wide: NeedTrace = {
      steps: [
        { iteration: 0, layer: 0, experts: [0, 1, 2] },
        { iteration: 1, layer: 0, experts: [0] },
      ],
    };
    const p2 = minPlan(new NeedIndex(wide, 4, 4), 4, 2);
    expect(Array.from(p2.overflow)).toEqual([0, 0, 1]);
  });
});

describe('oracle-prefetch: a recording that differs from the run', () => {
  it('re-synchronises, counts the mismatches, fetches what is missing on demand and still finishes', () => {
    const w = fourNeeds(100_000, 2);
    // A wrong future: needs M0E3, M1E3 at both iterations.
    const wrong: NeedTrace = {
      steps: [
        { iteration: 0, layer: 0, experts: [3] },
        { iteration: 0, layer: 1, experts: [3] },
        { iteration: 1, layer: 0, experts: [3] },
        { iteration: 1, layer: 1, experts: [3] },
      ],
    };
    const { outcome, violations, policy } = runOracle(w, wrong);
    expect(violations).toEqual([]);
    expect(policy.stats).toMatchObject({ routed: 4, matched: 0 });
    expect(outcome.counters.demandFetches).toBe(4);
    expect(outcome.counters.prefetchWastedBytes + outcome.resources.h2d.cancelledSentBytes).toBeGreaterThan(0);
    expect(outcome.requests.every((r) => r.emittedTokens === r.outputTokens)).toBe(true);
  });
});

describe('oracle-prefetch: registry and world builder', () => {
  it('is registered, asks for the recorded needs, and refuses to run without them', () => {
    expect(builtinPolicy('oracle-prefetch')).toBe(oraclePrefetch);
    expect(oraclePrefetch.oracle).toBe('needs');
    expect(oraclePrefetch.bufferSlots?.(oraclePrefetch.params.parse({ capacitySlots: 7 }), tinyModel(1, 2, 1))).toBe(7);
    expect(() =>
      oraclePrefetch.create(oraclePrefetch.params.parse({}), { model: tinyModel(1, 2, 1) } as never),
    ).toThrow(/ctx\.oracle/);
  });

  it('through experiments/world.ts (offline, static, releaseAfterUse): replays exactly, no waste, blocking ≤ on-demand', async () => {
    const spec = (name: string): RunSpec => ({
      index: 0,
      policy: { label: name, definition: builtinPolicy(name)!, params: builtinPolicy(name)!.params.parse({}) },
      model: 'mixtral-8x7b',
      hardware: 'h100',
      seed: 3,
      workload: WorkloadSchema.parse({
        requests: 4,
        arrival: { kind: 'offline' },
        promptTokens: { kind: 'fixed', tokens: 6 },
        outputTokens: { kind: 'fixed', tokens: 4 },
      }),
      executor: ServingExecutorSchema.parse({
        batching: 'static',
        maxBatchSize: 2,
        bufferSlots: 12,
        releaseAfterUse: true,
      }),
      params: {},
    });
    const oracle = await buildServingWorld(spec('oracle-prefetch'), { baseDir: '.' });
    const o = oracle.run();
    const od = (await buildServingWorld(spec('on-demand'), { baseDir: '.' })).run();
    const m = servingMetrics(o);
    expect(m.prefetchWastedBytes).toBe(0);
    expect(m.prefetchPrecision).toBe(1);
    expect(o.counters.needs).toBe(od.counters.needs);
    expect(o.counters.blockedNs).toBeLessThan(od.counters.blockedNs);
  });
});
