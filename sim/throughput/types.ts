/**
 * Plain data of the throughput family (DESIGN §7 "Throughput pipeline executor", §8 MoE-Gen):
 * the shape of a pass (what work it does), the configuration a policy chooses for it (how the
 * work is batched, split and buffered), and what a policy's plan for a whole run is.
 *
 * Vocabulary:
 * - a **pass** is one forward step of every layer over a set of sequences: in prefill their
 *   (padded) prompts, in decode one new token each;
 * - the **host batch** (N) is the set of sequences whose KV caches are held at once (in host
 *   DRAM, or on the GPU for GPU-KV systems); decode runs N sequences per pass (MoE-Gen's
 *   accumulated batch B in decode), prefill fills the host batch with passes of `batchSeqs`;
 * - **module-based batching** (MoE-Gen): attention runs in micro-batches of b_a sequences, the
 *   experts once per layer over every token of the pass, in GEMM chunks of b_e tokens;
 * - **model-based batching** (DeepSpeed, FlexGen, MoE-Lightning, vLLM, llama.cpp): every module
 *   runs per micro-batch.
 *
 * Units are in field names: tokens, seqs (sequences), bytes; times are ns.
 */
import type { ExecutionFactory } from './iteration.ts';

export type Phase = 'prefill' | 'decode';
export const PHASES: readonly Phase[] = ['prefill', 'decode'];

/** What one pass computes (independent of how). */
export interface PassShape {
  readonly phase: Phase;
  /** Sequences in the pass (≥ 1). */
  readonly seqs: number;
  /** New tokens per sequence: the padded prompt in prefill, 1 in decode. */
  readonly newTokens: number;
  /** Tokens already in each sequence's KV cache before the pass (0 in prefill). */
  readonly pastTokens: number;
  /** Sequences whose KV is held at once (the host batch); sizes GPU-resident KV. */
  readonly hostSeqs: number;
  /** Tokens of KV reserved per sequence (padded prompt + longest output): sizes GPU-resident KV. */
  readonly reserveTokens: number;
}

/** How a pass is executed: what a throughput policy chooses. Validated by `validatePassConfig`. */
export interface PassConfig {
  /** GPU attention micro-batch b_a, in sequences (≥ 1). */
  readonly attnMicroSeqs: number;
  /**
   * ω: fraction of the pass's sequences whose attention (scores over the KV cache) runs on the
   * CPU, reading the host KV in place, in parallel with GPU attention over the rest. In
   * `perMicroBatch` mode only 0 (all GPU) or 1 (all CPU, MoE-Lightning's CGOPipe) are allowed.
   */
  readonly omega: number;
  /** Cores used by each CPU task (CPU attention, CPU layers). */
  readonly cpuCores: number;
  /** Leading layers whose KV cache lives on the GPU (no KV transfers); the others keep it in host DRAM. */
  readonly kvGpuLayers: number;
  /** GPU staging buffers for host KV copied in for GPU attention (≥ 1). */
  readonly kvBuffers: number;
  /** `accumulated`: module-based (experts once per layer over the whole pass); `perMicroBatch`: model-based. */
  readonly expertBatching: 'accumulated' | 'perMicroBatch';
  /** Expert GEMM chunk b_e, tokens (≥ 1): an expert over n tokens runs as ⌈n / b_e⌉ kernels. */
  readonly expertChunkTokens: number;
  /**
   * `expert`: each expert's weights are a transfer of their own into an expert buffer of
   * `expertSlots` experts, streamed while the previous expert computes (MoE-Gen); the dense
   * module (attention, router, shared experts or dense FFN) of a layer goes into `weightSlots`
   * dense buffers. `layer`: the whole layer (dense module + every expert) is one transfer into
   * `weightSlots` layer buffers (DeepSpeed, FlexGen, MoE-Lightning, vLLM).
   */
  readonly weightGranularity: 'expert' | 'layer';
  /** Expert buffer S_expert, in experts (`expert` granularity; ≥ 1). */
  readonly expertSlots: number;
  /** Dense-module buffers (`expert` granularity) or layer buffers (`layer`), ≥ 1. */
  readonly weightSlots: number;
  /** Whether a layer's weights may load while the previous layer computes (false: vLLM's UVA reads). */
  readonly prefetch: boolean;
  /** Stream every expert of a layer whether or not a token routes to it (MoE-Gen's fixed order). */
  readonly streamAllExperts: boolean;
  /** S_params: bytes of parameters kept resident in spare VRAM (besides embedding and LM head). */
  readonly cachedParamBytes: number;
  /** What S_params caches first: `denseFirst` (every layer's dense module, then experts layer by layer) or `layers` (whole leading layers). */
  readonly cacheOrder: 'denseFirst' | 'layers';
  /** Leading layers computed on the GPU; the rest run on the CPU with weights read in host DRAM (llama.cpp). */
  readonly gpuLayers: number;
}

/** The chosen configuration of one phase and its predicted pass time (DESIGN §8 search). */
export interface SearchReport {
  /** Sequences per pass (decode: the accumulated batch B). */
  readonly B: number;
  readonly ba: number;
  readonly be: number;
  readonly omega: number;
  readonly sExpertBytes: number;
  readonly sParamsBytes: number;
  /** Critical path of the pass's task DAG (cost-model durations, no contention), seconds. */
  readonly predictedPassS: number;
  /** Tokens already in each sequence's KV in the pass the prediction is for (decode: prompt + half the output). */
  readonly refPastTokens: number;
  /** Configurations whose critical path was evaluated. */
  readonly evaluated?: number;
  /** When ω was fixed by a parameter: the ω an unconstrained search picks, and its predicted pass time. */
  readonly omegaAuto?: number;
  readonly predictedPassSAuto?: number;
}

/** A phase of a run plan. */
export interface PhasePlan {
  /** Sequences per pass. In decode this is the host batch (every resident sequence steps together). */
  readonly batchSeqs: number;
  readonly config: PassConfig;
  readonly search?: SearchReport;
}

/** A policy's plan for a run. */
export interface RunPlan {
  /** Sequences whose KV is held at once (≥ 1). */
  readonly hostBatchSeqs: number;
  readonly prefill: PhasePlan;
  readonly decode: PhasePlan;
  /** Free-form remarks shown in results (e.g. "batch capped by GPU KV memory"). */
  readonly notes?: readonly string[];
  /**
   * How the run executes: an iteration scheduler and a pipeline (`iteration.ts`). Default: the
   * host-batch loop over pass DAGs (`host-batch.ts`).
   */
  readonly execution?: ExecutionFactory;
}

export type PlanResult =
  | { readonly feasible: true; readonly plan: RunPlan }
  | { readonly feasible: false; readonly reason: string };

/** What a policy knows about the workload when it plans. */
export interface WorkloadSummary {
  readonly sequences: number;
  /** Padded prompt length P (every prompt is processed as P tokens). */
  readonly promptTokens: number;
  /** Longest output O (a host batch decodes until its longest output is done). */
  readonly outputTokens: number;
  /** Which phases the run simulates. */
  readonly phases: { readonly prefill: boolean; readonly decode: boolean };
  /** A batch size the experiment fixes (executor.batchSeqs): used as B where the policy can hold it. */
  readonly fixedBatchSeqs?: number;
}

/** Defaults of a `PassConfig`: MoE-Gen's shape with every knob at a neutral value. */
export function defaultPassConfig(layers: number): PassConfig {
  return {
    attnMicroSeqs: 64,
    omega: 0,
    cpuCores: 1,
    kvGpuLayers: 0,
    kvBuffers: 2,
    expertBatching: 'accumulated',
    expertChunkTokens: 2048,
    weightGranularity: 'expert',
    expertSlots: 2,
    weightSlots: 1,
    prefetch: true,
    streamAllExperts: true,
    cachedParamBytes: 0,
    cacheOrder: 'denseFirst',
    gpuLayers: layers,
  };
}

/** Totals over every pass (or iteration) of a phase (memoised passes counted as many times as they occur). */
export interface PhaseTotals {
  passes: number;
  ns: number;
  /** Tokens processed (prefill: sequences × P) and tokens generated. */
  processedTokens: number;
  generatedTokens: number;
  gpuBusyNs: number;
  gpuBusyNsByCategory: Record<string, number>;
  h2dBusyNs: number;
  d2hBusyNs: number;
  h2dBytes: number;
  d2hBytes: number;
  cpuBusyCoreNs: number;
  hostDramBytes: number;
  routedTokenSlots: number;
  expertLayerPairs: number;
  activatedPairs: number;
  /** Σ over passes of the (MoE layer, expert) pairs with a token in the pass, each once (MoE-CAP's S_activated). */
  passActivatedPairs: number;
}

/** Zeroed totals (every key, in the order results.json prints them). */
export const emptyTotals = (): PhaseTotals => ({
  passes: 0,
  ns: 0,
  processedTokens: 0,
  generatedTokens: 0,
  gpuBusyNs: 0,
  gpuBusyNsByCategory: {},
  h2dBusyNs: 0,
  d2hBusyNs: 0,
  h2dBytes: 0,
  d2hBytes: 0,
  cpuBusyCoreNs: 0,
  hostDramBytes: 0,
  routedTokenSlots: 0,
  expertLayerPairs: 0,
  activatedPairs: 0,
  passActivatedPairs: 0,
});
