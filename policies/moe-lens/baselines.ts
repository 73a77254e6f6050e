/**
 * The MoE-Lens paper's baselines on the MoE-Lens executor (`sim/lens/baselines.ts`): the same cost
 * lookups, testbed and page accounting as `moe-lens`, so the comparison is the scheduler's and
 * the pipeline's. Both report the same metrics as `moe-lens` (`metrics.schedule.*`).
 *
 * `lens-moe-lightning` — MoE-Lightning (arXiv 2411.11217) as its released artifact runs
 * (caoshiyi/artifacts `fastmoe/backend/optimizer.py`, settings card §4):
 * - CPU memory setting (MoE-Lens §7 "Baselines"): `normal` = model + KV + 30 GB, `large` =
 *   1.25 × (model + KV); `best` (default) simulates both and keeps the faster (the paper reports
 *   "the best performance of MoE-Lightning"). Of that, the optimiser uses ≤ 0.8 × (host) and
 *   ≤ 0.86 × the GPU memory. Both memory sizes are read in GiB, as the optimiser reads its
 *   `--cpu-mem` / `--gpu-mem` (the paper's "GB" numbers passed to it).
 * - HRM batch: the smallest N whose per-layer CPU attention or GPU FFN time reaches the layer's
 *   weight-transfer time (`lightningRoofline`, as the `moe-lightning-like` plugin's `released`
 *   mode: throughput stops rising there), capped by host memory (weights + pinned double expert
 *   buffer + N × (KV of p + g tokens + hidden states of p tokens) ≤ 0.8 × setting) and GPU memory
 *   (its own accounting: non-expert layer weights resident + double expert buffer + hidden states of N in decode, and the
 *   residual of the whole batch's prompts, N·p·h·2 B, in prefill ≤ 0.86 × VRAM — `gpu_home_p`).
 *   The plan uses p = the mean prompt (rounded up): the paper's Table 1 labels MoE-Lightning's
 *   plans by p = 98, MTBench's mean (card §5 E1).
 * - Micro-batches μ: the power of two ≤ 16 with the shortest CGOPipe stage at the mid-generation
 *   shape on the cost model (the optimiser searches micro-batch sizes in its LP).
 * - Run: fixed batches, KV reserved at admission for prompt + max generation, whole batch
 *   prefilled, then decoded to the end, then the next batch (no prefill/decode overlap, no
 *   paging); non-expert weights resident on the GPU, experts streamed per layer.
 * SIMPLIFIED: the LP over (N, μ, A_g, F_g, r_w, r_c) is reduced to A_g = 0, F_g = 1, r_w = r_c = 0
 * (the typical policy) with the roofline choice of N; the optimiser's analytic kernel rates are
 * replaced by our cost model; the fused-MoE intermediate buffer is not counted in VRAM.
 *
 * `lens-vllm` — vLLM v0 with `--cpu-offload-gb` (the paper: "its CPU offload option"; "performs
 * all computations, including GEMMs and attention, on the GPU while paging KV cache to and from
 * CPU memory"):
 * - paged KV on the GPU: gpuMemoryUtilization × VRAM − resident weights − one offloaded layer's
 *   copy − activations of `maxNumBatchedTokens` tokens; the same page size b as MoE-Lens;
 * - continuous batching with vLLM v0's default scheduler (prefill-only iterations first, then
 *   decode of every running sequence; preemption of the newest; swap to `swapSpaceGB` of CPU
 *   swap space, recompute when it is full; swap-in before new prompts);
 * - offloaded weights (default: all layer weights, `cpuOffloadGB` unset) copied layer by layer
 *   right before the layer runs, not overlapped with compute.
 * SIMPLIFIED: offloading is an even fraction of every layer (vLLM offloads whole parameters from
 * the first layers on); no CUDA graphs; the paged-attention kernel's efficiency is the cost
 * model's attention; swap copies are serial before the step. vLLM version, offload size, swap
 * space and max_num_seqs are NOT STATED by the paper: defaults are vLLM's (max_num_seqs 256,
 * swap_space 4 GiB, gpu_memory_utilization 0.9, watermark 0.01, block size 16) and the existing
 * `vllm-like` plugin's maxNumBatchedTokens 8192.
 */
import { z } from 'zod';
import type { ThroughputOutcome } from '../../sim/throughput/throughput-executor.ts';
import { lensPhaseTotals, totals } from './totals.ts';
import type { PlanContext, RunContext, ThroughputPolicy } from '../../sim/throughput/policy.ts';
import { defaultPassConfig, type PlanResult } from '../../sim/throughput/types.ts';
import { HIDDEN_VECTORS_PER_TOKEN, modelModules } from '../../sim/throughput/memory-model.ts';
import { ACTIVATION_BYTES } from '../../sim/cost/cost-model.ts';
import { largestSatisfying } from '../../sim/throughput/search.ts';
import { cgoStage, runLightning, runVllm, type BaselineRunResult } from '../../sim/lens/baselines.ts';
import { lensCosts } from '../../sim/lens/costs.ts';
import { lightningRoofline, RELEASED_GPU_MEMORY_FRACTION, RELEASED_HOST_MEMORY_FRACTION } from '../throughput/moe-lightning-like.ts';
import { defineThroughputPolicy } from '../throughput/define.ts';

/** MoE-Lens §7 "Baselines": the normal CPU-memory setting adds 30 GB for execution overhead. */
const NORMAL_OVERHEAD_BYTES = 30e9;
/** MoE-Lens §7 "Baselines": the large CPU-memory setting is 1.25 × (model + KV). */
const LARGE_FACTOR = 1.25;
const GIB = 1024 ** 3;

const r6 = (x: number) => Math.round(x * 1e6) / 1e6;

const needsBoth = (ctx: PlanContext, name: string): PlanResult | undefined =>
  !ctx.workload.phases.prefill || !ctx.workload.phases.decode ? { feasible: false, reason: `${name} runs prefill and decode of the whole workload: it runs only with executor phase both` } : undefined;

const planOf = (ctx: PlanContext, N: number, notes: string[]): PlanResult => {
  const c = { ...defaultPassConfig(ctx.model.layers), omega: 1, weightGranularity: 'layer' as const, weightSlots: 2 };
  return { feasible: true, plan: { hostBatchSeqs: N, prefill: { batchSeqs: N, config: c }, decode: { batchSeqs: N, config: c }, notes } };
};

/** The outcome every lens-executor baseline reports (the same fields as `moe-lens`). */
function outcome(ctx: RunContext, name: string, planned: PlanResult, r: BaselineRunResult, cores: number, schedule: Record<string, unknown>, peaks: ThroughputOutcome['peaks']): ThroughputOutcome {
  const { prefill, decode } = lensPhaseTotals(r, cores);
  decode.d2hBytes = r.d2hBytes;
  return {
    policy: name, requests: ctx.requests.length, promptTokens: ctx.workload.promptTokens, outputTokensMax: ctx.workload.outputTokens,
    feasible: true, ...(planned.feasible ? { plan: planned.plan } : {}),
    hostBatches: Math.max(1, r.batches), prefill, decode, endNs: r.endNs, simulatedPasses: r.iterations, memoHits: 0, events: r.iterations,
    peaks, checks: {}, routing: 'fallback', hardware: ctx.hardware,
    schedule: {
      iterations: r.iterations,
      pages: r.pages,
      peakPages: r.peakPages,
      meanPageOccupancy: r6(r.meanOccupancy),
      preemptions: r.preemptions,
      recomputedTokens: r.recomputedTokens,
      dramBoundStages: r.dramBoundStages,
      ...schedule,
      timeline: r.timeline.map(([t, pg, tok]) => [r6(t), pg, tok]),
    },
  };
}

const infeasible = (ctx: RunContext, name: string, reason: string): ThroughputOutcome => ({
  policy: name, requests: ctx.requests.length, promptTokens: ctx.workload.promptTokens, outputTokensMax: ctx.workload.outputTokens,
  feasible: false, infeasibleReason: reason, hostBatches: 0, prefill: totals(), decode: totals(), endNs: 0, simulatedPasses: 0, memoHits: 0, events: 0,
  peaks: { vram: {}, host: {} }, checks: {}, routing: 'fallback', hardware: ctx.hardware,
});

const timelineEvery = (reqs: RunContext['requests'], given: number) => (given > 0 ? given : Math.max(1, Math.floor((reqs.length > 0 ? Math.max(...reqs.map((r) => r.outputTokens)) * 4 : 1) / 200)));

// ---------------------------------------------------------------------------------------------
// lens-moe-lightning
// ---------------------------------------------------------------------------------------------

const LightningParams = z
  .object({
    /** The paper's KV-cache size (GB, 10⁹ B): sets the CPU-memory setting (model + KV + 30 GB, or 1.25 × (model + KV)). Default: host DRAM − weights. */
    kvCapacityGB: z.number().positive().optional(),
    memorySetting: z.enum(['normal', 'large', 'best']).default('best'),
    /**
     * Prompt length the optimiser plans with and the KV reserved per sequence: `mean` (default; the
     * paper's Table 1 labels MoE-Lightning's plans by MTBench's mean p = 98; each sequence reserves
     * its own prompt + max generation) or `max` (prompts padded to the longest, as a static batch
     * of FlexGen lineage would; every sequence reserves max prompt + max generation). NOT STATED.
     */
    planPrompt: z.enum(['mean', 'max']).default('mean'),
    pageTokens: z.number().int().positive().default(16),
    /** Fix N (default: the HRM roofline choice). */
    batchSeqs: z.number().int().positive().optional(),
    /** Fix μ (default: searched over powers of two ≤ 16). */
    microBatches: z.number().int().positive().optional(),
    contention: z.boolean().default(true),
    cpuCores: z.number().int().positive().optional(),
    /**
     * Usable VRAM in GiB (the paper fills the rest of the A40 with random tensors: "16 GB" for 8x7B,
     * "24 GB" for 8x22B / DBRX; MoE-Lightning's optimiser reads its `--gpu-mem` in GiB, `GB = 1 << 30`
     * in optimizer.py). Default: the GPU's.
     */
    usableVramGiB: z.number().positive().optional(),
    timelineEvery: z.number().int().nonnegative().default(0),
  })
  .strict();
type LightningParams = z.infer<typeof LightningParams>;

interface LightningChoice {
  readonly setting: 'normal' | 'large';
  readonly cpuMemBytes: number;
  readonly kvBudgetBytes: number;
  readonly N: number;
  readonly mu: number;
  readonly hostCap: number;
  readonly gpuCap: number;
  readonly roofline: number;
  /** VRAM its plan holds at the peak (the optimiser's accounting: w_other, two experts buffers, the batch's hidden states). */
  readonly gpuBytes: number;
  readonly why: string;
}

function lightningChoose(ctx: PlanContext, p: LightningParams, setting: 'normal' | 'large', pMean: number, sequences: number): LightningChoice | string {
  const { model, hardware: hw, cost } = ctx;
  const mm = modelModules(model);
  const W = model.derived.totalBytes;
  const kv = p.kvCapacityGB !== undefined ? p.kvCapacityGB * 1e9 : hw.hostDramBytes - W;
  // The setting in GB (model + KV [+ 30]) is given to MoE-Lightning's `--cpu-mem`, which its
  // optimiser reads in GiB (`cmem = cpu_mem * GB`, GB = 1 << 30): 7.4 % more bytes than 10⁹-B GB.
  const cpuMem = (GIB / 1e9) * (setting === 'normal' ? W + kv + NORMAL_OVERHEAD_BYTES : LARGE_FACTOR * (W + kv));
  if (cpuMem > hw.hostDramBytes) return `MoE-Lightning ${setting} setting needs ${(cpuMem / 1e9).toFixed(1)} GB of host memory, the testbed has ${(hw.hostDramBytes / 1e9).toFixed(1)} GB`;
  const g = ctx.workload.outputTokens;
  const layerExperts = mm.experts * mm.expertBytes;
  const d = model.hiddenSize;
  // optimizer.py: cpu_home = wi·l·wc + 4(s+n)·h_kv·bls·l·cc + 2·h1·bls·s; cpu_w = 2·wi; ≤ 0.8·cmem.
  const hostBudget = RELEASED_HOST_MEMORY_FRACTION * cpuMem - W - 2 * layerExperts;
  const perSeqHost = model.derived.kvBytesPerToken * (pMean + g) + ACTIVATION_BYTES * d * pMean;
  // Its KV never exceeds the KV capacity the row gives every system (the same pages as MoE-Lens).
  const kvBudget = Math.min(kv, hostBudget);
  const hostCap = Math.floor(kvBudget / perSeqHost);
  // gpu_home_d = w_other + 2·2·h1·bls; gpu_w = 2·wi; ≤ 0.86·gmem.
  const vram = p.usableVramGiB !== undefined ? p.usableVramGiB * GIB : hw.gpu.vramBytes;
  // The optimiser's GPU accounting: non-expert layer weights (w_other) resident; embeddings and LM
  // head are not in its constraint.
  const dense = mm.denseBytes.reduce((a, b) => a + b, 0);
  const gpuBudget = RELEASED_GPU_MEMORY_FRACTION * vram - dense - 2 * layerExperts;
  // Decode: gpu_home_d's hidden states 2·2·h1·bls. Prefill: gpu_home_p keeps the whole batch's
  // residual on the GPU, h1·bls·2·s ("currently residual is not offloaded to cpu"); the
  // micro-batch terms (2·h1·gbs·2·s, the fused-MoE `inter`) are left out (gbs ≪ bls).
  const gpuCapDecode = Math.floor(gpuBudget / (2 * ACTIVATION_BYTES * d));
  const gpuCapPrefill = Math.floor(gpuBudget / (ACTIVATION_BYTES * d * pMean));
  const gpuCap = Math.min(gpuCapDecode, gpuCapPrefill);
  if (hostCap < 1) return `MoE-Lightning ${setting} setting: 0.8 × ${(cpuMem / 1e9).toFixed(1)} GB cannot hold the weights, the pinned expert buffers and one sequence's KV`;
  if (gpuCap < 1) return `MoE-Lightning: 0.86 × ${(vram / 1e9).toFixed(1)} GB of VRAM cannot hold the non-expert weights and a double expert buffer`;
  const cores = p.cpuCores ?? hw.cpu.cores;
  const wctx: PlanContext = { ...ctx, workload: { ...ctx.workload, promptTokens: pMean } };
  const cap = Math.max(1, Math.min(sequences, hostCap, gpuCap));
  let N: number;
  let roofline = 0;
  let why: string;
  if (p.batchSeqs !== undefined) {
    N = Math.min(p.batchSeqs, cap);
    why = `batch ${N} (fixed)`;
  } else {
    const saturated = (n: number) => {
      const r = lightningRoofline(wctx, n, cores);
      return Math.max(r.cpuNs, r.gpuNs) >= r.commNs;
    };
    roofline = largestSatisfying(1, cap, (n) => !saturated(n)) + 1;
    N = Math.max(1, Math.min(cap, roofline));
    why = N === roofline ? `HRM roofline batch ${N} (host memory allows ${hostCap}, GPU ${gpuCap})` : `batch ${N} bounded by ${N === hostCap ? 'host' : N === gpuCap ? 'GPU' : 'workload'} memory (roofline ${roofline})`;
  }
  // μ: the shortest CGOPipe stage at the mid-generation shape (per MoE layer, no contention).
  let mu = p.microBatches ?? 1;
  if (p.microBatches === undefined) {
    const lc = lensCosts(model, hw, cost, cores);
    const l = Math.max(0, mm.moeIndexOfLayer.findIndex((m) => m >= 0));
    // At the last decode step (the largest CPU attention of the batch).
    const ctxTok = N * (pMean + g);
    let best = Number.POSITIVE_INFINITY;
    for (let m = 1; m <= Math.min(16, N); m *= 2) {
      const per = { decode: Math.ceil(N / m), decodeCtx: ctxTok / m, prefillTokens: 0, prefillCtx: 0 };
      const s = cgoStage(m * lc.cpuNs(per), 0, m * lc.gpuLayerNs(l, per), m, 0, lc.transferNs[l]!, undefined).stageNs;
      if (s < best - 1e-6) {
        best = s;
        mu = m;
      }
    }
  }
  const gpuBytes = dense + 2 * layerExperts + N * ACTIVATION_BYTES * d * Math.max(2, pMean);
  return { setting, cpuMemBytes: cpuMem, kvBudgetBytes: kvBudget, N, mu, hostCap, gpuCap, roofline, gpuBytes, why };
}

function lightningPolicy(p: LightningParams): ThroughputPolicy {
  const name = 'lens-moe-lightning';
  const settings = (): ('normal' | 'large')[] => (p.memorySetting === 'best' ? ['normal', 'large'] : [p.memorySetting]);
  const plan = (ctx: PlanContext): PlanResult => {
    const both = needsBoth(ctx, name);
    if (both) return both;
    const c = settings().map((s) => lightningChoose(ctx, p, s, ctx.workload.promptTokens, ctx.workload.sequences));
    const ok = c.find((x): x is LightningChoice => typeof x !== 'string');
    if (!ok) return { feasible: false, reason: c[0] as string };
    return planOf(ctx, ok.N, [ok.why]);
  };
  return {
    name,
    plan,
    run: (ctx: RunContext): ThroughputOutcome => {
      const planned = plan(ctx);
      if (!planned.feasible) return infeasible(ctx, name, planned.reason);
      const reqs = ctx.requests;
      const pMean = p.planPrompt === 'max' ? ctx.workload.promptTokens : Math.ceil(reqs.reduce((a, r) => a + r.promptTokens, 0) / Math.max(1, reqs.length));
      const cores = p.cpuCores ?? ctx.hardware.cpu.cores;
      let best: { r: BaselineRunResult; c: LightningChoice } | undefined;
      const tried: string[] = [];
      for (const s of settings()) {
        const c = lightningChoose(ctx, p, s, pMean, reqs.length);
        if (typeof c === 'string') {
          tried.push(c);
          continue;
        }
        if (c.cpuMemBytes > ctx.hardware.hostDramBytes) {
          tried.push(`${s}: its ${(c.cpuMemBytes / 1e9).toFixed(1)} GB of CPU memory exceed the host's ${(ctx.hardware.hostDramBytes / 1e9).toFixed(1)} GB`);
          continue;
        }
        const kvPageBytes = ctx.model.derived.kvBytesPerToken * p.pageTokens;
        const longest = Math.max(...reqs.map((q) => Math.max(q.promptTokens, p.planPrompt === 'max' ? pMean : 0) + ctx.workload.outputTokens));
        if (Math.ceil(longest / p.pageTokens) > Math.floor(c.kvBudgetBytes / kvPageBytes)) {
          tried.push(`${s}: a sequence reserving ${longest} tokens does not fit its ${(c.kvBudgetBytes / 1e9).toFixed(2)} GB of KV`);
          continue;
        }
        const r = runLightning({
          model: ctx.model, hardware: ctx.hardware, cost: ctx.cost, requests: reqs, ...(ctx.sink ? { sink: ctx.sink } : {}),
          pageTokens: p.pageTokens, cpuCores: cores, timelineEvery: timelineEvery(reqs, p.timelineEvery),
          kvCapacityBytes: c.kvBudgetBytes, batchSeqs: c.N, microBatches: c.mu, contention: p.contention,
          reserveOutput: ctx.workload.outputTokens, residentDense: true, ...(p.planPrompt === 'max' ? { reservePrompt: pMean } : {}),
        });
        tried.push(`${s}: N ${c.N}, μ ${c.mu}, ${r6(r.throughputTokPerS)} tok/s`);
        if (!best || r.throughputTokPerS > best.r.throughputTokPerS) best = { r, c };
      }
      if (!best) return infeasible(ctx, name, tried.join('; '));
      const { r, c } = best;
      const kvPage = ctx.model.derived.kvBytesPerToken * p.pageTokens;
      const W = ctx.model.derived.totalBytes;
      const notes = [c.why, `memory setting ${c.setting} (${(c.cpuMemBytes / 1e9).toFixed(1)} GB); μ ${c.mu}; plan prompt p = ${pMean} (${p.planPrompt}); KV reserved for prompt + ${ctx.workload.outputTokens} per sequence`, `settings tried: ${tried.join('; ')}`];
      return outcome(ctx, name, { ...planned, plan: { ...(planned.feasible ? planned.plan : ({} as never)), hostBatchSeqs: c.N, notes } } as PlanResult, r, cores, {
        memorySetting: c.setting,
        cpuMemoryGB: r6(c.cpuMemBytes / 1e9),
        batchSeqs: c.N,
        microBatches: c.mu,
        hostCapSeqs: c.hostCap,
        gpuCapSeqs: c.gpuCap,
        rooflineSeqs: c.roofline,
        batches: r.batches,
        pageTokens: p.pageTokens,
        /** Table 1's metric: (weights + peak KV) / the setting's CPU memory. */
        cpuMemoryUse: r6((W + r.peakPages * kvPage) / c.cpuMemBytes),
      }, {
        vram: { total: c.gpuBytes, capacity: p.usableVramGiB !== undefined ? p.usableVramGiB * GIB : ctx.hardware.gpu.vramBytes },
        host: { weights: W, kvPages: r.peakPages * kvPage, total: W + r.peakPages * kvPage, capacity: c.cpuMemBytes },
      });
    },
  };
}

export const lensMoeLightning = defineThroughputPolicy({
  name: 'lens-moe-lightning',
  summary: 'MoE-Lightning-like on the MoE-Lens executor: HRM roofline batch under its CPU-memory setting, fixed batches with KV reserved for p + g, CGOPipe decode, no prefill/decode overlap, no paging',
  params: LightningParams,
  createThroughput: (p) => lightningPolicy(p),
});

// ---------------------------------------------------------------------------------------------
// lens-vllm
// ---------------------------------------------------------------------------------------------

const VllmParams = z
  .object({
    pageTokens: z.number().int().positive().default(16),
    maxNumSeqs: z.number().int().positive().default(256),
    maxNumBatchedTokens: z.number().int().positive().default(8192),
    gpuMemoryUtilization: z.number().positive().max(1).default(0.9),
    /** vLLM `--swap-space` (GiB, its default 4). */
    swapSpaceGiB: z.number().nonnegative().default(4),
    preemption: z.enum(['swap', 'recompute']).default('swap'),
    /** vLLM `--cpu-offload-gb` (GB of layer weights offloaded; default all of them). */
    cpuOffloadGB: z.number().nonnegative().optional(),
    /** Usable VRAM in GiB (as `lens-moe-lightning`'s; the paper's "16 GB" / "24 GB"). Default: the GPU's. */
    usableVramGiB: z.number().positive().optional(),
    timelineEvery: z.number().int().nonnegative().default(0),
  })
  .strict();
type VllmParams = z.infer<typeof VllmParams>;

function vllmMemory(ctx: PlanContext, p: VllmParams): { gpuKvBytes: number; offloaded: number; residentBytes: number; otherBytes: number } | string {
  const { model, hardware: hw } = ctx;
  const mm = modelModules(model);
  const layerTotal = mm.denseBytes.reduce((a, b, l) => a + b + (mm.moeIndexOfLayer[l]! >= 0 ? mm.experts * mm.expertBytes : 0), 0);
  const maxLayer = Math.max(...mm.denseBytes.map((b, l) => b + (mm.moeIndexOfLayer[l]! >= 0 ? mm.experts * mm.expertBytes : 0)));
  const off = p.cpuOffloadGB !== undefined ? Math.min(1, (p.cpuOffloadGB * 1e9) / layerTotal) : 1;
  const vram = (p.usableVramGiB !== undefined ? p.usableVramGiB * GIB : hw.gpu.vramBytes) * p.gpuMemoryUtilization;
  const T = p.maxNumBatchedTokens;
  const d = model.hiddenSize;
  // The throughput memory model's activations (HIDDEN_VECTORS_PER_TOKEN·d + E per token) + the fused-MoE workspace of T·k tokens.
  const act = T * (HIDDEN_VECTORS_PER_TOKEN * d + model.experts) * ACTIVATION_BYTES + T * model.topK * (2 * model.expertIntermediateSize + d) * ACTIVATION_BYTES;
  const resident = mm.residentBytes + (1 - off) * layerTotal;
  const gpuKvBytes = vram - resident - off * maxLayer - act;
  const page = model.derived.kvBytesPerToken * p.pageTokens;
  if (gpuKvBytes < page) return `vLLM: ${(vram / 1e9).toFixed(1)} GB (× utilisation) − resident weights ${(resident / 1e9).toFixed(1)} GB − layer copy ${((off * maxLayer) / 1e9).toFixed(1)} GB − activations ${(act / 1e9).toFixed(1)} GB leaves no KV page`;
  return { gpuKvBytes, offloaded: off, residentBytes: resident, otherBytes: off * maxLayer + act };
}

function vllmPolicy(p: VllmParams): ThroughputPolicy {
  const name = 'lens-vllm';
  const plan = (ctx: PlanContext): PlanResult => {
    const both = needsBoth(ctx, name);
    if (both) return both;
    const m = vllmMemory(ctx, p);
    if (typeof m === 'string') return { feasible: false, reason: m };
    return planOf(ctx, Math.min(p.maxNumSeqs, ctx.workload.sequences), [`GPU KV ${(m.gpuKvBytes / 1e9).toFixed(2)} GB; ${(m.offloaded * 100).toFixed(0)} % of layer weights offloaded`]);
  };
  return {
    name,
    plan,
    run: (ctx: RunContext): ThroughputOutcome => {
      const planned = plan(ctx);
      if (!planned.feasible) return infeasible(ctx, name, planned.reason);
      const m = vllmMemory(ctx, p) as Exclude<ReturnType<typeof vllmMemory>, string>;
      const hostBytes = ctx.model.derived.totalBytes + p.swapSpaceGiB * GIB;
      if (hostBytes > ctx.hardware.hostDramBytes) return infeasible(ctx, name, `vLLM: weights + ${p.swapSpaceGiB} GiB of swap space (${(hostBytes / 1e9).toFixed(1)} GB) exceed host DRAM ${(ctx.hardware.hostDramBytes / 1e9).toFixed(1)} GB`);
      const reqs = ctx.requests;
      const longest = Math.max(...reqs.map((r) => r.promptTokens + r.outputTokens));
      const pageBytes = ctx.model.derived.kvBytesPerToken * p.pageTokens;
      if (Math.ceil(longest / p.pageTokens) * pageBytes > m.gpuKvBytes) return infeasible(ctx, name, `vLLM: a sequence of ${longest} tokens needs more KV than the GPU's ${(m.gpuKvBytes / 1e9).toFixed(2)} GB`);
      const r = runVllm({
        model: ctx.model, hardware: ctx.hardware, cost: ctx.cost, requests: reqs, ...(ctx.sink ? { sink: ctx.sink } : {}),
        pageTokens: p.pageTokens, timelineEvery: timelineEvery(reqs, p.timelineEvery),
        gpuKvBytes: m.gpuKvBytes, swapSpaceBytes: p.swapSpaceGiB * GIB, offloadedFraction: m.offloaded,
        limits: { maxNumSeqs: p.maxNumSeqs, maxNumBatchedTokens: p.maxNumBatchedTokens, watermark: 0.01, preemption: p.preemption },
      });
      return outcome(ctx, name, planned, r, ctx.hardware.cpu.cores, {
        gpuKvGB: r6(m.gpuKvBytes / 1e9),
        offloadedFraction: r6(m.offloaded),
        swapOuts: r.swapOuts,
        pageTokens: p.pageTokens,
      }, {
        vram: { weights: m.residentBytes, kvPages: r.peakPages * pageBytes, total: m.residentBytes + m.otherBytes + r.peakPages * pageBytes, capacity: p.usableVramGiB !== undefined ? p.usableVramGiB * GIB : ctx.hardware.gpu.vramBytes },
        host: { weights: ctx.model.derived.totalBytes, total: hostBytes, capacity: ctx.hardware.hostDramBytes },
      });
    },
  };
}

export const lensVllm = defineThroughputPolicy({
  name: 'lens-vllm',
  summary: 'vLLM-like on the MoE-Lens executor: continuous batching, paged GPU KV with swap/recompute preemption, weights copied over PCIe before every layer (no overlap)',
  params: VllmParams,
  createThroughput: (p) => vllmPolicy(p),
});
