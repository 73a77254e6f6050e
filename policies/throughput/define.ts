/**
 * `defineThroughputPolicy`: a `PolicyDefinition` of the throughput family (DESIGN §7). The
 * definition's `createThroughput` builds the `ThroughputPolicy` (`sim/throughput/policy.ts`);
 * its `create` (the serving factory every definition has) throws, since the experiment config
 * is checked first and a throughput policy is never given to the serving executor.
 */
import type { z } from 'zod';
import type { ThroughputPolicy } from '../../sim/throughput/policy.ts';
import type { PolicyContext, PolicyDefinition } from '../types.ts';

export interface ThroughputPolicySpec<P> {
  readonly name: string;
  readonly summary: string;
  readonly params: z.ZodType<P>;
  createThroughput(params: P, ctx: PolicyContext): ThroughputPolicy;
}

export function defineThroughputPolicy<P>(spec: ThroughputPolicySpec<P>): PolicyDefinition<P> {
  return {
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
