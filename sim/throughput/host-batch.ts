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
  PassWork,
} from './iteration.ts';
import { arraySource, type RequestSource } from '../workload.ts';
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

const NONE: readonly never[] = [];

/**
 * An iteration of the host-batch loop: every field present, in one order, so that the loop's
 * reads of the millions of them meet one object shape.
 */
function passIteration(
  pass: PassWork | undefined,
  admitted: readonly number[] | undefined,
  firstTokens: readonly number[] | undefined,
  finished: readonly number[],
): Iteration {
  return {
    prefill: NONE,
    decode: NONE,
    preempted: NONE,
    decodeContextTokens: 0,
    finished,
    admitted,
    firstTokens,
    swapOutTokens: undefined,
    swapInTokens: undefined,
    pass,
  };
}

const NO_WORK: Iteration = passIteration(undefined, undefined, undefined, NONE);

/**
 * Groups of N requests, each prefilled then decoded: one pass per iteration.
 *
 * A group's passes depend only on its size and its sorted outputs, and a workload's groups mostly
 * repeat them (fixed output lengths: every group but the last), so the passes without request ids
 * are built once per such signature (`passesOf`, the last one kept) and handed out by position;
 * only the iterations naming requests (prefill passes, the group's first and last) are built per
 * group. A run of llama.cpp-like decoding (8 sequences a group, 512 steps each) has millions of
 * iterations: they cost a lookup each, not a pass object, a host-KV figure and a generator step.
 */
export class HostBatchScheduler implements IterationScheduler {
  groups = 0;
  sequencesRun = 0;
  /** The current group's passes without request ids (empty: no group left). */
  private base: readonly Iteration[] = NONE;
  /** Its iterations that name requests: the first ones (`head`) and its last (`tail`). */
  private head: Iteration[] = [];
  private tail: Iteration = NO_WORK;
  private at = 0;
  /** The next group's first request. */
  private nextRequest = 0;
  private template: { readonly key: string; readonly passes: readonly Iteration[] } | null = null;
  private readonly src: RequestSource;

  constructor(
    private readonly x: ExecutionContext,
    private readonly plan: RunPlan,
    private readonly s: HostBatchSettings,
    private readonly hostKv: (c: PassConfig, seqs: number, tokens: number) => number,
  ) {
    this.src = x.source ?? arraySource(x.requests);
    this.openGroup();
  }

  get done(): boolean {
    return this.at >= this.base.length;
  }

  next(_nowNs: Ns): Iteration {
    const i = this.at;
    const last = this.base.length - 1;
    if (i > last) throw new RangeError('host-batch scheduler: no iteration left');
    const it = i < this.head.length ? this.head[i]! : i === last ? this.tail : this.base[i]!;
    this.at = i + 1;
    if (i === last) this.openGroup();
    return it;
  }

  /** Makes the next group current (none left: `done`). */
  private openGroup(): void {
    this.at = 0;
    this.base = NONE;
    const src = this.src;
    const g = this.nextRequest;
    if (g >= src.count) return;
    if (this.s.maxHostBatches !== undefined && this.groups >= this.s.maxHostBatches) return;
    this.groups++;
    const size = Math.min(this.plan.hostBatchSeqs, src.count - g);
    this.nextRequest = g + size;
    this.sequencesRun += size;
    const outs = Array.from({ length: size }, (_, i) => src.outputTokens(g + i)).sort((a, b) => b - a);
    const ids = Array.from({ length: size }, (_, i) => g + i);
    const base = this.passesOf(size, outs);
    const last = base.length - 1;
    // Milestones: the group is admitted with its first pass; a prefill pass gives its sequences'
    // first tokens (without prefill passes the first pass gives them all: the prompts' KV taken as
    // in place); the group finishes with its last pass.
    const prefill = this.x.workload.phases.prefill;
    const Bp = this.plan.prefill.batchSeqs;
    const named = prefill ? Math.ceil(size / Bp) : 1;
    const head: Iteration[] = [];
    for (let j = 0; j < named; j++) {
      const firstTokens = prefill ? ids.slice(j * Bp, Math.min(size, (j + 1) * Bp)) : ids;
      head.push(passIteration(base[j]!.pass, j === 0 ? ids : undefined, firstTokens, j === last ? ids : NONE));
    }
    this.base = base;
    this.head = head;
    this.tail = last < named ? head[last]! : passIteration(base[last]!.pass, undefined, undefined, ids);
  }

  /** The passes of a group of `size` with outputs `outs` (descending), without request ids; at least one. */
  private passesOf(size: number, outs: readonly number[]): readonly Iteration[] {
    const key = `${size}|${outs.join(',')}`;
    if (this.template?.key === key) return this.template.passes;
    const { workload: w } = this.x;
    const { plan, s: cfg } = this;
    const N = plan.hostBatchSeqs;
    const P = w.promptTokens;
    const reserve = P + w.outputTokens;
    const its: Iteration[] = [];
    if (w.phases.prefill) {
      const Bp = plan.prefill.batchSeqs;
      const hostKvBytes = this.hostKv(plan.prefill.config, size, P);
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
        its.push(passIteration({ shape, plan: plan.prefill, hostKvBytes }, undefined, undefined, NONE));
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
        its.push(passIteration({ shape, plan: plan.decode, hostKvBytes }, undefined, undefined, NONE));
      }
    }
    if (its.length === 0) its.push(NO_WORK);
    this.template = { key, passes: its };
    return its;
  }
}

/** A simulated pass and its GPU busy time by category as entries (added per pass without an array each). */
interface Simulated {
  readonly r: PassResult;
  readonly categories: readonly (readonly [string, number])[];
}

/**
 * Pass DAGs simulated on fresh machines, memoised per shape; phase totals, peaks. The memo is
 * keyed by (phase, sequences, past KV); a shape object met before (the scheduler hands out the
 * same ones group after group) finds its entry by identity, without building the key.
 */
export class PassDagPipeline implements IterationPipeline {
  readonly prefill = emptyTotals();
  readonly decode = emptyTotals();
  simulated = 0;
  hits = 0;
  events = 0;
  readonly peaks: Record<'vram' | 'host', Record<string, number>> = { vram: {}, host: {} };
  private readonly memo = new Map<string, Simulated>();
  private readonly byShape = new WeakMap<PassShape, Simulated>();

  constructor(
    private readonly x: ExecutionContext,
    private readonly s: HostBatchSettings,
  ) {}

  run(it: Iteration, nowNs: Ns): Ns {
    const w = it.pass;
    if (!w) return 0 as Ns;
    const m = this.s.memoise ? this.memoised(w, nowNs) : this.simulateWork(w, nowNs);
    const { shape } = w;
    const into = shape.phase === 'prefill' ? this.prefill : this.decode;
    addPass(into, m);
    into.processedTokens += shape.seqs * shape.newTokens;
    into.generatedTokens += shape.seqs;
    return m.r.durationNs as Ns;
  }

  /** `w`'s pass from the memo (a hit), else simulated and remembered. */
  private memoised(w: PassWork, nowNs: Ns): Simulated {
    const { shape } = w;
    let m = this.byShape.get(shape);
    if (m) {
      this.hits++;
      return m;
    }
    const key = `${shape.phase}|${shape.seqs}|${shape.pastTokens}`;
    m = this.memo.get(key);
    if (m) this.hits++;
    else {
      m = this.simulateWork(w, nowNs);
      this.memo.set(key, m);
    }
    this.byShape.set(shape, m);
    return m;
  }

  private simulateWork(w: PassWork, nowNs: Ns): Simulated {
    const r = this.simulate(w.plan.config, w.shape, w.hostKvBytes, nowNs);
    return { r, categories: Object.entries(r.gpuBusyNsByCategory) };
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

function addPass(into: PhaseTotals, m: Simulated): void {
  const r = m.r;
  into.passes++;
  into.ns += r.durationNs;
  into.gpuBusyNs += r.gpuBusyNs;
  const cat = into.gpuBusyNsByCategory;
  const entries = m.categories;
  for (let i = 0; i < entries.length; i++) {
    const [k, v] = entries[i]!;
    cat[k] = (cat[k] ?? 0) + v;
  }
  into.h2dBusyNs += r.h2dBusyNs;
  into.d2hBusyNs += r.d2hBusyNs;
  into.h2dBytes += r.h2dBytes;
  into.d2hBytes += r.d2hBytes;
  into.cpuBusyCoreNs += r.cpuBusyCoreNs;
  into.hostDramBytes += r.hostDramBytes;
  into.routedTokenSlots += r.routedTokenSlots;
  into.expertLayerPairs += r.expertLayerPairs;
  into.activatedPairs += r.activatedPairs;
  into.passActivatedPairs += r.passActivatedPairs;
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
