/**
 * `bench/serving-bench.ts`'s policy-hook share: the instrumented run (every hook of the
 * policy wrapped with a clock read before and after) simulates exactly what the plain run
 * does, and the share it reports is a fraction of the run (no timing is compared: figures are
 * the bench's, not the tests').
 */
import { describe, expect, it } from 'vitest';
import { timerCost } from '../../bench/clocks.ts';
import { policyHookShare, QUICKSTART } from '../../bench/serving-bench.ts';
import { loadConfigFile, validateConfig } from '../../experiments/config/load.ts';
import { expandRuns } from '../../experiments/config/expand.ts';
import { buildServingWorld } from '../../experiments/world.ts';

describe('serving bench: policy hook share', async () => {
  const loaded = loadConfigFile(QUICKSTART);
  const specs = await expandRuns(validateConfig(loaded.config, loaded.file), loaded.baseDir, loaded.file);
  const cost = timerCost();

  it('measures the timer wrapper once per call, the inside part no larger than the whole', () => {
    expect(cost.totalMs).toBeGreaterThan(0);
    expect(cost.insideMs).toBeGreaterThanOrEqual(0);
    expect(cost.insideMs).toBeLessThanOrEqual(cost.totalMs);
  });

  for (const label of ['on-demand', 'moe-infinity']) {
    it(`${label}: the instrumented run is the plain run`, async () => {
      const spec = specs.find((s) => s.policy.label === label)!;
      const plain = (await buildServingWorld(spec, { baseDir: loaded.baseDir })).run();
      const timed = await policyHookShare(spec, loaded.baseDir, cost);
      expect(timed.outcome.events).toBe(plain.events);
      expect(timed.outcome.endNs).toBe(plain.endNs);
      expect(JSON.stringify(timed.outcome.counters)).toBe(JSON.stringify(plain.counters));
      expect(timed.share).toBeGreaterThanOrEqual(0);
      expect(timed.share).toBeLessThan(1);
      // MoE-Infinity routes every layer through onLayerRouted (and more hooks); on-demand has
      // fewer hooks, each a line or two.
      if (label === 'moe-infinity') expect(timed.calls).toBeGreaterThan(plain.counters.iterations * 32);
      else expect(timed.calls).toBeGreaterThan(0);
    });
  }
});
