/**
 * The moe-lens policy through the throughput executor's self-scheduling hook
 * (`ThroughputPolicy.run`): by name from the registry, `analytic.*` and `schedule.*` in the
 * metrics beside the simulated throughput, unpadded prompts on request, infeasible phases.
 */
import { describe, expect, it } from 'vitest';
import { loadHardware, loadModel, loadRuntime } from '../../hardware-profiles/load.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import { Rng } from '../../sim/kernel/rng.ts';
import { ns } from '../../sim/kernel/time.ts';
import { throughputMetrics } from '../../sim/metrics/throughput-metrics.ts';
import { ThroughputExecutor } from '../../sim/throughput/throughput-executor.ts';
import type { RequestSpec, Workload } from '../../sim/workload.ts';
import { builtinPolicy } from '../../policies/registry.ts';

const model = loadModel('mixtral-8x7b');
const hw = loadHardware('a40-xeon8380-750gb');
const cost = createCostModel(model, hw, { runtime: loadRuntime('moe-lightning') });
const requests: RequestSpec[] = Array.from({ length: 300 }, (_, id) => ({
  id,
  arrivalNs: ns(0),
  promptTokens: 20 + (id % 80),
  outputTokens: 16,
}));
const workload: Workload = {
  requests,
  routing: { moeLayers: 0, experts: 0, topK: 0, forRequest: () => ({ route: () => {} }) },
  describe: 'test',
};

function run(params: Record<string, unknown>, phase: 'both' | 'decode' = 'both') {
  const def = builtinPolicy('moe-lens')!;
  const policy = def.createThroughput!(def.params.parse(params), { rng: new Rng('p'), model, hardware: hw, workload });
  const ex = new ThroughputExecutor({
    model,
    hardware: hw,
    cost,
    workload,
    policy,
    fallbackRng: new Rng('f'),
    config: {
      phase,
      contextBucketTokens: 64,
      kvLayout: 'paged',
      kvPageTokens: 16,
      packetBytes: 64 << 20,
      memoise: true,
    },
  });
  return ex.run();
}

describe('moe-lens policy', () => {
  it('reports analytic.* beside the simulated throughput', () => {
    const o = run({ kvCapacityGB: 1, promptPadding: 'none' });
    const m = throughputMetrics(o);
    expect(m.feasible).toBe(true);
    expect(m.outputTokens).toBe(300 * 16);
    expect(m.promptTokens).toBeGreaterThanOrEqual(requests.reduce((a, r) => a + r.promptTokens, 0));
    const a = m.analytic!;
    expect(a.simulatedTokPerS).toBeCloseTo(m.throughputTokPerS!, 3);
    expect(a.simulatedOverT).toBeCloseTo((a.simulatedTokPerS as number) / (a.t as number), 4);
    expect(typeof a.q).toBe('number');
    expect(m.schedule!.iterations).toBe(o.decode.passes);
  });

  it('pads prompts to P by default (family convention); other phases are infeasible with a reason', () => {
    const o = run({ kvCapacityGB: 1 });
    expect(o.prefill.processedTokens).toBeGreaterThanOrEqual(300 * 99);
    const d = run({}, 'decode');
    expect(d.feasible).toBe(false);
    expect(d.infeasibleReason).toMatch(/phase both/);
  });

  it('weights + KV capacity must fit host DRAM (805.3 GB here; Mixtral-8x7B is 93.4 GB)', () => {
    // 93.4 + 700 = 793.4 GB fits; 93.4 + 760 = 853.4 GB does not, and the reason names both.
    expect(run({ kvCapacityGB: 700 }).feasible).toBe(true);
    const o = run({ kvCapacityGB: 760 });
    expect(o.feasible).toBe(false);
    expect(o.infeasibleReason).toMatch(
      /^weights 93\.\d{3} GB \+ KV 760\.000 GB .* do not fit host DRAM 805\.\d{3} GB$/,
    );
  });
});
