/**
 * The baseline policies of DESIGN §8 on tiny hand-made inputs: pure decisions against a stub
 * view, and end-to-end checks in a tiny executor world (hand-made model with 1 MB experts, a
 * 1 GB/s zero-latency link — one expert = 1 ms — stub kernel times, stub routing and predictor).
 */
import { describe, expect, it } from 'vitest';
import type { CostModel, Operation } from '../../sim/cost/types.ts';
import { Rng } from '../../sim/kernel/rng.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import { servingMetrics } from '../../sim/metrics/serving-metrics.ts';
import { fanout, type PacketRecord, type TraceSink, type TransferRecord } from '../../sim/observe/trace-sink.ts';
import type {
  BufferEntryView,
  BufferView,
  EntryOrigin,
  ExpertKey,
  LayerRouting,
  PolicyDecision,
  RequestView,
  ServingPolicy,
  ServingView,
} from '../../sim/serving/policy.ts';
import { ServingExecutor, type ServingConfig, type ServingOutcome } from '../../sim/serving/serving-executor.ts';
import type { ExpertPredictor, RequestSpec, Workload } from '../../sim/workload.ts';
import { RngStreams } from '../../sim/kernel/rng.ts';
import { createLfu, LfuParams } from '../../policies/cache/lfu.ts';
import { createRnd, RndParams } from '../../policies/cache/rnd.ts';
import { createDependencyPrefetch, DependencyPrefetchParams } from '../../policies/prefetch/dependency-prefetch.ts';
import { createModelTracing, ModelTracingParams } from '../../policies/prefetch/model-tracing.ts';
import {
  createMixtralOffloading,
  MixtralOffloadingParams,
  mixtralOffloading,
} from '../../policies/prefetch/mixtral-offloading.ts';
import { createPreGated, PreGatedParams } from '../../policies/prefetch/pre-gated.ts';
import { AdapMoeParams, createAdapMoe } from '../../policies/prefetch/adapmoe.ts';
import { allocateSlots, equalSlots, LayerStats } from '../../policies/prefetch/adapmoe-allocator.ts';
import { BeladyParams, createBelady, NeedIndex } from '../../policies/oracle/belady.ts';
import { recordNeeds } from '../../policies/oracle/need-recorder.ts';
import { gpuRich } from '../../policies/reference/gpu-rich.ts';
import { builtinPolicy } from '../../policies/registry.ts';
import type { NeedTrace, PolicyDefinition } from '../../policies/types.ts';
import { buildServingWorld } from '../../experiments/world.ts';
import type { RunSpec } from '../../experiments/config/expand.ts';
import { ServingExecutorSchema } from '../../experiments/config/schema.ts';
import { WorkloadSchema } from '../../workloads/config.ts';
import { MB, tinyHardware, tinyModel } from '../helpers/tiny-world.ts';
import { InvariantChecker } from '../helpers/invariant-checker.ts';

// ------------------------------------------------------------------ stub view (pure decisions)

interface StubEntry extends BufferEntryView {
  state: 'loading' | 'resident';
  origin: EntryOrigin;
  pinned: boolean;
  lastUsedNs: number;
  uses: number;
}

class StubBuffer implements BufferView {
  readonly map = new Map<ExpertKey, StubEntry>();
  constructor(readonly slots: number) {}
  get occupied(): number {
    return this.map.size;
  }
  has(k: ExpertKey): boolean {
    return this.map.has(k);
  }
  isResident(k: ExpertKey): boolean {
    return this.map.get(k)?.state === 'resident';
  }
  isLoading(k: ExpertKey): boolean {
    return this.map.get(k)?.state === 'loading';
  }
  entry(k: ExpertKey): StubEntry | undefined {
    return this.map.get(k);
  }
  entries(): Iterable<StubEntry> {
    return this.map.values();
  }
  put(key: ExpertKey, o: Partial<StubEntry> = {}): void {
    this.map.set(key, {
      key,
      state: 'resident',
      origin: 'cache',
      pinned: false,
      residentSinceNs: 0,
      lastUsedNs: -1,
      uses: 0,
      ...o,
    });
  }
  /** Resident, unpinned keys in insertion order (the executor's candidates). */
  candidates(): ExpertKey[] {
    return [...this.map.values()].filter((e) => e.state === 'resident' && !e.pinned).map((e) => e.key);
  }
}

interface StubView extends ServingView {
  iteration: number;
  layer: number;
  batch: RequestView[];
  readonly buffer: StubBuffer;
}

function stubView(o: {
  layers: number;
  experts: number;
  topK?: number;
  slots?: number;
  predict?: (layer: number) => number[];
}): StubView {
  const E = o.experts;
  const slots = o.slots ?? o.layers * E;
  return {
    moeLayers: o.layers,
    experts: E,
    topK: o.topK ?? 1,
    bytesPerExpert: 1,
    firstLayer: 0,
    slots,
    nowNs: 0 as Ns,
    buffer: new StubBuffer(slots),
    batch: [],
    iteration: 0,
    layer: -1,
    keyOf: (l, e) => l * E + e,
    layerOf: (k) => Math.floor(k / E),
    expertOf: (k) => k % E,
    predict: (l) => o.predict?.(l) ?? [],
  };
}

function routed(view: StubView, layer: number, activated: number[]): LayerRouting {
  view.layer = layer;
  const tokensPerExpert = new Int32Array(view.experts);
  for (const e of activated) tokensPerExpert[e] = 1;
  return { layer, tokensPerExpert, perRequest: [tokensPerExpert], activated };
}

const decodeReq = (phase: 'prefill' | 'decode'): RequestView => ({
  spec: { id: 0, arrivalNs: 0 as Ns, promptTokens: 4, outputTokens: 4 },
  processedTokens: phase === 'prefill' ? 0 : 4,
  iterationTokens: phase === 'prefill' ? 4 : 1,
  phase,
  emittedTokens: phase === 'prefill' ? 0 : 1,
});

const prefetchKeys = (d: PolicyDecision | void): ExpertKey[] => (d?.prefetch ?? []).map((p) => p.key);

// ------------------------------------------------------------------ tiny executor world

function stubCost(expertNs: number): CostModel {
  const ns: Record<Operation['kind'], number> = {
    attention: 10_000,
    linearAttention: 0,
    crossAttention: 0,
    idleExperts: 0,
    router: 1_000,
    expert: expertNs,
    lmHead: 5_000,
    sharedExperts: 0,
    denseFfn: 0,
    attentionProj: 0,
    cpuAttention: 0,
    transfer: 0,
  };
  return { estimate: (op) => ({ ns: ns[op.kind] as Ns, bound: 'flops', source: 'roofline', flops: 0, bytes: 0 }) };
}

/** Experts (topK of them) of (request, layer, token). */
type Table = (request: number, layer: number, token: number) => readonly number[];

interface TinyWorld {
  readonly layers: number;
  readonly experts: number;
  readonly topK?: number;
  readonly route: Table;
  /** Ranked prediction for one token; default: none (no predictor). */
  readonly predict?: Table;
  readonly requests?: readonly Partial<RequestSpec>[];
  readonly bufferSlots: number;
  readonly expertNs?: number;
  readonly batching?: 'static' | 'continuous';
  readonly maxBatchSize?: number;
  readonly preloadAllExperts?: boolean;
  readonly packetBytes?: number;
}

function tinyWorkload(w: TinyWorld): Workload {
  const k = w.topK ?? 1;
  const requests = (w.requests ?? [{}]).map((r, id) => ({
    id,
    arrivalNs: 0 as Ns,
    promptTokens: 1,
    outputTokens: 4,
    ...r,
  }));
  const predictor: ExpertPredictor | undefined = w.predict
    ? {
        predict(requestId, layer, fromToken, toToken) {
          const score = new Map<number, number>();
          for (let t = fromToken; t < toToken; t++)
            w.predict!(requestId, layer, t).forEach((e, r) => score.set(e, (score.get(e) ?? 0) + 100 - r));
          return [...score.keys()].sort((a, b) => score.get(b)! - score.get(a)! || a - b);
        },
      }
    : undefined;
  return {
    requests,
    routing: {
      moeLayers: w.layers,
      experts: w.experts,
      topK: k,
      forRequest: (spec) => ({
        route(layer, fromToken, toToken, out) {
          let o = 0;
          for (let t = fromToken; t < toToken; t++) for (const e of w.route(spec.id, layer, t)) out[o++] = e;
        },
      }),
    },
    ...(predictor ? { predictor } : {}),
    describe: 'hand-made',
  };
}

class Recorder implements TraceSink {
  readonly transfers: TransferRecord[] = [];
  readonly packets: PacketRecord[] = [];
  /** Resident experts per layer now, and the maximum seen. */
  readonly residentPerLayer = new Map<number, number>();
  readonly maxResidentPerLayer = new Map<number, number>();
  readonly resident = new Set<number>();
  constructor(private readonly experts: number) {}
  onTransfer(r: TransferRecord): void {
    this.transfers.push(r);
  }
  onPacket(r: PacketRecord): void {
    this.packets.push(r);
  }
  onExpertResidency(key: number, resident: boolean): void {
    const l = Math.floor(key / this.experts);
    const n = (this.residentPerLayer.get(l) ?? 0) + (resident ? 1 : -1);
    this.residentPerLayer.set(l, n);
    this.maxResidentPerLayer.set(l, Math.max(n, this.maxResidentPerLayer.get(l) ?? 0));
    if (resident) this.resident.add(key);
    else this.resident.delete(key);
  }
}

function runTiny(
  w: TinyWorld,
  policy: ServingPolicy,
): { outcome: ServingOutcome; rec: Recorder; violations: string[] } {
  const model = tinyModel(w.layers, w.experts, w.topK ?? 1);
  const rec = new Recorder(w.experts);
  const checker = new InvariantChecker({
    experts: w.experts,
    bytesPerExpert: MB,
    allowPreload: w.preloadAllExperts ?? false,
  });
  const config: ServingConfig = {
    batching: w.batching ?? 'static',
    maxBatchSize: w.maxBatchSize ?? 1,
    maxWaitNs: 0 as Ns,
    maxBatchTokens: 8192,
    bufferSlots: w.bufferSlots,
    packetBytes: w.packetBytes ?? 256 * 1024,
    preloadAllExperts: w.preloadAllExperts ?? false,
  };
  const executor = new ServingExecutor({
    model,
    hardware: tinyHardware(),
    cost: stubCost(w.expertNs ?? 100_000),
    workload: tinyWorkload(w),
    policy,
    config,
    sink: fanout([rec, checker]),
    maxEvents: 200_000,
  });
  const outcome = executor.run();
  return { outcome, rec, violations: checker.finish(outcome) };
}

const transfersOf = (rec: Recorder, layer: number, expert: number) =>
  rec.transfers.filter((t) => t.label === `expert M${layer}E${expert}`);

// ------------------------------------------------------------------ lfu

describe('lfu', () => {
  it('evicts the least-used expert; counts since start survive eviction', () => {
    const v = stubView({ layers: 1, experts: 4 });
    const p = createLfu('lfu', LfuParams.parse({}));
    p.init?.(v);
    for (const act of [[0, 1], [0, 1], [0, 1], [0], [2]]) p.onLayerRouted?.(v, routed(v, 0, act));
    for (const k of [0, 1, 2]) v.buffer.put(k);
    expect(p.chooseVictim?.(v, { reason: 'demand', forKey: 3, candidates: [0, 1, 2] })).toBe(2);
    // Expert 2 evicted and re-loaded: its count (1) is kept, it is still the least used.
    expect(p.chooseVictim?.(v, { reason: 'demand', forKey: 3, candidates: [2, 1, 0] })).toBe(2);
    expect(p.chooseVictim?.(v, { reason: 'demand', forKey: 3, candidates: [0, 1] })).toBe(1);
  });

  it("in-buffer counts use the entry's uses; ties go to the least recently used, then the lowest key", () => {
    const v = stubView({ layers: 1, experts: 4 });
    const p = createLfu('lfu', LfuParams.parse({ counts: 'in-buffer' }));
    p.init?.(v);
    v.buffer.put(0, { uses: 5, lastUsedNs: 10 });
    v.buffer.put(1, { uses: 2, lastUsedNs: 30 });
    v.buffer.put(2, { uses: 2, lastUsedNs: 20 });
    v.buffer.put(3, { uses: 9, lastUsedNs: 20 });
    expect(p.chooseVictim?.(v, { reason: 'demand', forKey: 3, candidates: [0, 1, 2] })).toBe(2);
    v.buffer.put(2, { uses: 2, lastUsedNs: 30 });
    expect(p.chooseVictim?.(v, { reason: 'demand', forKey: 3, candidates: [0, 2, 1] })).toBe(1);
  });

  it('per-layer capacity: a full layer evicts its own least-used expert and is trimmed when layers route', () => {
    const v = stubView({ layers: 2, experts: 4, slots: 2 });
    const p = createLfu('lfu', LfuParams.parse({ perLayerSlots: 1 }));
    p.init?.(v);
    for (let i = 0; i < 5; i++) p.onLayerRouted?.(v, routed(v, 0, [0]));
    p.onLayerRouted?.(v, routed(v, 1, [1]));
    v.buffer.put(0); // M0E0, 5 uses
    v.buffer.put(5); // M1E1, 1 use
    // Globally M1E1 is least used, but layer 0 is full: it replaces its own expert.
    expect(p.chooseVictim?.(v, { reason: 'demand', forKey: 2, candidates: [0, 5] })).toBe(0);
    // Layer 1 overshot (two experts): routing trims it to one, dropping the least used.
    v.buffer.put(6);
    const d = p.onLayerRouted?.(v, routed(v, 1, [1]));
    expect(d?.evict).toEqual([6]);
  });
});

// ------------------------------------------------------------------ rnd

describe('rnd', () => {
  const victims = (seed: string, n: number) => {
    const v = stubView({ layers: 1, experts: 8 });
    const p = createRnd('rnd', RndParams.parse({}), new Rng(seed));
    const candidates = [0, 1, 2, 3, 4, 5, 6, 7];
    return Array.from({ length: n }, () => p.chooseVictim!(v, { reason: 'demand', forKey: 0, candidates }));
  };

  it('is deterministic for a seed, uses only the candidates, and depends on the seed', () => {
    const a = victims('policy:rnd#1', 64);
    expect(victims('policy:rnd#1', 64)).toEqual(a);
    expect(a.every((k) => k !== undefined && k >= 0 && k < 8)).toBe(true);
    expect(new Set(a).size).toBeGreaterThan(4);
    expect(victims('policy:rnd#2', 64)).not.toEqual(a);
  });

  it('end to end: the same seed gives the same run', () => {
    const w: TinyWorld = {
      layers: 2,
      experts: 4,
      route: (_r, l, t) => [(t * (l + 1)) % 4],
      requests: [{ outputTokens: 12 }],
      bufferSlots: 3,
    };
    const run = (seed: number) =>
      runTiny(w, createRnd('rnd', RndParams.parse({}), new RngStreams(seed).stream('policy:rnd')));
    const a = run(7);
    expect(a.violations).toEqual([]);
    expect(run(7).outcome.counters).toEqual(a.outcome.counters);
    expect(run(7).outcome.endNs).toBe(a.outcome.endNs);
  });
});

// ------------------------------------------------------------------ dependency-prefetch

describe('dependency-prefetch', () => {
  it('prefetches every expert of the next layer (and of layer 0 at the iteration start)', () => {
    const v = stubView({ layers: 3, experts: 4 });
    const p = createDependencyPrefetch('dp', DependencyPrefetchParams.parse({}));
    p.init?.(v);
    expect(prefetchKeys(p.onIterationStart?.(v))).toEqual([0, 1, 2, 3]);
    v.buffer.put(5); // M1E1 already resident: not fetched again
    expect(prefetchKeys(p.onLayerRouted?.(v, routed(v, 0, [2])))).toEqual([4, 6, 7]);
    expect(prefetchKeys(p.onLayerRouted?.(v, routed(v, 2, [0])))).toEqual([]);
  });

  it("cache 'none' releases after use and drops the layer's experts the router did not pick; 'lru' keeps them", () => {
    const none = createDependencyPrefetch('dp', DependencyPrefetchParams.parse({ cache: 'none' }));
    const lru = createDependencyPrefetch('dp', DependencyPrefetchParams.parse({ cache: 'lru' }));
    const v = stubView({ layers: 3, experts: 4 });
    none.init?.(v);
    lru.init?.(v);
    expect(none.afterUse?.(v, 0)).toBe(false);
    expect(lru.afterUse?.(v, 0)).toBe(true);
    v.buffer.put(4); // M1E0, not activated
    v.buffer.put(5, { pinned: true }); // M1E1, being computed
    v.buffer.put(8); // M2E0, prefetched for the next layer
    expect(none.onLayerRouted?.(v, routed(v, 1, [1]))?.evict).toEqual([4]);
    expect(lru.onLayerRouted?.(v, routed(v, 1, [1]))?.evict).toEqual([]);
  });

  it('end to end: every expert of every layer crosses PCIe; with a cache holding them all, exactly once', () => {
    const w: TinyWorld = {
      layers: 3,
      experts: 4,
      route: (_r, l, t) => [(l + t) % 4],
      requests: [{ outputTokens: 4 }],
      bufferSlots: 12,
      expertNs: 2_000_000,
    };
    const none = runTiny(w, createDependencyPrefetch('dp', DependencyPrefetchParams.parse({})));
    expect(none.violations).toEqual([]);
    for (let l = 0; l < 3; l++)
      for (let e = 0; e < 4; e++) expect(transfersOf(none.rec, l, e).length).toBeGreaterThan(0);
    expect(none.outcome.counters.cacheHits).toBe(0);
    const lru = runTiny(w, createDependencyPrefetch('dp', DependencyPrefetchParams.parse({ cache: 'lru' })));
    expect(lru.violations).toEqual([]);
    expect(lru.outcome.resources.h2d.bytesMoved).toBe(12 * MB);
    const hits = (o: ServingOutcome) => o.counters.cacheHits + o.counters.prefetchHits;
    expect(hits(lru.outcome)).toBeGreaterThan(hits(none.outcome));
  });
});

// ------------------------------------------------------------------ model-tracing

describe('model-tracing', () => {
  it('ranks by counts since start and cancels loading prefetches found unnecessary', () => {
    const v = stubView({ layers: 3, experts: 4 });
    const p = createModelTracing(
      'mt',
      ModelTracingParams.parse({ countBy: 'needs', horizon: 2, prefetchPerLayer: 1 }),
      1,
    );
    p.init?.(v);
    // History: layer 1 mostly expert 2, layer 2 mostly expert 3.
    for (let i = 0; i < 3; i++) {
      p.onLayerRouted?.(v, routed(v, 1, [2]));
      p.onLayerRouted?.(v, routed(v, 2, [3]));
    }
    p.onLayerRouted?.(v, routed(v, 1, [0]));
    expect(p.counts()[v.keyOf(1, 2)]).toBe(3);
    const d = p.onLayerRouted?.(v, routed(v, 0, [1]));
    expect(d?.prefetch).toEqual([
      { key: v.keyOf(1, 2), priority: 1 },
      { key: v.keyOf(2, 3), priority: 2 },
    ]);
    // Layer 1 routes expert 0 while M1E2 is still loading (not pinned: not needed): cancelled.
    // M2E1 loading but out of the ranking: cancelled. M2E3 (ranked) is kept.
    v.buffer.put(v.keyOf(1, 2), { state: 'loading', origin: 'prefetch' });
    v.buffer.put(v.keyOf(2, 1), { state: 'loading', origin: 'prefetch' });
    v.buffer.put(v.keyOf(2, 3), { state: 'loading', origin: 'prefetch' });
    v.buffer.put(v.keyOf(1, 0), { state: 'loading', origin: 'prefetch', pinned: true });
    const d2 = p.onLayerRouted?.(v, routed(v, 1, [0]));
    expect([...(d2?.cancel ?? [])].sort((a, b) => a - b)).toEqual([v.keyOf(1, 2), v.keyOf(2, 1)]);
  });

  it('ranks the best prefetchPerLayer experts by count, ties to the lower expert, never a count of 0', () => {
    const v = stubView({ layers: 2, experts: 6 });
    const p = createModelTracing('mt', ModelTracingParams.parse({ countBy: 'needs', prefetchPerLayer: 3 }), 1);
    p.init?.(v);
    // Layer 1 counts: E0 1, E1 3, E2 0, E3 3, E4 5, E5 1 → E4, E1, E3 (E1 before E3: tie, lower expert).
    for (const [e, n] of [
      [0, 1],
      [1, 3],
      [3, 3],
      [4, 5],
      [5, 1],
    ] as const)
      for (let i = 0; i < n; i++) p.onLayerRouted?.(v, routed(v, 1, [e]));
    const d = p.onLayerRouted?.(v, routed(v, 0, [0]));
    expect(d?.prefetch).toEqual([
      { key: v.keyOf(1, 4), priority: 1 },
      { key: v.keyOf(1, 1), priority: 2 },
      { key: v.keyOf(1, 3), priority: 3 },
    ]);
    // Fewer positive counts than the budget: all of them (layer 0 has only E0).
    const d0 = p.onIterationStart?.(v);
    expect(d0?.prefetch).toEqual([{ key: v.keyOf(0, 0), priority: 1 }]);
  });

  it('cache priority = counts; a prefetch never evicts an expert counted at least as often', () => {
    const v = stubView({ layers: 2, experts: 4 });
    const p = createModelTracing('mt', ModelTracingParams.parse({ countBy: 'needs' }), 1);
    p.init?.(v);
    for (const [l, e, n] of [
      [0, 0, 5],
      [0, 1, 2],
      [1, 3, 4],
    ] as const)
      for (let i = 0; i < n; i++) p.onLayerRouted?.(v, routed(v, l, [e]));
    v.buffer.put(v.keyOf(0, 0));
    v.buffer.put(v.keyOf(0, 1));
    expect(p.chooseVictim?.(v, { reason: 'demand', forKey: v.keyOf(0, 2), candidates: [0, 1] })).toBe(1);
    expect(p.chooseVictim?.(v, { reason: 'prefetch', forKey: v.keyOf(1, 3), candidates: [0, 1] })).toBe(1);
    expect(p.chooseVictim?.(v, { reason: 'prefetch', forKey: v.keyOf(1, 3), candidates: [0] })).toBeUndefined();
  });

  it('end to end: a prefetch that turns out unnecessary is cancelled and moves no further bytes', () => {
    // Prefill (4 tokens) counts M0E0 ×4 and M1E1 ×3, M1E2 ×1; the decode token routes M0E3 and
    // M1E2. Decode: the iteration start prefetches M0E0 (top count); layer 0 routes M0E3 → the
    // M0E0 prefetch is cancelled, M1E1 (top of layer 1) is prefetched; layer 1 routes M1E2 →
    // the M1E1 prefetch is cancelled. 256 KiB packets: each had one packet on the wire.
    const w: TinyWorld = {
      layers: 2,
      experts: 4,
      route: (_r, l, t) => (l === 0 ? [t < 4 ? 0 : 3] : [t < 3 ? 1 : 2]),
      requests: [{ promptTokens: 4, outputTokens: 2 }],
      bufferSlots: 2,
    };
    const { outcome, rec, violations } = runTiny(w, createModelTracing('mt', ModelTracingParams.parse({}), 1));
    expect(violations).toEqual([]);
    const cancelled = rec.transfers.filter((t) => t.outcome === 'cancelled');
    expect(cancelled.map((t) => t.label).sort()).toEqual(['expert M0E0', 'expert M1E1']);
    for (const t of cancelled) {
      expect(t.sentBytes).toBeLessThan(t.bytes);
      const packets = rec.packets.filter((p) => p.link === t.link && p.transferId === t.id);
      expect(packets.reduce((a, p) => a + p.bytes, 0)).toBe(t.sentBytes);
      // Nothing after the packet that was on the wire when it was cancelled.
      expect(packets.every((p) => p.endNs <= t.endNs)).toBe(true);
      expect(packets.length).toBeLessThanOrEqual(1);
    }
    const h2d = outcome.resources.h2d;
    expect(h2d.bytesMoved).toBe(h2d.completedBytes + h2d.cancelledSentBytes);
    expect(outcome.counters.prefetchesCancelled).toBe(2);
  });
});

// ------------------------------------------------------------------ mixtral-offloading

describe('mixtral-offloading', () => {
  it('defaults to 4 of 8 experts per layer (the released demo) and prefetches the top-k predicted experts of the next layer', () => {
    const model = tinyModel(32, 8, 2);
    expect(mixtralOffloading.bufferSlots?.(MixtralOffloadingParams.parse({}), model)).toBe(4 * 32 + 2); // per-layer caches plus top-k staging slots
    const v = stubView({ layers: 3, experts: 8, topK: 2, predict: (l) => (l === 1 ? [5, 2, 7, 0] : []) });
    const p = createMixtralOffloading('mo', MixtralOffloadingParams.parse({}), 8, 2);
    p.init?.(v);
    expect(prefetchKeys(p.onLayerRouted?.(v, routed(v, 0, [1, 3])))).toEqual([v.keyOf(1, 5), v.keyOf(1, 2)]);
    const off = createMixtralOffloading('mo', MixtralOffloadingParams.parse({ speculative: false }), 8, 2);
    off.init?.(v);
    expect(prefetchKeys(off.onLayerRouted?.(v, routed(v, 0, [1, 3])))).toEqual([]);
  });

  it('a speculative load replaces the LRU expert of its own full layer, never a predicted one', () => {
    const v = stubView({ layers: 2, experts: 4, slots: 4, predict: (l) => (l === 1 ? [3, 2] : []) });
    const p = createMixtralOffloading('mo', MixtralOffloadingParams.parse({ perLayerSlots: 2 }), 4, 2);
    p.init?.(v);
    p.onLayerRouted?.(v, routed(v, 1, [0]));
    p.onLayerRouted?.(v, routed(v, 1, [2]));
    p.onLayerRouted?.(v, routed(v, 0, [0, 1]));
    for (const k of [v.keyOf(0, 0), v.keyOf(0, 1), v.keyOf(1, 0), v.keyOf(1, 2)]) v.buffer.put(k);
    // The last routing predicted [3, 2] for layer 1: M1E2 is protected, M1E0 is the victim.
    expect(p.chooseVictim?.(v, { reason: 'prefetch', forKey: v.keyOf(1, 3), candidates: v.buffer.candidates() })).toBe(
      v.keyOf(1, 0),
    );
  });

  it('end to end: never more than perLayerSlots experts of a layer resident; a correct prediction gives prefetch hits', () => {
    const w: TinyWorld = {
      layers: 2,
      experts: 4,
      route: (_r, l, t) => [(t + l) % 4],
      predict: (_r, l, t) => [(t + l) % 4, (t + l + 1) % 4],
      requests: [{ outputTokens: 8 }],
      bufferSlots: 2,
      expertNs: 2_000_000,
    };
    const { outcome, rec, violations } = runTiny(
      w,
      createMixtralOffloading('mo', MixtralOffloadingParams.parse({ perLayerSlots: 1 }), 4, 1),
    );
    expect(violations).toEqual([]);
    expect(Math.max(...rec.maxResidentPerLayer.values())).toBe(1);
    expect(outcome.counters.prefetchHits).toBe(8);
  });
});

// ------------------------------------------------------------------ pre-gated

describe('pre-gated', () => {
  it('prefetches the predicted experts of the next layer and releases every expert after use', () => {
    const v = stubView({ layers: 2, experts: 4, topK: 2, predict: (l) => (l === 1 ? [3, 1, 0] : []) });
    const p = createPreGated('pg', PreGatedParams.parse({}), 2);
    expect(prefetchKeys(p.onLayerRouted?.(v, routed(v, 0, [0])))).toEqual([v.keyOf(1, 3), v.keyOf(1, 1)]);
    expect(p.afterUse?.(v, 0)).toBe(false);
    // Layer 1 routed [1]: the mispredicted M1E3 is released (cancelled if loading).
    v.buffer.put(v.keyOf(1, 3), { state: 'loading', origin: 'prefetch' });
    v.buffer.put(v.keyOf(1, 1), { pinned: true });
    const d = p.onLayerRouted?.(v, routed(v, 1, [1]));
    expect(d?.cancel).toEqual([v.keyOf(1, 3)]);
    expect(d?.evict).toEqual([]);
  });

  it('end to end: prefetch hits on every layer after the first, no cache hits although every token reuses the same experts, an empty buffer at the end', () => {
    const w: TinyWorld = {
      layers: 3,
      experts: 4,
      route: (_r, l) => [l],
      predict: (_r, l) => [l, (l + 1) % 4],
      requests: [{ outputTokens: 5 }],
      bufferSlots: 4,
      expertNs: 2_000_000,
    };
    const { outcome, rec, violations } = runTiny(w, createPreGated('pg', PreGatedParams.parse({}), 1));
    expect(violations).toEqual([]);
    expect(outcome.counters).toMatchObject({ needs: 15, cacheHits: 0, prefetchHits: 10, demandFetches: 5 });
    expect(rec.resident.size).toBe(0);
  });
});

// ------------------------------------------------------------------ adapmoe

describe('adapmoe', () => {
  it('the DP allocator finds the optimum (brute force) with Σ s_l = budget and 1 ≤ s_l ≤ E', () => {
    const rng = new Rng('adapmoe-dp');
    for (let trial = 0; trial < 30; trial++) {
      const L = 1 + rng.int(4);
      const E = 1 + rng.int(5);
      const total = L + rng.int(L * E - L + 1);
      const cost = Array.from({ length: L }, () => Float64Array.from({ length: E + 1 }, () => rng.int(20)));
      const sizes = allocateSlots(cost, total, 1, E);
      expect(sizes.reduce((a, b) => a + b, 0)).toBe(total);
      const value = (s: ArrayLike<number>) => Array.from(s).reduce((a, x, l) => a + cost[l]![x]!, 0);
      let best = Infinity;
      const walk = (l: number, left: number, acc: number[]) => {
        if (l === L) {
          if (left === 0) best = Math.min(best, value(acc));
          return;
        }
        for (let s = 1; s <= E && s <= left; s++) walk(l + 1, left - s, [...acc, s]);
      };
      walk(0, total, []);
      expect(value(sizes)).toBe(best);
    }
    expect(Array.from(equalSlots(3, 7, 8))).toEqual([3, 2, 2]);
    expect(() => allocateSlots([new Float64Array(3), new Float64Array(3)], 1, 1, 2)).toThrow(RangeError);
  });

  it('estimates per-layer LRU miss curves from stack distances and the observed prediction accuracy', () => {
    const s = new LayerStats(1, 4);
    for (const act of [[0], [1], [0], [2], [1]]) s.observe(0, act, null);
    // Distances: cold, cold, 1, cold, 2 → misses at size 1: 5, 2: 4, 3: 3, 4: 3 (cold only).
    expect(Array.from(s.cost(0)).slice(1)).toEqual([5, 4, 3, 3]);
    s.observe(0, [1], [1, 3]); // distance 0; prediction right
    s.observe(0, [3], [1, 0]); // cold; prediction wrong
    expect(s.accuracy(0)).toBe(0.5);
    // Predicted steps: max distances 0 and cold (4): at size s, steps with a miss = 1 for s ≥ 1.
    expect(Array.from(s.cost(0)).slice(1)).toEqual([6 - 0.5, 5 - 0.5, 4 - 0.5, 4 - 0.5]);
  });

  it('prefetches exactly one expert — the first predicted one not in the buffer — and only in decoding', () => {
    const v = stubView({ layers: 3, experts: 8, topK: 2, predict: (l) => (l === 1 ? [4, 6, 1] : []) });
    const p = createAdapMoe('adapmoe', AdapMoeParams.parse({}), 3, 8, 2);
    v.batch = [decodeReq('decode')];
    v.buffer.put(v.keyOf(1, 4));
    expect(prefetchKeys(p.onLayerRouted?.(v, routed(v, 0, [0, 1])))).toEqual([v.keyOf(1, 6)]);
    v.batch = [decodeReq('prefill')];
    expect(prefetchKeys(p.onLayerRouted?.(v, routed(v, 0, [0, 1])))).toEqual([]);
    // Prefetches only use free slots.
    expect(
      p.chooseVictim?.(v, { reason: 'prefetch', forKey: v.keyOf(1, 6), candidates: [v.keyOf(1, 4)] }),
    ).toBeUndefined();
  });

  it('end to end: reallocation gives the layer that reuses two experts two slots', () => {
    // Layer 0 always uses expert 0 (one slot suffices); layer 1 alternates experts 0 and 1 (a
    // one-slot LRU always misses). Budget 3: the equal split starts (2, 1), the DP moves to (1, 2).
    const w: TinyWorld = {
      layers: 2,
      experts: 4,
      route: (_r, l, t) => [l === 0 ? 0 : t % 2],
      requests: [{ outputTokens: 12 }],
      bufferSlots: 4,
    };
    const p = createAdapMoe('adapmoe', AdapMoeParams.parse({ totalSlots: 3, reallocateEveryIterations: 4 }), 2, 4, 1);
    expect(Array.from(p.sizes())).toEqual([2, 1]);
    const { outcome, violations } = runTiny(w, p);
    expect(violations).toEqual([]);
    expect(Array.from(p.sizes())).toEqual([1, 2]);
    // Layer 0: one cold miss, 11 hits. Layer 1: misses while it has one slot (iterations 0–3,
    // reallocation after the 4th) and the first token after (only M1E1 resident), then 7 hits.
    expect(outcome.counters).toMatchObject({ needs: 24, cacheHits: 18, demandFetches: 6 });
  });
});

// ------------------------------------------------------------------ belady

/** Drives a policy's chooseVictim over a need sequence with a simulated buffer; returns hits. */
function simulateCache(
  policy: ServingPolicy,
  trace: NeedTrace,
  layers: number,
  experts: number,
  slots: number,
): number {
  const v = stubView({ layers, experts, slots });
  policy.init?.(v);
  let hits = 0;
  for (const s of trace.steps) {
    v.iteration = s.iteration;
    v.layer = s.layer;
    const keys = s.experts.map((e) => v.keyOf(s.layer, e));
    for (const k of keys)
      if (v.buffer.has(k)) {
        hits++;
        v.buffer.entry(k)!.pinned = true;
      }
    for (const k of keys) {
      if (v.buffer.has(k)) continue;
      if (v.buffer.occupied >= slots) {
        const victim = policy.chooseVictim!(v, { reason: 'demand', forKey: k, candidates: v.buffer.candidates() })!;
        v.buffer.map.delete(victim);
      }
      v.buffer.put(k, { pinned: true });
    }
    const d = policy.onLayerRouted?.(v, routed(v, s.layer, [...s.experts]));
    for (const k of d?.evict ?? []) v.buffer.map.delete(k);
    for (const k of keys) v.buffer.entry(k)!.pinned = false;
  }
  return hits;
}

/** The most hits any eviction choice can get (exhaustive search). */
function optimalHits(trace: NeedTrace, experts: number, slots: number): number {
  const steps = trace.steps.map((s) => s.experts.map((e) => s.layer * experts + e));
  const go = (i: number, cache: readonly number[]): number => {
    if (i === steps.length) return 0;
    const need = steps[i]!;
    const hits = need.filter((k) => cache.includes(k)).length;
    const missing = need.filter((k) => !cache.includes(k));
    // Choose which non-needed entries to drop to make room (every combination).
    const free = slots - cache.length;
    const drop = Math.max(0, missing.length - free);
    const droppable = cache.filter((k) => !need.includes(k));
    let best = -Infinity;
    const choose = (from: number, left: number, dropped: number[]) => {
      if (left === 0) {
        const next = [...cache.filter((k) => !dropped.includes(k)), ...missing];
        best = Math.max(best, go(i + 1, next));
        return;
      }
      for (let j = from; j < droppable.length; j++) choose(j + 1, left - 1, [...dropped, droppable[j]!]);
    };
    choose(0, drop, []);
    return hits + best;
  };
  return go(0, []);
}

const traceOf = (seq: readonly (readonly number[])[], layerOf: (i: number) => number = () => 0): NeedTrace => ({
  steps: seq.map((experts, i) => ({ iteration: i, layer: layerOf(i), experts: [...experts].sort((a, b) => a - b) })),
});

describe('belady', () => {
  it('is exact on the textbook reference string (3 frames: 9 faults, 11 hits)', () => {
    const refs = [7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1];
    const trace = traceOf(refs.map((r) => [r]));
    const hits = simulateCache(createBelady('belady', BeladyParams.parse({}), trace, 8, 1), trace, 1, 8, 3);
    expect(hits).toBe(11);
    expect(optimalHits(trace, 8, 3)).toBe(11);
  });

  it('matches the exhaustive optimum on hand-made multi-expert needs, and beats LFU', () => {
    const seqs: number[][][] = [
      [
        [0, 1],
        [2, 3],
        [0, 4],
        [1, 2],
        [3, 4],
        [0, 1],
        [2, 4],
        [0, 3],
      ],
      [[0], [1, 2], [3], [0, 1], [2, 3], [4, 5], [0], [5, 1], [2], [3, 4]],
      [
        [5, 4],
        [3, 2],
        [1, 0],
        [5, 4],
        [3, 2],
        [1, 0],
        [0, 5],
      ],
    ];
    for (const seq of seqs) {
      for (const slots of [2, 3, 4]) {
        const trace = traceOf(seq);
        const hits = simulateCache(createBelady('belady', BeladyParams.parse({}), trace, 6, 1), trace, 1, 6, slots);
        expect(hits).toBe(optimalHits(trace, 6, slots));
        expect(hits).toBeGreaterThanOrEqual(simulateCache(createLfu('lfu', LfuParams.parse({})), trace, 1, 6, slots));
      }
    }
  });

  it('next uses and the cursor: the current layer counts as now, never again is +∞, a diverged run re-synchronises by (iteration, layer)', () => {
    const trace: NeedTrace = {
      steps: [
        { iteration: 0, layer: 0, experts: [1] },
        { iteration: 0, layer: 1, experts: [0, 2] },
        { iteration: 1, layer: 0, experts: [2] },
        { iteration: 1, layer: 1, experts: [0] },
      ],
    };
    const idx = new NeedIndex(trace, 4, 8);
    expect(idx.nextUse(4, 1)).toBe(1); // M1E0 needed at step 1
    expect(idx.nextUse(4, 2)).toBe(3);
    expect(idx.nextUse(6, 2)).toBe(Infinity); // M1E2 never again after step 1
    expect(idx.lowerBound(1, 0)).toBe(2);
    expect(idx.lowerBound(0, 5)).toBe(2);
    expect(idx.lowerBound(7, 0)).toBe(4);
    const p = createBelady('belady', BeladyParams.parse({}), trace, 4, 2);
    const v = stubView({ layers: 2, experts: 4 });
    // At (1, 0): M0E1 is never needed again, M1E0 at step 3: evict M0E1.
    v.iteration = 1;
    v.layer = 0;
    expect(
      p.chooseVictim?.(v, { reason: 'demand', forKey: v.keyOf(0, 2), candidates: [v.keyOf(1, 0), v.keyOf(0, 1)] }),
    ).toBe(v.keyOf(0, 1));
    // Ties (both never again): lowest key.
    v.layer = 1;
    expect(p.chooseVictim?.(v, { reason: 'demand', forKey: 4, candidates: [v.keyOf(1, 3), v.keyOf(0, 3)] })).toBe(
      v.keyOf(0, 3),
    );
    // Routing that differs from the recording is counted, not trusted.
    p.onLayerRouted?.(v, routed(v, 1, [0]));
    p.onLayerRouted?.(v, routed(v, 1, [3]));
    expect(p.stats).toEqual({ routed: 2, matched: 1 });
  });

  it('the recorder wraps a policy and records (iteration, layer, activated) of a real run', () => {
    const w: TinyWorld = {
      layers: 2,
      experts: 4,
      route: (_r, l, t) => [(t + 2 * l) % 4],
      requests: [{ outputTokens: 3 }],
      bufferSlots: 2,
    };
    const recorder = recordNeeds(builtinPolicy('on-demand')!.create({ keep: false }, undefined as never));
    const { violations } = runTiny(w, recorder.policy);
    expect(violations).toEqual([]);
    expect(recorder.trace.steps).toEqual([
      { iteration: 0, layer: 0, experts: [0] },
      { iteration: 0, layer: 1, experts: [2] },
      { iteration: 1, layer: 0, experts: [1] },
      { iteration: 1, layer: 1, experts: [3] },
      { iteration: 2, layer: 0, experts: [2] },
      { iteration: 2, layer: 1, experts: [0] },
    ]);
  });

  it('world builder: records a pass with on-demand and replays it exactly (offline arrivals, static batching); belady ≥ lru and lfu', async () => {
    const spec = (name: string): RunSpec => ({
      index: 0,
      policy: {
        label: name,
        definition: builtinPolicy(name)!,
        params: builtinPolicy(name)!.params.parse({ capacitySlots: 12 }),
      },
      model: 'mixtral-8x7b',
      hardware: 'h100',
      seed: 3,
      workload: WorkloadSchema.parse({
        requests: 4,
        arrival: { kind: 'offline' },
        promptTokens: { kind: 'fixed', tokens: 6 },
        outputTokens: { kind: 'fixed', tokens: 4 },
      }),
      executor: ServingExecutorSchema.parse({ batching: 'static', maxBatchSize: 2 }),
      params: {},
    });
    const hits: Record<string, number> = {};
    for (const name of ['belady', 'lru', 'lfu', 'rnd']) {
      const executor = await buildServingWorld(spec(name), { baseDir: '.' });
      const outcome = executor.run();
      hits[name] = outcome.counters.cacheHits;
      expect(outcome.slots).toBe(12);
    }
    expect(hits.belady).toBeGreaterThan(0);
    for (const name of ['lru', 'lfu', 'rnd']) expect(hits.belady).toBeGreaterThanOrEqual(hits[name]!);
  });
});

// ------------------------------------------------------------------ gpu-rich

describe('gpu-rich', () => {
  it('moves zero H2D bytes and hits every need', () => {
    const def = gpuRich as PolicyDefinition<unknown>;
    expect(def.servingOverrides?.preloadAllExperts).toBe(true);
    const w: TinyWorld = {
      layers: 3,
      experts: 4,
      topK: 2,
      route: (r, l, t) => [(r + l + t) % 4, (r + l + t + 1) % 4],
      requests: [{ outputTokens: 3 }, { promptTokens: 5, outputTokens: 2 }],
      bufferSlots: 1,
      preloadAllExperts: true,
      maxBatchSize: 2,
    };
    const { outcome, violations } = runTiny(w, def.create({}, undefined as never));
    expect(violations).toEqual([]);
    expect(outcome.resources.h2d.bytesMoved).toBe(0);
    expect(outcome.counters.needs).toBeGreaterThan(0);
    expect(outcome.counters.cacheHits).toBe(outcome.counters.needs);
    expect(servingMetrics(outcome).bufferHitRate).toBe(1);
    expect(outcome.counters.blockedNs).toBe(0);
  });
});
