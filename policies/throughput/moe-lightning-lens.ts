/**
 * moe-lightning-like in the MoE-Lens setup (`setup: moe-lens`; MoE-Lens arXiv 2504.09345 §7
 * "Baselines", Fig. 11): MoE-Lightning (arXiv 2411.11217) as its released artifact runs it
 * (caoshiyi/artifacts `fastmoe/backend/optimizer.py`, settings card §4), on the same cost lookups,
 * testbed and page accounting as `moe-lens`, so the comparison is the scheduler's and pipeline's:
 * - CPU memory setting (MoE-Lens §7): `normal` = model + KV + 30 GB, `large` = 1.25 × (model + KV);
 *   `best` (default) simulates both and keeps the faster (the paper reports "the best performance
 *   of MoE-Lightning"). Of that, the optimiser uses ≤ 0.8 × (host) and ≤ 0.86 × the GPU memory;
 *   both read in GiB, as the optimiser reads its `--cpu-mem` / `--gpu-mem`.
 * - HRM batch: the smallest N whose per-layer CPU attention or GPU FFN time reaches the layer's
 *   weight-transfer time (`lightningRoofline`), capped by host memory (weights + pinned double
 *   expert buffer + N × (KV of p + g tokens + hidden states of p tokens) ≤ 0.8 × setting) and GPU
 *   memory (non-expert weights + double expert buffer + hidden states ≤ 0.86 × VRAM). p = the
 *   mean prompt (rounded up): Table 1 labels MoE-Lightning's plans by p = 98 (card §5 E1).
 * - μ: the power of two ≤ 16 with the shortest CGOPipe stage at the last decode step.
 * - Execution: the fixed-batch scheduler (`fixed-batch-scheduler.ts`: KV reserved at admission
 *   for prompt + max generation, whole batch prefilled then decoded, no overlap, no paging) over
 *   the CGOPipe closed form (`sim/throughput/pipelines/cgopipe.ts`), non-expert weights resident.
 * SIMPLIFIED: the LP over (N, μ, A_g, F_g, r_w, r_c) is reduced to A_g = 0, F_g = 1, r_w = r_c = 0
 * with the roofline choice of N; the optimiser's kernel rates are our cost model's; the fused-MoE
 * intermediate buffer is not counted in VRAM.
 */
import { z } from 'zod';
import { ACTIVATION_BYTES } from '../../sim/cost/cost-model.ts';
import {
  runIterations,
  type Execution,
  type ExecutionContext,
  type IterationRun,
} from '../../sim/throughput/iteration.ts';
import { KvPages } from '../../sim/throughput/kv-pages.ts';
import { type ModelModules, modelModules } from '../../sim/throughput/memory-model.ts';
import { CgoPipe, cgoStage } from '../../sim/throughput/pipelines/cgopipe.ts';
import { layerCosts } from '../../sim/throughput/pipelines/layer-costs.ts';
import type { PlanContext } from '../../sim/throughput/policy.ts';
import { largestSatisfying } from '../../sim/throughput/search.ts';
import { defaultPassConfig, type PlanResult, type RunPlan } from '../../sim/throughput/types.ts';
import { continuousBooks, continuousReport, timelineEvery, type ContinuousRunResult } from './continuous-run.ts';
import { LightningScheduler } from './fixed-batch-scheduler.ts';
import {
  lightningRoofline,
  RELEASED_GPU_MEMORY_FRACTION,
  RELEASED_HOST_MEMORY_FRACTION,
} from './lightning-roofline.ts';

/** MoE-Lens §7 "Baselines": the normal CPU-memory setting adds 30 GB for execution overhead. */
const NORMAL_OVERHEAD_BYTES = 30e9;
/** MoE-Lens §7 "Baselines": the large CPU-memory setting is 1.25 × (model + KV). */
const LARGE_FACTOR = 1.25;
const GIB = 1024 ** 3;
const r6 = (x: number) => Math.round(x * 1e6) / 1e6;

export const LensLightningParams = z
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
export type LensLightningParams = z.infer<typeof LensLightningParams>;

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

/**
 * μ when not given: the micro-batch count (1, 2, 4, … up to 16 and N) whose CGOPipe stage of the
 * first MoE layer is shortest at the last decode step (the largest CPU attention of the batch),
 * each sequence holding `seqTokens` of context; no contention.
 */
function shortestStageMicroBatches(
  ctx: PlanContext,
  mm: ModelModules,
  cores: number,
  N: number,
  seqTokens: number,
): number {
  let mu = 1;
  const lc = layerCosts(ctx.model, ctx.hardware, ctx.cost, cores);
  const l = Math.max(
    0,
    mm.moeIndexOfLayer.findIndex((m) => m >= 0),
  );
  const ctxTok = N * seqTokens;
  let best = Number.POSITIVE_INFINITY;
  for (let m = 1; m <= Math.min(16, N); m *= 2) {
    const per = { decode: Math.ceil(N / m), decodeCtx: ctxTok / m, prefillTokens: 0, prefillCtx: 0 };
    const s = cgoStage(m * lc.cpuNs(per), 0, m * lc.gpuLayerNs(l, per), m, 0, lc.transferNs[l]!, undefined).stageNs;
    if (s < best - 1e-6) {
      best = s;
      mu = m;
    }
  }
  return mu;
}

function lightningChoose(
  ctx: PlanContext,
  p: LensLightningParams,
  setting: 'normal' | 'large',
  pMean: number,
  sequences: number,
): LightningChoice | string {
  const { model, hardware: hw } = ctx;
  const mm = modelModules(model);
  const W = model.derived.totalBytes;
  const kv = p.kvCapacityGB !== undefined ? p.kvCapacityGB * 1e9 : hw.hostDramBytes - W;
  // The setting in GB (model + KV [+ 30]) is given to MoE-Lightning's `--cpu-mem`, which its
  // optimiser reads in GiB (`cmem = cpu_mem * GB`, GB = 1 << 30): 7.4 % more bytes than 10⁹-B GB.
  const cpuMem = (GIB / 1e9) * (setting === 'normal' ? W + kv + NORMAL_OVERHEAD_BYTES : LARGE_FACTOR * (W + kv));
  if (cpuMem > hw.hostDramBytes)
    return `MoE-Lightning ${setting} setting needs ${(cpuMem / 1e9).toFixed(1)} GB of host memory, the testbed has ${(hw.hostDramBytes / 1e9).toFixed(1)} GB`;
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
  if (hostCap < 1)
    return `MoE-Lightning ${setting} setting: 0.8 × ${(cpuMem / 1e9).toFixed(1)} GB cannot hold the weights, the pinned expert buffers and one sequence's KV`;
  if (gpuCap < 1)
    return `MoE-Lightning: 0.86 × ${(vram / 1e9).toFixed(1)} GB of VRAM cannot hold the non-expert weights and a double expert buffer`;
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
    why =
      N === roofline
        ? `HRM roofline batch ${N} (host memory allows ${hostCap}, GPU ${gpuCap})`
        : `batch ${N} bounded by ${N === hostCap ? 'host' : N === gpuCap ? 'GPU' : 'workload'} memory (roofline ${roofline})`;
  }
  // μ: the shortest CGOPipe stage at the mid-generation shape (per MoE layer, no contention).
  const mu = p.microBatches ?? shortestStageMicroBatches(ctx, mm, cores, N, pMean + g);
  const gpuBytes = dense + 2 * layerExperts + N * ACTIVATION_BYTES * d * Math.max(2, pMean);
  return { setting, cpuMemBytes: cpuMem, kvBudgetBytes: kvBudget, N, mu, hostCap, gpuCap, roofline, gpuBytes, why };
}

/** The fixed-batch execution of one choice; `result` after the loop. */
function lightningExecution(ctx: ExecutionContext, p: LensLightningParams, c: LightningChoice, pMean: number) {
  const { model, hardware: hw, cost } = ctx;
  const reqs = ctx.requests;
  const cores = p.cpuCores ?? hw.cpu.cores;
  const lc = layerCosts(model, hw, cost, cores);
  const kvBytesPerToken = model.derived.kvBytesPerToken;
  const pages = Math.floor(c.kvBudgetBytes / (kvBytesPerToken * p.pageTokens));
  const pool = new KvPages(Math.max(1, pages), p.pageTokens, kvBytesPerToken, 'hostKv', ctx.sink);
  const reservePrompt = p.planPrompt === 'max' ? pMean : undefined;
  const scheduler = new LightningScheduler(reqs, pool, c.N, ctx.workload.outputTokens, reservePrompt);
  const dramBytesPerNs = p.contention ? hw.cpu.dramBytesPerSec / 1e9 : undefined;
  const pipeline = new CgoPipe(lc, {
    microBatches: c.mu,
    residentDense: true,
    ...(dramBytesPerNs !== undefined ? { dramBytesPerNs } : {}),
  });
  const books = continuousBooks(pool, timelineEvery(reqs, p.timelineEvery), scheduler, pipeline.totals);
  return { scheduler, pipeline, afterIteration: books.afterIteration, result: books.result, pages };
}

/** The plan of `moe-lightning-like` with `setup: moe-lens` (see the header). */
export function lensLightningPlan(ctx: PlanContext, p: LensLightningParams): PlanResult {
  const name = 'moe-lightning-like';
  if (!ctx.workload.phases.prefill || !ctx.workload.phases.decode) {
    return {
      feasible: false,
      reason: `${name} (setup moe-lens) runs prefill and decode of the whole workload: it runs only with executor phase both`,
    };
  }
  const reqs = ctx.requests ?? [];
  const pMean =
    p.planPrompt === 'max'
      ? ctx.workload.promptTokens
      : Math.ceil(reqs.reduce((a, r) => a + r.promptTokens, 0) / Math.max(1, reqs.length));
  const settings: ('normal' | 'large')[] = p.memorySetting === 'best' ? ['normal', 'large'] : [p.memorySetting];
  const tried: string[] = [];
  const feasible: LightningChoice[] = [];
  for (const s of settings) {
    const c = lightningChoose(ctx, p, s, pMean, reqs.length);
    if (typeof c === 'string') {
      tried.push(c);
      continue;
    }
    const kvPageBytes = ctx.model.derived.kvBytesPerToken * p.pageTokens;
    const longest = Math.max(
      ...reqs.map((q) => Math.max(q.promptTokens, p.planPrompt === 'max' ? pMean : 0) + ctx.workload.outputTokens),
    );
    if (Math.ceil(longest / p.pageTokens) > Math.floor(c.kvBudgetBytes / kvPageBytes)) {
      tried.push(
        `${s}: a sequence reserving ${longest} tokens does not fit its ${(c.kvBudgetBytes / 1e9).toFixed(2)} GB of KV`,
      );
      continue;
    }
    feasible.push(c);
  }
  // `best`: each feasible setting is run (the pipeline as the plan's estimator) and the faster kept.
  let best: { c: LightningChoice; tokPerS: number } | undefined;
  const xctx = (): ExecutionContext => ({ ...ctx, requests: reqs, counts: () => undefined });
  for (const c of feasible) {
    const e = lightningExecution(xctx(), p, c, pMean);
    const r = e.result(runIterations(e));
    tried.push(`${c.setting}: N ${c.N}, μ ${c.mu}, ${r6(r.throughputTokPerS)} tok/s`);
    if (!best || r.throughputTokPerS > best.tokPerS) best = { c, tokPerS: r.throughputTokPerS };
  }
  if (!best) return { feasible: false, reason: tried.join('; ') };
  const c = best.c;
  const cfg = { ...defaultPassConfig(ctx.model.layers), omega: 1, weightGranularity: 'layer' as const, weightSlots: 2 };
  const notes = [
    c.why,
    `memory setting ${c.setting} (${(c.cpuMemBytes / 1e9).toFixed(1)} GB); μ ${c.mu}; plan prompt p = ${pMean} (${p.planPrompt}); KV reserved for prompt + ${ctx.workload.outputTokens} per sequence`,
    `settings tried: ${tried.join('; ')}`,
  ];
  const plan: RunPlan = {
    hostBatchSeqs: c.N,
    prefill: { batchSeqs: 1, config: cfg },
    decode: { batchSeqs: c.N, config: cfg },
    notes,
  };
  const execution = (x: ExecutionContext): Execution => {
    const e = lightningExecution(x, p, c, pMean);
    const report = (run: IterationRun) => lightningReport(x, p, plan, c, e.result(run));
    return { scheduler: e.scheduler, pipeline: e.pipeline, afterIteration: e.afterIteration, report };
  };
  return { feasible: true, plan: { ...plan, execution } };
}

function lightningReport(
  x: ExecutionContext,
  p: LensLightningParams,
  plan: RunPlan,
  c: LightningChoice,
  r: ContinuousRunResult,
) {
  const kvPage = x.model.derived.kvBytesPerToken * p.pageTokens;
  const W = x.model.derived.totalBytes;
  const cores = p.cpuCores ?? x.hardware.cpu.cores;
  const schedule = {
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
  };
  const peaks = {
    vram: {
      total: c.gpuBytes,
      capacity: p.usableVramGiB !== undefined ? p.usableVramGiB * GIB : x.hardware.gpu.vramBytes,
    },
    host: { weights: W, kvPages: r.peakPages * kvPage, total: W + r.peakPages * kvPage, capacity: c.cpuMemBytes },
  };
  // CGOPipe: decode attention on the CPU; the whole batch's prefill on the GPU (`layerCosts.gpuLayerNs`).
  const attentionOnCpu = { prefill: 0, decode: 1 };
  return { ...continuousReport(plan, r, cores, schedule, peaks), routing: 'fallback' as const, attentionOnCpu };
}
