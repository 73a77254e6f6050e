/**
 * What a policy module provides: a definition with a name, the family of executor it plugs
 * into, a zod schema for its parameters, and a factory. Built-in policies and plugins loaded
 * by path (DESIGN §1, "policy authors") use the same contract: a plugin module's default
 * export is a `PolicyDefinition`.
 */
import type { z } from 'zod';
import type { Rng } from '../sim/kernel/rng.ts';
import type { ServingPolicy } from '../sim/serving/policy.ts';
import type { ThroughputPolicy } from '../sim/throughput/policy.ts';
import type { Workload } from '../sim/workload.ts';
import type { ModelProfile, HardwareProfile } from '../hardware-profiles/types.ts';

export type PolicyFamily = 'serving' | 'throughput';

/**
 * The version of this contract (definitions, hooks, views, decisions). `definePolicy` stamps it
 * on a definition; the plugin loader refuses a definition with another version, so a plugin
 * built against an incompatible moesim fails at load with one line instead of mid-run.
 * Raised whenever a change to these types would break an existing plugin.
 */
export const POLICY_API_VERSION = 1;

/** Everything a policy factory may use. */
export interface PolicyContext {
  /** The policy's own random stream (`policy:<name>`): adding a policy never perturbs others. */
  readonly rng: Rng;
  readonly model: ModelProfile;
  readonly hardware: HardwareProfile;
  /** The workload. Only oracle policies (belady) may look at future routing through it. */
  readonly workload: Workload;
  /**
   * Set only for definitions with `oracle: 'needs'`: the expert needs of a recording pass of
   * the same run (see `NeedTrace`). Read-only; shared, never mutate it.
   */
  readonly oracle?: NeedTrace;
}

/** One routed MoE layer of one iteration: the experts the router activated (ascending). */
export interface NeedStep {
  readonly iteration: number;
  readonly layer: number;
  readonly experts: readonly number[];
}

/**
 * The sequence of expert needs of a run, in execution order (iteration, then MoE layer), as
 * recorded by a pass of the same run spec with the `on-demand` policy (experiments/world.ts).
 * It is the run's true future exactly when the needs do not depend on timing (offline arrivals
 * and static batching); otherwise an approximation.
 */
export interface NeedTrace {
  readonly steps: readonly NeedStep[];
}

export interface PolicyDefinition<P = Record<string, unknown>> {
  /** The contract version the definition was written against (`POLICY_API_VERSION`); absent means the current one. */
  readonly apiVersion?: number;
  readonly name: string;
  readonly family: PolicyFamily;
  /** One line for `moesim list policies`. */
  readonly summary: string;
  /** Parameters (without `name`), strict, fully defaulted. */
  readonly params: z.ZodType<P>;
  /**
   * Oracle input the policy needs: `'needs'` makes the world builder first run a recording
   * pass of the same run spec with `on-demand` and pass the recorded need sequence as
   * `ctx.oracle` (belady). Absent for every ordinary policy.
   */
  readonly oracle?: 'needs';
  /** Serving-executor options this policy requires (e.g. gpu-rich preloads every expert). */
  readonly servingOverrides?: { readonly preloadAllExperts?: boolean };
  /** Expert buffer size the policy's parameters imply (cache capacity), overriding `executor.bufferSlots`. */
  bufferSlots?(params: P, model: ModelProfile): number | undefined;
  create(params: P, ctx: PolicyContext): ServingPolicy;
  /**
   * Throughput family (`family: 'throughput'`): builds the policy the throughput executor runs
   * (`sim/throughput/policy.ts`). Such definitions are made with `defineThroughputPolicy`
   * (`policies/throughput/define.ts`), whose `create` only throws: the serving executor never
   * runs them (configs are checked first).
   */
  createThroughput?(params: P, ctx: PolicyContext): ThroughputPolicy;
}

/** Helper for typed definitions; stamps `apiVersion` (this moesim's) unless the definition sets one. */
export function definePolicy<P>(d: PolicyDefinition<P>): PolicyDefinition<P> {
  return d.apiVersion === undefined ? { apiVersion: POLICY_API_VERSION, ...d } : d;
}
