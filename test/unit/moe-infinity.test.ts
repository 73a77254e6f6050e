/**
 * moe-infinity (policies/moe-infinity/): decisions on tiny hand-made inputs, and tiny executor
 * worlds (a shrunk real model profile, the a5000 testbed, a stub cost model and scripted
 * routing) for what only shows up in the executor: cancellation, queue jumping, ablations.
 */
import { describe, expect, it } from 'vitest';
import { deriveModel } from '../../hardware-profiles/derive.ts';
import { loadHardware, loadModel } from '../../hardware-profiles/load.ts';
import type { ModelProfile } from '../../hardware-profiles/types.ts';
import type { CostModel, Operation } from '../../sim/cost/types.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import type { PacketRecord, TraceSink, TransferRecord } from '../../sim/observe/trace-sink.ts';
import type {
  BufferEntryView,
  BufferView,
  LayerRouting,
  PolicyDecision,
  ServingPolicy,
  ServingView,
} from '../../sim/serving/policy.ts';
import { ServingExecutor, type ServingOutcome } from '../../sim/serving/serving-executor.ts';
import type { RequestSpec, RoutingSource, Workload } from '../../sim/workload.ts';
import { builtinPolicy } from '../../policies/registry.ts';
import { fakeBuffer } from './buffer-fakes.ts';
import { CachePriorities } from '../../policies/moe-infinity/cache-priority.ts';
import { RequestEams, cosineSimilarity } from '../../policies/moe-infinity/eam.ts';
import { EamCollection, IncrementalMatcher } from '../../policies/moe-infinity/eam-collection.ts';
import { MoeInfinityParams, MoeInfinityPolicy, moeInfinity } from '../../policies/moe-infinity/policy.ts';
import {
  PrefetchQueue,
  ScoreAccumulator,
  dependencyRanking,
  dependencySelection,
  proximityFactor,
  rankPrefetch,
  type RankOptions,
  type Selection,
} from '../../policies/moe-infinity/prefetcher.ts';

// ---------------------------------------------------------------------------- helpers

/** An L×E EAM with `cells` = [[layer, expert, count], ...]. */
function eam(L: number, E: number, cells: readonly (readonly [number, number, number])[]): Float64Array {
  const m = new Float64Array(L * E);
  for (const [l, e, c] of cells) m[l * E + e]! += c;
  return m;
}

/** An EAM whose row l has one count at `experts[l]`. */
const path = (E: number, experts: readonly number[]): Float64Array =>
  eam(
    experts.length,
    E,
    experts.map((e, l) => [l, e, 1] as const),
  );

function tinyModel(L: number, E: number, k: number): ModelProfile {
  const base = loadModel('mixtral-8x7b');
  const input = {
    ...base,
    layers: L,
    moeLayers: L,
    moeLayerIndices: Array.from({ length: L }, (_, i) => i),
    experts: E,
    topK: k,
    details: { ...base.details, decoderLayers: L },
  };
  return { ...input, id: `tiny-${L}l${E}e${k}k`, derived: deriveModel(input) };
}

interface TinyWorld {
  readonly L: number;
  readonly E: number;
  readonly k?: number;
  /** Experts of token `token` of request `req` at `layer` (length k). */
  readonly route: (req: number, layer: number, token: number) => readonly number[];
  readonly requests: readonly { promptTokens: number; outputTokens: number; arrivalNs?: number }[];
  readonly slots: number;
  readonly maxBatchSize?: number;
  readonly batching?: 'static' | 'continuous';
  /** Packets per expert transfer. */
  readonly packetsPerExpert?: number;
  /** Stub kernel durations in units of one expert transfer time (T). */
  readonly attentionT?: number;
  readonly expertT?: number;
}

interface TinyRun {
  readonly outcome: ServingOutcome;
  readonly transfers: TransferRecord[];
  readonly packets: PacketRecord[];
  /** One expert's transfer time without latency, ns. */
  readonly T: number;
  readonly model: ModelProfile;
}

function runTiny(w: TinyWorld, policy: ServingPolicy, sinkExtra: TraceSink = {}): TinyRun {
  const model = tinyModel(w.L, w.E, w.k ?? 1);
  const hardware = loadHardware('a5000-pcie4-1tb');
  const T = Math.ceil((model.derived.bytesPerExpert / hardware.pcie.h2dBytesPerSec) * 1e9);
  const dur = (op: Operation): number => {
    switch (op.kind) {
      case 'attention':
        return Math.round((w.attentionT ?? 0.01) * T);
      case 'expert':
        return Math.round((w.expertT ?? 0.01) * T);
      default:
        return 1000;
    }
  };
  const cost: CostModel = {
    estimate: (op) => ({ ns: dur(op) as Ns, bound: 'flops', source: 'roofline', flops: 0, bytes: 0 }),
  };
  const requests: RequestSpec[] = w.requests.map((r, id) => ({
    id,
    arrivalNs: (r.arrivalNs ?? 0) as Ns,
    promptTokens: r.promptTokens,
    outputTokens: r.outputTokens,
  }));
  const k = w.k ?? 1;
  const routing: RoutingSource = {
    moeLayers: w.L,
    experts: w.E,
    topK: k,
    forRequest: (spec) => ({
      route(layer, from, to, out) {
        let o = 0;
        for (let t = from; t < to; t++) for (const e of w.route(spec.id, layer, t)) out[o++] = e;
      },
    }),
  };
  const workload: Workload = { requests, routing, describe: 'scripted' };
  const transfers: TransferRecord[] = [];
  const packets: PacketRecord[] = [];
  const sink: TraceSink = {
    ...sinkExtra,
    onTransfer: (r) => transfers.push(r),
    onPacket: (r) => packets.push(r),
  };
  const executor = new ServingExecutor({
    model,
    hardware,
    cost,
    workload,
    policy,
    sink,
    config: {
      batching: w.batching ?? 'static',
      maxBatchSize: w.maxBatchSize ?? 1,
      maxWaitNs: 0 as Ns,
      maxBatchTokens: 8192,
      bufferSlots: w.slots,
      packetBytes: Math.ceil(model.derived.bytesPerExpert / (w.packetsPerExpert ?? 8)),
      preloadAllExperts: false,
    },
  });
  const outcome = executor.run();
  return { outcome, transfers, packets, T, model };
}

function createPolicy(raw: Record<string, unknown>, L: number, E: number, topK = 1): MoeInfinityPolicy {
  return new MoeInfinityPolicy('moe-infinity', MoeInfinityParams.parse(raw), { moeLayers: L, experts: E, topK });
}

/** Records every decision `onLayerRouted` returns, with the layer. */
function recordDecisions(p: MoeInfinityPolicy): { layer: number; d: PolicyDecision }[] {
  const log: { layer: number; d: PolicyDecision }[] = [];
  const orig = p.onLayerRouted.bind(p);
  p.onLayerRouted = (v: ServingView, r: LayerRouting) => {
    const d = orig(v, r);
    log.push({ layer: r.layer, d });
    return d;
  };
  return log;
}

const expertLabel = (E: number, key: number): string => `expert M${Math.floor(key / E)}E${key % E}`;

function checkBytes(o: ServingOutcome): void {
  const h2d = o.resources.h2d;
  expect(h2d.bytesMoved).toBe(h2d.completedBytes + h2d.cancelledSentBytes);
  for (const r of o.requests) expect(r.emittedTokens).toBe(r.outputTokens);
}

// ---------------------------------------------------------------------------- params and registry

describe('moe-infinity definition', () => {
  it('is registered, strict, and defaults to the full design', () => {
    expect(builtinPolicy('moe-infinity')).toBe(moeInfinity);
    const p = MoeInfinityParams.parse({});
    expect(p).toMatchObject({
      requestTracing: true,
      eamcCapacity: 1000,
      eamcReplacement: 'most-similar',
      topMatches: 8,
      batchMatching: 'per-batch',
      multiLayerPrefetch: true,
      layerProximity: true,
      queueOrder: 'nearest-first',
      queueJump: true,
      cachePriorities: true,
      initialLayerBoost: 1,
      prefetchAdmission: 'priority',
    });
    expect(p.prefetchLayers).toBeUndefined();
    expect(p.prefetchBudget).toBeUndefined();
    expect(p.fixedPrefetchExperts).toBeUndefined();
    expect(MoeInfinityParams.safeParse({ eamcCapacty: 3 }).success).toBe(false);
    expect(MoeInfinityParams.safeParse({ eamcCapacity: 0 }).success).toBe(false);
  });

  it('passes queueJump to the executor as a policy flag', () => {
    expect(createPolicy({}, 2, 2).queueJump).toBe(true);
    expect(createPolicy({ queueJump: false }, 2, 2).queueJump).toBe(false);
  });
});

// ---------------------------------------------------------------------------- EAMs and the EAMC

describe('request EAMs', () => {
  it('keeps prefill and decode separately and sums iterations', () => {
    const r = new RequestEams({ layers: 2, experts: 3 });
    r.addTokens(7, 'prefill', 4);
    r.addRow(7, 'prefill', 0, [3, 1, 0]);
    r.addRow(7, 'prefill', 1, [0, 2, 2]);
    for (let step = 0; step < 2; step++) {
      r.addTokens(7, 'decode', 1);
      r.addRow(7, 'decode', 0, [0, 1, 0]);
      r.addRow(7, 'decode', 1, [1, 0, 0]);
    }
    expect([...r.get(7, 'prefill')!]).toEqual([3, 1, 0, 0, 2, 2]);
    expect([...r.get(7, 'decode')!]).toEqual([0, 2, 0, 2, 0, 0]);
    expect(r.count(7, 0, 1)).toBe(3);
    expect(r.tokens(7)).toBe(6);
    const got: string[] = [];
    r.take(7, (phase, m) => got.push(`${phase}:${[...m].join(',')}`));
    expect(got).toEqual(['prefill:3,1,0,0,2,2', 'decode:0,2,0,2,0,0']);
    expect(r.size).toBe(0);
  });
});

describe('EAM collection', () => {
  it('replaces the most similar stored EAM when full', () => {
    const c = new EamCollection({ layers: 2, experts: 3 }, 3, 'most-similar');
    const a = eam(2, 3, [
      [0, 0, 5],
      [1, 0, 5],
    ]);
    const b = eam(2, 3, [
      [0, 1, 5],
      [1, 1, 5],
    ]);
    const d = eam(2, 3, [
      [0, 2, 5],
      [1, 2, 5],
    ]);
    expect([c.insert(a), c.insert(b), c.insert(d)]).toEqual([0, 1, 2]);
    // Close to b (cosine 0.97), far from a and d.
    const near = eam(2, 3, [
      [0, 1, 4],
      [1, 1, 5],
      [1, 2, 1],
    ]);
    expect(c.mostSimilar(near)).toBe(1);
    expect(c.insert(near)).toBe(1);
    expect([...c.entry(1)]).toEqual([...near]);
    expect([...c.entry(0)]).toEqual([...a]);
    expect([...c.entry(2)]).toEqual([...d]);
    expect(c.size).toBe(3);
  });

  it('with lfu-access replaces the entry matched the fewest times', () => {
    const c = new EamCollection({ layers: 1, experts: 2 }, 2, 'lfu-access');
    c.insert(eam(1, 2, [[0, 0, 1]]));
    c.insert(eam(1, 2, [[0, 1, 1]]));
    c.noteMatched(1);
    c.noteMatched(1);
    c.noteMatched(0);
    // Entry 0 (2 accesses) < entry 1 (3): replaced although the new EAM equals entry 1.
    expect(c.insert(eam(1, 2, [[0, 1, 7]]))).toBe(0);
    expect(c.accessCount(0)).toBe(1);
  });

  it('keeps entries when its storage grows, and ignores empty EAMs', () => {
    const c = new EamCollection({ layers: 2, experts: 2 }, 100, 'most-similar');
    const all: Float64Array[] = [];
    for (let i = 0; i < 40; i++) {
      const m = eam(2, 2, [
        [0, i % 2, i + 1],
        [1, (i >> 1) % 2, 2 * i + 1],
      ]);
      all.push(m);
      c.insert(m);
    }
    expect(c.insert(new Float64Array(4))).toBe(-1);
    expect(c.size).toBe(40);
    all.forEach((m, n) => expect([...c.entry(n)]).toEqual([...m]));
    const sims = new Float64Array(40);
    c.similarities(all[5]!, sims);
    all.forEach((m, n) => expect(sims[n]).toBeCloseTo(cosineSimilarity(all[5]!, m, 2), 12));
  });
});

describe('incremental matching', () => {
  it('matches the rows seen so far by cosine and keeps the best entries', () => {
    const L = 3;
    const E = 4;
    const c = new EamCollection({ layers: L, experts: E }, 10, 'most-similar');
    c.insert(path(E, [0, 0, 0])); // 0
    c.insert(path(E, [0, 1, 1])); // 1
    c.insert(path(E, [2, 2, 2])); // 2
    const m = new IncrementalMatcher({ layers: L, experts: E }, 2);
    m.reset(c);
    m.addRow(0, [1, 0, 0, 0]);
    // Row 0: entries 0 and 1 identical (cos 1), entry 2 orthogonal (never matches).
    expect([m.similarity(0), m.similarity(1), m.similarity(2)]).toEqual([1, 1, 0]);
    expect([...m.top.subarray(0, m.topCount)]).toEqual([0, 1]);
    m.addRow(1, [0, 1, 0, 0]);
    expect(m.similarity(1)).toBeCloseTo(1, 12);
    expect(m.similarity(0)).toBeCloseTo(0.5, 12);
    expect([...m.top.subarray(0, m.topCount)]).toEqual([1, 0]);
    const cur = eam(L, E, [
      [0, 0, 1],
      [1, 1, 1],
    ]);
    for (let n = 0; n < 3; n++) expect(m.similarity(n)).toBeCloseTo(cosineSimilarity(cur, c.entry(n), E, [0, 1]), 12);
  });

  it('sums the best matches, normalises each row, and weights by tokens', () => {
    const c = new EamCollection({ layers: 3, experts: 2 }, 4, 'most-similar');
    c.insert(
      eam(3, 2, [
        [0, 0, 2],
        [1, 0, 2],
        [2, 1, 2],
      ]),
    );
    c.insert(
      eam(3, 2, [
        [0, 0, 1],
        [1, 1, 1],
        [2, 1, 1],
      ]),
    );
    const out = new Float64Array(6).fill(-1);
    new ScoreAccumulator({ layers: 3, experts: 2 }).compute(
      [
        { collection: c, top: [0, 1], count: 2, weight: 3 }, // rows 1, 2: shares (2/3, 1/3), (0, 1) × 3 tokens
        { collection: c, top: [1], count: 1, weight: 1 }, // (0, 1), (0, 1) × 1 token
      ],
      1,
      3,
      out,
    );
    expect([...out]).toEqual([-1, -1, 2, 2, 0, 4]);
  });
});

// ---------------------------------------------------------------------------- ranking

describe('prefetch ranking', () => {
  const opts = (o: Partial<RankOptions> = {}): RankOptions => ({
    layers: 4,
    experts: 2,
    horizon: 4,
    proximity: true,
    order: 'nearest-first',
    ...o,
  });

  it('scales future layers by 1 − (i − l)/L: a nearer layer ranks first for equal probabilities', () => {
    expect(proximityFactor(1, 0, 4)).toBe(0.75);
    const s = new Float64Array(8);
    s[2 * 2 + 0] = 1; // layer 2, expert 0
    s[1 * 2 + 1] = 1; // layer 1, expert 1
    expect(rankPrefetch(s, 0, 1, opts())).toEqual([3]);
    expect(rankPrefetch(s, 0, 1, opts({ proximity: false }))).toEqual([3]); // tie → nearer layer
    s[2 * 2 + 0] = 1.2; // higher probability one layer further
    expect(rankPrefetch(s, 0, 1, opts())).toEqual([3]); // 0.75 > 1.2 × 0.5
    expect(rankPrefetch(s, 0, 1, opts({ proximity: false }))).toEqual([4]);
  });

  it('queues nearest layer first, or by score, and respects budget and horizon', () => {
    const s = new Float64Array(8);
    s[1 * 2 + 0] = 0.1;
    s[1 * 2 + 1] = 0.2;
    s[2 * 2 + 1] = 0.9;
    s[3 * 2 + 0] = 0.8;
    expect(rankPrefetch(s, 0, 8, opts())).toEqual([3, 2, 5, 6]);
    expect(rankPrefetch(s, 0, 8, opts({ order: 'score' }))).toEqual([5, 6, 3, 2]);
    expect(rankPrefetch(s, 0, 2, opts({ order: 'score' }))).toEqual([5, 6]);
    expect(rankPrefetch(s, 0, 8, opts({ horizon: 1 }))).toEqual([3, 2]);
    expect(rankPrefetch(s, 1, 8, opts())).toEqual([5, 6]);
    expect(rankPrefetch(s, 0, 0, opts())).toEqual([]);
  });

  it('ties of score go to the lower key, in either order, and the scores come out beside the keys', () => {
    const s = new Float64Array(8);
    // Layer 1: both experts 0.5; layer 2: expert 1 0.5; no proximity, so all three tie.
    s[1 * 2 + 0] = 0.5;
    s[1 * 2 + 1] = 0.5;
    s[2 * 2 + 1] = 0.5;
    const scores: number[] = [];
    expect(rankPrefetch(s, 0, 8, opts({ proximity: false }), undefined, scores)).toEqual([2, 3, 5]);
    expect(scores).toEqual([0.5, 0.5, 0.5]);
    expect(rankPrefetch(s, 0, 8, opts({ proximity: false, order: 'score' }))).toEqual([2, 3, 5]);
    // With proximity layer 1 (×0.75) beats layer 2 (×0.5); the tie inside layer 1 by key.
    expect(rankPrefetch(s, 0, 8, opts({ order: 'score' }), undefined, scores)).toEqual([2, 3, 5]);
    expect(scores).toEqual([0.375, 0.375, 0.25]);
  });

  it('dependency prefetch takes the first n experts of the next layer in order', () => {
    // As a selection: score 1 each, urgency 1, 2, … in that order.
    const sel = dependencySelection(0, 3, 4, 3, 100);
    expect([sel.count, [...sel.keys], [...sel.scores], [...sel.urgency]]).toEqual([3, [4, 5, 6], [1, 1, 1], [1, 2, 3]]);
    expect(dependencyRanking(0, 3, 4, 4, 100)).toEqual([4, 5, 6, 7]);
    expect(dependencyRanking(1, 3, 4, 2, 100)).toEqual([8, 9]);
    expect(dependencyRanking(1, 3, 4, 4, 3)).toEqual([8, 9, 10]);
    expect(dependencyRanking(2, 3, 4, 4, 100)).toEqual([]);
  });

  it('re-ranking cancels our loading prefetches that left the ranked set and re-prioritises the rest', () => {
    const sel = (keys: number[]): Selection => ({
      count: keys.length,
      keys: Int32Array.from(keys),
      scores: new Float64Array(keys.length).fill(1),
      urgency: Float64Array.from(keys, (_, j) => 1 + j),
    });
    const q = new PrefetchQueue(64);
    const empty = fakeBuffer({});
    // Admitted keys are issued most urgent first.
    expect(q.plan(empty, sel([10, 11, 12]), [12, 10, 11])).toEqual({
      cancel: [],
      prefetch: [
        { key: 10, priority: 1 },
        { key: 11, priority: 2 },
        { key: 12, priority: 3 },
      ],
    });
    // 10 completed, 11 still loading, 12 loading but now needed (pinned), 13 is someone else's.
    const buf = fakeBuffer({
      10: { state: 'resident' },
      11: { state: 'loading' },
      12: { state: 'loading', pinned: true },
      13: { state: 'loading' },
    });
    expect(q.plan(buf, sel([14, 10]), [14])).toEqual({ cancel: [11], prefetch: [{ key: 14, priority: 1 }] });
    expect([...q.outstanding]).toEqual([14]);
    // 14 still loading and still ranked: re-prioritised; keys outside the set are never issued.
    const buf2 = fakeBuffer({ 14: { state: 'loading' } });
    expect(q.plan(buf2, sel([15, 14]), [15, 99])).toEqual({
      cancel: [],
      prefetch: [
        { key: 14, priority: 2 },
        { key: 15, priority: 1 },
      ],
    });
  });
});

// ---------------------------------------------------------------------------- cache priorities

describe('cache priorities', () => {
  const L = 3;
  const E = 4;
  const setup = (boost: number) => {
    const eams = new RequestEams({ layers: L, experts: E });
    eams.addTokens(1, 'decode', 10);
    eams.addRow(1, 'decode', 0, [6, 4, 0, 0]);
    eams.addRow(1, 'decode', 1, [0, 3, 7, 0]);
    eams.addRow(1, 'decode', 2, [6, 0, 0, 4]);
    const c = new CachePriorities({ layers: L, experts: E, requestPriorities: true, initialLayerBoost: boost });
    for (let l = 0; l < L; l++) c.resetLayer(eams, [1], l);
    return { eams, c };
  };

  it('resets to the request-EAM frequency and evicts the lowest', () => {
    const { c } = setup(0);
    [0, 0.3, 0.7, 0].forEach((v, e) => expect(c.priority[4 + e]).toBeCloseTo(v, 12));
    const buf = fakeBuffer({ 1: {}, 5: {}, 6: {}, 8: {} });
    expect(c.chooseVictim(buf, { reason: 'demand', forKey: 11, candidates: [1, 6, 5, 8] })).toBe(5); // (1,1) = 0.3 < (0,1) = 0.4 < (2,0) = 0.6 < (1,2) = 0.7
    expect(c.chooseVictim(buf, { reason: 'demand', forKey: 11, candidates: [1, 6, 8] })).toBe(1);
  });

  it('answers a query from the listed candidates unless they are the whole evictable set (allEvictable)', () => {
    const { c } = setup(0);
    const buf = fakeBuffer({ 1: {}, 5: {}, 6: {}, 8: {} });
    // The buffer's cheapest is 5 (0.3); a query that lists only [1, 6, 8] gets 1 (0.4).
    expect(c.victimInBuffer(buf, { reason: 'demand', forKey: 11, candidates: [1, 6, 8] })).toBe(1);
    expect(c.victimInBuffer(buf, { reason: 'demand', forKey: 11, candidates: [1, 6, 5, 8], allEvictable: true })).toBe(
      5,
    );
  });

  it('never evicts the ranked set for a prefetch; on demand the least urgent of it', () => {
    const { c } = setup(0);
    c.setRanked([5, 1]);
    const buf = fakeBuffer({ 1: {}, 5: {}, 6: {} });
    expect(c.chooseVictim(buf, { reason: 'prefetch', forKey: 11, candidates: [1, 5, 6] })).toBe(6);
    expect(c.chooseVictim(buf, { reason: 'prefetch', forKey: 11, candidates: [1, 5] })).toBeUndefined();
    expect(c.chooseVictim(buf, { reason: 'demand', forKey: 11, candidates: [1, 5] })).toBe(1);
  });

  it('boosts the first layers: ×(1 + b·(1 − l/L)); ties go to the least recently used', () => {
    // Layer 0 expert 0 and layer 2 expert 0 both have frequency 0.6.
    const none = setup(0).c;
    const buf = fakeBuffer({ 0: { lastUsedNs: 5 }, 8: { lastUsedNs: 9 } });
    expect(none.chooseVictim(buf, { reason: 'demand', forKey: 3, candidates: [8, 0] })).toBe(0);
    const boosted = setup(1).c;
    expect(boosted.boost(0)).toBe(2);
    expect(boosted.priority[0]).toBeCloseTo(1.2, 12);
    expect(boosted.priority[8]).toBeCloseTo(0.6 * (1 + 1 / 3), 12);
    expect(boosted.chooseVictim(buf, { reason: 'demand', forKey: 3, candidates: [8, 0] })).toBe(8);
  });

  it('admits a prefetch into a full buffer only over a lower-priority victim', () => {
    const { c } = setup(0);
    c.setRanked([3, 11]);
    // Full buffer (fakeBuffer has 64 slots): fill it so no slot is free.
    const entries: Record<number, Partial<BufferEntryView>> = { 1: {}, 5: {}, 6: {}, 8: {} };
    for (let k = 20; k < 80; k++) entries[k] = { pinned: true };
    const buf = fakeBuffer(entries);
    expect(buf.occupied).toBe(64);
    const admit = c.admission(buf);
    expect(admit(3, 0.25)).toBe(false); // cheapest victim (1,1) has priority 0.3
    expect(admit(3, 0.35)).toBe(true); // evicts (1,1)
    expect(admit(11, 0.35)).toBe(false); // next victim (0,1) has 0.4
    expect(c.chooseVictim(buf, { reason: 'prefetch', forKey: 3, candidates: [1, 5, 6, 8] })).toBe(5);
    // A prefetch admitted at 0.35 must not evict a victim of 0.4.
    expect(c.chooseVictim(buf, { reason: 'prefetch', forKey: 3, candidates: [1, 6, 8] })).toBeUndefined();
    const free = c.admission(fakeBuffer({ 1: {} }));
    expect(free(3, 0)).toBe(true);
  });

  it('without request priorities is LRU', () => {
    const c = new CachePriorities({ layers: L, experts: E, requestPriorities: false, initialLayerBoost: 1 });
    const buf = fakeBuffer({ 0: { lastUsedNs: 7 }, 5: { lastUsedNs: 3 }, 9: { lastUsedNs: 4 } });
    expect(c.chooseVictim(buf, { reason: 'prefetch', forKey: 3, candidates: [0, 5, 9] })).toBe(5);
  });
});

// ---------------------------------------------------------------------------- executor worlds

describe('moe-infinity in the serving executor', () => {
  it('cancels a prefetch dropped from the ranking: no further bytes, slot freed', () => {
    // 3 MoE layers × 4 experts, top-1, one request of one prompt token. EAMC (prefill):
    // P0 = e0 at every layer, P1 = e0, e1, e1. The request routes e0, e1, e1.
    // After layer 0 both match (tie → P0): prefetch (1,0) then (2,0). Layer 1 routes e1:
    // P1 now matches best, so (2,0) — on the wire by then — is cancelled and (2,1) prefetched.
    const L = 3;
    const E = 4;
    const p = createPolicy({ topMatches: 1 }, L, E);
    p.preload('prefill', [path(E, [0, 0, 0]), path(E, [0, 1, 1])]);
    const log = recordDecisions(p);
    const k20 = 2 * E + 0;
    const k21 = 2 * E + 1;
    const seenAfterCancel: { has20: boolean; has21: boolean; occupied: number }[] = [];
    const origAfter = p.afterUse.bind(p);
    p.afterUse = (v, key) => {
      if (key === 1 * E + 1)
        seenAfterCancel.push({ has20: v.buffer.has(k20), has21: v.buffer.has(k21), occupied: v.buffer.occupied });
      return origAfter(v, key);
    };
    const run = runTiny(
      {
        L,
        E,
        route: (_r, l) => [[0, 1, 1][l]!],
        requests: [{ promptTokens: 1, outputTokens: 1 }],
        slots: 4,
        attentionT: 1.5,
        packetsPerExpert: 8,
      },
      p,
    );
    expect(log.map((x) => x.layer)).toEqual([0, 1, 2]);
    // Priorities are urgencies, layer distance + (1 − score / best score): (1,0) scores
    // 1 × 2/3, (2,0) 1 × 1/3 (proximity), so 1 + 0 and 2 + 0.5.
    expect(log[0]!.d.prefetch).toEqual([
      { key: 1 * E + 0, priority: 1 },
      { key: k20, priority: 2.5 },
    ]);
    expect(log[1]!.d.cancel).toEqual([k20]);
    expect(log[1]!.d.prefetch).toEqual([{ key: k21, priority: 1 }]);
    const t20 = run.transfers.find((t) => t.label === expertLabel(E, k20))!;
    expect(t20.outcome).toBe('cancelled');
    expect(t20.sentBytes).toBeGreaterThan(0);
    expect(t20.sentBytes).toBeLessThan(t20.bytes);
    // No packet of it starts after the cancellation (the one on the wire completes).
    const cancelNs = t20.endNs;
    const after = run.packets.filter((pk) => pk.transferId === t20.id && pk.startNs >= cancelNs);
    expect(after).toEqual([]);
    expect(run.packets.filter((pk) => pk.transferId === t20.id).reduce((a, pk) => a + pk.bytes, 0)).toBe(t20.sentBytes);
    expect(seenAfterCancel).toEqual([{ has20: false, has21: true, occupied: 4 }]);
    expect(run.outcome.counters.prefetchesCancelled).toBe(1);
    checkBytes(run.outcome);
  });

  it('a needed prefetch jumps the queue unless queueJump is off', () => {
    // A stub policy: at iteration start prefetch A = (1,0) at priority 5; after layer 0
    // prefetch B = (1,1) at priority 1. Layer 1 needs A while B is ahead of it.
    const E = 2;
    const A = 1 * E + 0;
    const B = 1 * E + 1;
    const doneOf = (queueJump: boolean): number => {
      const stub: ServingPolicy = {
        name: 'stub',
        queueJump,
        onIterationStart: () => ({ prefetch: [{ key: A, priority: 5 }] }),
        onLayerRouted: (_v, r) => (r.layer === 0 ? { prefetch: [{ key: B, priority: 1 }] } : undefined),
      };
      const run = runTiny(
        {
          L: 2,
          E,
          route: () => [0],
          requests: [{ promptTokens: 1, outputTokens: 1 }],
          slots: 4,
          attentionT: 0.5,
          packetsPerExpert: 16,
        },
        stub,
      );
      checkBytes(run.outcome);
      return run.transfers.find((t) => t.label === expertLabel(E, A))!.endNs;
    };
    const jump = doneOf(true);
    const noJump = doneOf(false);
    expect(jump).toBeLessThan(noJump);
    // And the moe-infinity policy forwards its switch.
    expect(
      moeInfinity.create(MoeInfinityParams.parse({ queueJump: false }), { model: tinyModel(2, 2, 1) } as never)
        .queueJump,
    ).toBe(false);
  });

  it('the EAMC warm-up waits for the run (init): a world only checked never pays for it', () => {
    const policy = moeInfinity.create(MoeInfinityParams.parse({ eamcWarmup: 3 }), {
      model: tinyModel(2, 2, 1),
      workload: { requests: [] },
    } as never) as MoeInfinityPolicy;
    expect(typeof policy.beforeRun).toBe('function');
    policy.init();
    expect(policy.beforeRun).toBeNull();
    const cold = moeInfinity.create(MoeInfinityParams.parse({ eamcWarmup: 0 }), {
      model: tinyModel(2, 2, 1),
    } as never) as MoeInfinityPolicy;
    expect(cold.beforeRun).toBeNull();
  });

  it('requestTracing off: a fixed-size dependency prefetch of the next layer only', () => {
    const L = 4;
    const E = 4;
    const p = createPolicy({ requestTracing: false, fixedPrefetchExperts: 2 }, L, E);
    const log = recordDecisions(p);
    const run = runTiny(
      { L, E, route: (_r, l, t) => [(l + t) % E], requests: [{ promptTokens: 2, outputTokens: 3 }], slots: 12 },
      p,
    );
    checkBytes(run.outcome);
    for (const { layer, d } of log) {
      const keys = (d.prefetch ?? []).map((x) => x.key);
      for (const k of keys) expect(Math.floor(k / E)).toBe(layer + 1);
      expect(keys).toEqual(layer + 1 < L ? [(layer + 1) * E, (layer + 1) * E + 1].filter((k) => keys.includes(k)) : []);
      for (const k of keys) expect(k % E).toBeLessThan(2);
    }
    expect(p.collections.decode.size + p.collections.prefill.size).toBe(0);
    expect(run.outcome.counters.prefetchesIssued).toBeGreaterThan(0);
  });

  it('multiLayerPrefetch, prefetchLayers and prefetchBudget bound the ranked layers and size', () => {
    const L = 5;
    const E = 4;
    const history = [path(E, [0, 1, 2, 3, 0]), path(E, [0, 2, 3, 0, 1])];
    const layersOf = (raw: Record<string, unknown>): { maxAhead: number; maxCount: number } => {
      const p = createPolicy(raw, L, E);
      p.preload('prefill', history);
      const log = recordDecisions(p);
      const run = runTiny(
        { L, E, route: (_r, l) => [[0, 1, 2, 3, 0][l]!], requests: [{ promptTokens: 1, outputTokens: 1 }], slots: 16 },
        p,
      );
      checkBytes(run.outcome);
      let maxAhead = 0;
      let maxCount = 0;
      for (const { layer, d } of log) {
        const keys = (d.prefetch ?? []).map((x) => x.key);
        maxCount = Math.max(maxCount, keys.length);
        for (const k of keys) maxAhead = Math.max(maxAhead, Math.floor(k / E) - layer);
      }
      return { maxAhead, maxCount };
    };
    expect(layersOf({}).maxAhead).toBe(4);
    expect(layersOf({ multiLayerPrefetch: false }).maxAhead).toBe(1);
    expect(layersOf({ prefetchLayers: 2 }).maxAhead).toBe(2);
    expect(layersOf({ prefetchBudget: 1 }).maxCount).toBe(1);
    expect(layersOf({}).maxCount).toBeGreaterThan(1);
  });

  it('per-request matching serves every request of a batch; per-batch matching blends them', () => {
    // Two prefill requests: one routes e0 everywhere, the other e1. EAMC: both patterns.
    const L = 3;
    const E = 4;
    const predicted = (batchMatching: string): number[] => {
      const p = createPolicy({ topMatches: 1, batchMatching }, L, E);
      p.preload('prefill', [path(E, [0, 0, 0]), path(E, [1, 1, 1])]);
      const log = recordDecisions(p);
      runTiny(
        {
          L,
          E,
          route: (r) => [r],
          requests: [
            { promptTokens: 1, outputTokens: 1 },
            { promptTokens: 1, outputTokens: 1 },
          ],
          slots: 16,
          maxBatchSize: 2,
        },
        p,
      );
      return (log[0]!.d.prefetch ?? []).map((x) => x.key).sort((a, b) => a - b);
    };
    expect(predicted('per-request')).toEqual([4, 5, 8, 9]);
    expect(predicted('per-batch')).toEqual([4, 8]); // the blend matches both equally: top-1 is entry 0
  });

  it('learns online: finished requests fill the EAMC of their phase', () => {
    const L = 3;
    const E = 4;
    const p = createPolicy({}, L, E);
    const run = runTiny(
      {
        L,
        E,
        route: (r, l, t) => [(r + l + (t % 2)) % E],
        requests: [1, 2, 3].map(() => ({ promptTokens: 3, outputTokens: 4 })),
        slots: 6,
      },
      p,
    );
    checkBytes(run.outcome);
    expect(p.collections.prefill.size).toBe(3);
    expect(p.collections.decode.size).toBe(3);
    expect(p.stats.layerMatches).toBeGreaterThan(0);
    expect(p.requestEams.size).toBe(0);
  });

  it('every ablation switch changes behaviour on a clustered workload', () => {
    const L = 4;
    const E = 6;
    // Three clusters of requests, two distinct experts per token (1 + c + t%2 ∈ [1, 4], never 0 mod 6).
    const route = (r: number, l: number, t: number): number[] => {
      const c = r % 3;
      const a = (c * 2 + l + (t % 3 === 0 ? 1 : 0)) % E;
      return [a, (a + 1 + c + (t % 2)) % E];
    };
    const requests = Array.from({ length: 12 }, (_, i) => ({ promptTokens: 2 + (i % 3), outputTokens: 4 + (i % 4) }));
    const summary = (raw: Record<string, unknown>): string => {
      const p = createPolicy(raw, L, E, 2);
      const run = runTiny(
        {
          L,
          E,
          k: 2,
          route,
          requests,
          slots: 18,
          attentionT: 1.5,
          expertT: 0.05,
          batching: 'continuous',
          maxBatchSize: 3,
        },
        p,
      );
      checkBytes(run.outcome);
      const c = run.outcome.counters;
      return JSON.stringify([
        run.outcome.endNs,
        c.prefetchesIssued,
        c.prefetchesCancelled,
        c.cacheHits,
        c.prefetchHits,
        c.evictions,
      ]);
    };
    // Each switch against the defaults; queue order and queue jumping against always-admit
    // prefetching (with priority admission this small world prefetches too little for them).
    const always = { prefetchAdmission: 'always' };
    const cases: [Record<string, unknown>, Record<string, unknown>][] = [
      [{}, { requestTracing: false }],
      [{}, { eamcCapacity: 1 }],
      [{}, { eamcReplacement: 'lfu-access', eamcCapacity: 2 }],
      [{}, { topMatches: 1 }],
      [{}, { multiLayerPrefetch: false }],
      [{}, { prefetchLayers: 1 }],
      [{}, { layerProximity: false }],
      [always, { ...always, queueOrder: 'score' }],
      [always, { ...always, queueJump: false }],
      [{}, { cachePriorities: false }],
      [{}, { initialLayerBoost: 0 }],
      [{}, { prefetchBudget: 2 }],
      [{}, { batchMatching: 'per-request' }],
      [{}, always],
      [{ requestTracing: false }, { requestTracing: false, fixedPrefetchExperts: 2 }],
    ];
    const same = cases.filter(([a, b]) => summary(a) === summary(b)).map(([, b]) => JSON.stringify(b));
    expect(same).toEqual([]);
  });
});
