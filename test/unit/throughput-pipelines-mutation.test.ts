/**
 * The throughput family's closed-form pipelines, event VSLPipe and plan shapes on hand-computed
 * tiny cases: each case pins an accounting or timing rule a whole-set mutation sample found
 * unguarded (the stage sum without contention, a DMA of zero length, the prefill group CGOPipe
 * builds, the serial pipe's KV swap-in bytes, the cost memo's key per operation kind, the event
 * pipe's CPU busy time and D2H legs, the decode reference shape, arrivals of an offline batch).
 * The layer costs are stubs with round numbers, so every expected figure is arithmetic on them.
 */
import { describe, expect, it } from 'vitest';
import { loadHardware, loadModel, loadRuntime } from '../../hardware-profiles/load.ts';
import { builtinPolicy } from '../../policies/registry.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import { Rng } from '../../sim/kernel/rng.ts';
import type { ModelProfile } from '../../hardware-profiles/types.ts';
import type { CostModel, Operation } from '../../sim/cost/types.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import { defaultPassConfig } from '../../sim/throughput/types.ts';
import type { Iteration } from '../../sim/throughput/iteration.ts';
import { CgoPipe, cgoStage } from '../../sim/throughput/pipelines/cgopipe.ts';
import { passConfigProblem } from '../../sim/throughput/pass-config.ts';
import { KvPages } from '../../sim/throughput/kv-pages.ts';
import { type GroupLoad, type LayerCosts, layerCosts } from '../../sim/throughput/pipelines/layer-costs.ts';
import { SerialOffloadPipe } from '../../sim/throughput/pipelines/serial-offload.ts';
import { EventPipe } from '../../sim/throughput/pipelines/vslpipe-events.ts';
import { sharedStage, VslPipe } from '../../sim/throughput/pipelines/vslpipe.ts';
import { vramNeeded } from '../../sim/throughput/memory-model.ts';
import { refDecodeShape, worstDecodeShape } from '../../sim/throughput/search.ts';
import { ThroughputExecutor } from '../../sim/throughput/throughput-executor.ts';
import type { RequestSpec, Workload } from '../../sim/workload.ts';

/**
 * A one-layer MoE model's layer costs: 100 weight bytes in 10 ns, CPU attention 10 ns per context
 * token, GPU work 10 per prefill token + (decode tokens: 1000 − 100 per context token), LM head 0.
 */
function stubCosts(layers = 1): LayerCosts {
  return {
    model: { hiddenSize: 1, derived: { kvBytesPerTokenPerLayer: 0, kvBytesPerToken: 3 } } as unknown as ModelProfile,
    mm: {
      layers,
      moeIndexOfLayer: Array.from({ length: layers }, (_, l) => l),
      denseBytes: Array(layers).fill(0),
      expertBytes: 10,
      experts: 10,
      kvBytesPerTokenPerLayer: 0,
      kvLayers: layers,
      residentBytes: 0,
    },
    layerBytes: Array(layers).fill(100),
    transferNs: Array(layers).fill(10),
    // A transfer costs 1 ns per 10 bytes; nothing else is asked for by these pipelines.
    ns: (op: Operation) => (op.kind === 'transfer' ? op.bytes / 10 : 0),
    gpuLayerNs: (_l: number, g: GroupLoad) => 10 * g.prefillTokens + (g.decode > 0 ? 1000 - 100 * g.decodeCtx : 0),
    cpuNs: (g: GroupLoad) => 10 * g.decodeCtx,
    lmHead: () => 0,
  };
}

const seq = (id: number, kvTokens: number) => ({ id, prompt: 1, kvTokens });
const decodeIt = (kv: number[]): Iteration => ({
  prefill: [],
  decode: kv.map((k, i) => seq(i, k)),
  preempted: [],
  decodeContextTokens: 0,
  finished: [],
});

describe('VSLPipe closed form, no contention, by hand', () => {
  it('a stage is max(CPU α, GPU β) + max(CPU β, GPU α), and the totals add up', () => {
    const hw = { pinnedHostMemory: true, cpu: { dramBytesPerSec: 1e12 } } as never;
    const pipe = new VslPipe(stubCosts(), hw, { contention: false, mode: 'closed-form', cores: 1 });
    // Decode sequences alternate: α has context 4, β 6. CPU α 40, CPU β 60; GPU α 600, GPU β 400.
    // Stage max(40, 400) + max(60, 600) = 1000; link 0 + (4 B of activations / 100 B) · 10 = 0.4.
    // Iteration: transfer_0 10 + 1000 + LM head 0 = 1010.
    expect(pipe.run(decodeIt([4, 6]), 0 as Ns)).toBe(1010);
    expect(pipe.totals).toMatchObject({
      gpuBusyNs: 1000,
      cpuBusyNs: 100,
      h2dBusyNs: 10.4,
      h2dBytes: 104,
      hostDramBytes: 104,
      decodeTokens: 2,
      prefillTokens: 0,
      dramBoundStages: 0,
    });
  });
});

describe('sharedStage with no weight DMA', () => {
  it('0 bytes in 0 ns: the stage is the compute phases alone, not slowed', () => {
    // max(10, 5) + max(0, 4) = 14 whatever the DRAM capacity.
    expect(sharedStage(10, 100, 5, 0, 0, 4, 0, 0, 1000)).toEqual({ stageNs: 14, slowed: false });
    expect(sharedStage(10, 0, 5, 0, 0, 4, 0, 0, 1)).toEqual({ stageNs: 14, slowed: false });
  });
});

describe('CGOPipe prefill, by hand', () => {
  it('the GPU works on the iteration prefill tokens, layer by layer beside the next transfer', () => {
    const pipe = new CgoPipe(stubCosts(2), { microBatches: 1, residentDense: false });
    const it: Iteration = {
      prefill: [
        { seq: seq(0, 3), tokens: 3, recomputed: 0 },
        { seq: seq(1, 5), tokens: 5, recomputed: 0 },
      ],
      decode: [],
      preempted: [],
      decodeContextTokens: 0,
      finished: [],
    };
    // GPU per layer 10 · 8 = 80; transfer_0 10, layer 0 max(80, 10), layer 1 max(80, 0): 170.
    expect(pipe.run(it, 0 as Ns)).toBe(170);
    expect(pipe.totals).toMatchObject({ gpuBusyNs: 160, h2dBusyNs: 20, h2dBytes: 200, prefillTokens: 8 });
  });
});

describe('CGOPipe decode, by hand', () => {
  it('μ micro-batches of ⌈n/μ⌉ sequences, each over 1/μ of the context; stage max(link, C + G/μ, G + C/μ)', () => {
    const pipe = new CgoPipe(stubCosts(), { microBatches: 2, residentDense: false });
    const it: Iteration = { ...decodeIt([1, 1, 1, 1]), decodeContextTokens: 8 };
    // A micro-batch: 2 sequences over 4 context tokens: CPU 40, GPU 1000 − 400 = 600; ×2: C 80, G 1200.
    // Stage max(0.8 ns of activations, 80 + 600, 1200 + 40) = 1240; + transfer_0 10 = 1250.
    expect(pipe.run(it, 0 as Ns)).toBe(1250);
    expect(pipe.totals).toMatchObject({ gpuBusyNs: 1200, cpuBusyNs: 80 });
  });
});

describe('serial offload, KV swaps by hand', () => {
  it('swap-in bytes go H2D before the step, swap-outs D2H', () => {
    const pipe = new SerialOffloadPipe(stubCosts(), 0.5);
    const it: Iteration = { ...decodeIt([2]), swapInTokens: 10, swapOutTokens: 4 };
    // KV 3 B per token: in 30 B (3 ns), out 12 B (1.2 ns); offloaded half of 100 B: 50 B (5 ns).
    // GPU: all attention on the GPU, one token as a prefill group → 10. 1.2 + 3 + 5 + 10 → ⌈19.2⌉.
    expect(pipe.run(it, 0 as Ns)).toBe(20);
    expect(pipe.totals).toMatchObject({
      h2dBytes: 80,
      d2hBytes: 12,
      hostDramBytes: 92,
      h2dBusyNs: 8,
      gpuBusyNs: 10,
      decodeTokens: 1,
    });
  });
});

describe('layerCosts memo', () => {
  it('keys a dense FFN and an LM head of the same tokens apart', () => {
    const cost = {
      estimate: (op: Operation) => ({ ns: op.kind === 'denseFfn' ? 7 : op.kind === 'lmHead' ? 11 : 1 }),
    } as unknown as CostModel;
    const lc = layerCosts(loadModel('mixtral-8x7b'), {} as never, cost, 1);
    expect(lc.ns({ kind: 'denseFfn', tokens: 4 } as Operation)).toBe(7);
    expect(lc.ns({ kind: 'lmHead', tokens: 4 } as Operation)).toBe(11);
    expect(lc.lmHead(4)).toBe(11);
  });
});

describe('event VSLPipe, by hand', () => {
  const pipe = () =>
    new EventPipe({
      linkBytesPerSec: 1e9,
      linkLatencyNs: 0,
      packetBytes: 1e6,
      dramBytesPerSec: 1e12,
      contention: false,
      cores: 4,
    });
  const x = { layerBytes: [1000, 1000], ga: [5, 5], gb: [7, 7], ca: 100, cb: 60, ka: 0, kb: 0, actA: 0, actB: 0 };

  it('CPU busy time is one core worth: Σ over layers of CPU α + CPU β', () => {
    const p = pipe();
    p.runIteration({ ...x, lmHeadNs: 0 });
    expect(p.stats().cpuBusyNs).toBe(2 * (100 + 60));
  });

  it("D2H legs: β's after each layer, α's after every layer but the last", () => {
    const p = pipe();
    p.runIteration({ ...x, d2hA: 50, d2hB: 30, lmHeadNs: 0 });
    expect(p.stats().d2hBytes).toBe(2 * 30 + 50);
  });
});

describe('plan shapes', () => {
  const w = { promptTokens: 100, outputTokens: 20 } as Parameters<typeof refDecodeShape>[0];
  it('the reference decode shape sits mid-output and reserves prompt + output tokens', () => {
    expect(refDecodeShape(w, 8, 3)).toEqual({
      phase: 'decode',
      seqs: 8,
      newTokens: 1,
      pastTokens: 110,
      hostSeqs: 3,
      reserveTokens: 120,
    });
    expect(worstDecodeShape(w, 8, 3)).toMatchObject({ pastTokens: 119, reserveTokens: 120 });
  });
});

describe('throughput executor, an offline batch', () => {
  it('every request arrives at 0, once, before it is admitted', () => {
    const model = loadModel('mixtral-8x7b');
    const hardware = loadHardware('a40-xeon8380-750gb');
    const cost = createCostModel(model, hardware, { runtime: loadRuntime('moe-lightning') });
    const requests: RequestSpec[] = Array.from({ length: 6 }, (_, id) => ({
      id: 10 + id,
      arrivalNs: 0 as Ns,
      promptTokens: 8,
      outputTokens: 2,
    }));
    const workload: Workload = {
      requests,
      routing: { moeLayers: 0, experts: 0, topK: 0, forRequest: () => ({ route: () => {} }) },
      describe: 'test',
    };
    const def = builtinPolicy('moe-lens')!;
    const policy = def.createThroughput!(def.params.parse({ kvCapacityGB: 1 }), {
      rng: new Rng('p'),
      model,
      hardware,
      workload,
    });
    const log: [number, string, number][] = [];
    const config = {
      phase: 'both' as const,
      contextBucketTokens: 64,
      kvLayout: 'paged' as const,
      kvPageTokens: 16,
      packetBytes: 64 << 20,
      memoise: true,
    };
    new ThroughputExecutor({
      model,
      hardware,
      cost,
      workload,
      policy,
      fallbackRng: new Rng('f'),
      config,
      sink: { onRequest: (id, ph, t) => log.push([id, ph, t]) },
    }).run();
    const arrivals = log.filter(([, ph]) => ph === 'arrive');
    expect(arrivals).toEqual(requests.map((r) => [r.id, 'arrive', 0]));
    for (const r of requests) {
      const first = log.findIndex(([id]) => id === r.id);
      expect(log[first]).toEqual([r.id, 'arrive', 0]);
      expect(log.some(([id, ph]) => id === r.id && ph === 'admit')).toBe(true);
    }
  });
});

describe('VRAM workspace of an MLA model', () => {
  it('the attention workspace holds Q + the latent KV + rope key + hidden per token', () => {
    const m = loadModel('deepseek-v2-lite'); // MLA: 16 heads × 192, kvLoraRank 512, rope 64, hidden 2048
    const c = { ...defaultPassConfig(m.layers), expertChunkTokens: 1 };
    const shape = {
      phase: 'prefill' as const,
      seqs: 1,
      newTokens: 100,
      pastTokens: 0,
      hostSeqs: 0,
      reserveTokens: 100,
    };
    // (16·192 + 512 + 64 + 2048) = 5 696 elements per token, 2 B each, 100 tokens, 1 micro-batch:
    // 1 139 200 B, above the LM head's 102 400 · 4 = 409 600 and the one-token FFN workspaces.
    expect(vramNeeded(m, shape, c).workspaceBytes).toBe(1_139_200);
  });
});

describe('CGOPipe stage with a DRAM capacity, by hand', () => {
  it('the CPU window slowed by the shared DRAM, then max(C + G/μ, G + C/μ) with the slowed C', () => {
    // C 100 ns reading 1000 B (10 B/ns) beside a DMA of 500 B in 50 ns (10 B/ns): 20 B/ns against a
    // capacity of 10, so C takes 100 × 20 / 10 = 200 ns. G 400, μ 2: max(200 + 200, 400 + 100) = 500,
    // above sharedStage's 200 and the free stage max(50, 100 + 200, 400 + 50) = 450: slowed.
    expect(sharedStage(100, 1000, 0, 0, 0, 0, 500, 50, 10).stageNs).toBe(200);
    expect(cgoStage(100, 1000, 400, 2, 500, 50, 10)).toEqual({ stageNs: 500, slowed: true });
    // Without a capacity: the free stage, not slowed.
    expect(cgoStage(100, 1000, 400, 2, 500, 50, undefined)).toEqual({ stageNs: 450, slowed: false });
  });
});

describe('pass configuration rules', () => {
  const model = loadModel('mixtral-8x7b');
  const layerWise = { ...defaultPassConfig(model.layers), weightGranularity: 'layer' as const, weightSlots: 2 };
  it('per-micro-batch expert batching takes ω 0 or 1 with layer-granular weights, nothing between', () => {
    expect(passConfigProblem({ ...layerWise, expertBatching: 'perMicroBatch', omega: 0 }, model)).toBeUndefined();
    expect(passConfigProblem({ ...layerWise, expertBatching: 'perMicroBatch', omega: 1 }, model)).toBeUndefined();
    expect(passConfigProblem({ ...layerWise, expertBatching: 'perMicroBatch', omega: 0.5 }, model)).toBe(
      'perMicroBatch batching needs omega 0 or 1 (got 0.5)',
    );
    expect(passConfigProblem({ ...layerWise, expertBatching: 'accumulated', omega: 0.5 }, model)).toBeUndefined();
  });
  it('ω outside [0, 1] is named with its value', () => {
    expect(passConfigProblem({ ...layerWise, omega: 1.5 }, model)).toBe('omega must be in [0, 1] (got 1.5)');
    expect(passConfigProblem({ ...layerWise, omega: -0.5 }, model)).toBe('omega must be in [0, 1] (got -0.5)');
  });
});

describe('input checks', () => {
  it('KV pages grow only non-negative integer sequence ids', () => {
    const kv = new KvPages(4, 2, 1);
    for (const id of [-1, 1.5]) {
      expect(() => kv.grow(id, 1)).toThrow(`KvPages: sequence id ${id} is not a non-negative integer`);
    }
    kv.grow(0, 3);
    expect(kv.heldBy(0)).toBe(2);
  });
  it('the GPU layers of a pass are 0 to the model’s layers', () => {
    const model = loadModel('mixtral-8x7b');
    const c = defaultPassConfig(model.layers);
    expect(passConfigProblem({ ...c, gpuLayers: model.layers }, model)).toBeUndefined();
    expect(passConfigProblem({ ...c, gpuLayers: model.layers + 1 }, model)).toMatch(/^gpuLayers .*\(got 33\)$/);
  });
});
