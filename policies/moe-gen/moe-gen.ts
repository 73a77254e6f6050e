/**
 * moe-gen-g and moe-gen-h — MoE-Gen's module-based batching (DESIGN §8; Xu et al., "MoE-Gen:
 * High-Throughput MoE Inference on a Single GPU with Module-Based Batching", arXiv 2503.09716).
 *
 * Reproduces: tokens accumulated in host memory and launched per module with different batch
 * sizes — attention in micro-batches of b_a sequences (GPU attention copies each micro-batch's
 * KV in from host DRAM), the experts once per layer over the whole accumulated batch B, in GEMM
 * chunks of b_e tokens; a layer's experts run one after another, each expert's weights streamed
 * over PCIe (into an expert buffer of S_expert) while the previous one computes, every expert
 * every pass in a fixed order; one dense-module buffer sized for one layer; spare VRAM caches
 * parameters (S_params); the KV cache lives entirely in host DRAM (new KV copied out after each
 * attention micro-batch). `moe-gen-h` runs a fraction ω of the batch's attention on the CPU,
 * reading the host KV in place, in parallel with GPU attention over the rest; `moe-gen-g` is
 * GPU-only attention (ω = 0). Batch sizes, buffers and ω come from the paper's search
 * (`search.ts`): maximise B / T with T the critical path of the pass DAG, under host-memory and
 * VRAM constraints; in decode B is as large as host memory allows.
 *
 * When to use: offline batch generation on one GPU with a large host memory (DESIGN §8 "judged
 * by": throughput against DeepSpeed-like, FlexGen-like, MoE-Lightning-like, vLLM-like).
 *
 * Known gaps versus the original: the released code has no optimiser at all — per-model
 * hard-coded batch sizes, B = host-KV slots, ω behind an environment variable
 * (reference-facts §1b.1); we implement the paper's search instead, as a coordinate search over
 * grids. Prefill attention is GPU-only. Passes do not overlap (no prefetch of the next pass's
 * first layer during the LM head). Hidden states of the whole pass stay on the GPU (the code
 * keeps them in host memory between modules). DeepSeek-V3/R1 FP8 weights are modelled by the
 * `deepseek-r1-fp8` profile (half the bytes), without the dequantisation kernel's time.
 */
import { z } from 'zod';
import type { ThroughputPolicy } from '../../sim/throughput/policy.ts';
import { defineThroughputPolicy } from '../throughput/define.ts';
import { moeGenPlan, type MoeGenSettings } from './search.ts';

const positiveInt = z.number().int().positive();

/** Parameters both variants share: fixed values for the search's axes, for experiments. */
const common = {
  /** Host KV staging buffers on the GPU: 'auto' = 3 for GQA, 2 for MLA (as MoE-Gen's code). */
  kvBuffers: z.union([z.literal('auto'), positiveInt]).default('auto'),
  /** Fix the accumulated decode batch B (default: as large as host memory allows). */
  B: positiveInt.optional(),
  /** Fix the attention micro-batch b_a (sequences). */
  ba: positiveInt.optional(),
  /** Fix the expert GEMM chunk b_e (tokens). */
  be: positiveInt.optional(),
  /** Fix the expert buffer S_expert (experts). */
  expertSlots: positiveInt.optional(),
  /** Fix S_params (GiB of cached parameters); default: all spare VRAM. */
  sParamsGiB: z.number().nonnegative().optional(),
  /** Fix the sequences per prefill pass. */
  prefillBatchSeqs: positiveInt.optional(),
};

const GParams = z.object(common).strict();
const HParams = z
  .object({
    ...common,
    /** ω, the share of attention on the CPU: a number in [0, 1], or 'auto' (searched). */
    omega: z.union([z.literal('auto'), z.number().min(0).max(1)]).default('auto'),
    /** Grid step of the ω search. */
    omegaStep: z.number().positive().max(1).default(0.1),
    /** CPU cores for CPU attention. */
    cpuCores: z.union([z.literal('all'), positiveInt]).default('all'),
  })
  .strict();

function policy(name: string, settings: MoeGenSettings): ThroughputPolicy {
  return { name, plan: (ctx) => moeGenPlan(ctx, settings) };
}

const axes = (p: z.infer<typeof GParams>) => ({
  ...(p.B !== undefined ? { B: p.B } : {}),
  ...(p.ba !== undefined ? { ba: p.ba } : {}),
  ...(p.be !== undefined ? { be: p.be } : {}),
  ...(p.expertSlots !== undefined ? { expertSlots: p.expertSlots } : {}),
  ...(p.sParamsGiB !== undefined ? { sParamsGiB: p.sParamsGiB } : {}),
  ...(p.prefillBatchSeqs !== undefined ? { prefillBatchSeqs: p.prefillBatchSeqs } : {}),
});

export const moeGenG = defineThroughputPolicy({
  name: 'moe-gen-g',
  summary: 'MoE-Gen, GPU-only attention (ω = 0): module-based batching, host KV, searched B/b_a/b_e/S_expert/S_params',
  params: GParams,
  createThroughput: (p) =>
    policy('moe-gen-g', { omega: 0, omegaStep: 0.1, kvBuffers: p.kvBuffers, cpuCores: 1, ...axes(p) }),
});

export const moeGenH = defineThroughputPolicy({
  name: 'moe-gen-h',
  summary:
    'MoE-Gen with CPU attention on a fraction ω of the batch (ω searched or fixed), host KV, module-based batching',
  params: HParams,
  createThroughput: (p) =>
    policy('moe-gen-h', {
      omega: p.omega,
      omegaStep: p.omegaStep,
      kvBuffers: p.kvBuffers,
      cpuCores: p.cpuCores,
      ...axes(p),
    }),
});
