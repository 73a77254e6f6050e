/**
 * The throughput executor (DESIGN §7, offline batch): runs a whole workload as iterations whose
 * work is a task graph or its closed-form estimate.
 *
 * 1. **Plan.** The policy's `plan` (once per run) gives the host batch N, the sequences per
 *    prefill pass, each phase's `PassConfig` and, optionally, its own execution (an iteration
 *    scheduler and a pipeline, `iteration.ts`); or says the model cannot run on this machine
 *    (`feasible: false` and why), which is reported, not thrown. The executor checks every plan
 *    (`checkPlan`): valid configurations, host DRAM (weights + KV of N sequences) and VRAM of the
 *    largest prefill and decode pass within capacity; a violation is a `PolicyError`.
 * 2. **Execution.** The plan's execution, or the default host-batch loop over pass DAGs
 *    (`host-batch.ts`), runs through `runIterations`: the family's one loop.
 *
 * Phases: `prefill` simulates prefill only; `decode` decode only, as if the prompts' KV were in
 * place; `both`, the whole run. Arrival times are ignored (offline batch). Prompts are padded (or
 * truncated, as MoE-Gen does) to P = `padPromptTo`, default the longest prompt.
 */
import type { HardwareProfile, ModelProfile } from '../../hardware-profiles/types.ts';
import type { CostModel } from '../cost/types.ts';
import { PolicyError, SimError } from '../kernel/errors.ts';
import type { Rng } from '../kernel/rng.ts';
import type { Ns } from '../kernel/time.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import { arraySource, type AggregateRouter, type RequestSource, type RequestSpec, type Workload } from '../workload.ts';
import { hostBatchExecution } from './host-batch.ts';
import { runIterations, type AttentionOnCpu, type Execution, type ExecutionContext } from './iteration.ts';
import { hostNeeded, vramNeeded } from './memory-model.ts';
import { passConfigProblem, type CountsFn } from './pass-dag.ts';
import type { PlanContext, ThroughputPolicy } from './policy.ts';
import { UniformMultinomialCounts } from './routing-counts.ts';
import {
  emptyTotals,
  type Phase,
  type PassShape,
  type PhasePlan,
  type PhaseTotals,
  type RunPlan,
  type WorkloadSummary,
} from './types.ts';

export type { PhaseTotals } from './types.ts';
export { offsetSink } from './host-batch.ts';

export interface ThroughputConfig {
  readonly phase: 'prefill' | 'decode' | 'both';
  /** Fixed host/decode batch B (policies use it where their memory can hold it). */
  readonly batchSeqs?: number;
  /** Simulate only the first n host batches (the rest of the workload is not run). */
  readonly maxHostBatches?: number;
  /** Prompts are padded or truncated to this many tokens (default: the longest prompt). */
  readonly padPromptTo?: number;
  readonly contextBucketTokens: number;
  readonly kvLayout: 'contiguous' | 'paged';
  readonly kvPageTokens: number;
  readonly packetBytes: number;
  readonly memoise: boolean;
}

export interface ThroughputInput {
  readonly model: ModelProfile;
  readonly hardware: HardwareProfile;
  readonly cost: CostModel;
  readonly workload: Workload;
  readonly policy: ThroughputPolicy;
  readonly config: ThroughputConfig;
  /** Stream for the multinomial fallback when the workload has no aggregate router. */
  readonly fallbackRng: Rng;
  readonly sink?: TraceSink;
}

/** The search's prediction beside the simulation of the same pass shape. */
export interface PredictionCheck {
  readonly shape: PassShape;
  readonly simulatedNs: number;
  /** Critical path of the simulated DAG (sampled routing). */
  readonly criticalPathNs: number;
}

export interface ThroughputOutcome {
  readonly feasible: boolean;
  readonly infeasibleReason?: string;
  readonly policy: string;
  readonly plan?: RunPlan;
  /** Sequences simulated (all of the workload's, or the first `maxHostBatches` host batches'). */
  readonly requests: number;
  readonly promptTokens: number;
  readonly outputTokensMax: number;
  readonly hostBatches: number;
  readonly prefill: PhaseTotals;
  readonly decode: PhaseTotals;
  readonly endNs: number;
  readonly simulatedPasses: number;
  readonly memoHits: number;
  readonly events: number;
  readonly peaks: Record<'vram' | 'host', Record<string, number>>;
  readonly checks: Partial<Record<Phase, PredictionCheck>>;
  readonly routing: 'aggregate' | 'fallback';
  readonly hardware: HardwareProfile;
  /** Executions with their own model beside the run (MoE-Lens's analytic model) and counters. */
  readonly analytic?: Readonly<Record<string, number | string>>;
  readonly schedule?: Readonly<Record<string, unknown>>;
  /** Where the execution ran each phase's attention, when not where its plan's ω says (`ExecutionReport`). */
  readonly attentionOnCpu?: AttentionOnCpu;
}

export class ThroughputExecutor {
  private readonly counts: CountsFn;
  private readonly routing: 'aggregate' | 'fallback';

  constructor(private readonly x: ThroughputInput) {
    const agg: AggregateRouter =
      x.workload.aggregate ?? new UniformMultinomialCounts(x.model.experts, x.model.topK, x.fallbackRng);
    this.routing = x.workload.aggregate ? 'aggregate' : 'fallback';
    this.counts = (layer, tokens, out) => agg.counts(layer, tokens, out);
  }

  run(): ThroughputOutcome {
    const { model, hardware: hw, workload, policy, config: cfg } = this.x;
    // Lengths are read by position; the array of specs is built only if something asks for it (a
    // host-batch run of MoE-Gen reads one host batch of a 100 000-request workload).
    const source = workload.source ?? arraySource(workload.requests);
    let specs: readonly RequestSpec[] | undefined;
    const requestsOf = (): readonly RequestSpec[] => (specs ??= workload.requests);
    const count = source.count;
    const summary = workloadSummary(source, cfg);
    const P = summary.promptTokens;
    const maxOut = summary.outputTokens;
    const base = { policy: policy.name, requests: count, promptTokens: P, outputTokensMax: maxOut, hardware: hw };
    const cost = this.x.cost;
    const sink = this.x.sink;
    const ctx: ExecutionContext = {
      model,
      hardware: hw,
      cost,
      workload: summary,
      get requests() {
        return requestsOf();
      },
      source,
      counts: this.counts,
      ...(sink ? { sink } : {}),
    };
    const planCtx: PlanContext = {
      model,
      hardware: hw,
      cost,
      workload: summary,
      get requests() {
        return requestsOf();
      },
    };
    const result = this.guard('plan', () => policy.plan(planCtx));
    if (!result.feasible) {
      const none = {
        hostBatches: 0,
        prefill: emptyTotals(),
        decode: emptyTotals(),
        endNs: 0,
        simulatedPasses: 0,
        memoHits: 0,
      };
      const empty = { events: 0, peaks: { vram: {}, host: {} }, checks: {}, routing: this.routing };
      return { ...base, feasible: false, infeasibleReason: result.reason, ...none, ...empty };
    }
    const plan = result.plan;
    this.checkPlan(plan, summary);
    const make = plan.execution;
    const exec: Execution = make ? this.guard('plan', () => make(ctx)) : hostBatchExecution(ctx, plan, cfg);
    // Offline batch: every request is present at the start.
    // Ids by position (a spec made per call dies young; the array would live through the run).
    const idOf = (i: number): number => source.spec(i).id;
    if (sink?.onRequest) for (let i = 0; i < count; i++) sink.onRequest(idOf(i), 'arrive', 0 as Ns);
    const run = runIterations(exec, sink, idOf);
    const r = exec.report(run);
    const { requests, plan: asRun, checks, ...rest } = r;
    const routing = rest.routing ?? this.routing;
    const asPlanned = asRun ?? plan;
    return {
      ...base,
      ...rest,
      requests: requests ?? count,
      feasible: true,
      plan: asPlanned,
      endNs: run.endNs,
      checks: checks ?? {},
      routing,
    };
  }

  /** Runs a policy's code: its exceptions become a `PolicyError` naming the policy and the hook. */
  private guard<T>(hook: string, f: () => T): T {
    try {
      return f();
    } catch (e) {
      if (e instanceof SimError) throw e;
      const err = new PolicyError(e instanceof Error ? e.message : String(e), 0, this.x.policy.name, hook);
      err.cause = e;
      throw err;
    }
  }
  private checkPlan(plan: RunPlan, w: WorkloadSummary): void {
    const { model, hardware: hw, policy } = this.x;
    const fail = (m: string): never => {
      throw new PolicyError(`invalid plan: ${m}`, 0, policy.name, 'plan');
    };
    const N = plan.hostBatchSeqs;
    if (!(Number.isSafeInteger(N) && N >= 1)) fail(`hostBatchSeqs must be an integer ≥ 1 (got ${N})`);
    const reserve = w.promptTokens + w.outputTokens;
    for (const ph of ['prefill', 'decode'] as const) {
      const pp: PhasePlan = plan[ph];
      if (!(Number.isSafeInteger(pp.batchSeqs) && pp.batchSeqs >= 1))
        fail(`${ph}.batchSeqs must be an integer ≥ 1 (got ${pp.batchSeqs})`);
      const problem = passConfigProblem(pp.config, model);
      if (problem) fail(`${ph}: ${problem}`);
      if (pp.config.cpuCores > hw.cpu.cores) fail(`${ph}: cpuCores ${pp.config.cpuCores} > the CPU's ${hw.cpu.cores}`);
      if (!w.phases[ph]) continue;
      const seqs = ph === 'decode' ? Math.min(N, w.sequences) : Math.min(pp.batchSeqs, N, w.sequences);
      const shape: PassShape =
        ph === 'prefill'
          ? { phase: ph, seqs, newTokens: w.promptTokens, pastTokens: 0, hostSeqs: N, reserveTokens: reserve }
          : { phase: ph, seqs, newTokens: 1, pastTokens: reserve - 1, hostSeqs: N, reserveTokens: reserve };
      const v = vramNeeded(model, shape, pp.config);
      if (v.totalBytes > hw.gpu.vramBytes)
        fail(
          `${ph} pass needs ${(v.totalBytes / 1e9).toFixed(2)} GB of VRAM, the GPU has ${(hw.gpu.vramBytes / 1e9).toFixed(2)} GB`,
        );
    }
    const kvGpu = Math.min(plan.prefill.config.kvGpuLayers, plan.decode.config.kvGpuLayers);
    const host = hostNeeded(model, N, reserve, kvGpu);
    if (host > hw.hostDramBytes)
      fail(
        `host batch of ${N} needs ${(host / 1e9).toFixed(1)} GB of host DRAM, the host has ${(hw.hostDramBytes / 1e9).toFixed(1)} GB`,
      );
  }
}

/** What the plan sees of the workload: its size, the padded prompt and the longest output, the phases. */
function workloadSummary(source: RequestSource, cfg: ThroughputConfig): WorkloadSummary {
  let maxPrompt = 1;
  let maxOut = 1;
  for (let i = 0; i < source.count; i++) {
    const p = source.promptTokens(i);
    const o = source.outputTokens(i);
    if (p > maxPrompt) maxPrompt = p;
    if (o > maxOut) maxOut = o;
  }
  return {
    sequences: source.count,
    promptTokens: cfg.padPromptTo ?? maxPrompt,
    outputTokens: maxOut,
    phases: { prefill: cfg.phase !== 'decode', decode: cfg.phase !== 'prefill' },
    ...(cfg.batchSeqs !== undefined ? { fixedBatchSeqs: cfg.batchSeqs } : {}),
  };
}
