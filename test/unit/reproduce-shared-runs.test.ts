/**
 * `moesim reproduce`'s run sharing: a run whose simulated inputs equal another experiment's is
 * simulated once and handed back with its own index, label, sweep values and seed; runs that
 * differ in anything simulated, or use a plugin policy, are each simulated. Pre-gated MoE's runs
 * at two V_e are one run: the key ignores the value (not the presence) of `budgetExperts`, and
 * both simulate to the same record.
 */
import { describe, expect, it } from 'vitest';
import type { RunSpec } from '../../experiments/config/expand.ts';
import type { Backend } from '../../experiments/parallel/pool.ts';
import type { RunOutput } from '../../experiments/runner.ts';
import { RunSharing, simulatedKey } from '../../experiments/cli/reproduce/shared-runs.ts';
import { builtinPolicy } from '../../policies/registry.ts';
import { buildServingWorld } from '../../experiments/world.ts';
import { ServingExecutorSchema } from '../../experiments/config/schema.ts';
import { servingMetrics } from '../../sim/metrics/serving-metrics.ts';
import { WorkloadSchema } from '../../workloads/config.ts';

const lru = builtinPolicy('lru')!;

function spec(index: number, label: string, over: Partial<RunSpec> = {}): RunSpec {
  return {
    index,
    policy: { label, definition: lru, params: { slots: 4 } },
    model: 'mixtral-8x7b',
    hardware: 'a6000',
    seed: 1,
    workload: { requests: 3 } as unknown as RunSpec['workload'],
    executor: { batching: 'static' } as unknown as RunSpec['executor'],
    params: { case: `c${index}`, 'policy.slots': 4 },
    ...over,
  };
}

function fakeBackend(): Backend & { calls: number } {
  const b = {
    calls: 0,
    concurrency: 3,
    close: async () => {},
    run: async (s: RunSpec): Promise<RunOutput> => {
      b.calls++;
      const record = JSON.parse(
        JSON.stringify({
          index: s.index,
          policy: s.policy.label,
          params: s.params,
          seed: s.seed,
          metrics: { tpotMs: { mean: 7 } },
          sim: { events: 11, simulatedS: 2 },
        }),
      ) as RunOutput['record'];
      return {
        record,
        timing: { index: s.index, policy: s.policy.label, wallS: 3, eventsPerS: 4, simulatedSPerWallS: 5 },
      };
    },
  };
  return b;
}

describe('RunSharing', () => {
  it('simulates a run held by two experiments once, each record with its own labels', async () => {
    const sharing = new RunSharing();
    const backend = fakeBackend();
    const a = sharing.wrap(backend, '/cfg');
    const b = sharing.wrap(backend, '/cfg');
    const first = await a.run(spec(0, 'LRU'));
    const second = await b.run(spec(5, 'LRU cache'));
    expect(backend.calls).toBe(1);
    expect(sharing.shared).toBe(1);
    expect(JSON.stringify(first.record)).toBe(JSON.stringify((await fakeBackend().run(spec(0, 'LRU'))).record));
    expect(JSON.stringify(second.record)).toBe(JSON.stringify((await fakeBackend().run(spec(5, 'LRU cache'))).record));
    expect(first.timing.wallS).toBe(3);
    expect(second.timing).toEqual({ index: 5, policy: 'LRU cache', wallS: 0, eventsPerS: 0, simulatedSPerWallS: 0 });
  });

  it('simulates runs that differ in anything simulated, or use a plugin, each', async () => {
    const sharing = new RunSharing();
    const backend = fakeBackend();
    const w = sharing.wrap(backend, '/cfg');
    await w.run(spec(0, 'x'));
    await w.run(spec(1, 'x', { seed: 2 }));
    await w.run(spec(2, 'x', { hardware: 'h100' }));
    await w.run(spec(3, 'x', { workload: { requests: 4 } as unknown as RunSpec['workload'] }));
    await sharing.wrap(backend, '/other').run(spec(4, 'x'));
    const plugin = { ...lru };
    await w.run(spec(5, 'x', { policy: { label: 'x', definition: plugin, params: { slots: 4 } } }));
    await w.run(spec(6, 'x', { policy: { label: 'x', definition: plugin, params: { slots: 4 } } }));
    expect(backend.calls).toBe(7);
    expect(sharing.shared).toBe(0);
    expect(
      simulatedKey(spec(0, 'x', { policy: { label: 'x', definition: plugin, params: {} } }), '/cfg'),
    ).toBeUndefined();
  });
});

describe('pre-gated runs at every V_e', () => {
  const preGated = builtinPolicy('pre-gated')!;
  const pg = (index: number, params: Record<string, unknown>): RunSpec => ({
    index,
    policy: { label: 'Pre-gated', definition: preGated, params: preGated.params.parse(params) },
    model: 'mixtral-8x7b',
    hardware: 'a6000-xeon8358p-512gb',
    seed: 2,
    workload: WorkloadSchema.parse({
      requests: 3,
      arrival: { kind: 'offline' },
      promptTokens: { kind: 'fixed', tokens: 5 },
      outputTokens: { kind: 'fixed', tokens: 4 },
      prediction: { kind: 'profile', accuracy: 0.7 },
    }),
    executor: ServingExecutorSchema.parse({ batching: 'static', maxBatchSize: 1 }),
    params: { 'policy.budgetExperts': params.budgetExperts },
  });

  it('share one key across V_e, but not with V_e absent or another buffer', () => {
    const key = (p: Record<string, unknown>) => simulatedKey(pg(0, p), '/cfg');
    expect(key({ budgetExperts: 64 })).toBe(key({ budgetExperts: 192 }));
    expect(key({ budgetExperts: 0 })).toBe(key({ budgetExperts: 64 }));
    expect(key({})).not.toBe(key({ budgetExperts: 64 }));
    expect(key({ budgetExperts: 64, capacitySlots: 6 })).not.toBe(key({ budgetExperts: 64 }));
    expect(key({ budgetExperts: 64, prefetchK: 1 })).not.toBe(key({ budgetExperts: 64 }));
  });

  it('simulate to the same outcome at two V_e (what sharing them assumes)', async () => {
    const outcomes: string[] = [];
    for (const budgetExperts of [8, 200]) {
      const spec = pg(0, { budgetExperts });
      const outcome = (await buildServingWorld(spec, { baseDir: '.' })).run();
      expect(outcome.counters.needs).toBeGreaterThan(0);
      expect(outcome.resources.h2d.bytesMoved).toBeGreaterThan(0);
      outcomes.push(JSON.stringify([servingMetrics(outcome), outcome.events, outcome.endNs]));
    }
    expect(outcomes[1]).toBe(outcomes[0]);
  });
});
