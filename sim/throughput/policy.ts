/**
 * The contract between the throughput executor and a throughput-family policy (MoE-Gen, and
 * the baselines it is compared with: DeepSpeed-like, FlexGen-like, MoE-Lightning-like,
 * vLLM-like, llama.cpp-like).
 *
 * A throughput policy is a plain object with one hook, `plan`: given the model, the machine,
 * the cost model and a summary of the workload, it returns how the run is executed — the host
 * batch (sequences whose KV is held at once), for each phase the sequences per pass and the
 * `PassConfig` (micro-batch sizes, ω, buffers, cached parameters, where KV lives, which layers
 * run on the CPU), and optionally its execution: an iteration scheduler (admission, preemption,
 * the prefill/decode mix) and a pipeline (a pass DAG, or its closed-form estimate) — or that the
 * model cannot run on this machine and why. The executor checks every plan's memory: a plan
 * whose static memory exceeds a pool is rejected with a `PolicyError` naming the policy and the
 * hook; buffers and KV pages are granted by the pools.
 *
 * Helpers a policy may use (all pure): `memory-model.ts` (what a configuration needs in VRAM
 * and host DRAM), `estimator.ts` (the critical path of a pass DAG), `search.ts` (coordinate
 * search over candidate grids).
 */
import type { HardwareProfile, ModelProfile } from '../../hardware-profiles/types.ts';
import type { CostModel } from '../cost/types.ts';
import type { RequestSpec } from '../workload.ts';
import type { PlanResult, WorkloadSummary } from './types.ts';

export interface PlanContext {
  readonly model: ModelProfile;
  readonly hardware: HardwareProfile;
  readonly cost: CostModel;
  readonly workload: WorkloadSummary;
  /** The requests (prompt and output lengths), for plans that schedule them one by one. */
  readonly requests?: readonly RequestSpec[];
}

export interface ThroughputPolicy {
  readonly name: string;
  /**
   * The run's plan, or `{ feasible: false, reason }` when the model cannot run on this machine
   * under this policy (weights larger than host DRAM, no configuration fits VRAM ...). Called
   * once per run. Throwing is a policy bug (reported as a `PolicyError`). The plan's `execution`
   * (optional) says what each iteration runs and how; without it the host-batch loop runs.
   */
  plan(ctx: PlanContext): PlanResult;
}
