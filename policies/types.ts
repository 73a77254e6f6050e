/**
 * What a policy module provides: a definition with a name, the family of executor it plugs
 * into, a zod schema for its parameters, and a factory. Built-in policies and plugins loaded
 * by path (DESIGN §1, "policy authors") use the same contract: a plugin module's default
 * export is a `PolicyDefinition`.
 */
import type { z } from 'zod';
import type { Rng } from '../sim/kernel/rng.ts';
import type { ServingPolicy } from '../sim/serving/policy.ts';
import type { Workload } from '../sim/workload.ts';
import type { ModelProfile, HardwareProfile } from '../hardware-profiles/types.ts';

export type PolicyFamily = 'serving' | 'throughput';

/** Everything a policy factory may use. */
export interface PolicyContext {
  /** The policy's own random stream (`policy:<name>`): adding a policy never perturbs others. */
  readonly rng: Rng;
  readonly model: ModelProfile;
  readonly hardware: HardwareProfile;
  /** The workload. Only oracle policies (belady) may look at future routing through it. */
  readonly workload: Workload;
}

export interface PolicyDefinition<P = Record<string, unknown>> {
  readonly name: string;
  readonly family: PolicyFamily;
  /** One line for `moesim list policies`. */
  readonly summary: string;
  /** Parameters (without `name`), strict, fully defaulted. */
  readonly params: z.ZodType<P>;
  /** Serving-executor options this policy requires (e.g. gpu-rich preloads every expert). */
  readonly servingOverrides?: { readonly preloadAllExperts?: boolean };
  /** Expert buffer size the policy's parameters imply (cache capacity), overriding `executor.bufferSlots`. */
  bufferSlots?(params: P, model: ModelProfile): number | undefined;
  create(params: P, ctx: PolicyContext): ServingPolicy;
}

/** Helper for typed definitions. */
export function definePolicy<P>(d: PolicyDefinition<P>): PolicyDefinition<P> {
  return d;
}
