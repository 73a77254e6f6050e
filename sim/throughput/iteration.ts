/**
 * The throughput family's plug point (DESIGN §7, "after the redesign"): a run is a sequence of
 * iterations. A policy's plan gives an `Execution`: what each iteration runs (an
 * `IterationScheduler`: admission, preemption, the prefill/decode mix) and how an iteration is
 * executed (an `IterationPipeline`: a task DAG on `TaskGraphExecutor`, or a closed-form estimate
 * of the same DAG). `runIterations` is the family's one loop: it asks the scheduler, runs the
 * pipeline, advances integer-ns time and reports request milestones to the trace sink.
 */
import { ceilNs, type Ns } from '../kernel/time.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import type { CostModel } from '../cost/types.ts';
import type { HardwareProfile, ModelProfile } from '../../hardware-profiles/types.ts';
import type { RequestSource, RequestSpec } from '../workload.ts';
import type { CountsFn } from './pass-dag.ts';
import type { PhasePlan, PhaseTotals, PassShape, RunPlan, WorkloadSummary } from './types.ts';

/** What a pipeline reads of a sequence (its request index and the KV tokens it holds now). */
export interface SeqView {
  readonly id: number;
  readonly prompt: number;
  readonly kvTokens: number;
}

/** A sequence (re-)prefilled in an iteration: tokens processed, of which recomputed after preemption. */
export interface PrefillWork {
  readonly seq: SeqView;
  readonly tokens: number;
  readonly recomputed: number;
}

/** A uniform pass (the host-batch loop): its shape, its phase's plan and the host KV it holds. */
export interface PassWork {
  readonly shape: PassShape;
  readonly plan: PhasePlan;
  readonly hostKvBytes: number;
}

/** One iteration as its scheduler decided it. */
export interface Iteration {
  /** Sequences (re-)prefilled this iteration. */
  readonly prefill: readonly PrefillWork[];
  /** Decoding sequences, one token each (their `kvTokens` already include it). */
  readonly decode: readonly SeqView[];
  /** Sequences preempted before this iteration (their KV dropped or swapped out). */
  readonly preempted: readonly SeqView[];
  /** Σ KV tokens attended by the decode tokens. */
  readonly decodeContextTokens: number;
  /** Sequences whose last token this iteration generates (request indices, for the sink). */
  readonly finished: readonly number[];
  /**
   * Sequences admitted at the start of this iteration and those whose first token it emits, when
   * not the prefill items (uniform passes of the host-batch loop). Default: the prefill items not
   * recomputed after a preemption.
   */
  readonly admitted?: readonly number[];
  readonly firstTokens?: readonly number[];
  /** KV tokens copied GPU → host (swap-out) and host → GPU (swap-in) before the step. */
  readonly swapOutTokens?: number;
  readonly swapInTokens?: number;
  /** Host-batch passes: the uniform shape the pass DAG is built for. */
  readonly pass?: PassWork;
}

/** Decides iterations until the workload is done. Stateful; one per run. */
export interface IterationScheduler {
  readonly done: boolean;
  /** Decides (and applies) the next iteration; `nowNs` is when it starts. */
  next(nowNs: Ns): Iteration;
}

/** Executes (or estimates) iterations; accumulates its own busy times and bytes. */
export interface IterationPipeline {
  /** Duration of `it` starting at `nowNs`, integer ns (≥ 0). */
  run(it: Iteration, nowNs: Ns): Ns;
}

/** What the loop runs: a scheduler, a pipeline, and what to do after each iteration. */
export interface IterationLoop {
  readonly scheduler: IterationScheduler;
  readonly pipeline: IterationPipeline;
  /** Called after each iteration with its start and end (book-keeping, traces). */
  afterIteration?(it: Iteration, startNs: Ns, endNs: Ns): void;
}

/** A plan's execution: the loop's parts and the report of the run. */
export interface Execution extends IterationLoop {
  /** After the last iteration: the figures of the outcome. */
  report(run: IterationRun): ExecutionReport;
}

/** The search's prediction beside the simulation of the same pass shape. */
export interface PassCheck {
  readonly shape: PassShape;
  readonly simulatedNs: number;
  readonly criticalPathNs: number;
}

/** What an execution reports for the run's outcome (the executor adds the plan and the workload). */
export interface ExecutionReport {
  readonly prefill: PhaseTotals;
  readonly decode: PhaseTotals;
  /** Sequences simulated (default: every request). */
  readonly requests?: number;
  readonly hostBatches: number;
  readonly simulatedPasses: number;
  readonly memoHits: number;
  readonly events: number;
  readonly peaks: Record<'vram' | 'host', Record<string, number>>;
  readonly checks?: Partial<Record<'prefill' | 'decode', PassCheck>>;
  /** The plan as run, when the execution refines it (batch, notes). */
  readonly plan?: RunPlan;
  readonly analytic?: Readonly<Record<string, number | string>>;
  readonly schedule?: Readonly<Record<string, unknown>>;
  /** Routing the pipeline used when not the run's counts (closed forms: even routing, reported as `fallback`). */
  readonly routing?: 'aggregate' | 'fallback';
  /**
   * Share of each phase's attention (KV reads and score FLOPs) the execution ran on the CPU, when
   * its plan's ω does not say it: the continuous pipelines' plans give the family's memory checks
   * one config for both phases, while they run prefill attention on the GPU (MoE-Lens §6.4).
   * MoE-CAP's device split reads it (`sim/metrics/cap-totals.ts`); default: the plan's ω.
   */
  readonly attentionOnCpu?: AttentionOnCpu;
}

/** Share of each phase's attention run on the CPU (`ExecutionReport.attentionOnCpu`). */
export type AttentionOnCpu = Readonly<Record<'prefill' | 'decode', number>>;

/** What an execution is built from: the plan's context, the requests, the routing and the sink. */
export interface ExecutionContext {
  readonly model: ModelProfile;
  readonly hardware: HardwareProfile;
  readonly cost: CostModel;
  readonly workload: WorkloadSummary;
  readonly requests: readonly RequestSpec[];
  /** The same requests by position, without an object per request (default: over `requests`). */
  readonly source?: RequestSource;
  /** Per-expert token counts (the workload's aggregate router or the fallback). */
  readonly counts: CountsFn;
  readonly sink?: TraceSink;
}

/** A plan's execution: built once per run, after the plan is checked. */
export type ExecutionFactory = (x: ExecutionContext) => Execution;

export interface IterationRun {
  readonly endNs: Ns;
  readonly iterations: number;
}

/**
 * The family's loop: scheduler → pipeline → time, until the scheduler is done. Request milestones
 * go to `sink` (ids through `requestId`): admit at the start and first token at the end of a
 * sequence's first prefill (or as the iteration lists them), finish at the end of its last
 * iteration. Arrivals are the executor's (offline: every request at 0).
 */
export function runIterations(
  x: IterationLoop,
  sink?: TraceSink,
  requestId: (seq: number) => number = (s) => s,
): IterationRun {
  let now = 0 as Ns;
  let iterations = 0;
  const onRequest = sink?.onRequest?.bind(sink);
  while (!x.scheduler.done) {
    const it = x.scheduler.next(now);
    const t = x.pipeline.run(it, now);
    if (!(Number.isSafeInteger(t) && t >= 0)) {
      throw new RangeError(`pipeline returned a duration of ${t} ns (integer ≥ 0 expected)`);
    }
    const start = now;
    now = (now + t) as Ns;
    iterations++;
    x.afterIteration?.(it, start, now);
    if (onRequest) {
      if (it.admitted || it.firstTokens) {
        for (const id of it.admitted ?? []) onRequest(requestId(id), 'admit', start);
        for (const id of it.firstTokens ?? []) onRequest(requestId(id), 'firstToken', now);
      } else {
        for (const p of it.prefill) {
          if (p.recomputed > 0) continue;
          onRequest(requestId(p.seq.id), 'admit', start);
          onRequest(requestId(p.seq.id), 'firstToken', now);
        }
      }
      for (const id of it.finished) onRequest(requestId(id), 'finish', now);
    }
  }
  return { endNs: now, iterations };
}

/** A real duration rounded up to integer ns (closed-form pipelines compute in real ns). */
export const iterationNs = (realNs: number): Ns => ceilNs(realNs);
