/**
 * The built-in policies, by name. Names derive from this const object (no enum to keep in
 * sync); `moesim list policies` prints it. Plugins loaded by path use the same contract.
 */
import type { PolicyDefinition } from './types.ts';
import { onDemand } from './cache/on-demand.ts';
import { lru } from './cache/lru.ts';
import { lfu } from './cache/lfu.ts';
import { rnd } from './cache/rnd.ts';
import { lcp } from './cache/lcp.ts';
import { dependencyPrefetch } from './prefetch/dependency-prefetch.ts';
import { modelTracing } from './prefetch/model-tracing.ts';
import { mixtralOffloading } from './prefetch/mixtral-offloading.ts';
import { preGated } from './prefetch/pre-gated.ts';
import { adapMoe } from './prefetch/adapmoe.ts';
import { belady } from './oracle/belady.ts';
import { oraclePrefetch } from './oracle/oracle-prefetch.ts';
import { gpuRich } from './reference/gpu-rich.ts';
import { moeInfinity } from './moe-infinity/policy.ts';
import { moepic } from './moepic/policy.ts';
import { flashMoe } from './engine/flash-moe.ts';
import { hostExperts } from './engine/host-experts.ts';
// Throughput family (executor.kind: throughput): MoE-Gen and the baselines it is compared with.
import { moeGenG, moeGenH } from './moe-gen/moe-gen.ts';
import { deepspeedLike } from './throughput/deepspeed-like.ts';
import { flexgenLike } from './throughput/flexgen-like.ts';
import { moeLightningLike } from './throughput/moe-lightning-like.ts';
import { vllmLike } from './throughput/vllm-like.ts';
import { llamacppLike } from './throughput/llamacpp-like.ts';
import { moeLens } from './moe-lens/policy.ts';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type AnyPolicy = PolicyDefinition<any>;

export const BUILTIN_POLICIES = {
  'on-demand': onDemand,
  lru,
  lfu,
  rnd,
  lcp,
  'dependency-prefetch': dependencyPrefetch,
  'model-tracing': modelTracing,
  'mixtral-offloading': mixtralOffloading,
  'pre-gated': preGated,
  adapmoe: adapMoe,
  belady,
  'oracle-prefetch': oraclePrefetch,
  'gpu-rich': gpuRich,
  'moe-infinity': moeInfinity,
  moepic,
  'host-experts': hostExperts,
  'flash-moe': flashMoe,
  'moe-gen-g': moeGenG,
  'moe-gen-h': moeGenH,
  'deepspeed-like': deepspeedLike,
  'flexgen-like': flexgenLike,
  'moe-lightning-like': moeLightningLike,
  'vllm-like': vllmLike,
  'llamacpp-like': llamacppLike,
  'moe-lens': moeLens,
} as const satisfies Record<string, AnyPolicy>;

export type BuiltinPolicyName = keyof typeof BUILTIN_POLICIES;

export function builtinPolicy(name: string): PolicyDefinition<unknown> | undefined {
  return (BUILTIN_POLICIES as Record<string, PolicyDefinition<unknown>>)[name];
}

export const builtinPolicyNames = (): string[] => Object.keys(BUILTIN_POLICIES);
