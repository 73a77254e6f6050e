/**
 * MoE-Infinity's EAMC warm-up is memoised per process for synthetic routing: a warm-up served
 * from the memo fills the collections exactly as routing the held-out requests anew does (the
 * plain path, taken for any routing that is not a `SyntheticRouting`), and a different routing
 * seed (same request specs) is a different key.
 */
import { describe, expect, it } from 'vitest';
import { loadModel } from '../../hardware-profiles/load.ts';
import { RngStreams } from '../../sim/kernel/rng.ts';
import type { RoutingSource, Workload } from '../../sim/workload.ts';
import { MoeInfinityParams, MoeInfinityPolicy, warmEamc } from '../../policies/moe-infinity/policy.ts';
import { buildWorkload, WorkloadSchema } from '../../workloads/config.ts';

const model = loadModel('mixtral-8x7b');
const shape = { modelId: model.id, moeLayers: model.moeLayers, experts: model.experts, topK: model.topK };
const config = WorkloadSchema.parse({
  requests: 6,
  arrival: { kind: 'offline' },
  // One task and fixed lengths: the specs of every seed are the same, only the routing differs.
  tasks: { flan: 1 },
  promptTokens: { kind: 'fixed', tokens: 12 },
  outputTokens: { kind: 'fixed', tokens: 5 },
  routing: { kind: 'synthetic', profile: 'mixtral-8x7b' },
});

async function warmed(seed: number, wrap = false): Promise<MoeInfinityPolicy> {
  const w = await buildWorkload(config, shape, new RngStreams(seed));
  // A routing that is not a SyntheticRouting instance (same routers): the warm-up routes anew.
  const routing: RoutingSource = wrap
    ? {
        moeLayers: w.routing.moeLayers,
        experts: w.routing.experts,
        topK: w.routing.topK,
        forRequest: (r) => w.routing.forRequest(r),
      }
    : w.routing;
  const workload: Workload = { requests: w.requests, routing, describe: w.describe };
  const policy = new MoeInfinityPolicy('moe-infinity', MoeInfinityParams.parse({}), model);
  warmEamc(policy, 9, model, workload);
  return policy;
}

function contents(p: MoeInfinityPolicy): number[][] {
  const out: number[][] = [];
  for (const c of [p.collections.prefill, p.collections.decode])
    for (let n = 0; n < c.size; n++) out.push([...c.entry(n)]);
  return out;
}

describe('MoE-Infinity EAMC warm-up memo', () => {
  it('fills the collections as routing anew does; another seed is another warm-up', async () => {
    const plain = contents(await warmed(3, true));
    const first = contents(await warmed(3));
    const memoised = contents(await warmed(3));
    expect(plain.length).toBeGreaterThan(9);
    expect(first).toEqual(plain);
    expect(memoised).toEqual(plain);
    expect(contents(await warmed(4))).not.toEqual(plain);
  });
});
