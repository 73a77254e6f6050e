/**
 * vllm-like in the MoE-Lens setup (`setup: moe-lens`): vLLM v0 with `--cpu-offload-gb` as the
 * MoE-Lens paper runs it ("performs all computations, including GEMMs and attention, on the GPU
 * while paging KV cache to and from CPU memory"), on the same cost lookups and page size as
 * `moe-lens`:
 * - paged KV on the GPU: gpuMemoryUtilization × VRAM − resident weights − one offloaded layer's
 *   copy − activations of `maxNumBatchedTokens` tokens;
 * - vLLM's scheduler (`vllm-scheduler.ts`: continuous batching, preemption of the newest, swap to
 *   `swapSpaceGiB` of CPU swap space, recompute when it is full, swap-in before new prompts);
 * - the serial-offload pipeline (`sim/throughput/pipelines/serial-offload.ts`): offloaded weights
 *   (default all, `cpuOffloadGB` unset) copied layer by layer right before the layer runs.
 * SIMPLIFIED: offloading is an even fraction of every layer (vLLM offloads whole parameters from
 * the first layers on); no CUDA graphs; the paged-attention kernel's efficiency is the cost
 * model's attention; swap copies are serial before the step. vLLM version, offload size, swap
 * space and max_num_seqs are NOT STATED by the paper: defaults are vLLM's (max_num_seqs 256,
 * swap_space 4 GiB, gpu_memory_utilization 0.9, watermark 0.01, block size 16) and
 * maxNumBatchedTokens 8192.
 */
import { z } from 'zod';
import { ACTIVATION_BYTES } from '../../sim/cost/cost-model.ts';
import type { Execution, ExecutionContext, IterationRun } from '../../sim/throughput/iteration.ts';
import { KvPages } from '../../sim/throughput/kv-pages.ts';
import { HIDDEN_VECTORS_PER_TOKEN, modelModules } from '../../sim/throughput/memory-model.ts';
import { layerCosts } from '../../sim/throughput/pipelines/layer-costs.ts';
import { SerialOffloadPipe } from '../../sim/throughput/pipelines/serial-offload.ts';
import type { PlanContext } from '../../sim/throughput/policy.ts';
import { defaultPassConfig, type PlanResult, type RunPlan } from '../../sim/throughput/types.ts';
import { continuousBooks, continuousReport, timelineEvery } from './continuous-run.ts';
import { VllmScheduler } from './vllm-scheduler.ts';

const GIB = 1024 ** 3;
/** vLLM's block manager `watermark` default (vllm/config.py CacheConfig). */
const VLLM_WATERMARK = 0.01;
const r6 = (x: number) => Math.round(x * 1e6) / 1e6;

export const LensVllmParams = z
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
export type LensVllmParams = z.infer<typeof LensVllmParams>;

function vllmMemory(
  ctx: PlanContext,
  p: LensVllmParams,
): { gpuKvBytes: number; offloaded: number; residentBytes: number; otherBytes: number } | string {
  const { model, hardware: hw } = ctx;
  const mm = modelModules(model);
  const layerTotal = mm.denseBytes.reduce(
    (a, b, l) => a + b + (mm.moeIndexOfLayer[l]! >= 0 ? mm.experts * mm.expertBytes : 0),
    0,
  );
  const maxLayer = Math.max(
    ...mm.denseBytes.map((b, l) => b + (mm.moeIndexOfLayer[l]! >= 0 ? mm.experts * mm.expertBytes : 0)),
  );
  const off = p.cpuOffloadGB !== undefined ? Math.min(1, (p.cpuOffloadGB * 1e9) / layerTotal) : 1;
  const vram = (p.usableVramGiB !== undefined ? p.usableVramGiB * GIB : hw.gpu.vramBytes) * p.gpuMemoryUtilization;
  const T = p.maxNumBatchedTokens;
  const d = model.hiddenSize;
  // The throughput memory model's activations (HIDDEN_VECTORS_PER_TOKEN·d + E per token) + the fused-MoE workspace of T·k tokens.
  const act =
    T * (HIDDEN_VECTORS_PER_TOKEN * d + model.experts) * ACTIVATION_BYTES +
    T * model.topK * (2 * model.expertIntermediateSize + d) * ACTIVATION_BYTES;
  const resident = mm.residentBytes + (1 - off) * layerTotal;
  const gpuKvBytes = vram - resident - off * maxLayer - act;
  const page = model.derived.kvBytesPerToken * p.pageTokens;
  if (gpuKvBytes < page)
    return `vLLM: ${(vram / 1e9).toFixed(1)} GB (× utilisation) − resident weights ${(resident / 1e9).toFixed(1)} GB − layer copy ${((off * maxLayer) / 1e9).toFixed(1)} GB − activations ${(act / 1e9).toFixed(1)} GB leaves no KV page`;
  return { gpuKvBytes, offloaded: off, residentBytes: resident, otherBytes: off * maxLayer + act };
}

/** The vLLM execution (scheduler over GPU and swap pages, serial-offload pipeline). */
function vllmExecution(
  x: ExecutionContext,
  p: LensVllmParams,
  m: Exclude<ReturnType<typeof vllmMemory>, string>,
  plan: RunPlan,
): Execution {
  const { model, hardware: hw, cost } = x;
  const reqs = x.requests;
  const lc = layerCosts(model, hw, cost, hw.cpu.cores);
  const kvBytesPerToken = model.derived.kvBytesPerToken;
  const pageBytes = kvBytesPerToken * p.pageTokens;
  const pages = Math.floor(m.gpuKvBytes / pageBytes);
  if (pages < 1) throw new Error(`vllm-like: GPU KV of ${m.gpuKvBytes} bytes holds no page of ${pageBytes} bytes`);
  const gpu = new KvPages(pages, p.pageTokens, kvBytesPerToken, 'gpuKv', x.sink);
  const swap = new KvPages(
    Math.max(1, Math.floor((p.swapSpaceGiB * GIB) / pageBytes)),
    p.pageTokens,
    kvBytesPerToken,
    'swapKv',
    x.sink,
  );
  const limits = {
    maxNumSeqs: p.maxNumSeqs,
    maxNumBatchedTokens: p.maxNumBatchedTokens,
    watermark: VLLM_WATERMARK,
    preemption: p.preemption,
  };
  const scheduler = new VllmScheduler(reqs, gpu, swap, limits);
  const pipeline = new SerialOffloadPipe(lc, m.offloaded);
  const books = continuousBooks(gpu, timelineEvery(reqs, p.timelineEvery), scheduler, pipeline.totals);
  const report = (run: IterationRun) => {
    const r = books.result(run);
    const hostBytes = model.derived.totalBytes + p.swapSpaceGiB * GIB;
    const schedule = {
      gpuKvGB: r6(m.gpuKvBytes / 1e9),
      offloadedFraction: r6(m.offloaded),
      swapOuts: r.swapOuts,
      pageTokens: p.pageTokens,
    };
    const vramCap = p.usableVramGiB !== undefined ? p.usableVramGiB * GIB : hw.gpu.vramBytes;
    const peaks = {
      vram: {
        weights: m.residentBytes,
        kvPages: r.peakPages * pageBytes,
        total: m.residentBytes + m.otherBytes + r.peakPages * pageBytes,
        capacity: vramCap,
      },
      host: { weights: model.derived.totalBytes, total: hostBytes, capacity: hw.hostDramBytes },
    };
    // "all computations, including GEMMs and attention, on the GPU" (the plan's ω = 1 is the memory checks').
    const attentionOnCpu = { prefill: 0, decode: 0 };
    return {
      ...continuousReport(plan, r, hw.cpu.cores, schedule, peaks),
      routing: 'fallback' as const,
      attentionOnCpu,
    };
  };
  return { scheduler, pipeline, afterIteration: books.afterIteration, report };
}

/** The plan of `vllm-like` with `setup: moe-lens` (see the header). */
export function lensVllmPlan(ctx: PlanContext, p: LensVllmParams): PlanResult {
  const name = 'vllm-like';
  if (!ctx.workload.phases.prefill || !ctx.workload.phases.decode) {
    return {
      feasible: false,
      reason: `${name} (setup moe-lens) runs prefill and decode of the whole workload: it runs only with executor phase both`,
    };
  }
  const m = vllmMemory(ctx, p);
  if (typeof m === 'string') return { feasible: false, reason: m };
  const hostBytes = ctx.model.derived.totalBytes + p.swapSpaceGiB * GIB;
  if (hostBytes > ctx.hardware.hostDramBytes)
    return {
      feasible: false,
      reason: `vLLM: weights + ${p.swapSpaceGiB} GiB of swap space (${(hostBytes / 1e9).toFixed(1)} GB) exceed host DRAM ${(ctx.hardware.hostDramBytes / 1e9).toFixed(1)} GB`,
    };
  const reqs = ctx.requests ?? [];
  const longest = Math.max(...reqs.map((r) => r.promptTokens + r.outputTokens));
  const pageBytes = ctx.model.derived.kvBytesPerToken * p.pageTokens;
  if (Math.ceil(longest / p.pageTokens) * pageBytes > m.gpuKvBytes)
    return {
      feasible: false,
      reason: `vLLM: a sequence of ${longest} tokens needs more KV than the GPU's ${(m.gpuKvBytes / 1e9).toFixed(2)} GB`,
    };
  const c = { ...defaultPassConfig(ctx.model.layers), omega: 1, weightGranularity: 'layer' as const, weightSlots: 2 };
  const N = Math.min(p.maxNumSeqs, ctx.workload.sequences);
  const plan: RunPlan = {
    hostBatchSeqs: N,
    prefill: { batchSeqs: 1, config: c },
    decode: { batchSeqs: N, config: c },
    notes: [
      `GPU KV ${(m.gpuKvBytes / 1e9).toFixed(2)} GB; ${(m.offloaded * 100).toFixed(0)} % of layer weights offloaded`,
    ],
  };
  return { feasible: true, plan: { ...plan, execution: (x) => vllmExecution(x, p, m, plan) } };
}
