/**
 * MoE-Lens's execution on the throughput executor: its resource-aware scheduler (`scheduler.ts`)
 * over a paged host KV pool (`KvPages`, a `MemoryPool`) and the VSLPipe pipeline
 * (`sim/throughput/pipelines/vslpipe.ts`, closed form or events), run by the family's loop
 * (`runIterations`); every iteration is simulated (only pure cost lookups are memoised). Beside
 * the run: the pipeline profiler (n_real: a line fit of one MoE layer's GPU time against tokens,
 * against that layer's transfer time; paper §6.3), the occupancy timeline and the analytic model
 * (`analytic.ts`). Trace: KV pages through the pool; each preemption iteration as a blocked slice
 * on the `prefill scheduler` track; admit, first token and finish of every request.
 */
import type { HardwareProfile, ModelProfile } from '../../hardware-profiles/types.ts';
import type { CostModel } from '../../sim/cost/types.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import type { TraceSink } from '../../sim/observe/trace-sink.ts';
import { runIterations, type IterationLoop, type IterationRun } from '../../sim/throughput/iteration.ts';
import { KvPages } from '../../sim/throughput/kv-pages.ts';
import { layerCosts, type LayerCosts } from '../../sim/throughput/pipelines/layer-costs.ts';
import { VslPipe, type PipeTotals } from '../../sim/throughput/pipelines/vslpipe.ts';
import type { EventPipeStats } from '../../sim/throughput/pipelines/vslpipe-events.ts';
import { lensAnalytic, profilerNReal, type LensAnalytic } from './analytic.ts';
import { LensScheduler, type Iteration } from './scheduler.ts';

export interface LensSettings {
  /** Host KV capacity, bytes. */
  readonly kvCapacityBytes: number;
  /** Page size b, token slots. */
  readonly pageTokens: number;
  /** n_real override (default: the profiler's). */
  readonly nReal?: number;
  /** Cores for CPU attention (default all). */
  readonly cpuCores?: number;
  /** Host-DRAM contention between CPU attention and DMA. */
  readonly contention: boolean;
  /** Cap on sequences holding KV at once (executor.batchSeqs). */
  readonly maxRunning?: number;
  /** Occupancy timeline samples kept (every k-th iteration). */
  readonly timelineEvery?: number;
  /** VSLPipe: `closed-form` (default) or `events`. */
  readonly pipeline?: 'closed-form' | 'events';
  /** Data-mover packet size in `events` mode (default the paper's 100 MB). */
  readonly packetBytes?: number;
  /** `events` mode only: model the D2H leg. */
  readonly qkvD2H?: boolean;
}

export interface LensRequest {
  readonly id: number;
  readonly promptTokens: number;
  readonly outputTokens: number;
}

export interface LensRunInput {
  readonly model: ModelProfile;
  readonly hardware: HardwareProfile;
  readonly cost: CostModel;
  readonly requests: readonly LensRequest[];
  readonly settings: LensSettings;
  readonly sink?: TraceSink;
}

export interface LensRunResult extends PipeTotals {
  readonly endNs: number;
  readonly iterations: number;
  readonly generatedTokens: number;
  readonly preemptions: number;
  readonly recomputedTokens: number;
  readonly pages: number;
  readonly peakPages: number;
  readonly meanOccupancy: number;
  readonly nReal: number;
  /** (time s, pages in use, generated, prefill tokens, preemptions so far) every `timelineEvery` iterations. */
  readonly timeline: readonly (readonly [number, number, number, number, number])[];
  readonly analytic: LensAnalytic;
  readonly throughputTokPerS: number;
  readonly pipeline: 'closed-form' | 'events';
  readonly eventStats?: EventPipeStats;
}

/** n_real from the pipeline profiler on the first MoE layer (or layer 0). */
function profile(lc: LayerCosts): { nReal: number; slopeS: number } {
  const profLayer = Math.max(
    0,
    lc.mm.moeIndexOfLayer.findIndex((m) => m >= 0),
  );
  const pts: [number, number][] = [1024, 2048, 4096, 8192, 16384].map((n) => [
    n,
    lc.gpuLayerNs(profLayer, { decode: n, decodeCtx: 0, prefillTokens: 0, prefillCtx: 0 }) / 1e9,
  ]);
  return profilerNReal(pts, lc.transferNs[profLayer]! / 1e9);
}

/** The MoE-Lens execution; `result(run)` gives its figures after `runIterations`. */
export function lensExecution(x: LensRunInput): IterationLoop & { result(run: IterationRun): LensRunResult } {
  const { model, hardware: hw, cost, settings: st } = x;
  const cores = st.cpuCores ?? hw.cpu.cores;
  const lc = layerCosts(model, hw, cost, cores);
  const prof = profile(lc);
  const nReal = st.nReal ?? prof.nReal;
  const kvBytesPerToken = model.derived.kvBytesPerToken;
  const pages = Math.floor(st.kvCapacityBytes / (kvBytesPerToken * st.pageTokens));
  const pool = new KvPages(pages, st.pageTokens, kvBytesPerToken, 'hostKv', x.sink);
  const scheduler = new LensScheduler(x.requests, pool, nReal, st.maxRunning);
  const mode = st.pipeline ?? 'closed-form';
  const pipeline = new VslPipe(lc, hw, {
    contention: st.contention,
    mode,
    cores,
    ...(st.packetBytes !== undefined ? { packetBytes: st.packetBytes } : {}),
    ...(st.qkvD2H ? { qkvD2H: true } : {}),
  });
  const every = st.timelineEvery ?? 1;
  const timeline: [number, number, number, number, number][] = [];
  let occIntegral = 0;
  let iterations = 0;
  const sample = (now: number) =>
    timeline.push([
      now / 1e9,
      pool.usedPages,
      scheduler.generatedTokens,
      pipeline.totals.prefillTokens,
      scheduler.preemptions,
    ]);
  const afterIteration = (it: Iteration, startNs: Ns, endNs: Ns): void => {
    occIntegral += pool.usedPages * (endNs - startNs);
    iterations++;
    if (iterations % every === 0) sample(endNs);
    // Preemption iterations on the timeline: prefill admission is blocked for the iteration.
    if (it.preempted.length > 0 && x.sink?.onBlocked) {
      const reason = `preempted ${it.preempted.length} sequences (no admission)`;
      x.sink.onBlocked({ stream: 'prefill scheduler', reason, startNs, endNs });
    }
  };
  const result = (run: IterationRun): LensRunResult => {
    const now = run.endNs;
    const eventStats = pipeline.eventStats();
    if (timeline.length === 0 || timeline[timeline.length - 1]![0] !== now / 1e9) sample(now);
    return {
      ...pipeline.totals,
      endNs: now,
      iterations: run.iterations,
      generatedTokens: scheduler.generatedTokens,
      preemptions: scheduler.preemptions,
      recomputedTokens: scheduler.recomputedTokens,
      pages,
      peakPages: pool.peakUsed,
      meanOccupancy: now > 0 ? occIntegral / now / pages : 0,
      nReal,
      timeline,
      analytic: analyticOf(x, lc, prof.slopeS, nReal, pages),
      throughputTokPerS: now > 0 ? scheduler.generatedTokens / (now / 1e9) : 0,
      pipeline: mode,
      ...(eventStats ? { eventStats } : {}),
    };
  };
  return {
    scheduler,
    pipeline,
    afterIteration: afterIteration as IterationLoop['afterIteration'],
    result,
  };
}

/** Analytic model beside the run (batch means; settings card §8). */
function analyticOf(x: LensRunInput, lc: LayerCosts, slopeS: number, nReal: number, pages: number): LensAnalytic {
  const K = x.requests.length;
  const pMean = x.requests.reduce((a, r) => a + r.promptTokens, 0) / Math.max(1, K);
  const gMean = x.requests.reduce((a, r) => a + Math.max(1, r.outputTokens), 0) / Math.max(1, K);
  const modelBytes = lc.layerBytes.reduce((a, b) => a + b, 0);
  const deltaS = lc.transferNs.reduce((a, b) => a + b, 0) / 1e9;
  return lensAnalytic({
    promptTokens: pMean,
    genTokens: Math.max(1, Math.round(gMean)),
    pageTokens: x.settings.pageTokens,
    kvCapacityTokens: pages * x.settings.pageTokens,
    sequences: Math.max(1, K),
    modelBytes,
    ioBytesPerS: modelBytes / deltaS,
    tGpuTokPerS: 1 / (slopeS * lc.mm.layers),
    tGpuItTokens: nReal,
    experts: x.model.experts,
    topK: x.model.topK,
    gpuFlops: x.hardware.gpu.bf16FlopsPerSec,
    kvCapacityBytes: x.settings.kvCapacityBytes,
  });
}

/** A whole MoE-Lens run through the family's loop (tests, ad hoc checks). */
export function runLens(x: LensRunInput): LensRunResult {
  const e = lensExecution(x);
  return e.result(runIterations(e, x.sink, (i) => x.requests[i]!.id));
}
