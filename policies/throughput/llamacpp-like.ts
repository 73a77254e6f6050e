/**
 * llamacpp-like — llama.cpp with partial GPU offload (`-ngl`): the leading layers on the GPU,
 * the rest computed on the CPU.
 *
 * Reproduces the CPU-heavy baseline of MoE-Gen's comparison: the first g layers (attention,
 * router and every expert) are resident in VRAM with their KV cache; the remaining layers run
 * on the CPU — projections, attention over their host KV, and the routed experts, reading the
 * weights from host DRAM (memory-bound at small batches) — with the hidden state crossing PCIe
 * at the boundary; g is the largest that fits VRAM. A few sequences decode together
 * (`nParallel` server slots). For prompt processing llama.cpp offloads large batches to the GPU,
 * so prefill streams the CPU layers' weights to the GPU one layer at a time (no overlap) in
 * micro-batches of `ubatchTokens`, and copies their KV out.
 *
 * When to use: the "small batch, CPU compute" end of the comparison.
 *
 * Known gaps: BF16 weights (llama.cpp users run quantised GGUF: 2–4× fewer bytes); no
 * per-tensor (`-ot`, experts on CPU / attention on GPU) placement; the CPU expert GEMMs are
 * priced with the same vector throughput as CPU attention.
 */
import { z } from 'zod';
import {
  hostInfeasibility,
  hostNeeded,
  layerBytes,
  modelModules,
  vramNeeded,
} from '../../sim/throughput/memory-model.ts';
import type { PlanContext, ThroughputPolicy } from '../../sim/throughput/policy.ts';
import { largestSatisfying, prefillShape, worstDecodeShape } from '../../sim/throughput/search.ts';
import { defaultPassConfig, type PassConfig, type PlanResult } from '../../sim/throughput/types.ts';
import { gb, NO_CHUNKING_TOKENS, phasePlan, workloadCap } from './common.ts';
import { defineThroughputPolicy } from './define.ts';

const Params = z
  .object({
    /** Sequences decoded together (server slots, `-np`). */
    nParallel: z.number().int().positive().default(8),
    /** Prompt tokens per micro-batch (`-ub`). */
    ubatchTokens: z.number().int().positive().default(512),
    cpuCores: z.union([z.literal('all'), z.number().int().positive()]).default('all'),
    /** Fix the GPU layers (`-ngl`); default: as many as fit. */
    gpuLayers: z.number().int().nonnegative().optional(),
  })
  .strict();

function cachedBytesOf(ctx: PlanContext, g: number): number {
  const mm = modelModules(ctx.model);
  let b = 0;
  for (let l = 0; l < g; l++) b += layerBytes(mm, l);
  return b;
}

function decodeConfig(ctx: PlanContext, g: number, N: number, cores: number): PassConfig {
  const L = ctx.model.layers;
  return {
    ...defaultPassConfig(L),
    attnMicroSeqs: N,
    cpuCores: cores,
    expertBatching: 'perMicroBatch',
    expertChunkTokens: NO_CHUNKING_TOKENS,
    weightGranularity: 'layer',
    weightSlots: 1,
    prefetch: false,
    streamAllExperts: true,
    cachedParamBytes: cachedBytesOf(ctx, g),
    cacheOrder: 'layers',
    gpuLayers: g,
    kvGpuLayers: g,
  };
}

function prefillConfig(ctx: PlanContext, g: number, cores: number, ubatchSeqs: number): PassConfig {
  return { ...decodeConfig(ctx, g, ubatchSeqs, cores), gpuLayers: ctx.model.layers };
}

function plan(ctx: PlanContext, p: z.infer<typeof Params>): PlanResult {
  const { model, hardware: hw, workload: w } = ctx;
  const hostWhy = hostInfeasibility(model, hw.hostDramBytes);
  if (hostWhy) return { feasible: false, reason: hostWhy };
  const L = model.layers;
  const cores = p.cpuCores === 'all' ? hw.cpu.cores : Math.min(p.cpuCores, hw.cpu.cores);
  // A batch the experiment fixes sets the server slots (`-np`); otherwise `nParallel`. Prompts
  // are processed one micro-batch of `ubatchTokens` at a time: a prefill pass holds the prompts
  // that fit in one ubatch (at least one).
  const cap = w.fixedBatchSeqs !== undefined ? workloadCap(ctx) : workloadCap(ctx, p.nParallel);
  const vram = hw.gpu.vramBytes;
  const reserve = w.promptTokens + w.outputTokens;
  const prefillSeqs = (N: number) => Math.max(1, Math.min(N, Math.floor(p.ubatchTokens / w.promptTokens)));
  const fits = (g: number, N: number) =>
    (!w.phases.decode ||
      vramNeeded(model, worstDecodeShape(w, N, N), decodeConfig(ctx, g, N, cores)).totalBytes <= vram) &&
    (!w.phases.prefill ||
      vramNeeded(model, prefillShape(w, prefillSeqs(N), N), prefillConfig(ctx, g, cores, prefillSeqs(N))).totalBytes <=
        vram) &&
    hostNeeded(model, N, reserve, g) <= hw.hostDramBytes;
  const layersFor = (N: number) =>
    p.gpuLayers !== undefined
      ? fits(Math.min(p.gpuLayers, L), N)
        ? Math.min(p.gpuLayers, L)
        : -1
      : largestSatisfying(0, L, (g) => fits(g, N));
  // The most slots (up to the cap) for which some split fits; then as many GPU layers as fit.
  const N = largestSatisfying(1, cap, (n) => layersFor(n) >= 0);
  if (N < 1) {
    return {
      feasible: false,
      reason: `${p.gpuLayers !== undefined ? `${p.gpuLayers} GPU layers` : 'no GPU layer split'} fits one sequence: a streamed layer for prompt processing + KV exceed VRAM (${gb(vram)} GB) or host DRAM`,
    };
  }
  const g = layersFor(N);
  return {
    feasible: true,
    plan: {
      hostBatchSeqs: N,
      prefill: phasePlan(ctx, 'prefill', prefillSeqs(N), N, prefillConfig(ctx, g, cores, prefillSeqs(N))),
      decode: phasePlan(ctx, 'decode', N, N, decodeConfig(ctx, g, N, cores)),
      notes: [`${g} of ${L} layers on the GPU, ${N} slots`],
    },
  };
}

export const llamacppLike = defineThroughputPolicy({
  name: 'llamacpp-like',
  summary: 'leading layers resident on the GPU, the rest computed on the CPU from host DRAM, a few parallel sequences',
  params: Params,
  createThroughput: (p): ThroughputPolicy => ({ name: 'llamacpp-like', plan: (ctx) => plan(ctx, p) }),
});
