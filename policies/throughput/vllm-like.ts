/**
 * vllm-like — vLLM with CPU weight offloading (`--cpu-offload-gb`) and continuous batching.
 *
 * Reproduces the continuous-batching baseline of MoE-Gen (arXiv 2503.09716) and MoE-Lens: the
 * offloaded weights are read over PCIe on every forward pass (UVA: the kernels read host memory
 * directly, so a layer's transfer is not overlapped with the previous layer's compute — one
 * layer buffer, no prefetch); the paged KV cache lives on the GPU, in what
 * `gpuMemoryUtilization` × VRAM leaves after the buffer and activations, so decode batches are
 * small (at most `maxNumSeqs`); prefill passes hold at most `maxNumBatchedTokens` tokens.
 *
 * When to use: the "continuous batching with weights offloaded" point of comparison.
 *
 * `setup: moe-lens` runs vLLM's own scheduler instead (`vllm-scheduler.ts`: continuous batching,
 * paged GPU KV, swap/recompute preemption) over the serial-offload closed form (`vllm-lens.ts`).
 *
 * Known gaps (`setup: moe-gen`): continuous batching is modelled as waves — with the equal output lengths of the
 * experiments, sequences admitted together finish together, and a new wave is prefilled when
 * one finishes (vLLM would mix the next prefills into decode steps); no weights are kept
 * resident (vLLM keeps all but `cpu-offload-gb` on the GPU, at the cost of KV space); CUDA
 * Graphs and the paged-attention kernel's efficiency are not modelled.
 */
import { z } from 'zod';
import { hostInfeasibility, vramNeeded } from '../../sim/throughput/memory-model.ts';
import type { PlanContext, ThroughputPolicy } from '../../sim/throughput/policy.ts';
import { largestSatisfying, prefillShape, worstDecodeShape } from '../../sim/throughput/search.ts';
import type { PassConfig, PlanResult } from '../../sim/throughput/types.ts';
import { gb, phasePlan, workloadCap } from './common.ts';
import { deepspeedConfig } from './deepspeed-like.ts';
import { defineThroughputPolicy } from './define.ts';
import { lensOnly, lensOnlyCheck } from './setup.ts';
import { LensVllmParams, lensVllmPlan } from './vllm-lens.ts';

/** Parameters both setups read. */
const SHARED = ['maxNumSeqs', 'maxNumBatchedTokens', 'gpuMemoryUtilization'];

const Params = z
  .object({
    maxNumSeqs: z.number().int().positive().default(256),
    maxNumBatchedTokens: z.number().int().positive().default(8192),
    gpuMemoryUtilization: z.number().positive().max(1).default(0.9),
    /**
     * Whose baseline: `moe-gen` (default; MoE-Gen's comparison on the host-batch loop) or `moe-lens`
     * (the MoE-Lens paper's: vLLM's scheduler over paged GPU KV, serial-offload pipeline;
     * `vllm-lens.ts`, whose parameters follow).
     */
    setup: z.enum(['moe-gen', 'moe-lens']).default('moe-gen'),
    ...lensOnly(LensVllmParams.shape, SHARED),
  })
  .strict()
  .superRefine((p, ctx) => lensOnlyCheck(p, LensVllmParams.shape, SHARED, ctx));

/** DeepSpeed-like model-based passes, but one layer buffer and no weight prefetch: weights are read over PCIe each pass without overlap. */
function config(layers: number, B: number): PassConfig {
  return { ...deepspeedConfig(layers, B), weightSlots: 1, prefetch: false };
}

function plan(ctx: PlanContext, p: z.infer<typeof Params>): PlanResult {
  const { model, hardware: hw, workload: w } = ctx;
  const hostWhy = hostInfeasibility(model, hw.hostDramBytes);
  if (hostWhy) return { feasible: false, reason: hostWhy };
  const L = model.layers;
  const usable = Math.floor(p.gpuMemoryUtilization * hw.gpu.vramBytes);
  const prefillSeqs = (B: number) => Math.max(1, Math.min(B, Math.floor(p.maxNumBatchedTokens / w.promptTokens)));
  const fits = (B: number) =>
    (!w.phases.decode || vramNeeded(model, worstDecodeShape(w, B, B), config(L, B)).totalBytes <= usable) &&
    (!w.phases.prefill ||
      vramNeeded(model, prefillShape(w, prefillSeqs(B), B), config(L, prefillSeqs(B))).totalBytes <= usable);
  const B = largestSatisfying(1, workloadCap(ctx, p.maxNumSeqs), fits);
  if (B < 1) {
    const need = vramNeeded(model, worstDecodeShape(w, 1, 1), config(L, 1));
    return {
      feasible: false,
      reason: `one layer buffer (${gb(need.weightBufferBytes)} GB) + one sequence's KV exceed ${p.gpuMemoryUtilization} × VRAM (${gb(usable)} GB)`,
    };
  }
  return {
    feasible: true,
    plan: {
      hostBatchSeqs: B,
      prefill: phasePlan(ctx, 'prefill', prefillSeqs(B), B, config(L, prefillSeqs(B))),
      decode: phasePlan(ctx, 'decode', B, B, config(L, B)),
      notes: [B === p.maxNumSeqs ? `batch capped by maxNumSeqs ${B}` : `batch ${B} bounded by GPU KV memory`],
    },
  };
}

export const vllmLike = defineThroughputPolicy({
  name: 'vllm-like',
  summary:
    'continuous batching (as waves), weights offloaded and read over PCIe every pass, paged KV on the GPU (small batches)',
  params: Params,
  createThroughput: (p): ThroughputPolicy => {
    if (p.setup === 'moe-lens') {
      const { setup: _s, ...rest } = p;
      const lp = LensVllmParams.parse(rest);
      return { name: 'vllm-like', plan: (ctx) => lensVllmPlan(ctx, lp) };
    }
    return { name: 'vllm-like', plan: (ctx) => plan(ctx, p) };
  },
});
