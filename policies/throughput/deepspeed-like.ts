/**
 * deepspeed-like — DeepSpeed-Inference / ZeRO-Inference style offloading (model-based batching).
 *
 * Reproduces the baseline MoE-Gen (arXiv 2503.09716) compares against: every weight lives in
 * pinned host memory and whole layers (attention + every expert) are streamed to the GPU, one
 * layer ahead (two layer buffers); the whole batch runs each module together (one micro-batch:
 * attention, router, then each expert over the batch's tokens routed to it); the KV cache stays
 * on the GPU, so the batch is bounded by what GPU memory leaves for KV and activations after
 * the two layer buffers. Model-based batching (MoE-Gen, arXiv 2503.09716, §3 and Figure 2: "a
 * single, unified batch size throughout the entire forward pass"): the batch that decodes is
 * the batch that was prefilled as one unit, so B must also fit the prefill of all its prompts
 * through every module at once (its activations and the attention and expert working sets) —
 * even in a decode-only experiment, whose batch was prefilled by the same system. This is the
 * paper's "batch size in DeepSpeed is bounded by attention peak memory" (§5.3).
 *
 * When to use: the "model-based batching with GPU-resident KV" point of comparison; it shows
 * why small batches cannot amortise streaming whole layers over PCIe.
 *
 * Known gaps: DeepSpeed's own partitioned prefetch (ZeRO-3 parameter fetch with bucket sizes),
 * its kernel fusion and CUDA Graphs are not modelled; no KV offload (DeepSpeed-MII / FastGen
 * paged KV is not used in the offloading setup MoE-Gen compares with). Batch = the largest that
 * fits (the paper's baselines were tuned to the largest batch that runs).
 */
import { z } from 'zod';
import { hostInfeasibility, vramNeeded } from '../../sim/throughput/memory-model.ts';
import type { PlanContext, ThroughputPolicy } from '../../sim/throughput/policy.ts';
import { largestSatisfying, prefillShape, worstDecodeShape } from '../../sim/throughput/search.ts';
import { defaultPassConfig, type PassConfig, type PlanResult } from '../../sim/throughput/types.ts';
import { gb, NO_CHUNKING_TOKENS, phasePlan, workloadCap } from './common.ts';
import { defineThroughputPolicy } from './define.ts';

const Params = z
  .object({
    /** Cap on the batch (sequences); default: the largest that fits GPU memory. */
    maxBatchSeqs: z.number().int().positive().optional(),
  })
  .strict();

export function deepspeedConfig(layers: number, B: number): PassConfig {
  return {
    ...defaultPassConfig(layers),
    attnMicroSeqs: B,
    expertBatching: 'perMicroBatch',
    expertChunkTokens: NO_CHUNKING_TOKENS,
    weightGranularity: 'layer',
    weightSlots: 2,
    prefetch: true,
    streamAllExperts: true,
    kvGpuLayers: layers,
  };
}

function plan(ctx: PlanContext, p: z.infer<typeof Params>): PlanResult {
  const { model, hardware: hw, workload: w } = ctx;
  const hostWhy = hostInfeasibility(model, hw.hostDramBytes);
  if (hostWhy) return { feasible: false, reason: hostWhy };
  const L = model.layers;
  // Model-based batching: the decoding batch is prefilled as one unit, so its prefill must fit too.
  const fits = (B: number) =>
    (!w.phases.decode ||
      vramNeeded(model, worstDecodeShape(w, B, B), deepspeedConfig(L, B)).totalBytes <= hw.gpu.vramBytes) &&
    vramNeeded(model, prefillShape(w, B, B), deepspeedConfig(L, B)).totalBytes <= hw.gpu.vramBytes;
  const B = largestSatisfying(1, workloadCap(ctx, p.maxBatchSeqs), fits);
  if (B < 1) {
    const need = vramNeeded(model, worstDecodeShape(w, 1, 1), deepspeedConfig(L, 1));
    return {
      feasible: false,
      reason: `two layer buffers (${gb(need.weightBufferBytes)} GB) + one sequence's KV and activations exceed VRAM (${gb(hw.gpu.vramBytes)} GB)`,
    };
  }
  const c = deepspeedConfig(L, B);
  return {
    feasible: true,
    plan: {
      hostBatchSeqs: B,
      prefill: phasePlan(ctx, 'prefill', B, B, c),
      decode: phasePlan(ctx, 'decode', B, B, c),
      notes: [`batch ${B} bounded by GPU memory (its KV, and its prefill as one batch)`],
    },
  };
}

export const deepspeedLike = defineThroughputPolicy({
  name: 'deepspeed-like',
  summary: 'model-based batching, KV on the GPU (batch bounded by GPU memory), whole MoE layers streamed per pass',
  params: Params,
  createThroughput: (p): ThroughputPolicy => ({ name: 'deepspeed-like', plan: (ctx) => plan(ctx, p) }),
});
