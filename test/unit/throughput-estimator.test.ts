/**
 * The throughput family's critical-path estimator and pass DAG, checked by hand (DESIGN §8):
 * - `uncontendedNs` / `earliestFinishes` / `staticCriticalPath` on small hand-made DAGs;
 * - the pass DAG of a two-layer toy model, every task's finish worked out by hand, and its
 *   simulation (no contention in this machine) finishing at exactly the same time;
 * - extrapolation against the exact critical path, and the even routing counts.
 *
 * The toy machine: PCIe 1 GB/s both ways (1 MB takes 1 ms), no latency, host DRAM so wide that
 * nothing contends; GPU kernel durations come from a stub cost model (fixed per kind).
 */
import { describe, expect, it } from 'vitest';
import type { HardwareProfile, ModelProfile } from '../../hardware-profiles/types.ts';
import { loadHardware, loadModel, loadRuntime } from '../../hardware-profiles/load.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import type { Cost, CostModel, Operation } from '../../sim/cost/types.ts';
import { ns, type Ns } from '../../sim/kernel/time.ts';
import { staticCriticalPath, type TaskSpec } from '../../sim/taskgraph/index.ts';
import { earliestFinishes, estimatePassNs, layerPeriod, uncontendedNs } from '../../sim/throughput/estimator.ts';
import { DagEmitter, EarliestFinishes } from '../../sim/throughput/dag-emitter.ts';
import { buildPassDag, type CountsFn, expectedCounts, type PassDag } from '../../sim/throughput/pass-dag.ts';
import { simulatePass } from '../../sim/throughput/pass-sim.ts';
import { refDecodeShape } from '../../sim/throughput/search.ts';
import { defaultPassConfig, type PassConfig, type PassShape } from '../../sim/throughput/types.ts';

const MB = 1_000_000;
const ms = (x: number): Ns => ns(Math.round(x * 1e6));

/** A machine with round numbers: 1 GB/s links, no latency, 4 cores of 1 GFLOP/s, 1 GB/s per core. */
function toyHardware(): HardwareProfile {
  const real = loadHardware('moe-gen-c1');
  return {
    ...real,
    id: 'toy',
    gpu: { ...real.gpu, vramBytes: 1_000 * MB },
    cpu: {
      ...real.cpu,
      cores: 4,
      vectorFlopsPerSecPerCore: 1e9,
      vectorEfficiency: 1,
      dramBytesPerSec: 1e15,
      perCoreDramBytesPerSec: 1e9,
    },
    pcie: { ...real.pcie, h2dBytesPerSec: 1e9, d2hBytesPerSec: 1e9, latencyNs: 0, pageableFactor: 1 },
    hostDramBytes: 100_000 * MB,
    pinnedHostMemory: true,
  };
}

/** Two MoE layers of two experts, top-1; 1 MB per expert and per dense module; 1000 B of KV per token per layer. */
function toyModel(): ModelProfile {
  const real = loadModel('mixtral-8x7b');
  return {
    ...real,
    id: 'toy-moe',
    name: 'toy',
    layers: 2,
    moeLayers: 2,
    moeLayerIndices: [0, 1],
    experts: 2,
    topK: 1,
    hiddenSize: 64,
    expertIntermediateSize: 64,
    vocabSize: 100,
    sharedExperts: 0,
    sharedIntermediateSize: 0,
    denseIntermediateSize: 0,
    derived: {
      ...real.derived,
      bytesPerExpert: 1 * MB,
      attentionBytesPerLayer: 1 * MB,
      sharedExpertBytesPerLayer: 0,
      denseFfnBytesPerLayer: 0,
      embeddingBytes: 1000,
      lmHeadBytes: 1000,
      kvBytesPerTokenPerLayer: 1000,
      kvBytesPerToken: 2000,
      totalBytes: 6 * MB + 2000,
      nonExpertBytes: 2 * MB + 2000,
      allExpertBytes: 4 * MB,
    },
  };
}

/** Fixed kernel times: attention 1 ms, router 0.1 ms, expert 0.5 ms, LM head 0.2 ms, projections 0.3 ms. */
const stubCost: CostModel = {
  estimate(op: Operation): Cost {
    const t = {
      attention: 1,
      router: 0.1,
      expert: 0.5,
      lmHead: 0.2,
      attentionProj: 0.3,
      sharedExperts: 0.4,
      denseFfn: 0.4,
    } as Record<string, number>;
    if (op.kind === 'cpuAttention')
      return { ns: ms(2), bound: 'cpuFlops', source: 'roofline', flops: 0, bytes: 0, computeNs: ms(2) };
    if (op.kind === 'transfer') throw new Error('transfers are priced by the links');
    return { ns: ms(t[op.kind]!), bound: 'flops', source: 'roofline', flops: 0, bytes: 0 };
  },
};

const decode2: PassShape = { phase: 'decode', seqs: 2, newTokens: 1, pastTokens: 500, hostSeqs: 2, reserveTokens: 600 };
const moeGenLike = (o: Partial<PassConfig> = {}): PassConfig => ({
  ...defaultPassConfig(2),
  attnMicroSeqs: 2,
  kvBuffers: 1,
  expertSlots: 1,
  weightSlots: 1,
  ...o,
});

function finishOf(dag: PassDag, hw: HardwareProfile): Map<string, number> {
  const f = earliestFinishes(dag, hw);
  const out = new Map<string, number>();
  dag.tasks.forEach((t, i) => out.set(t.label ?? String(t.id), f[i]! / 1e6));
  return out;
}

describe('critical-path estimator: hand-made DAGs', () => {
  const hw = toyHardware();

  it('prices each kind of task alone on an idle machine', () => {
    expect(uncontendedNs({ id: 0, kind: 'gpu', category: 'x', durationNs: ms(3) }, hw)).toBe(3e6);
    expect(uncontendedNs({ id: 0, kind: 'h2d', category: 'x', bytes: 2 * MB }, hw)).toBe(2e6);
    expect(
      uncontendedNs(
        { id: 0, kind: 'h2d', category: 'x', bytes: 2 * MB },
        { ...hw, pcie: { ...hw.pcie, latencyNs: 7000 } },
      ),
    ).toBe(2e6 + 7000);
    // CPU: max(compute, bytes / min(DRAM, cores × per-core)); 2 cores draw 2 GB/s → 4 MB take 2 ms.
    expect(uncontendedNs({ id: 0, kind: 'cpu', category: 'x', cores: 2, computeNs: ms(1), bytes: 4 * MB }, hw)).toBe(
      2e6,
    );
    expect(uncontendedNs({ id: 0, kind: 'cpu', category: 'x', cores: 2, computeNs: ms(5), bytes: 4 * MB }, hw)).toBe(
      5e6,
    );
    expect(uncontendedNs({ id: 0, kind: 'barrier', category: 'x' }, hw)).toBe(0);
  });

  it('longest path of a diamond with a CPU branch, by dynamic programming', () => {
    // 0: H2D 2 ms → 1: GPU 3 ms → 3: join; 0 → 2: CPU (4 cores, 1 ms compute, 8 MB at 4 GB/s = 2 ms) → 3; 3 → 4: GPU 1 ms.
    const tasks: TaskSpec[] = [
      { id: 0, kind: 'h2d', category: 'w', bytes: 2 * MB },
      { id: 1, kind: 'gpu', category: 'a', durationNs: ms(3), deps: [0] },
      { id: 2, kind: 'cpu', category: 'c', cores: 4, computeNs: ms(1), bytes: 8 * MB, deps: [0] },
      { id: 3, kind: 'barrier', category: 's', deps: [1, 2] },
      { id: 4, kind: 'gpu', category: 'b', durationNs: ms(1), deps: [3] },
    ];
    const dag = { tasks, finalId: 4 } as unknown as PassDag;
    expect([...earliestFinishes(dag, hw)].map((x) => x / 1e6)).toEqual([2, 5, 4, 5, 6]);
    const cp = staticCriticalPath(tasks, (t) => uncontendedNs(t, hw));
    expect(cp.lengthNs).toBe(6e6);
    expect(cp.path).toEqual([0, 1, 3, 4]);
  });

  it('the generic and the creation-order DP agree on a real pass DAG', () => {
    const model = loadModel('mixtral-8x7b');
    const real = loadHardware('moe-gen-c2');
    const cost = createCostModel(model, real);
    const shape = {
      ...refDecodeShape(
        { sequences: 1000, promptTokens: 128, outputTokens: 32, phases: { prefill: false, decode: true } },
        300,
        300,
      ),
    };
    const config = {
      ...defaultPassConfig(model.layers),
      omega: 0.3,
      attnMicroSeqs: 64,
      cpuCores: 8,
      kvBuffers: 3,
      expertSlots: 3,
    };
    const dag = buildPassDag({ model, hardware: real, cost, shape, config, counts: expectedCounts(model.topK) });
    const f = earliestFinishes(dag, real);
    expect(staticCriticalPath(dag.tasks, (t) => uncontendedNs(t, real)).lengthNs).toBe(f[dag.finalId]);
    expect(estimatePassNs({ model, hardware: real, cost, shape, config, counts: expectedCounts(model.topK) })).toBe(
      f[dag.finalId],
    );
  });

  it("the final join's earliest finish is the critical path's length (what a simulated pass reports)", () => {
    const model = loadModel('deepseek-v2-lite');
    const real = loadHardware('moe-gen-c2');
    const cost = createCostModel(model, real);
    const decode = {
      phase: 'decode',
      seqs: 40,
      newTokens: 1,
      pastTokens: 300,
      hostSeqs: 40,
      reserveTokens: 400,
    } as const;
    const prefill = {
      phase: 'prefill',
      seqs: 4,
      newTokens: 256,
      pastTokens: 0,
      hostSeqs: 4,
      reserveTokens: 400,
    } as const;
    const base = { ...defaultPassConfig(model.layers), attnMicroSeqs: 8, cpuCores: 8, kvBuffers: 2, expertSlots: 5 };
    const variants: [PassShape, PassConfig][] = [
      [decode, { ...base, omega: 0.4 }],
      [decode, { ...base, omega: 1, expertBatching: 'perMicroBatch', weightGranularity: 'layer', weightSlots: 2 }],
      [decode, { ...base, gpuLayers: 10, kvGpuLayers: 3 }],
      [prefill, { ...base, expertChunkTokens: 64 }],
    ];
    // Uneven, made-up routing (not the estimator's even counts); the last expert gets no token.
    const counts = (layer: number, tokens: number, out: Float64Array) => {
      const n = Math.round(tokens * model.topK);
      for (let i = 0; i < n; i++) out[(i * 7 + layer) % (out.length - 1)]! += 1 + (i % 3);
    };
    for (const [i, [shape, config]] of variants.entries()) {
      const dag = buildPassDag({ model, hardware: real, cost, shape, config, counts });
      const cp = staticCriticalPath(dag.tasks, (t) => uncontendedNs(t, real)).lengthNs;
      expect(earliestFinishes(dag, real)[dag.finalId]).toBe(cp);
      if (i > 0) continue; // one simulated pass: its report is that number
      const sim = simulatePass({
        model,
        hardware: real,
        cost,
        shape,
        config,
        counts,
        packetBytes: 1 << 20,
        hostKvBytes: 0,
      });
      expect(sim.criticalPathNs).toBe(cp);
    }
  });
});

describe('pass DAG of a two-layer toy model, timed by hand', () => {
  const hw = toyHardware();
  const model = toyModel();
  const inp = {
    model,
    hardware: hw,
    cost: stubCost,
    shape: decode2,
    config: moeGenLike(),
    counts: expectedCounts(1),
    labels: true,
  };

  it('module-based decode: one dense buffer, one KV buffer, one expert slot', () => {
    // H2D chain per layer: dense weights (1 MB), KV of the micro-batch (2 seqs × 500 tokens ×
    // 1000 B = 1 MB), expert 0, expert 1. GPU: attention, router, expert 0, expert 1. One token
    // per expert (2 tokens × top-1 over 2 experts).
    // Layer 0: D0 [0,1]; KV0 [1,2]; X0.0 [2,3]; attention [2,3]; its KV out D2H (2 kB) [3,3.002];
    //   router [3,3.1] (frees the dense buffer); e0 [3.1,3.6] (frees the slot); X0.1 [3.6,4.6]; e1 [4.6,5.1].
    // Layer 1: D1 after X0.1 [4.6,5.6]; KV1 (its buffer freed at 3) [5.6,6.6]; X1.0 waits for e1 (5.1)
    //   and the chain (6.6) [6.6,7.6]; attention after e1, D1, KV1 [6.6,7.6]; router [7.6,7.7];
    //   e0 [7.7,8.2]; X1.1 after e0 [8.2,9.2]; e1 [9.2,9.7]. LM head [9.7,9.9].
    const dag = buildPassDag(inp);
    const f = finishOf(dag, hw);
    const want: Record<string, number> = {
      'L0 dense weights': 1,
      'L0 m0 KV H2D': 2,
      'L0 e0 weights': 3,
      'L0 m0 attention': 3,
      'L0 m0 KV D2H': 3.002,
      'L0 router': 3.1,
      'L0 e0 (1 chunk)': 3.6,
      'L0 e1 weights': 4.6,
      'L0 e1 (1 chunk)': 5.1,
      'L1 dense weights': 5.6,
      'L1 m0 KV H2D': 6.6,
      'L1 e0 weights': 7.6,
      'L1 m0 attention': 7.6,
      'L1 router': 7.7,
      'L1 e0 (1 chunk)': 8.2,
      'L1 e1 weights': 9.2,
      'L1 e1 (1 chunk)': 9.7,
      'LM head': 9.9,
      'pass end': 9.9,
    };
    for (const [label, t] of Object.entries(want)) expect(f.get(label), label).toBeCloseTo(t, 9);
    expect(dag.tasks.length).toBe(Object.keys(want).length + 1); // + layer 1's KV D2H
    // The simulation of the same DAG on an idle machine (nothing contends) ends at the same instant.
    const sim = simulatePass({ ...inp, packetBytes: 64 * MB, hostKvBytes: 0 });
    expect(sim.durationNs).toBe(9.9e6);
    expect(sim.criticalPathNs).toBe(9.9e6);
    expect(sim.h2dBytes).toBe(8 * MB);
    expect(sim.d2hBytes).toBe(4000);
  });

  it('two expert slots: the second expert streams while the first computes', () => {
    // Layer 0: X0.1 no longer waits for e0: [3,4]; e1 [4,4.5]. Layer 1: D1 [4,5], KV1 [5,6],
    // X1.0 (waits for e0 of layer 0, 3.6) [6,7], X1.1 (waits for e1, 4.5) [7,8];
    // attention [6,7], router [7,7.1], e0 [7.1,7.6], e1 [8,8.5]; LM head [8.5,8.7].
    const dag = buildPassDag({ ...inp, config: moeGenLike({ expertSlots: 2 }) });
    const f = finishOf(dag, hw);
    expect(f.get('L0 e1 (1 chunk)')).toBeCloseTo(4.5, 9);
    expect(f.get('L1 e1 weights')).toBeCloseTo(8, 9);
    expect(f.get('pass end')).toBeCloseTo(8.7, 9);
  });

  it('cached parameters skip their transfers (S_params)', () => {
    // S_params = 2 MB caches both dense modules (denseFirst): per layer only KV and experts cross PCIe.
    // L0: KV [0,1], X0.0 [1,2], attention [1,2], router [2,2.1], e0 [2.1,2.6], X0.1 [2.6,3.6], e1 [3.6,4.1].
    // L1: KV [3.6,4.6], X1.0 waits for e1 (4.1), chain 4.6 → [4.6,5.6]; attention [4.6,5.6];
    //   router [5.6,5.7]; e0 [5.7,6.2]; X1.1 [6.2,7.2]; e1 [7.2,7.7]; LM head [7.7,7.9].
    const dag = buildPassDag({ ...inp, config: moeGenLike({ cachedParamBytes: 2 * MB }) });
    expect(dag.cached.denseCached).toEqual([true, true]);
    expect(finishOf(dag, hw).get('pass end')).toBeCloseTo(7.9, 9);
  });

  it('CPU attention (ω = 1): projections on the GPU, attention on the CPU, no KV over PCIe', () => {
    // L0: D0 [0,1]; projections [1,1.3]; Q D2H (2 × 64 × 2 B = 256 B) [1.3,1.300256]; CPU attention 2 ms
    //   → 3.300256; output H2D 256 B → 3.300512; router → 3.400512; X0.0 [1,2]; e0 → 3.900512;
    //   X0.1 [3.900512, 4.900512]; e1 → 5.400512.
    const dag = buildPassDag({ ...inp, config: moeGenLike({ omega: 1, cpuCores: 4 }) });
    const f = finishOf(dag, hw);
    expect(f.get('L0 m0 CPU attention')).toBeCloseTo(3.300256, 9);
    expect(f.get('L0 e1 (1 chunk)')).toBeCloseTo(5.400512, 9);
    expect(dag.tasks.some((t) => t.category === 'kv')).toBe(false);
  });

  it('layer granularity (model-based batching): one transfer per layer into two layer buffers', () => {
    // L0 weights (1 + 2 MB) [0,3]; L1 weights [3,6]; KV in/out as before; experts run per micro-batch.
    const c = moeGenLike({ weightGranularity: 'layer', weightSlots: 2, expertBatching: 'perMicroBatch' });
    const dag = buildPassDag({ ...inp, config: c });
    const f = finishOf(dag, hw);
    expect(f.get('L0 layer weights')).toBeCloseTo(3, 9);
    expect(f.get('L1 layer weights')).toBeCloseTo(7, 9); // after L0's KV H2D [3,4] in the chain order
    expect(dag.tasks.filter((t) => t.kind === 'h2d' && t.category === 'weights')).toHaveLength(2);
  });
});

describe('estimator: extrapolation and routing counts', () => {
  it('even counts: integers summing to tokens·k, at most one apart', () => {
    const out = new Float64Array(8);
    expectedCounts(2)(3, 13, out);
    expect([...out].reduce((a, b) => a + b)).toBe(26);
    expect(Math.max(...out) - Math.min(...out)).toBeLessThanOrEqual(1);
    expectedCounts(6)(0, 1, (out.fill(0), out));
    expect([...out].filter((x) => x > 0)).toHaveLength(6);
  });

  it('even counts: the extra ones start at expert (layer · r) mod E and wrap around', () => {
    const out = new Float64Array(8);
    // 13 tokens × top-2 = 26 = 3·8 + 2: experts 6 and 7 (3·2 mod 8 = 6) get 4.
    expectedCounts(2)(3, 13, out);
    expect([...out]).toEqual([3, 3, 3, 3, 3, 3, 4, 4]);
    // Layer 5: 10 mod 8 = 2, experts 2 and 3.
    expectedCounts(2)(5, 13, out);
    expect([...out]).toEqual([3, 3, 4, 4, 3, 3, 3, 3]);
    // 27 tokens × top-1 = 3·8 + 3, layer 2: 6 mod 8 = 6, experts 6, 7 and 0 (wrapping).
    expectedCounts(1)(2, 27, out);
    expect([...out]).toEqual([4, 3, 3, 3, 3, 3, 4, 4]);
    // r = 0: every expert gets q; layer 0 with r = 5: experts 0 … 4.
    expectedCounts(1)(7, 16, out);
    expect([...out]).toEqual([2, 2, 2, 2, 2, 2, 2, 2]);
    expectedCounts(1)(0, 5, out);
    expect([...out]).toEqual([1, 1, 1, 1, 1, 0, 0, 0]);
    // Three experts: 4 = 1·3 + 1, layer 1: expert 1 (1·1 mod 3).
    const three = new Float64Array(3);
    expectedCounts(1)(1, 4, three);
    expect([...three]).toEqual([1, 2, 1]);
  });

  it('the period of a configuration is the realignment of its buffer rings', () => {
    const model = loadModel('mixtral-8x7b');
    const shape: PassShape = {
      phase: 'decode',
      seqs: 400,
      newTokens: 1,
      pastTokens: 100,
      hostSeqs: 400,
      reserveTokens: 200,
    };
    const base = { ...defaultPassConfig(model.layers), attnMicroSeqs: 400, kvBuffers: 1 };
    expect(layerPeriod({ model, shape, config: { ...base, expertSlots: 8 } })).toBe(2); // the out-KV ring: 1 fill/layer of 2
    expect(layerPeriod({ model, shape, config: { ...base, expertSlots: 12 } })).toBe(6); // 12/gcd(8,12) = 3, lcm with 2
  });

  it('extrapolated critical paths match the exact ones on the shipped models', () => {
    for (const [id, hwId] of [
      ['mixtral-8x7b', 'moe-gen-c2'],
      ['deepseek-v2-lite', 'moe-gen-c1'],
    ] as const) {
      const model = loadModel(id);
      const hw = loadHardware(hwId);
      const cost = createCostModel(model, hw);
      const shape: PassShape = {
        phase: 'decode',
        seqs: 500,
        newTokens: 1,
        pastTokens: 300,
        hostSeqs: 500,
        reserveTokens: 400,
      };
      for (const config of [
        {
          ...defaultPassConfig(model.layers),
          omega: 0.5,
          attnMicroSeqs: 64,
          cpuCores: 8,
          kvBuffers: 2,
          expertSlots: 4,
        },
        { ...defaultPassConfig(model.layers), attnMicroSeqs: 128, kvBuffers: 3, expertSlots: 3, cachedParamBytes: 4e9 },
      ]) {
        const inp = { model, hardware: hw, cost, shape, config, counts: expectedCounts(model.topK) };
        const exact = estimatePassNs(inp);
        const approx = estimatePassNs(inp, { mode: 'extrapolate' });
        expect(Math.abs(approx - exact) / exact, `${id} ${JSON.stringify(config)}`).toBeLessThan(1e-3);
      }
    }
  });
});

describe('pass DAG: activated experts per GEMM and per pass', () => {
  it('micro-batches that compute the same experts count them once per pass (MoE-CAP 1[l, i]), once each per GEMM', () => {
    const model = loadModel('mixtral-8x7b');
    const hw = loadHardware('moe-gen-c2');
    const cost = createCostModel(model, hw);
    // Every token on the first topK (2) experts of every MoE layer.
    const skewed: CountsFn = (_mi, tokens, out) => {
      for (let x = 0; x < out.length; x++) out[x] = x < model.topK ? tokens : 0;
    };
    const shape = {
      phase: 'decode',
      seqs: 48,
      newTokens: 1,
      pastTokens: 100,
      hostSeqs: 48,
      reserveTokens: 200,
    } as const;
    const base = defaultPassConfig(model.layers);
    // 48 sequences in micro-batches of 16: 3 micro-batches per layer, each runs the layer's experts.
    const micro: PassConfig = {
      ...base,
      weightGranularity: 'layer',
      weightSlots: 2,
      expertBatching: 'perMicroBatch',
      attnMicroSeqs: 16,
      omega: 1,
    };
    const m = buildPassDag({ model, hardware: hw, cost, shape, config: micro, counts: skewed });
    // 32 MoE layers × 8 experts × 3 micro-batches visited; 2 with tokens in each micro-batch.
    expect(m.expertLayerPairs).toBe(32 * 8 * 3);
    expect(m.activatedPairs).toBe(32 * 2 * 3);
    expect(m.passActivatedPairs).toBe(32 * 2);
    // One expert pass per layer: both counts agree.
    const one = buildPassDag({ model, hardware: hw, cost, shape, config: base, counts: skewed });
    expect([one.activatedPairs, one.passActivatedPairs]).toEqual([32 * 2, 32 * 2]);
  });
});

describe('estimator: streamed pricing', () => {
  it('prices every task as earliestFinishes prices the built DAG (streaming mode vs materialised)', () => {
    let compared = 0;
    // Unused streamed experts (a barrier releasing an expert slot): only skewed routing has them.
    let unusedExpertBarriers = 0;
    for (const [id, hwId] of [
      ['mixtral-8x7b', 'moe-gen-c2'],
      ['deepseek-v2-lite', 'moe-gen-c1'],
    ] as const) {
      const model = loadModel(id);
      const real = loadHardware(hwId);
      const cost = createCostModel(model, real);
      const L = model.layers;
      const base = defaultPassConfig(L);
      const configs: PassConfig[] = [
        { ...base, omega: 0.3, attnMicroSeqs: 48, cpuCores: 8, kvBuffers: 2, expertSlots: 3 },
        { ...base, attnMicroSeqs: 100, kvBuffers: 3, expertSlots: 5, cachedParamBytes: 3e9, streamAllExperts: false },
        { ...base, omega: 1, attnMicroSeqs: 64, cpuCores: 4, expertSlots: 2, kvGpuLayers: 3 },
        { ...base, gpuLayers: Math.floor(L / 2), cpuCores: 6, attnMicroSeqs: 64 },
        {
          ...base,
          weightGranularity: 'layer',
          weightSlots: 2,
          expertBatching: 'perMicroBatch',
          attnMicroSeqs: 60,
          prefetch: false,
        },
        { ...base, weightGranularity: 'layer', weightSlots: 2, expertBatching: 'perMicroBatch', omega: 1 },
      ];
      for (const pinned of [true, false]) {
        const hw: HardwareProfile = { ...real, pinnedHostMemory: pinned };
        for (const config of configs) {
          for (const shape of [
            { phase: 'decode', seqs: 150, newTokens: 1, pastTokens: 250, hostSeqs: 300, reserveTokens: 400 },
            { phase: 'prefill', seqs: 7, newTokens: 128, pastTokens: 0, hostSeqs: 300, reserveTokens: 400 },
          ] as const) {
            // Expected routing, and every token on the first topK experts (the others unused).
            const skewed: CountsFn = (_mi, tokens, out) => {
              for (let x = 0; x < out.length; x++) out[x] = x < model.topK ? tokens : 0;
            };
            for (const counts of [expectedCounts(model.topK), skewed]) {
              const inp = { model, hardware: hw, cost, shape, config, counts };
              const built = buildPassDag(inp);
              const want = earliestFinishes(built, hw);
              const finishes = new EarliestFinishes(hw);
              const streamed = buildPassDag({ ...inp, finishes });
              expect(streamed.tasks).toHaveLength(0);
              expect(streamed.finalId).toBe(built.finalId);
              expect(streamed.layerEnds).toEqual(built.layerEnds);
              expect([
                streamed.routedTokenSlots,
                streamed.expertLayerPairs,
                streamed.activatedPairs,
                streamed.passActivatedPairs,
              ]).toEqual([
                built.routedTokenSlots,
                built.expertLayerPairs,
                built.activatedPairs,
                built.passActivatedPairs,
              ]);
              const got = finishes.finish.subarray(0, built.tasks.length);
              // Every task, the final join included (its unchained tails, listed only when built: none in a full pass).
              expect(got).toEqual(want);
              for (const t of built.tasks)
                if (t.kind === 'barrier' && t.release?.[0]?.startsWith('x')) unusedExpertBarriers++;
              compared++;
            }
          }
        }
      }
    }
    expect(compared).toBe(2 * 2 * 6 * 2 * 2);
    expect(unusedExpertBarriers).toBeGreaterThan(0);
  });
});

describe("the pass's final join", () => {
  it('the emitter lists the tasks nobody depends on, in id order, as it makes them', () => {
    const e = new DagEmitter(false, undefined, 1);
    expect(e.withoutDependents()).toEqual([]);
    const a = e.gpu('attention', ns(1), []);
    expect(e.withoutDependents()).toEqual([a]);
    const copy = e.h2d('activations', 10, [a], false); // unchained: nobody reads it
    const b = e.gpu('router', ns(1), []); // after a on the GPU chain
    expect([a, copy, b]).toEqual([0, 1, 2]);
    expect(e.withoutDependents()).toEqual([copy, b]);
    // More tasks than the first marks array holds (1 024): ids past it are marked too.
    let last = b;
    while (e.tasks.length < 1025) last = e.gpu('expert', ns(1), []);
    expect(last).toBe(1024); // the first id past the first array
    expect(e.withoutDependents()).toEqual([copy, 1024]);
    while (e.tasks.length < 1503) last = e.gpu('expert', ns(1), []);
    expect(e.withoutDependents()).toEqual([copy, 1502]);
  });

  it('depends on every task nobody else depends on (the LM head among them) and on the copy and CPU chain tails', () => {
    const model = loadModel('deepseek-v2-lite');
    const hw = loadHardware('moe-gen-c1');
    const cost = createCostModel(model, hw);
    const base = defaultPassConfig(model.layers);
    const shape = {
      phase: 'decode',
      seqs: 150,
      newTokens: 1,
      pastTokens: 250,
      hostSeqs: 300,
      reserveTokens: 400,
    } as const;
    let joins = 0;
    for (const config of [
      { ...base, omega: 0.3, attnMicroSeqs: 48, cpuCores: 8, kvBuffers: 2, expertSlots: 3 },
      { ...base, gpuLayers: Math.floor(model.layers / 2), cpuCores: 6, attnMicroSeqs: 64 },
    ]) {
      for (const layerLimit of [undefined, 3]) {
        const dag = buildPassDag({
          model,
          hardware: hw,
          cost,
          shape,
          config,
          counts: expectedCounts(model.topK),
          ...(layerLimit === undefined ? {} : { layerLimit }),
        });
        const join = dag.tasks[dag.finalId]!;
        expect(dag.finalId).toBe(dag.tasks.length - 1);
        // The model: every task before the join that no other task before it lists as a dep.
        const before = dag.tasks.slice(0, -1);
        const depended = new Set<number>();
        for (const t of before) for (const d of t.deps ?? []) depended.add(d as number);
        const alone = before.filter((t) => !depended.has(t.id as number)).map((t) => t.id as number);
        const deps = new Set(join.deps as number[]);
        // Every such task is joined; the only others are the tails of the copy and CPU chains
        // (the LM head, the GPU chain's tail, has no dependent), which may feed later tasks.
        for (const id of alone) expect(deps.has(id), `task ${id}`).toBe(true);
        const tails = [...deps].filter((id) => !alone.includes(id));
        expect(tails.length).toBeLessThanOrEqual(3);
        for (const id of tails) expect(['h2d', 'd2h', 'cpu']).toContain(dag.tasks[id]!.kind);
        expect(alone.length).toBeLessThan(dag.tasks.length / 10);
        // The LM head (the GPU chain's last task) is one of them.
        expect(alone).toContain(dag.tasks.filter((t) => t.kind === 'gpu').at(-1)!.id);
        joins++;
      }
    }
    expect(joins).toBe(4);
  });
});

describe('CPU attention of latent-KV (MLA) models', () => {
  it('adds the latent up-projection of its tokens to the CPU task, and reads kv_b', async () => {
    const { mlaUpProjection } = await import('../../sim/throughput/pass-dag.ts');
    const model = loadModel('deepseek-v2-lite');
    const hw = loadHardware('moe-gen-c1');
    const cost = createCostModel(model, hw);
    const up = mlaUpProjection(model);
    // 16 heads × (2·128·512 + 2·512·128) FLOPs per token; kv_b = 512 × 16 × (128 + 128) BF16 parameters.
    expect(up).toEqual({ flopsPerToken: 16 * (2 * 128 * 512 + 2 * 512 * 128), bytes: 512 * 16 * 256 * 2 });
    expect(mlaUpProjection(loadModel('mixtral-8x7b'))).toEqual({ flopsPerToken: 0, bytes: 0 });
    const shape: PassShape = {
      phase: 'decode',
      seqs: 10,
      newTokens: 1,
      pastTokens: 99,
      hostSeqs: 10,
      reserveTokens: 120,
    };
    const config = { ...defaultPassConfig(model.layers), omega: 1, cpuCores: 4 };
    const dag = buildPassDag({ model, hardware: hw, cost, shape, config, counts: expectedCounts(model.topK) });
    const task = dag.tasks.find((t) => t.category === 'cpuAttention')!;
    const scores = cost.estimate({ kind: 'cpuAttention', tokens: 10, contextTokens: 10 * 100, cores: 4 });
    // The up-projection runs at the FLOP rate of the runtime's CPU kernel, as the scores do
    // (default runtime: the CPU profile's efficiency on the task's 4 cores).
    const rate = 4 * hw.cpu.vectorFlopsPerSecPerCore * hw.cpu.vectorEfficiency;
    expect(scores.flops / scores.computeNs! / (rate / 1e9)).toBeCloseTo(1, 4); // computeNs is rounded up
    const upNs = Math.ceil(((10 * up.flopsPerToken) / scores.flops) * scores.computeNs!);
    expect(Math.abs(upNs - (10 * up.flopsPerToken * 1e9) / rate)).toBeLessThan(2);
    expect(task).toMatchObject({
      kind: 'cpu',
      cores: 4,
      bytes: scores.bytes + up.bytes,
      computeNs: scores.computeNs! + upNs,
    });
  });

  it('prices the up-projection with the runtime’s kernel: MoE-Gen’s (0.10 of peak, 16 threads) is slower per thread', async () => {
    const model = loadModel('deepseek-v2-lite');
    const hw = loadHardware('moe-gen-c1');
    const shape: PassShape = {
      phase: 'decode',
      seqs: 10,
      newTokens: 1,
      pastTokens: 99,
      hostSeqs: 10,
      reserveTokens: 120,
    };
    const config = { ...defaultPassConfig(model.layers), omega: 1, cpuCores: 16 };
    const task = (cost: ReturnType<typeof createCostModel>) =>
      buildPassDag({ model, hardware: hw, cost, shape, config, counts: expectedCounts(model.topK) }).tasks.find(
        (t) => t.category === 'cpuAttention',
      )!;
    const fused = task(createCostModel(model, hw));
    const moeGen = task(createCostModel(model, hw, { runtime: loadRuntime('moe-gen') }));
    // Same 16 threads; efficiency 0.10 instead of the profile's 0.5: 5× the compute time (± ceil rounding).
    expect((moeGen as { computeNs: number }).computeNs / (fused as { computeNs: number }).computeNs).toBeCloseTo(5, 3);
  });
});
