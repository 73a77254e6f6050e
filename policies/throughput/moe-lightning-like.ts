/**
 * moe-lightning-like — MoE-Lightning's CPU-GPU-I/O pipeline (Cao et al., "MoE-Lightning",
 * ASPLOS'25, arXiv 2411.11217; no public code, see reference-facts §1e).
 *
 * Reproduces: in decode, attention runs on the CPU over the host KV (A_g = 0) and the FFN
 * (router + experts) on the GPU (F_g = 1); a layer's weights are streamed as one unit into a
 * buffer of two layers (the next layer's weights load while this one computes); the batch N
 * is split into micro-batches pipelined CGOPipe-style (the GPU computes the projections of
 * micro-batch m+1 while the CPU attends for m, then the post-attention part of m). N comes from
 * its hierarchical-roofline policy: the per-layer time is max(T_comm, T_cpu(N), T_gpu(N)), so
 * throughput stops improving once CPU or GPU time reaches the weight-transfer time; the policy
 * takes the smallest N that gets there (capped by host memory) — it does not use the host
 * memory capacity fully, which is MoE-Gen's and MoE-Lens's criticism. The number of
 * micro-batches is chosen by the critical-path estimator. Prefill runs attention on the GPU.
 *
 * When to use: the "CPU attention, layer-pipelined weights, roofline-sized batch" point of
 * comparison (MoE-Gen and MoE-Lens baselines).
 *
 * Known gaps: the MILP over (N, μ, A_g, F_g, r_w, r_c) is reduced to the roofline choice of N
 * and a search of μ; no partial residency of weights or KV on the GPU (r_w = r_c = 0); paged
 * weights and the page table are a plain two-layer buffer; CPU attention kernel efficiency is
 * the profile's, not MoE-Lightning's hand-tuned kernel.
 */
import { z } from 'zod';
import { hostInfeasibility, layerBytes, maxHostSeqs, modelModules, vramNeeded } from '../../sim/throughput/memory-model.ts';
import type { PlanContext, ThroughputPolicy } from '../../sim/throughput/policy.ts';
import { coordinateSearch, largestSatisfying, powersOfTwoUpTo, predictPassNs, prefillShape, refDecodeShape, worstDecodeShape } from '../../sim/throughput/search.ts';
import { defaultPassConfig, type PassConfig, type PlanResult } from '../../sim/throughput/types.ts';
import { gb, NO_CHUNKING_TOKENS, phasePlan, workloadCap } from './common.ts';
import { defineThroughputPolicy } from './define.ts';

const Params = z
  .object({
    /** Micro-batches per layer (CGOPipe); default searched in 1 … 16. */
    microBatches: z.number().int().positive().optional(),
    cpuCores: z.union([z.literal('all'), z.number().int().positive()]).default('all'),
  })
  .strict();

function config(layers: number, microSeqs: number, omega: 0 | 1, cores: number): PassConfig {
  return {
    ...defaultPassConfig(layers),
    attnMicroSeqs: Math.max(1, microSeqs),
    omega,
    cpuCores: cores,
    expertBatching: 'perMicroBatch',
    expertChunkTokens: NO_CHUNKING_TOKENS,
    weightGranularity: 'layer',
    weightSlots: 2,
    prefetch: true,
    streamAllExperts: true,
    kvGpuLayers: 0,
  };
}

/** The roofline's per-layer times for a decode batch of N (ns): weight transfer, CPU attention, GPU FFN. */
export function lightningRoofline(ctx: PlanContext, N: number, cores: number): { commNs: number; cpuNs: number; gpuNs: number } {
  const { model, hardware: hw, cost, workload: w } = ctx;
  const mm = modelModules(model);
  let maxLayer = 0;
  for (let l = 0; l < model.layers; l++) maxLayer = Math.max(maxLayer, layerBytes(mm, l));
  const commNs = (maxLayer / hw.pcie.h2dBytesPerSec) * 1e9;
  const ctxTokens = w.promptTokens + Math.floor(w.outputTokens / 2);
  const cpuNs = cost.estimate({ kind: 'cpuAttention', tokens: N, contextTokens: N * (ctxTokens + 1), cores }).ns;
  const perExpert = (N * model.topK) / model.experts;
  const gpuNs =
    cost.estimate({ kind: 'attentionProj', tokens: N }).ns +
    cost.estimate({ kind: 'router', tokens: N }).ns +
    (model.sharedExperts > 0 ? cost.estimate({ kind: 'sharedExperts', tokens: N }).ns : 0) +
    model.experts * cost.estimate({ kind: 'expert', tokens: perExpert }).ns;
  return { commNs, cpuNs, gpuNs };
}

function plan(ctx: PlanContext, p: z.infer<typeof Params>): PlanResult {
  const { model, hardware: hw, workload: w } = ctx;
  const hostWhy = hostInfeasibility(model, hw.hostDramBytes);
  if (hostWhy) return { feasible: false, reason: hostWhy };
  const L = model.layers;
  const cores = p.cpuCores === 'all' ? hw.cpu.cores : Math.min(p.cpuCores, hw.cpu.cores);
  const reserve = w.promptTokens + w.outputTokens;
  const hostMax = maxHostSeqs(model, hw.hostDramBytes, reserve, 0);
  if (hostMax < 1) return { feasible: false, reason: `host DRAM left after the weights (${gb(hw.hostDramBytes - model.derived.totalBytes)} GB) cannot hold one sequence's KV` };
  const cap = Math.min(workloadCap(ctx), hostMax);
  // Roofline turning point: the smallest N whose CPU or GPU time reaches the transfer time.
  const saturated = (n: number) => {
    const r = lightningRoofline(ctx, n, cores);
    return Math.max(r.cpuNs, r.gpuNs) >= r.commNs;
  };
  const notSaturated = largestSatisfying(1, cap, (n) => !saturated(n));
  const vram = hw.gpu.vramBytes;
  // The batch's activations stay on the GPU: no more sequences than fit beside the two layer buffers.
  const fitsDecode = (n: number) => !w.phases.decode || vramNeeded(model, worstDecodeShape(w, n, n), config(L, Math.ceil(n / 16), 1, cores)).totalBytes <= vram;
  const maxFit = largestSatisfying(1, cap, fitsDecode);
  const N = Math.max(1, Math.min(maxFit, w.fixedBatchSeqs !== undefined ? cap : notSaturated + 1));

  const pick = (phase: 'prefill' | 'decode', seqs: number) => {
    const omega = phase === 'decode' ? 1 : 0;
    const shapeFit = phase === 'decode' ? worstDecodeShape(w, seqs, N) : prefillShape(w, seqs, N);
    const ref = phase === 'decode' ? refDecodeShape(w, seqs, N) : prefillShape(w, seqs, N);
    const grid = p.microBatches !== undefined ? [p.microBatches] : powersOfTwoUpTo(Math.min(16, seqs));
    const found = coordinateSearch({
      start: { m: grid[0]! },
      axes: [{ key: 'm', values: grid }],
      evaluate: ({ m }) => {
        const c = config(L, Math.ceil(seqs / m), omega, cores);
        if (vramNeeded(model, shapeFit, c).totalBytes > vram) return undefined;
        return 1 / predictPassNs(ctx, ref, c, { mode: 'extrapolate' });
      },
    });
    return found ? config(L, Math.ceil(seqs / found.best.m), omega, cores) : undefined;
  };
  const decodeCfg = w.phases.decode ? pick('decode', N) : undefined;
  if (w.phases.decode && !decodeCfg) {
    return { feasible: false, reason: `two layer buffers + the activations of a batch of ${N} exceed VRAM (${gb(vram)} GB)` };
  }
  // Prefill: GPU attention; the largest batch ≤ N whose prompts fit on the GPU.
  let Bp = N;
  let prefillCfg: PassConfig | undefined;
  if (w.phases.prefill) {
    Bp = largestSatisfying(1, N, (b) => vramNeeded(model, prefillShape(w, b, N), config(L, b, 0, cores)).totalBytes <= vram);
    prefillCfg = Bp >= 1 ? pick('prefill', Bp) : undefined;
    if (!prefillCfg) return { feasible: false, reason: `two layer buffers + one prompt's activations exceed VRAM (${gb(vram)} GB)` };
  }
  const dc = decodeCfg ?? prefillCfg!;
  const pc = prefillCfg ?? dc;
  return {
    feasible: true,
    plan: {
      hostBatchSeqs: N,
      prefill: phasePlan(ctx, 'prefill', Math.max(1, Bp), N, pc),
      decode: phasePlan(ctx, 'decode', N, N, dc),
      notes: [N === maxFit && N < cap ? `batch ${N} bounded by GPU memory (activations)` : N < hostMax && w.fixedBatchSeqs === undefined && N < w.sequences ? `roofline batch ${N} (host memory allows ${hostMax})` : `batch ${N}`],
    },
  };
}

export const moeLightningLike = defineThroughputPolicy({
  name: 'moe-lightning-like',
  summary: 'CPU attention over host KV, GPU FFN, layer weights pipelined (CGOPipe), batch from a CPU/GPU/PCIe roofline',
  params: Params,
  createThroughput: (p): ThroughputPolicy => ({ name: 'moe-lightning-like', plan: (ctx) => plan(ctx, p) }),
});
