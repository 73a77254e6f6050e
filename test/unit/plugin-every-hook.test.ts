/**
 * A plugin gets every hook it wrote: a plugin (loaded by path, so wrapped in the runner's
 * contract guard) implementing every hook and setting of `ServingPolicy` runs a small
 * experiment, and each hook — walked from the typed list `SERVING_HOOKS`, so a new hook must be
 * covered here — was called and its result took effect; each setting reached the executor.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { validateConfig } from '../../experiments/config/load.ts';
import { guardPolicy, prepareRuns } from '../../experiments/runner.ts';
import type { PolicyContext } from '../../policies/types.ts';
import { buildServingWorld } from '../../experiments/world.ts';
import { SERVING_HOOK_NAMES, SERVING_SETTING_NAMES } from '../../sim/serving/policy.ts';
import plugin, { type EveryHookLog } from './every-hook-plugin.ts';

const PLUGIN = path.resolve(import.meta.dirname, 'every-hook-plugin.ts');

describe('a plugin implementing every hook, through the runner’s guard', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'moesim-every-hook-'));
  const file = path.join(dir, 'every-hook.yaml');
  writeFileSync(file, '# written by plugin-every-hook.test.ts\n');
  const raw = {
    name: 'every-hook',
    model: 'olmoe',
    hardware: 'rtx4090',
    seeds: [3],
    workload: {
      requests: 6,
      arrival: { kind: 'offline' },
      promptTokens: { kind: 'fixed', tokens: 12 },
      outputTokens: { kind: 'uniform', min: 3, max: 6 },
      routing: { kind: 'uniform' },
    },
    executor: { batching: 'continuous', maxBatchSize: 4, packetMiB: 4 },
    policies: [{ path: PLUGIN, label: 'every-hook' }],
  };
  const [spec] = await prepareRuns(validateConfig(raw, file), dir, file);
  const outcome = (await buildServingWorld(spec!, { baseDir: dir })).run();
  const log = (globalThis as { __everyHook?: EveryHookLog }).__everyHook!;

  it('calls every hook, and each result takes effect', () => {
    for (const hook of SERVING_HOOK_NAMES) {
      expect(log.calls[hook] ?? 0, `${hook} called`).toBeGreaterThan(0);
      if (hook !== 'report') expect(log.effects[hook] ?? 0, `${hook} took effect`).toBeGreaterThan(0);
    }
    expect(log.missed).toEqual([]);
    expect(outcome.policyReport).toEqual({ everyHook: true });
    expect(outcome.counters.topLoads).toBeGreaterThan(0);
    expect(outcome.counters.prefetchesIssued).toBeGreaterThan(0);
  });

  it('keeps every setting and hook of the policy', () => {
    const ctx = { model: { derived: { bytesPerExpert: 1000 } } } as unknown as PolicyContext;
    const raw = plugin.create(plugin.params.parse({}), ctx);
    const guarded = guardPolicy(raw, { violation: undefined });
    // hostExperts and ssdTier select other parts (host-residency.ts, ssd-tier.ts) than the split experts
    // this plugin exercises: the guard must still pass them on when a policy sets them.
    const otherParts = new Set<string>(['hostExperts', 'ssdTier']);
    for (const s of SERVING_SETTING_NAMES) {
      if (otherParts.has(s)) {
        const withIt = { ...raw, [s]: { sentinel: s } };
        expect(guardPolicy(withIt, { violation: undefined })[s], s).toBe(withIt[s]);
        continue;
      }
      expect(raw[s], `${s} set by the plugin`).toBeDefined();
      expect(guarded[s], s).toBe(raw[s]);
    }
    for (const h of SERVING_HOOK_NAMES) expect(guarded[h], h).toBeTypeOf('function');
  });
});
