/**
 * The throughput family's default execution: the host-batch scheduler (MoE-Gen and the baselines
 * it compares with) and the pass-DAG pipeline.
 *
 * Scheduler: requests are taken in order in groups of N (the plan's host batch). A group is
 * prefilled in passes of the plan's prefill batch (prompts padded to P), then decoded step by
 * step: step s runs every sequence still generating (output > s) with P + s − 1 tokens of past
 * KV. Groups run one after another (no overlap between a group's decode and the next prefill).
 *
 * Pipeline: each pass is the task DAG of `pass-dag.ts`, simulated by `pass-sim.ts` on a fresh
 * machine. Memoisation (a simplification, on by default): a pass is simulated once per shape —
 * (phase, sequences, past KV rounded up to a multiple of `contextBucketTokens`) — and its result
 * reused for every later pass of that shape; the routing sampled for the first pass of a shape
 * stands for all of them. KV layout: `contiguous` reserves P + O tokens per sequence in host
 * DRAM; `paged` counts pages of `kvPageTokens` as contexts grow.
 */
import type { Ns } from '../kernel/time.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import type {
  Execution,
  ExecutionContext,
  PassCheck,
  ExecutionReport,
  Iteration,
  IterationPipeline,
  IterationRun,
  IterationScheduler,
} from './iteration.ts';
import { arraySource } from '../workload.ts';
import { hostKvBytesPerSeq } from './memory-model.ts';
import { simulatePass, type PassResult } from './pass-sim.ts';
import {
  emptyTotals,
  type Phase,
  type PassConfig,
  type PassShape,
  type PhasePlan,
  type PhaseTotals,
  type RunPlan,
} from './types.ts';

/** The executor settings the host-batch loop reads. */
export interface HostBatchSettings {
  readonly maxHostBatches?: number;
  readonly contextBucketTokens: number;
  readonly kvLayout: 'contiguous' | 'paged';
  readonly kvPageTokens: number;
  readonly packetBytes: number;
  readonly memoise: boolean;
}

const NO_WORK: Iteration = { prefill: [], decode: [], preempted: [], decodeContextTokens: 0, finished: [] };

/** Groups of N requests, each prefilled then decoded: one pass per iteration. */
export class HostBatchScheduler implements IterationScheduler {
  groups = 0;
  sequencesRun = 0;
  private readonly gen: Generator<Iteration, void>;
  private pending: IteratorResult<Iteration, void>;

  constructor(
    private readonly x: ExecutionContext,
    private readonly plan: RunPlan,
    private readonly s: HostBatchSettings,
    private readonly hostKv: (c: PassConfig, seqs: number, tokens: number) => number,
  ) {
    this.gen = this.passes();
    this.pending = this.gen.next();
  }

  get done(): boolean {
    return this.pending.done === true;
  }

  next(_nowNs: Ns): Iteration {
    if (this.pending.done) throw new RangeError('host-batch scheduler: no iteration left');
    const it = this.pending.value;
    this.pending = this.gen.next();
    return it;
  }

  private *passes(): Generator<Iteration, void> {
    const { workload: w } = this.x;
    const src = this.x.source ?? arraySource(this.x.requests);
    const { plan, s: cfg } = this;
    const N = plan.hostBatchSeqs;
    const P = w.promptTokens;
    const reserve = P + w.outputTokens;
    for (let g = 0; g < src.count; g += N) {
      if (cfg.maxHostBatches !== undefined && this.groups >= cfg.maxHostBatches) return;
      this.groups++;
      const size = Math.min(N, src.count - g);
      const outs = Array.from({ length: size }, (_, i) => src.outputTokens(g + i)).sort((a, b) => b - a);
      this.sequencesRun += size;
      const ids = Array.from({ length: size }, (_, i) => g + i);
      const its: Iteration[] = [];
      if (w.phases.prefill) {
        const Bp = plan.prefill.batchSeqs;
        for (let off = 0; off < size; off += Bp) {
          const seqs = Math.min(Bp, size - off);
          const shape: PassShape = {
            phase: 'prefill',
            seqs,
            newTokens: P,
            pastTokens: 0,
            hostSeqs: N,
            reserveTokens: reserve,
          };
          const hostKvBytes = this.hostKv(plan.prefill.config, size, P);
          its.push({
            ...NO_WORK,
            firstTokens: ids.slice(off, off + seqs),
            pass: { shape, plan: plan.prefill, hostKvBytes },
          });
        }
      }
      if (w.phases.decode) {
        let active = size;
        for (let st = 1; st < outs[0]!; st++) {
          while (active > 0 && outs[active - 1]! <= st) active--;
          const past = P + st - 1;
          const bucket = cfg.contextBucketTokens;
          const pastB = cfg.memoise ? Math.min(reserve - 1, Math.ceil(past / bucket) * bucket) : past;
          const shape: PassShape = {
            phase: 'decode',
            seqs: active,
            newTokens: 1,
            pastTokens: pastB,
            hostSeqs: N,
            reserveTokens: reserve,
          };
          const hostKvBytes = this.hostKv(plan.decode.config, size, past + 1);
          its.push({ ...NO_WORK, pass: { shape, plan: plan.decode, hostKvBytes } });
        }
      }
      if (its.length === 0) its.push(NO_WORK);
      // Milestones: the group is admitted with its first pass; without prefill passes its first
      // tokens come from its first pass (the prompts' KV taken as in place); it finishes with its last.
      its[0] = { ...its[0]!, admitted: ids, ...(w.phases.prefill ? {} : { firstTokens: ids }) };
      const last = its.length - 1;
      its[last] = { ...its[last]!, finished: ids };
      yield* its;
    }
  }
}

/** Pass DAGs simulated on fresh machines, memoised per shape; phase totals, peaks. */
export class PassDagPipeline implements IterationPipeline {
  readonly prefill = emptyTotals();
  readonly decode = emptyTotals();
  simulated = 0;
  hits = 0;
  events = 0;
  readonly peaks: Record<'vram' | 'host', Record<string, number>> = { vram: {}, host: {} };
  private readonly memo = new Map<string, PassResult>();

  constructor(
    private readonly x: ExecutionContext,
    private readonly s: HostBatchSettings,
  ) {}

  run(it: Iteration, nowNs: Ns): Ns {
    const w = it.pass;
    if (!w) return 0 as Ns;
    const { shape } = w;
    const key = `${shape.phase}|${shape.seqs}|${shape.pastTokens}`;
    let r = this.s.memoise ? this.memo.get(key) : undefined;
    if (r) this.hits++;
    else {
      r = this.simulate(w.plan.config, shape, w.hostKvBytes, nowNs);
      if (this.s.memoise) this.memo.set(key, r);
    }
    const into = shape.phase === 'prefill' ? this.prefill : this.decode;
    addPass(into, r);
    into.processedTokens += shape.seqs * shape.newTokens;
    into.generatedTokens += shape.seqs;
    return r.durationNs as Ns;
  }

  /** Simulates `shape`; `atNs` places its trace records in the run (undefined: not counted, no trace). */
  simulate(c: PassConfig, shape: PassShape, hostKvBytes: number, atNs?: number): PassResult {
    const { model, hardware, cost, sink: runSink } = this.x;
    const counted = atNs !== undefined;
    const sink = counted && runSink ? offsetSink(runSink, atNs) : undefined;
    const r = simulatePass({
      model,
      hardware,
      cost,
      shape,
      config: c,
      counts: this.x.counts,
      packetBytes: this.s.packetBytes,
      hostKvBytes,
      ...(sink ? { sink } : {}),
      criticalPath: !counted,
    });
    if (counted) {
      this.simulated++;
      this.events += r.events;
    }
    for (const pool of ['vram', 'host'] as const) {
      const into = this.peaks[pool];
      for (const [k, v] of Object.entries(r.peaks[pool])) into[k] = Math.max(into[k] ?? 0, v);
    }
    return r;
  }
}

function addPass(into: PhaseTotals, r: PassResult): void {
  into.passes++;
  into.ns += r.durationNs;
  into.gpuBusyNs += r.gpuBusyNs;
  const cat = into.gpuBusyNsByCategory;
  for (const [k, v] of Object.entries(r.gpuBusyNsByCategory)) cat[k] = (cat[k] ?? 0) + v;
  into.h2dBusyNs += r.h2dBusyNs;
  into.d2hBusyNs += r.d2hBusyNs;
  into.h2dBytes += r.h2dBytes;
  into.d2hBytes += r.d2hBytes;
  into.cpuBusyCoreNs += r.cpuBusyCoreNs;
  into.hostDramBytes += r.hostDramBytes;
  into.routedTokenSlots += r.routedTokenSlots;
  into.expertLayerPairs += r.expertLayerPairs;
  into.activatedPairs += r.activatedPairs;
}

/** The default execution of a plan: the host-batch scheduler over the pass-DAG pipeline. */
export function hostBatchExecution(x: ExecutionContext, plan: RunPlan, s: HostBatchSettings): Execution {
  const w = x.workload;
  const reserve = w.promptTokens + w.outputTokens;
  /** Host KV bytes of `seqs` resident sequences holding `tokens` tokens each (contiguous: P + O). */
  const hostKv = (c: PassConfig, seqs: number, tokens: number): number => {
    const page = s.kvPageTokens;
    const held = s.kvLayout === 'contiguous' ? reserve : Math.min(reserve, Math.ceil(tokens / page) * page);
    return seqs * hostKvBytesPerSeq(x.model, held, c.kvGpuLayers);
  };
  const scheduler = new HostBatchScheduler(x, plan, s, hostKv);
  const pipeline = new PassDagPipeline(x, s);
  const report = (_run: IterationRun): ExecutionReport => {
    // The search's prediction beside the simulation of the same pass shape.
    const checks: Partial<Record<Phase, PassCheck>> = {};
    const N = plan.hostBatchSeqs;
    const P = w.promptTokens;
    for (const ph of ['prefill', 'decode'] as const) {
      const pp: PhasePlan = plan[ph];
      if (!w.phases[ph] || !pp.search) continue;
      const shape: PassShape =
        ph === 'prefill'
          ? { phase: 'prefill', seqs: pp.search.B, newTokens: P, pastTokens: 0, hostSeqs: N, reserveTokens: reserve }
          : {
              phase: 'decode',
              seqs: pp.search.B,
              newTokens: 1,
              pastTokens: pp.search.refPastTokens,
              hostSeqs: N,
              reserveTokens: reserve,
            };
      const r = pipeline.simulate(pp.config, shape, hostKv(pp.config, N, shape.pastTokens + 1));
      checks[ph] = { shape, simulatedNs: r.durationNs, criticalPathNs: r.criticalPathNs };
    }
    return {
      prefill: pipeline.prefill,
      decode: pipeline.decode,
      requests: scheduler.sequencesRun,
      hostBatches: scheduler.groups,
      simulatedPasses: pipeline.simulated,
      memoHits: pipeline.hits,
      events: pipeline.events,
      peaks: pipeline.peaks,
      checks,
    };
  };
  return { scheduler, pipeline, report };
}

/** A sink whose records are shifted by `offsetNs` (a pass simulated from 0 placed in the run). */
export function offsetSink(s: TraceSink, offsetNs: number): TraceSink {
  const o = offsetNs;
  const t = (x: number) => (x + o) as Ns;
  const out: TraceSink = {};
  if (s.onKernel) out.onKernel = (r) => s.onKernel!({ ...r, startNs: t(r.startNs), endNs: t(r.endNs) });
  if (s.onTransfer) {
    out.onTransfer = (r) => s.onTransfer!({ ...r, submitNs: t(r.submitNs), startNs: t(r.startNs), endNs: t(r.endNs) });
  }
  if (s.onPacket) out.onPacket = (r) => s.onPacket!({ ...r, startNs: t(r.startNs), endNs: t(r.endNs) });
  if (s.onCpuTask) out.onCpuTask = (r) => s.onCpuTask!({ ...r, startNs: t(r.startNs), endNs: t(r.endNs) });
  if (s.onMemory) out.onMemory = (r) => s.onMemory!({ ...r, timeNs: t(r.timeNs) });
  if (s.onBlocked) out.onBlocked = (r) => s.onBlocked!({ ...r, startNs: t(r.startNs), endNs: t(r.endNs) });
  return out;
}
