/**
 * The serving executor on a tiny hand-made world, with every expected time worked out by hand.
 *
 * World: 2 layers, both MoE, 4 experts, top-1; one expert is 1 MB (10^6 B). PCIe H2D 1 GB/s with
 * zero latency, so a 1 MB expert takes exactly 1 ms = 1 000 000 ns. A stub cost model gives
 * fixed kernel times: attention 10 µs, router 1 µs, expert 100 µs, LM head 5 µs. A stub
 * routing sends every token to expert 1 at layer 0 and expert 2 at layer 1. One request,
 * 1 prompt token, arriving at t = 0.
 *
 * One pass with both experts missing (on-demand):
 *   attention 0 → 10 000, router → 11 000, fetch M0E1 11 000 → 1 011 000 (GPU blocked 1 ms),
 *   expert → 1 111 000; attention → 1 121 000, router → 1 122 000, fetch M1E2 → 2 122 000
 *   (blocked 1 ms), expert → 2 222 000; LM head → 2 227 000.
 * A pass with both experts resident: 2 × (10 000 + 1 000 + 100 000) + 5 000 = 227 000.
 */
import { describe, expect, it } from 'vitest';
import type { ModelProfile, RuntimeProfile } from '../../hardware-profiles/types.ts';
import { loadRuntime } from '../../hardware-profiles/load.ts';
import type { CostModel } from '../../sim/cost/types.ts';
import { PolicyError } from '../../sim/kernel/errors.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import { servingMetrics } from '../../sim/metrics/serving-metrics.ts';
import type { MemoryRecord, PacketRecord, TraceSink, TransferRecord } from '../../sim/observe/trace-sink.ts';
import type { ServingPolicy } from '../../sim/serving/policy.ts';
import { ServingExecutor, type ServingConfig, type ServingOutcome } from '../../sim/serving/serving-executor.ts';
import type { RequestSpec, RoutingSource, Workload } from '../../sim/workload.ts';
import { builtinPolicy } from '../../policies/registry.ts';
import { fanout } from '../../sim/observe/trace-sink.ts';
import { MB, fixedRouting as routeTo, stubKernelCost, tinyHardware, tinyModel } from '../helpers/tiny-world.ts';
import { InvariantChecker } from '../helpers/invariant-checker.ts';

const EXPERTS = 4;

const model: ModelProfile = { ...tinyModel(2, EXPERTS, 1), id: 'tiny' };

const stubCost: CostModel = stubKernelCost();

/** Every token: expert 1 at layer 0, expert 2 at layer 1. */
const fixedRouting: RoutingSource = routeTo(2, EXPERTS, (layer) => [layer === 0 ? 1 : 2]);

function workload(requests: readonly Partial<RequestSpec>[] = [{}]): Workload {
  return {
    requests: requests.map((r, id) => ({ id, arrivalNs: 0 as Ns, promptTokens: 1, outputTokens: 2, ...r })),
    routing: fixedRouting,
    describe: 'hand-made',
  };
}

function config(o: Partial<ServingConfig> = {}): ServingConfig {
  return {
    batching: 'continuous',
    maxBatchSize: 1,
    maxWaitNs: 0 as Ns,
    maxBatchTokens: 8192,
    bufferSlots: 4,
    packetBytes: 16 * 1024 * 1024,
    preloadAllExperts: false,
    ...o,
  };
}

/** Records transfers, packets and memory, and checks invariants. */
class Recorder implements TraceSink {
  readonly transfers: TransferRecord[] = [];
  readonly packets: PacketRecord[] = [];
  readonly memory: MemoryRecord[] = [];
  onTransfer(r: TransferRecord): void {
    this.transfers.push(r);
  }
  onPacket(r: PacketRecord): void {
    this.packets.push(r);
  }
  onMemory(r: MemoryRecord): void {
    this.memory.push(r);
  }
}

function run(
  policy: ServingPolicy,
  o: {
    cfg?: Partial<ServingConfig>;
    requests?: readonly Partial<RequestSpec>[];
    runtime?: RuntimeProfile;
    cost?: CostModel;
  } = {},
) {
  const rec = new Recorder();
  const checker = new InvariantChecker({ experts: EXPERTS, bytesPerExpert: MB });
  const executor = new ServingExecutor({
    model,
    hardware: tinyHardware(100 * MB),
    cost: o.cost ?? stubCost,
    workload: workload(o.requests),
    policy,
    config: config(o.cfg),
    ...(o.runtime ? { runtime: o.runtime } : {}),
    sink: fanout([rec, checker]),
    // A runaway run fails fast instead of filling the heap.
    maxEvents: 100_000,
  });
  const outcome = executor.run();
  return { outcome, rec, violations: checker.finish(outcome) };
}

const onDemand = (): ServingPolicy => builtinPolicy('on-demand')!.create({ keep: false }, undefined as never);
/** LRU; the buffer size comes from the config here (the world builder maps `capacitySlots` to it). */
const lru = (capacitySlots: number): ServingPolicy =>
  builtinPolicy('lru')!.create({ capacitySlots }, undefined as never);

const key = (layer: number, expert: number) => layer * EXPERTS + expert;

describe('serving executor: hand-checked timings', () => {
  it('on-demand: every expert is fetched and the GPU blocks 1 ms per expert', () => {
    const { outcome, violations } = run(onDemand());
    expect(violations).toEqual([]);
    const r = outcome.requests[0]!;
    // First pass: 2 227 000 (header). Second pass: on-demand released both experts, so the same again.
    expect(r.firstTokenNs).toBe(2_227_000);
    expect(r.finishNs).toBe(4_454_000);
    expect(outcome.endNs).toBe(4_454_000);
    expect(outcome.counters.blockedNs).toBe(4 * 1_000_000);
    expect(outcome.counters).toMatchObject({
      needs: 4,
      cacheHits: 0,
      prefetchHits: 0,
      demandFetches: 4,
      iterations: 2,
    });
    expect(outcome.resources.h2d.bytesMoved).toBe(4 * MB);
    const m = servingMetrics(outcome);
    expect(m.ttftMs.mean).toBe(2.227);
    expect(m.tpotMs.mean).toBe(2.227);
    expect(m.gpuBlockedS).toBe(0.004);
    expect(m.bufferHitRate).toBe(0);
  });

  it('LRU: the second token hits both experts', () => {
    const { outcome, violations } = run(lru(4), { cfg: { bufferSlots: 4 } });
    expect(violations).toEqual([]);
    const r = outcome.requests[0]!;
    expect(r.firstTokenNs).toBe(2_227_000);
    // Second pass: both resident, 227 000 ns.
    expect(r.finishNs).toBe(2_227_000 + 227_000);
    expect(outcome.counters).toMatchObject({ needs: 4, cacheHits: 2, prefetchHits: 0, demandFetches: 2, evictions: 0 });
    expect(outcome.counters.blockedNs).toBe(2_000_000);
    expect(outcome.resources.h2d.bytesMoved).toBe(2 * MB);
    expect(servingMetrics(outcome).bufferHitRate).toBe(0.5);
  });

  it('LRU with one slot thrashes: no hits, one eviction per need after the first', () => {
    const { outcome, violations } = run(lru(1), { cfg: { bufferSlots: 1 } });
    expect(violations).toEqual([]);
    expect(outcome.requests[0]!.finishNs).toBe(4_454_000);
    expect(outcome.counters).toMatchObject({ needs: 4, cacheHits: 0, demandFetches: 4, evictions: 3 });
  });

  it('a prefetch issued at iteration start overlaps compute; the demand fetch waits for the packet on the wire', () => {
    // t=0: prefetch M1E2 (1 MB, one packet) occupies the link 0 → 1 000 000. At 11 000 layer 0
    // needs M0E1 on demand (priority 0), but a packet is never pre-empted: it runs
    // 1 000 000 → 2 000 000 (blocked 11 000 → 2 000 000), expert → 2 100 000; layer 1:
    // attention → 2 110 000, router → 2 111 000, M1E2 resident: a prefetch hit, expert →
    // 2 211 000; LM head → 2 216 000.
    let issued = false;
    const policy: ServingPolicy = {
      name: 'prefetch-next',
      onIterationStart(view) {
        if (issued) return;
        issued = true;
        return { prefetch: [{ key: view.keyOf(1, 2), priority: 5 }] };
      },
    };
    const { outcome, rec, violations } = run(policy, { requests: [{ outputTokens: 1 }] });
    expect(violations).toEqual([]);
    expect(outcome.requests[0]!.firstTokenNs).toBe(2_216_000);
    expect(outcome.counters).toMatchObject({
      needs: 2,
      prefetchHits: 1,
      cacheHits: 0,
      demandFetches: 1,
      prefetchesIssued: 1,
      prefetchesUsed: 1,
    });
    expect(outcome.counters.blockedNs).toBe(2_000_000 - 11_000);
    expect(rec.transfers.map((t) => [t.label, t.category, t.startNs, t.endNs, t.outcome])).toEqual([
      ['expert M1E2', 'expert-prefetch', 0, 1_000_000, 'done'],
      ['expert M0E1', 'expert-demand', 1_000_000, 2_000_000, 'done'],
    ]);
    const m = servingMetrics(outcome);
    expect(m.prefetchHitRate).toBe(0.5);
    expect(m.bufferHitRate).toBe(m.cacheHitRate + m.prefetchHitRate);
  });
});

describe('serving executor: policy errors', () => {
  it('a hook that throws is reported as a PolicyError naming the policy and the hook', () => {
    const policy: ServingPolicy = {
      name: 'boom',
      onLayerRouted() {
        throw new Error('kaput');
      },
    };
    let err: unknown;
    try {
      run(policy);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(PolicyError);
    const pe = err as PolicyError;
    expect(pe.policy).toBe('boom');
    expect(pe.hook).toBe('onLayerRouted');
    expect(pe.message).toContain('kaput');
    expect(pe.message).toContain('boom');
    expect(pe.message).toContain('onLayerRouted');
    // Routed at layer 0 after attention + router: t = 11 000.
    expect(pe.simTimeNs).toBe(11_000);
  });

  it('init, afterUse and chooseVictim errors name their hook too', () => {
    const cases: [string, ServingPolicy][] = [
      [
        'init',
        {
          name: 'p',
          init: () => {
            throw new Error('x');
          },
        },
      ],
      [
        'afterUse',
        {
          name: 'p',
          afterUse: () => {
            throw new Error('x');
          },
        },
      ],
      [
        'chooseVictim',
        {
          name: 'p',
          chooseVictim: () => {
            throw new Error('x');
          },
        },
      ],
    ];
    for (const [hook, policy] of cases) {
      const cfg = hook === 'chooseVictim' ? { bufferSlots: 1 } : {};
      expect(() => run(policy, { cfg }), hook).toThrow(PolicyError);
      try {
        run(policy, { cfg });
      } catch (e) {
        expect((e as PolicyError).hook).toBe(hook);
      }
    }
  });

  it.each([
    ['out of range', 99],
    ['negative', -1],
    ['fractional', 1.5],
    ['not a number', Number.NaN],
    ['a string', '3' as unknown as number],
  ])('a prefetch of an invalid key (%s) is a PolicyError', (_what, badKey) => {
    const policy: ServingPolicy = {
      name: 'bad-key',
      onIterationStart: () => ({ prefetch: [{ key: badKey, priority: 1 }] }),
    };
    expect(() => run(policy)).toThrow(PolicyError);
    try {
      run(policy);
    } catch (e) {
      expect((e as PolicyError).hook).toBe('onIterationStart');
      expect((e as PolicyError).policy).toBe('bad-key');
    }
  });

  it('choosing a victim that is not a candidate is a PolicyError', () => {
    const policy: ServingPolicy = { name: 'liar', chooseVictim: () => 7 };
    expect(() => run(policy, { cfg: { bufferSlots: 1 } })).toThrow(/not an evictable candidate/);
  });
});

describe('serving executor: the executor enforces the buffer', () => {
  it('a policy that prefetches every expert into a 2-slot buffer never overflows it', () => {
    const policy: ServingPolicy = {
      name: 'greedy',
      onIterationStart: () => ({
        prefetch: Array.from({ length: 2 * EXPERTS }, (_, k) => ({ key: k, priority: 1 + k })),
      }),
      onLayerRouted: () => ({ prefetch: Array.from({ length: 2 * EXPERTS }, (_, k) => ({ key: k, priority: 1 })) }),
      onPrefetchDone: () => ({ prefetch: Array.from({ length: 2 * EXPERTS }, (_, k) => ({ key: k, priority: 1 })) }),
      afterUse: () => true,
    };
    const { outcome, rec, violations } = run(policy, {
      cfg: { bufferSlots: 2 },
      requests: [{ outputTokens: 3 }, { outputTokens: 2, arrivalNs: 1_000 as Ns }],
    });
    expect(violations).toEqual([]);
    for (const r of outcome.requests) expect(r.emittedTokens).toBe(r.outputTokens);
    const expertCache = rec.memory.filter((m) => m.pool === 'vram' && m.category === 'expertCache');
    expect(expertCache.length).toBeGreaterThan(0);
    expect(Math.max(...expertCache.map((m) => m.categoryUsedBytes))).toBeLessThanOrEqual(2 * MB);
    expect(outcome.resources.vram.peakBy('expertCache')).toBeLessThanOrEqual(2 * MB);
    expect(outcome.counters.prefetchesIssued).toBeGreaterThan(0);
    // It re-asks from onPrefetchDone forever; once the last request has finished its prefetches
    // are dropped, so the run ends when the transfer already on the link lands (≤ 1 ms later).
    const lastFinish = Math.max(...outcome.requests.map((r) => r.finishNs));
    expect(outcome.endNs - lastFinish).toBeLessThanOrEqual(1_000_000);
  });

  it('a cancelled prefetch frees its slot at once and moves no further bytes', () => {
    // Packets of 250 000 B (250 µs). t=0: prefetch M1E3 (never needed) starts its first packet,
    // 0 → 250 000. t=11 000: layer 0 routes M0E1 (demand, the second slot), then the policy
    // cancels M1E3: its slot is freed now, the packet on the wire lands at 250 000, nothing more.
    // The demand fetch then runs 250 000 → 1 250 000.
    const prefetched = key(1, 3);
    let occupiedAfterCancel = -1;
    let stillThere = true;
    const policy: ServingPolicy = {
      name: 'cancel',
      onIterationStart: (view) => (view.iteration === 0 ? { prefetch: [{ key: prefetched, priority: 3 }] } : undefined),
      onLayerRouted: (view, routing) => (routing.layer === 0 ? { cancel: [prefetched] } : undefined),
      afterUse(view) {
        if (occupiedAfterCancel < 0) {
          occupiedAfterCancel = view.buffer.occupied;
          stillThere = view.buffer.has(prefetched);
        }
        return false;
      },
    };
    const { outcome, rec, violations } = run(policy, {
      cfg: { bufferSlots: 2, packetBytes: 250_000 },
      requests: [{ outputTokens: 1 }],
    });
    expect(violations).toEqual([]);
    expect(stillThere).toBe(false);
    // During M0E1's compute only M0E1 holds a slot.
    expect(occupiedAfterCancel).toBe(1);
    const cancelled = rec.transfers.filter((t) => t.outcome === 'cancelled');
    expect(cancelled).toHaveLength(1);
    expect(cancelled[0]).toMatchObject({ label: 'expert M1E3', sentBytes: 250_000, endNs: 250_000 });
    const packetsOfCancelled = rec.packets.filter((p) => p.transferId === cancelled[0]!.id);
    expect(packetsOfCancelled.map((p) => [p.startNs, p.endNs, p.bytes])).toEqual([[0, 250_000, 250_000]]);
    // At t = 11 000 the demand fetch takes the second slot (2 MB) and the cancel frees one (1 MB).
    const at11k = rec.memory
      .filter((m) => m.category === 'expertCache' && m.timeNs === 11_000)
      .map((m) => m.categoryUsedBytes);
    expect(at11k).toEqual([2 * MB, 1 * MB]);
    const h2d = outcome.resources.h2d;
    expect(h2d.cancelledSentBytes).toBe(250_000);
    expect(h2d.bytesMoved).toBe(250_000 + 2 * MB);
    expect(outcome.counters.prefetchesCancelled).toBe(1);
    expect(servingMetrics(outcome).prefetchWastedBytes).toBe(250_000);
    // M0E1 250 000 → 1 250 000, expert → 1 350 000, attention → 1 360 000, router → 1 361 000,
    // M1E2 → 2 361 000, expert → 2 461 000, LM head → 2 466 000.
    expect(outcome.requests[0]!.firstTokenNs).toBe(2_466_000);
  });
});

describe("serving executor: its own checks of what it is given and of the run's end", () => {
  const make = (o: { routing?: RoutingSource; maxEvents?: number } = {}) =>
    new ServingExecutor({
      model,
      hardware: tinyHardware(100 * MB),
      cost: stubCost,
      workload: { ...workload(), ...(o.routing ? { routing: o.routing } : {}) },
      policy: onDemand(),
      config: config(),
      maxEvents: o.maxEvents ?? 100_000,
    });

  it("a routing whose shape is not the model's is refused, naming both", () => {
    for (const shape of [{ moeLayers: 3 }, { experts: 5 }, { topK: 2 }]) {
      expect(() => make({ routing: { ...fixedRouting, ...shape } })).toThrow(/does not match model tiny/);
    }
  });

  it('a router that returns an expert outside 0 … E−1 stops the run, naming it', () => {
    for (const bad of [-1, EXPERTS]) {
      const routing = routeTo(2, EXPERTS, () => [bad]);
      expect(() => make({ routing }).run()).toThrow(`router returned expert ${bad} (experts ${EXPERTS})`);
    }
    // The last valid index is accepted.
    const last = routeTo(2, EXPERTS, () => [EXPERTS - 1]);
    expect(make({ routing: last }).run().requests[0]!.emittedTokens).toBe(2);
  });

  it('a run cut short by maxEvents is an error, not a partial outcome', () => {
    expect(() => make({ maxEvents: 5 }).run()).toThrow(/stopped after 5 events \(maxEvents\)/);
    expect(make().run().requests[0]!.emittedTokens).toBe(2);
  });
});

describe('serving metrics', () => {
  it('bufferHitRate is exactly cacheHitRate + prefetchHitRate, even when both parts round', () => {
    const { outcome } = run(lru(4), { cfg: { bufferSlots: 4 } });
    // 41/147 and 5/147 each round to 6 digits; rounding the total separately (46/147) disagreed by 6e-7.
    const fake: ServingOutcome = {
      ...outcome,
      counters: { ...outcome.counters, needs: 147, cacheHits: 41, prefetchHits: 5 },
    };
    const m = servingMetrics(fake);
    expect(m.cacheHitRate).toBe(0.278912);
    expect(m.prefetchHitRate).toBe(0.0340136);
    expect(m.bufferHitRate).toBe(m.cacheHitRate + m.prefetchHitRate);
    expect(Math.abs(m.bufferHitRate - 46 / 147)).toBeLessThan(1e-6);
  });
});

describe('serving executor: a Python-loop runtime (expertOrder index, expertLoop all)', () => {
  // Idle loop iterations cost 10 µs each; everything else as in the hand-checked timings above.
  const loopCost: CostModel = stubKernelCost({}, 10_000);
  const loop: RuntimeProfile = { ...loadRuntime('hf-eager'), expertOrder: 'index', expertLoop: 'all' };

  it('pays the idle iterations in index order; those before a missing expert overlap its fetch', () => {
    const { outcome, violations } = run(onDemand(), { runtime: loop, cost: loopCost });
    expect(violations).toEqual([]);
    // Layer 0 needs expert 1: idle expert 0 (10 µs) runs while its 1 ms fetch is in flight, so the
    // GPU blocks 990 µs; after it, idle experts 2 and 3 (20 µs). Layer 1 needs expert 2: idle 0
    // and 1 (20 µs) overlap the fetch (980 µs blocked), then idle 3 (10 µs).
    expect(outcome.counters.blockedNs).toBe(2 * (990_000 + 980_000));
    // Each pass: the ready-first pass (2 227 000 ns) plus the 30 µs of trailing idle iterations.
    expect(outcome.requests[0]!.firstTokenNs).toBe(2_257_000);
    expect(outcome.endNs).toBe(2 * 2_257_000);
  });

  it('index order over active experts only: cache hits block nothing, misses block their whole fetch', () => {
    // LRU with room for everything: pass 1 fetches both experts (1 ms blocked each, no idle
    // iterations to overlap them); pass 2 finds both resident and blocks nothing.
    const kept = run(lru(4), { runtime: { ...loop, expertLoop: 'active' }, cost: loopCost });
    expect(kept.violations).toEqual([]);
    expect(kept.outcome.counters.blockedNs).toBe(2 * 1_000_000);
    expect(kept.outcome.counters.cacheHits).toBe(2);
  });
});
