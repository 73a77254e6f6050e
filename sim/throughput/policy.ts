/**
 * The contract between the throughput executor and a throughput-family policy (MoE-Gen, and
 * the baselines it is compared with: DeepSpeed-like, FlexGen-like, MoE-Lightning-like,
 * vLLM-like, llama.cpp-like).
 *
 * A throughput policy is a plain object with one hook, `plan`: given the model, the machine,
 * the cost model and a summary of the workload, it returns how the run is executed — the host
 * batch (sequences whose KV is held at once), and for each phase the sequences per pass and
 * the `PassConfig` (micro-batch sizes, ω, buffers, cached parameters, where KV lives, which
 * layers run on the CPU) — or that the model cannot run on this machine and why. Policies
 * decide; the executor builds each pass's task DAG from the plan (`pass-dag.ts`), simulates it,
 * and enforces memory: a plan whose static memory exceeds a pool is rejected with a
 * `PolicyError` naming the policy and the hook, and buffers are granted by the pools.
 *
 * Helpers a policy may use (all pure): `memory-model.ts` (what a configuration needs in VRAM
 * and host DRAM), `estimator.ts` (the critical path of a pass DAG), `search.ts` (coordinate
 * search over candidate grids).
 */
import type { HardwareProfile, ModelProfile } from '../../hardware-profiles/types.ts';
import type { CostModel } from '../cost/types.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import type { RequestSpec } from '../workload.ts';
import type { ThroughputOutcome } from './throughput-executor.ts';
import type { PlanResult, WorkloadSummary } from './types.ts';

export interface PlanContext {
  readonly model: ModelProfile;
  readonly hardware: HardwareProfile;
  readonly cost: CostModel;
  readonly workload: WorkloadSummary;
}

export interface ThroughputPolicy {
  readonly name: string;
  /**
   * The run's plan, or `{ feasible: false, reason }` when the model cannot run on this machine
   * under this policy (weights larger than host DRAM, no configuration fits VRAM ...). Called
   * once per run. Throwing is a policy bug (reported as a `PolicyError`).
   */
  plan(ctx: PlanContext): PlanResult;
  /**
   * Optional: a policy that owns its schedule (MoE-Lens: a continuous, stateful schedule whose
   * pass shapes change every iteration) runs the whole workload itself and returns the outcome;
   * the executor then skips its host-batch loop. Policies without it are unaffected.
   */
  run?(ctx: RunContext): ThroughputOutcome;
}

/** What a self-scheduling policy's `run` gets: the plan context, the requests and the trace sink. */
export interface RunContext extends PlanContext {
  readonly requests: readonly RequestSpec[];
  readonly sink?: TraceSink;
}
