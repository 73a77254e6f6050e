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
 * Two batch policies (`batching`):
 * - `model` (default): the MoE-Gen paper's MoE-Lightning*, MoE-Gen's own re-implementation on
 *   its engine (arXiv 2503.09716 §5.1; MoE-Lightning's code was not public then) with
 *   model-based batching: the batch that decodes was prefilled as one batch through every module
 *   on the GPU, so N is the largest batch whose prefill fits beside the two layer buffers (§4.1:
 *   "the batch size for model-based batching is constrained by the module with the highest
 *   memory usage"; §5.3: FlexGen and MoE-Lightning "have the same problem" as DeepSpeed). Run it
 *   with runtime `moe-gen` (MoE-Gen's CPU kernel).
 * - `released`: MoE-Lightning's released optimiser (caoshiyi/artifacts
 *   fastmoe/backend/optimizer.py, reference-facts §1e), for the MoE-Lens comparisons: per-layer
 *   T = max(T_comm, T_cpu, T_gpu); N grows until T_cpu or T_gpu reaches T_comm (throughput stops
 *   rising) or memory runs out, with its limits: GPU peak ≤ 0.86 × VRAM, host ≤ 0.8 × host
 *   memory. Run it with runtime `moe-lightning` (its flash-decode kernel).
 *
 * `setup: moe-lens`: the MoE-Lens paper's setup of this baseline (`moe-lightning-lens.ts`: its
 * CPU-memory settings, the fixed-batch scheduler, the CGOPipe closed form).
 *
 * When to use: the "CPU attention, layer-pipelined weights" point of comparison (MoE-Gen and
 * MoE-Lens baselines).
 *
 * Known gaps: the released LP over (N, μ, A_g, F_g, r_w, r_c) is reduced to the roofline choice
 * of N under its memory limits and a search of μ on our estimator; no partial residency of
 * weights or KV on the GPU (r_w = r_c = 0); paged weights and the page table are a plain
 * two-layer buffer; the CPU kernel's rate is the runtime profile's (no measurement of
 * MoE-Lightning's own kernel exists in the references, see runtimes/moe-lightning.json).
 */
import { z } from 'zod';
import {
  hostInfeasibility,
  layerBytes,
  maxHostSeqs,
  modelModules,
  vramNeeded,
} from '../../sim/throughput/memory-model.ts';
import type { PlanContext, ThroughputPolicy } from '../../sim/throughput/policy.ts';
import {
  coordinateSearch,
  largestSatisfying,
  powersOfTwoUpTo,
  predictPassNs,
  prefillShape,
  refDecodeShape,
  worstDecodeShape,
} from '../../sim/throughput/search.ts';
import { defaultPassConfig, type PassConfig, type PlanResult } from '../../sim/throughput/types.ts';
import { gb, NO_CHUNKING_TOKENS, phasePlan, workloadCap } from './common.ts';
import {
  lightningRoofline,
  RELEASED_GPU_MEMORY_FRACTION,
  RELEASED_HOST_MEMORY_FRACTION,
} from './lightning-roofline.ts';
import { defineThroughputPolicy } from './define.ts';
import { lensOnly, lensOnlyCheck } from './setup.ts';
import { LensLightningParams, lensLightningPlan } from './moe-lightning-lens.ts';

const Params = z
  .object({
    /** Micro-batches per layer (CGOPipe); default searched in 1 … 16. */
    microBatches: z.number().int().positive().optional(),
    cpuCores: z.union([z.literal('all'), z.number().int().positive()]).default('all'),
    /** `model`: MoE-Gen's MoE-Lightning* (batch = its prefill on the GPU); `released`: MoE-Lightning's own optimiser. */
    batching: z.enum(['model', 'released']).default('model'),
    /**
     * Whose baseline: `moe-gen` (default; MoE-Gen's comparison, host-batch loop over pass DAGs) or
     * `moe-lens` (the MoE-Lens paper's: released optimiser under its CPU-memory setting, fixed-batch
     * scheduler, CGOPipe closed form; `moe-lightning-lens.ts`, whose parameters follow).
     */
    setup: z.enum(['moe-gen', 'moe-lens']).default('moe-gen'),
    ...lensOnly(LensLightningParams.shape, ['microBatches', 'cpuCores']),
  })
  .strict()
  .superRefine((p, ctx) => lensOnlyCheck(p, LensLightningParams.shape, ['microBatches', 'cpuCores'], ctx));

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

export { lightningRoofline, RELEASED_GPU_MEMORY_FRACTION, RELEASED_HOST_MEMORY_FRACTION };

/**
 * The batch N (sequences decoding together) and the reason for it: with the released optimiser,
 * the roofline turning point within GPU memory; with model-based batching, the largest batch
 * whose prefill as one batch and whose decode fit the GPU.
 */
function chooseBatch(
  ctx: PlanContext,
  cores: number,
  cap: number,
  hostMax: number,
  vram: number,
  released: boolean,
): { N: number; why: string } {
  const { model, workload: w } = ctx;
  const L = model.layers;
  // The batch's activations stay on the GPU: no more sequences than fit beside the two layer buffers.
  const fitsDecode = (n: number) =>
    !w.phases.decode ||
    vramNeeded(model, worstDecodeShape(w, n, n), config(L, Math.ceil(n / 16), 1, cores)).totalBytes <= vram;
  let N: number;
  let maxFit: number;
  let why: string;
  if (released) {
    // Roofline turning point: the smallest N whose CPU or GPU time reaches the transfer time.
    const saturated = (n: number) => {
      const r = lightningRoofline(ctx, n, cores);
      return Math.max(r.cpuNs, r.gpuNs) >= r.commNs;
    };
    const notSaturated = largestSatisfying(1, cap, (n) => !saturated(n));
    maxFit = largestSatisfying(1, cap, fitsDecode);
    N = Math.max(1, Math.min(maxFit, w.fixedBatchSeqs !== undefined ? cap : notSaturated + 1));
    why =
      N === maxFit && N < cap
        ? `batch ${N} bounded by GPU memory (activations)`
        : N < hostMax && w.fixedBatchSeqs === undefined && N < w.sequences
          ? `roofline batch ${N} (host memory allows ${hostMax})`
          : `batch ${N}`;
  } else {
    // Model-based batching: the batch is prefilled as one batch (GPU attention) and decodes together.
    const fitsPrefill = (n: number) =>
      vramNeeded(model, prefillShape(w, n, n), config(L, n, 0, cores)).totalBytes <= vram;
    maxFit = largestSatisfying(1, cap, (n) => fitsPrefill(n) && fitsDecode(n));
    N = Math.max(1, maxFit);
    why = N < cap ? `batch ${N} bounded by GPU memory (its prefill as one batch)` : `batch ${N}`;
  }
  return { N, why };
}

function plan(ctx: PlanContext, p: z.infer<typeof Params>): PlanResult {
  const { model, hardware: hw, workload: w } = ctx;
  const hostWhy = hostInfeasibility(model, hw.hostDramBytes);
  if (hostWhy) return { feasible: false, reason: hostWhy };
  const L = model.layers;
  const cores = p.cpuCores === 'all' ? hw.cpu.cores : Math.min(p.cpuCores, hw.cpu.cores);
  const released = p.batching === 'released';
  const reserve = w.promptTokens + w.outputTokens;
  const hostBytes = released ? Math.floor(hw.hostDramBytes * RELEASED_HOST_MEMORY_FRACTION) : hw.hostDramBytes;
  const hostMax = maxHostSeqs(model, hostBytes, reserve, 0);
  if (hostMax < 1)
    return {
      feasible: false,
      reason: `host DRAM left after the weights (${gb(hostBytes - model.derived.totalBytes)} GB) cannot hold one sequence's KV`,
    };
  const cap = Math.min(workloadCap(ctx), hostMax);
  const vram = released ? Math.floor(hw.gpu.vramBytes * RELEASED_GPU_MEMORY_FRACTION) : hw.gpu.vramBytes;
  const { N, why } = chooseBatch(ctx, cores, cap, hostMax, vram, released);
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
    return {
      feasible: false,
      reason: `two layer buffers + the activations of a batch of ${N} exceed VRAM (${gb(vram)} GB)`,
    };
  }
  // Prefill: GPU attention; the largest batch ≤ N whose prompts fit on the GPU.
  let Bp = N;
  let prefillCfg: PassConfig | undefined;
  if (w.phases.prefill) {
    Bp = largestSatisfying(
      1,
      N,
      (b) => vramNeeded(model, prefillShape(w, b, N), config(L, b, 0, cores)).totalBytes <= vram,
    );
    prefillCfg = Bp >= 1 ? pick('prefill', Bp) : undefined;
    if (!prefillCfg)
      return { feasible: false, reason: `two layer buffers + one prompt's activations exceed VRAM (${gb(vram)} GB)` };
  }
  const dc = decodeCfg ?? prefillCfg!;
  const pc = prefillCfg ?? dc;
  return {
    feasible: true,
    plan: {
      hostBatchSeqs: N,
      prefill: phasePlan(ctx, 'prefill', Math.max(1, Bp), N, pc),
      decode: phasePlan(ctx, 'decode', N, N, dc),
      notes: [why],
    },
  };
}

export const moeLightningLike = defineThroughputPolicy({
  name: 'moe-lightning-like',
  summary:
    'CPU attention over host KV, GPU FFN, layer weights pipelined (CGOPipe); batch: its prefill as one batch on the GPU (MoE-Gen’s MoE-Lightning*) or its released optimiser',
  params: Params,
  createThroughput: (p): ThroughputPolicy => {
    if (p.setup === 'moe-lens') {
      const { setup: _s, batching: _b, cpuCores, ...rest } = p;
      const lp = LensLightningParams.parse({ ...rest, ...(cpuCores !== 'all' ? { cpuCores } : {}) });
      return { name: 'moe-lightning-like', plan: (ctx) => lensLightningPlan(ctx, lp) };
    }
    return { name: 'moe-lightning-like', plan: (ctx) => plan(ctx, p) };
  },
});
