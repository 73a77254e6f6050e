/**
 * `moesim/policy`: the policy-plugin API, the only part of moesim a plugin's source imports
 * (docs/PLUGINS.md). A plugin module default-exports `definePolicy({...})` (serving family) or
 * `defineThroughputPolicy({...})` (throughput family); the hooks receive read-only views and
 * return decisions. `z` is re-exported so a plugin's parameter schema uses the same zod as
 * the moesim that loads it. Nothing outside `moesim/policy`, `moesim/testing` and the `moesim`
 * command is part of the contract.
 */
export { z } from 'zod';
export { definePolicy, POLICY_API_VERSION } from '../policies/types.ts';
export type { NeedStep, NeedTrace, PolicyContext, PolicyDefinition, PolicyFamily } from '../policies/types.ts';
export type {
  BufferEntryView,
  BufferView,
  EntryOrigin,
  EvictionQuery,
  ExpertKey,
  KeepTop,
  LayerRouting,
  ModelShapeView,
  PolicyDecision,
  PrefetchRequest,
  RequestView,
  SegmentCacheView,
  ServingPolicy,
  ServingView,
  TopRequest,
} from '../sim/serving/policy.ts';
export type { ModelProfile, HardwareProfile } from '../hardware-profiles/types.ts';
export type { Rng } from '../sim/kernel/rng.ts';

// Throughput family: one hook, `plan`, and the helpers the built-in throughput policies use.
export { defineThroughputPolicy, type ThroughputPolicySpec } from '../policies/throughput/define.ts';
export type { PlanContext, ThroughputPolicy } from '../sim/throughput/policy.ts';
export { defaultPassConfig } from '../sim/throughput/types.ts';
export type {
  Phase,
  PassConfig,
  PassShape,
  PhasePlan,
  PlanResult,
  RunPlan,
  WorkloadSummary,
} from '../sim/throughput/types.ts';
export { hostInfeasibility, vramNeeded } from '../sim/throughput/memory-model.ts';
export { largestSatisfying, prefillShape, worstDecodeShape } from '../sim/throughput/search.ts';
export { NO_CHUNKING_TOKENS, phasePlan, workloadCap } from '../policies/throughput/common.ts';
