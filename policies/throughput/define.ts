/**
 * `defineThroughputPolicy`: a `PolicyDefinition` of the throughput family (DESIGN §7). The
 * definition's `createThroughput` builds the `ThroughputPolicy` (`sim/throughput/policy.ts`);
 * its `create` (the serving factory every definition has) throws, since the experiment config
 * is checked first and a throughput policy is never given to the serving executor.
 */
import type { z } from 'zod';
import type { ThroughputPolicy } from '../../sim/throughput/policy.ts';
import { POLICY_API_VERSION, type PolicyContext, type PolicyDefinition } from '../types.ts';

export interface ThroughputPolicySpec<P> {
  /** The contract version (default: this moesim's `POLICY_API_VERSION`). */
  readonly apiVersion?: number;
  readonly name: string;
  readonly summary: string;
  readonly params: z.ZodType<P>;
  createThroughput(params: P, ctx: PolicyContext): ThroughputPolicy;
}

export function defineThroughputPolicy<P>(spec: ThroughputPolicySpec<P>): PolicyDefinition<P> {
  return {
    apiVersion: spec.apiVersion ?? POLICY_API_VERSION,
    name: spec.name,
    family: 'throughput',
    summary: spec.summary,
    params: spec.params,
    create: () => {
      throw new Error(`${spec.name} is a throughput-family policy: it needs executor.kind 'throughput'`);
    },
    createThroughput: spec.createThroughput,
  };
}
