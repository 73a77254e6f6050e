/**
 * Linear-attention (Gated DeltaNet) layers of hybrid models: the cost model's `linearAttention`
 * op and a hybrid model's `attention` op hand-computed on a real profile, and the serving
 * executor's layer walk running a DeltaNet block on the linear layers and attention on the
 * others, with the recurrent state reserved beside the KV, timed by hand on a tiny world.
 */
import { describe, expect, it } from 'vitest';
import { gatedDeltaNetStateBytes } from '../../hardware-profiles/derive.ts';
import { loadHardware, loadModel } from '../../hardware-profiles/load.ts';
import type { ModelProfile } from '../../hardware-profiles/types.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import { isLinearAttentionLayer } from '../../sim/cost/linear-attention.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import type { KernelRecord, MemoryRecord } from '../../sim/observe/trace-sink.ts';
import { ServingExecutor } from '../../sim/serving/serving-executor.ts';
import type { RoutingSource } from '../../sim/workload.ts';
import { builtinPolicy } from '../../policies/registry.ts';
import { MB, stubKernelCost, tinyHardware, tinyModel } from '../helpers/tiny-world.ts';
import { InvariantChecker } from '../helpers/invariant-checker.ts';

describe('linearAttention op: Qwen3.6-35B-A3B (BF16) on an RTX 4090, no runtime (fused)', () => {
  const m = loadModel('qwen3.6-35b-a3b');
  const hw = loadHardware('rtx4090');
  const cost = createCostModel(m, hw);

  it('derives the DeltaNet block, the full-attention block and the recurrent state by hand', () => {
    // h = 2048, Hk·dk = 16·128 = 2048, Hv·dv = 32·128 = 4096, conv kernel 4:
    // in_proj_qkvz 2048·(2·2048 + 2·4096) = 25 165 824, in_proj_ba 2048·64 = 131 072,
    // conv (2·2048 + 4096)·4 = 32 768, dt_bias + A_log 64, norm 128, out_proj 4096·2048 = 8 388 608.
    expect(m.derived.linearAttentionParamsPerLayer).toBe(33_718_464);
    // + 2 RMSNorms of 2048 per layer, × 2 B (BF16).
    expect(m.derived.linearAttentionBytesPerLayer).toBe((33_718_464 + 4096) * 2);
    // Full attention: q 2048·4096, gate 2048·4096, k = v 2048·512, o 4096·2048, q/k norms 2·256.
    expect(m.derived.fullAttentionBytesPerLayer).toBe((3 * 8_388_608 + 2 * 1_048_576 + 512 + 4096) * 2);
    expect(m.derived.fullAttentionProjFlopsPerToken).toBe(2 * 27_263_488);
    // 30 DeltaNet layers × (32·128·128·4 B + 8192 conv channels · 3 columns · 2 B).
    expect(m.derived.recurrentStateBytesPerSequence).toBe(30 * (2_097_152 + 49_152));
  });

  it('a state of under a byte per element is still whole bytes (rounded up per layer)', () => {
    // 32·128·128 = 524 288 elements × 1e-9 B = 0.000524… → 1 B, + the conv window 49 152 B.
    const la = { ...m.linearAttention!, stateBytesPerElement: 1e-9 };
    expect(gatedDeltaNetStateBytes(la)).toBe(1 + 49_152);
    expect(gatedDeltaNetStateBytes({ ...la, stateBytesPerElement: 0.5 })).toBe(262_144 + 49_152);
  });

  it('one decode token of one sequence is HBM-bound: weights + activations + state read and written', () => {
    const c = cost.estimate({ kind: 'linearAttention', tokens: 1, sequences: 1 });
    // 67 445 120 B of weights + 2·2048·2 B activations in and out + 2 × 2 146 304 B of state.
    const bytes = 67_445_120 + 8192 + 2 * 2_146_304;
    expect(c.bytes).toBe(bytes);
    expect(c.bytes).toBe(71_745_920);
    // FLOPs: 2·33 718 464 + recurrence 7·32·128·128 + conv 2·8192·4 = 71 172 480.
    expect(c.flops).toBe(71_172_480);
    expect(c.bound).toBe('hbm');
    // 71 745 920 B / (1008 GB/s × 0.8) = 88 970.6 ns, + 5 µs launch.
    expect(c.ns).toBe(93_971);
  });

  it('does not grow with context, and adds one state read + write per sequence', () => {
    const one = cost.estimate({ kind: 'linearAttention', tokens: 2, sequences: 1 });
    const two = cost.estimate({ kind: 'linearAttention', tokens: 2, sequences: 2 });
    expect(two.bytes - one.bytes).toBe(2 * 2_146_304);
    // A full-attention layer at the same tokens grows with the context: KV 2 KV heads × 512 × 2 B per token.
    const a0 = cost.estimate({ kind: 'attention', tokens: 1, contextTokens: 1 });
    const a1 = cost.estimate({ kind: 'attention', tokens: 1, contextTokens: 1001 });
    expect(a1.bytes - a0.bytes).toBe(1000 * 2048);
  });

  it("a hybrid model's attention op reads the full-attention layer's weights, not the all-layer average", () => {
    const a = cost.estimate({ kind: 'attention', tokens: 1, contextTokens: 0 });
    // weights + activations + the new token's KV (2048 B).
    expect(a.bytes).toBe(54_535_168 + 8192 + 2048);
  });

  it('refuses a model without linear attention', () => {
    const plain = createCostModel(loadModel('qwen3-30b-a3b'), hw);
    expect(() => plain.estimate({ kind: 'linearAttention', tokens: 1, sequences: 1 })).toThrow(/no linear-attention/);
  });
});

/**
 * Tiny hybrid world: 2 MoE layers, full-attention interval 2 (layer 0 DeltaNet, layer 1 full
 * attention), 4 experts of 1 MB, top-1, a 1 GB/s link (1 ms per expert). Stub kernels: linear
 * attention 4 µs, attention 10 µs, router 1 µs, expert 100 µs, LM head 5 µs. On-demand, one
 * request of 1 prompt token and 2 output tokens, every token to expert 1 at layer 0, 2 at layer 1.
 * One pass: linear 0 → 4 000, router → 5 000, fetch → 1 005 000, expert → 1 105 000; attention →
 * 1 115 000, router → 1 116 000, fetch → 2 116 000, expert → 2 216 000; LM head → 2 221 000
 * (6 µs less than the same world without linear attention, serving-executor.test.ts).
 */
describe('serving executor: a hybrid model walks DeltaNet and attention layers', () => {
  const STATE = 3 * MB;
  const base = tinyModel(2, 4, 1);
  const model: ModelProfile = {
    ...base,
    id: 'tiny-hybrid',
    linearAttention: {
      kind: 'gated-deltanet',
      fullAttentionInterval: 2,
      keyHeads: 1,
      valueHeads: 1,
      keyHeadDim: 64,
      valueHeadDim: 64,
      convKernel: 4,
      stateBytesPerElement: 4,
    },
    derived: {
      ...base.derived,
      kvBytesPerToken: 500, // the one full-attention layer
      linearAttentionLayers: 1,
      linearStateBytesPerLayer: STATE,
      recurrentStateBytesPerSequence: STATE,
    },
  };
  const routing: RoutingSource = {
    moeLayers: 2,
    experts: 4,
    topK: 1,
    forRequest: () => ({
      route(layer, fromToken, toToken, out) {
        for (let i = 0; i < toToken - fromToken; i++) out[i] = layer === 0 ? 1 : 2;
      },
    }),
  };

  it('layer 0 runs a 4 µs DeltaNet block, layer 1 attention; the state is reserved with the KV', () => {
    expect([0, 1].map((l) => isLinearAttentionLayer(model, l))).toEqual([true, false]);
    const kernels: KernelRecord[] = [];
    const memory: MemoryRecord[] = [];
    const checker = new InvariantChecker({ experts: 4, bytesPerExpert: MB });
    const executor = new ServingExecutor({
      model,
      hardware: tinyHardware(100 * MB),
      cost: stubKernelCost(),
      workload: {
        requests: [{ id: 0, arrivalNs: 0 as Ns, promptTokens: 1, outputTokens: 2 }],
        routing,
        describe: 'hand-made',
      },
      policy: builtinPolicy('on-demand')!.create({ keep: false }, undefined as never),
      config: {
        batching: 'continuous',
        maxBatchSize: 1,
        maxWaitNs: 0 as Ns,
        maxBatchTokens: 8192,
        bufferSlots: 4,
        packetBytes: 16 * MB,
        preloadAllExperts: false,
      },
      sink: {
        onKernel: (r) => {
          kernels.push(r);
          checker.onKernel(r);
        },
        onMemory: (r) => {
          memory.push(r);
          checker.onMemory(r);
        },
        onTransfer: (r) => checker.onTransfer(r),
        onPacket: (r) => checker.onPacket(r),
        onExpertCompute: (k, t, r) => checker.onExpertCompute(k, t, r),
        onExpertResidency: (k, r, t) => checker.onExpertResidency(k, r, t),
        onRequest: (id, p, t) => checker.onRequest(id, p, t),
      },
      maxEvents: 100_000,
    });
    const outcome = executor.run();
    expect(checker.finish(outcome)).toEqual([]);
    expect(outcome.requests[0]!.firstTokenNs).toBe(2_221_000);
    expect(outcome.endNs).toBe(2 * 2_221_000);
    const firstPass = kernels.filter((k) => k.category === 'attention' && k.endNs <= 2_221_000);
    expect(firstPass.map((k) => [k.label, k.startNs, k.endNs])).toEqual([
      ['L0 linear attention', 0, 4_000],
      ['L1 attention', 1_105_000, 1_115_000],
    ]);
    // KV of 3 tokens on the one full-attention layer, plus the 3 MB recurrent state.
    const kv = memory.find((r) => r.category === 'kvCache' && r.categoryUsedBytes > 0);
    expect(kv?.categoryUsedBytes).toBe(3 * 500 + STATE);
  });
});
