/**
 * The built-in policies, by name. Names derive from this const object (no enum to keep in
 * sync); `moesim list policies` prints it. Plugins loaded by path use the same contract.
 */
import type { PolicyDefinition } from './types.ts';
import { onDemand } from './cache/on-demand.ts';
import { lru } from './cache/lru.ts';
import { moeInfinity } from './moe-infinity/policy.ts';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type AnyPolicy = PolicyDefinition<any>;

export const BUILTIN_POLICIES = {
  'on-demand': onDemand,
  lru,
  'moe-infinity': moeInfinity,
} as const satisfies Record<string, AnyPolicy>;

export type BuiltinPolicyName = keyof typeof BUILTIN_POLICIES;

export function builtinPolicy(name: string): PolicyDefinition<unknown> | undefined {
  return (BUILTIN_POLICIES as Record<string, PolicyDefinition<unknown>>)[name];
}

export const builtinPolicyNames = (): string[] => Object.keys(BUILTIN_POLICIES);
