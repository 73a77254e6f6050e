/**
 * moe-lens — MoE-Lens (Yuan, Ma, Talati, "MoE-Lens: Towards the Hardware Limit of High-Throughput
 * MoE LLM Serving Under Resource Constraints", arXiv 2504.09345; DESIGN §8 "MoE-Lens").
 *
 * Reproduces: all weights in host DRAM, streamed every iteration through a 2-layer GPU buffer
 * (2W/L); KV cache paged in host DRAM (N pages of b slots, `KvPages` on a MemoryPool); decode
 * attention on the CPU, prefill attention on the GPU (§6.4); a resource-aware scheduler (decode
 * first, then whole prompts up to n_real; preemption of the newest decoding sequences when the next
 * decode step lacks pages, re-prefill ahead of new prompts; `scheduler.ts`); a pipeline profiler
 * for n_real; VSLPipe with two token groups α/β; the analytic model (Eqs. 2–14) computed beside
 * every run and reported as `metrics.analytic.*` with the simulated throughput and their ratio.
 * Its plan's execution (`execution.ts`) is its scheduler over the VSLPipe pipeline
 * (`sim/throughput/pipelines/vslpipe.ts`), run by the family's loop; every iteration simulated.
 *
 * SIMPLIFICATIONS: the VSLPipe iteration is a closed-form pipeline over cost-model durations (per
 * layer: max(CPU α, GPU β) + max(CPU β, GPU α) against the next layer's weight transfer), not the
 * task-DAG pass of `pass-dag.ts`; host-DRAM contention is a closed form of the two-flow
 * proportional share per stage (`sharedStage`); routing is even (every expert's weights are
 * streamed anyway); no KV write-back cost; whole-prompt prefill (no chunking); activation bytes are
 * added to the link time. The page size b is NOT STATED by the paper: default 16 (vLLM's default,
 * settings card §10). KV capacity default: host DRAM − weights. Each iteration's duration is
 * rounded up to integer ns once.
 *
 * `pipeline: events` (default `closed-form`) runs the VSLPipe iteration at event level instead
 * (`sim/throughput/pipelines/vslpipe-events.ts`): α/β phases on the CPU pool and GPU, the next
 * layer's weights through a data mover in the paper's 100 MB packets (§6.5) at low priority, the
 * attention outputs H2D at high priority, host DRAM as the fluid share; its runs add
 * `schedule.pipeline`, `dmaDramSlowedS`, `dramContendedS` and the activation copies' queueing delay.
 *
 * The paper's baselines: `moe-lightning-like` and `vllm-like` with `setup: moe-lens`
 * (`policies/throughput/moe-lightning-lens.ts`, `vllm-lens.ts`), on the same cost lookups.
 */
import { z } from 'zod';
import type { Execution, ExecutionContext, ExecutionReport, IterationRun } from '../../sim/throughput/iteration.ts';
import { lensPhaseTotals } from './totals.ts';
import type { PlanContext, ThroughputPolicy } from '../../sim/throughput/policy.ts';
import { defaultPassConfig, type PlanResult, type RunPlan } from '../../sim/throughput/types.ts';
import { hostKvBytesPerSeq, modelModules, vramNeeded } from '../../sim/throughput/memory-model.ts';
import { prefillShape, worstDecodeShape } from '../../sim/throughput/search.ts';
import { lensExecution, type LensRunResult, type LensSettings } from './execution.ts';
import { defineThroughputPolicy } from '../throughput/define.ts';

const Params = z
  .object({
    /** Host KV capacity in GB (10⁹ B; the paper's 70 / 210 GB, unit NOT STATED); default: host DRAM − weights. */
    kvCapacityGB: z.number().positive().optional(),
    /** Page size b in token slots (NOT STATED by the paper; 16 = vLLM's default). */
    pageTokens: z.number().int().positive().default(16),
    /** Fix n_real (default: the pipeline profiler's). */
    nReal: z.number().int().positive().optional(),
    /** Host-DRAM contention between CPU attention and weight DMA. */
    contention: z.boolean().default(true),
    /**
     * VSLPipe iteration cost: `closed-form` (default, the per-layer formulas) or `events` (phases,
     * the data mover's packets and the host-DRAM fluid share simulated as events,
     * `sim/throughput/pipelines/vslpipe-events.ts`).
     */
    pipeline: z.enum(['closed-form', 'events']).default('closed-form'),
    /** Data-mover packet size in bytes for `pipeline: events` (default the paper's 100 MB, §6.5). */
    packetBytes: z.number().int().positive().optional(),
    /** `pipeline: events` only (an error with the closed form): also model the D2H leg (Q and new K/V, prefill K/V) on its own link. */
    qkvD2H: z.boolean().default(false),
    /** Cores for CPU attention (default: all of the socket's). */
    cpuCores: z.number().int().positive().optional(),
    /** Keep a (time, pages, tokens) sample every k iterations (0: about 200 samples). */
    timelineEvery: z.number().int().nonnegative().default(0),
    /**
     * `executor`: prompts padded to the executor's P (the throughput family's convention, and the
     * default so that every policy of the family sees the same work); `none`: each sequence's own
     * prompt (MoE-Lens's paged KV needs no padding — the paper's setting; experiments set it).
     */
    promptPadding: z.enum(['executor', 'none']).default('executor'),
  })
  .strict()
  .superRefine((p, ctx) => {
    // Event-level options with the closed form would be silently ignored: say so instead.
    if (p.pipeline !== 'events') {
      if (p.qkvD2H)
        ctx.addIssue({
          code: 'custom',
          path: ['qkvD2H'],
          message: 'needs pipeline: events (the closed form has no D2H leg)',
        });
      if (p.packetBytes !== undefined)
        ctx.addIssue({
          code: 'custom',
          path: ['packetBytes'],
          message: 'needs pipeline: events (the closed form has no packets)',
        });
    }
  });
type Params = z.infer<typeof Params>;

const r6 = (x: number) => Math.round(x * 1e6) / 1e6;

function lensPolicy(p: Params): ThroughputPolicy {
  const name = 'moe-lens';
  const configOf = (layers: number) => ({
    ...defaultPassConfig(layers),
    omega: 1,
    weightGranularity: 'layer' as const,
    weightSlots: 2,
    expertBatching: 'perMicroBatch' as const,
  });
  const kvBytesOf = (ctx: PlanContext) =>
    p.kvCapacityGB !== undefined ? p.kvCapacityGB * 1e9 : ctx.hardware.hostDramBytes - ctx.model.derived.totalBytes;
  /**
   * The plan the family's memory checks see: host batch N = sequences whose KV at P + O fits the
   * KV capacity (MoE-Lens holds more at once, since pages grow with the context); VRAM from the
   * family's memory model for a 2-layer weight buffer and CPU decode attention (ω = 1).
   */
  const plan = (ctx: PlanContext): PlanResult => {
    const { model, hardware: hw, workload: w } = ctx;
    if (!w.phases.prefill || !w.phases.decode)
      return {
        feasible: false,
        reason: 'moe-lens overlaps prefill and decode in every iteration: it runs only with executor phase both',
      };
    const kvBytes = kvBytesOf(ctx);
    const weights = model.derived.totalBytes;
    const reserve = w.promptTokens + w.outputTokens;
    const perSeq = hostKvBytesPerSeq(model, reserve, 0);
    const pages = Math.floor(kvBytes / hostKvBytesPerSeq(model, p.pageTokens, 0));
    if (pages < Math.ceil(reserve / p.pageTokens) || weights + kvBytes > hw.hostDramBytes) {
      return {
        feasible: false,
        reason: `weights ${(weights / 1e9).toFixed(3)} GB + KV ${(kvBytes / 1e9).toFixed(3)} GB (one sequence needs ${(perSeq / 1e9).toFixed(3)} GB) do not fit host DRAM ${(hw.hostDramBytes / 1e9).toFixed(3)} GB`,
      };
    }
    const N = Math.max(
      1,
      Math.min(w.sequences, Math.floor(kvBytes / perSeq), w.fixedBatchSeqs ?? Number.POSITIVE_INFINITY),
    );
    const c = configOf(model.layers);
    const vD = vramNeeded(model, worstDecodeShape(w, Math.min(N, w.sequences), N), c).totalBytes;
    const vP = vramNeeded(model, prefillShape(w, 1, N), c).totalBytes;
    if (Math.max(vD, vP) > hw.gpu.vramBytes)
      return {
        feasible: false,
        reason: `2-layer weight buffer + activations need ${(Math.max(vD, vP) / 1e9).toFixed(3)} GB of VRAM, the GPU has ${(hw.gpu.vramBytes / 1e9).toFixed(3)} GB`,
      };
    return {
      feasible: true,
      plan: { hostBatchSeqs: N, prefill: { batchSeqs: 1, config: c }, decode: { batchSeqs: N, config: c } },
    };
  };
  return {
    name,
    plan: (ctx: PlanContext): PlanResult => {
      const planned = plan(ctx);
      return planned.feasible
        ? { feasible: true, plan: { ...planned.plan, execution: (x) => execution(x, planned.plan) } }
        : planned;
    },
  };

  function execution(ctx: ExecutionContext, planned: RunPlan): Execution {
    const { model, hardware: hw, cost } = ctx;
    const mm = modelModules(model);
    const weights = model.derived.totalBytes;
    const kvBytes = kvBytesOf(ctx);
    const maxLayer = Math.max(
      ...mm.denseBytes.map((d, l) => d + (mm.moeIndexOfLayer[l]! >= 0 ? mm.experts * mm.expertBytes : 0)),
    );
    const P = ctx.workload.promptTokens;
    const reqs =
      p.promptPadding === 'executor'
        ? ctx.requests.map((r) => ({ id: r.id, promptTokens: P, outputTokens: r.outputTokens }))
        : ctx.requests;
    const vramFixed =
      2 * maxLayer + model.derived.embeddingBytes + (model.tiedEmbeddings ? 0 : model.derived.lmHeadBytes);
    const approxIters = reqs.length > 0 ? Math.max(...reqs.map((r) => r.outputTokens)) * 4 : 1;
    const every = p.timelineEvery > 0 ? p.timelineEvery : Math.max(1, Math.floor(approxIters / 200));
    const settings: LensSettings = {
      kvCapacityBytes: kvBytes,
      pageTokens: p.pageTokens,
      contention: p.contention,
      timelineEvery: every,
      ...(p.pipeline === 'events' ? { pipeline: 'events' as const } : {}),
      ...(p.packetBytes !== undefined ? { packetBytes: p.packetBytes } : {}),
      ...(p.qkvD2H && p.pipeline === 'events' ? { qkvD2H: true } : {}),
      ...(ctx.workload.fixedBatchSeqs !== undefined ? { maxRunning: ctx.workload.fixedBatchSeqs } : {}),
      ...(p.nReal !== undefined ? { nReal: p.nReal } : {}),
      ...(p.cpuCores !== undefined ? { cpuCores: p.cpuCores } : {}),
    };
    const e = lensExecution({
      model,
      hardware: hw,
      cost,
      requests: reqs,
      settings,
      ...(ctx.sink ? { sink: ctx.sink } : {}),
    });
    const report = (run: IterationRun): ExecutionReport => {
      const r = e.result(run);
      const cores = p.cpuCores ?? hw.cpu.cores;
      const { prefill, decode } = lensPhaseTotals(r, cores);
      if (r.eventStats && r.eventStats.d2hBytes > 0) {
        decode.d2hBytes = r.eventStats.d2hBytes;
        decode.d2hBusyNs = r.eventStats.d2hBusyNs;
      }
      const analytic = analyticOf(r);
      const kvTok = model.derived.kvBytesPerToken * p.pageTokens;
      const notes = lensNotes(p, r, kvBytes, P);
      return {
        plan: { ...planned, notes },
        hostBatches: 1,
        prefill,
        decode,
        // VSLPipe: decode attention on the CPU, prefill attention on the GPU (§6.4); the plan's one
        // config (ω = 1) is the memory checks'.
        attentionOnCpu: { prefill: 0, decode: 1 },
        simulatedPasses: r.iterations,
        memoHits: 0,
        events: r.iterations,
        peaks: {
          vram: { weights: 2 * maxLayer, total: vramFixed, capacity: hw.gpu.vramBytes },
          host: {
            weights,
            kvPages: r.peakPages * kvTok,
            total: weights + r.peakPages * kvTok,
            capacity: hw.hostDramBytes,
          },
        },
        analytic,
        schedule: scheduleOf(r, p.pageTokens),
        routing: 'fallback',
      };
    };
    return { ...e, report };
  }
}

/** `metrics.analytic` of a MoE-Lens run: the analytic model (rounded) beside the simulated throughput. */
function analyticOf(r: LensRunResult): Record<string, number | string> {
  const a = r.analytic;
  const analytic: Record<string, number | string> = {};
  for (const [k, v] of Object.entries(a))
    if (v !== undefined) analytic[k] = typeof v === 'number' ? r6(v) : (v as string);
  analytic.simulatedTokPerS = r6(r.throughputTokPerS);
  analytic.simulatedOverT = r6(r.throughputTokPerS / a.t);
  analytic.simulatedOverTMaxGen = r6(r.throughputTokPerS / a.tMaxGenTokPerS);
  return analytic;
}

/** The plan notes of a MoE-Lens run: its KV pages and n_real, the VSLPipe variant, the prompt padding. */
function lensNotes(p: Params, r: LensRunResult, kvBytes: number, P: number): string[] {
  return [
    `MoE-Lens: KV ${(kvBytes / 1e9).toFixed(1)} GB = ${r.pages} pages of ${p.pageTokens} tokens; n_real ${r.nReal}${p.nReal !== undefined ? ' (fixed)' : ' (profiler)'}; contention ${p.contention ? 'on' : 'off'}`,
    r.pipeline === 'events'
      ? `event-level VSLPipe iteration (sim/throughput/pipelines/vslpipe-events.ts: ${((p.packetBytes ?? 100e6) / 1e6).toFixed(0)} MB data-mover packets, host-DRAM fluid share ${p.contention ? 'on' : 'off'}), even routing`
      : 'closed-form VSLPipe iteration cost, even routing (see policies/moe-lens/policy.ts)',
    `prompts: ${p.promptPadding === 'executor' ? `padded to P = ${P} (executor convention)` : 'unpadded'}`,
  ];
}

/** `metrics.schedule` of a MoE-Lens run (event-mode fields only in event mode). */
function scheduleOf(r: LensRunResult, pageTokens: number): Record<string, unknown> {
  const ev = r.eventStats;
  return {
    iterations: r.iterations,
    nReal: r.nReal,
    pages: r.pages,
    pageTokens,
    peakPages: r.peakPages,
    meanPageOccupancy: r6(r.meanOccupancy),
    preemptions: r.preemptions,
    recomputedTokens: r.recomputedTokens,
    dramBoundStages: r.dramBoundStages,
    ...(ev
      ? {
          pipeline: r.pipeline,
          kernelEvents: ev.events,
          /** Σ over weight packets of (duration − duration alone on the link), s. */
          dmaDramSlowedS: r6(ev.weightSlowedNs / 1e9),
          /** Time host-DRAM demand exceeded capacity, s. */
          dramContendedS: r6(ev.dramContendedNs / 1e9),
          activationTransfers: ev.activationTransfers,
          /** Σ of the activation copies' queueing delay (start − submit), s; mean and max in µs. */
          activationQueueS: r6(ev.activationQueueNs / 1e9),
          activationQueueMeanUs: r6(
            ev.activationTransfers > 0 ? ev.activationQueueNs / ev.activationTransfers / 1e3 : 0,
          ),
          activationQueueMaxUs: r6(ev.activationMaxQueueNs / 1e3),
          ...(ev.d2hBytes > 0 ? { d2hCopyS: r6(ev.d2hLatencyNs / 1e9), cpuWaitD2hS: r6(ev.cpuWaitD2hNs / 1e9) } : {}),
        }
      : {}),
    /** [time s, pages in use, generated tokens, prefill tokens, preemptions] (cumulative counts). */
    timeline: r.timeline.map(([t, pg, tok, pre, pe]) => [r6(t), pg, tok, pre, pe]),
  };
}

export const moeLens = defineThroughputPolicy({
  name: 'moe-lens',
  summary:
    'MoE-Lens: paged host KV, resource-aware prefill/decode scheduler with preemption, VSLPipe (closed-form, or event-level with pipeline: events), analytic model beside the run',
  params: Params,
  createThroughput: (p) => lensPolicy(p),
});
