/**
 * Experiment configs in process (no CLI): sweep expansion and the errors the runner reports
 * before anything is written.
 */
import { describe, expect, it } from 'vitest';
import { expandRuns } from '../../experiments/config/expand.ts';
import { validateConfig } from '../../experiments/config/load.ts';
import { runExperiment } from '../../experiments/runner.ts';
import { UserError } from '../../sim/kernel/errors.ts';

const base = {
  name: 't',
  model: 'olmoe',
  hardware: 'rtx4090',
  workload: { requests: 2, promptTokens: { kind: 'fixed', tokens: 4 }, outputTokens: { kind: 'fixed', tokens: 2 } },
  policies: [{ name: 'on-demand' }, { name: 'lru' }],
};

const summary = (runs: Awaited<ReturnType<typeof expandRuns>>) =>
  runs.map((r) => `${r.policy.label} ${JSON.stringify(r.params)} s${r.seed}`);

describe('sweep expansion', () => {
  it('a policy the swept parameter does not apply to runs once per seed, not once per value', async () => {
    const config = validateConfig({ ...base, seeds: [1, 2], sweep: { 'policy.capacitySlots': [64, 128] } });
    const runs = await expandRuns(config, process.cwd());
    expect(summary(runs)).toEqual([
      'on-demand {"model":"olmoe","hardware":"rtx4090"} s1',
      'on-demand {"model":"olmoe","hardware":"rtx4090"} s2',
      'lru {"model":"olmoe","hardware":"rtx4090","policy.capacitySlots":64} s1',
      'lru {"model":"olmoe","hardware":"rtx4090","policy.capacitySlots":64} s2',
      'lru {"model":"olmoe","hardware":"rtx4090","policy.capacitySlots":128} s1',
      'lru {"model":"olmoe","hardware":"rtx4090","policy.capacitySlots":128} s2',
    ]);
    expect(runs.map((r) => r.index)).toEqual([0, 1, 2, 3, 4, 5]);
    expect(
      runs
        .filter((r) => r.policy.label === 'lru')
        .map((r) => (r.policy.params as { capacitySlots: number }).capacitySlots),
    ).toEqual([64, 64, 128, 128]);
  });

  it('a workload sweep applies to every policy; the last key varies fastest', async () => {
    const config = validateConfig({ ...base, sweep: { 'workload.requests': [1, 3], 'executor.maxBatchSize': [2, 4] } });
    const runs = await expandRuns(config, process.cwd());
    expect(runs.map((r) => [r.policy.label, r.workload.requests, r.executor.maxBatchSize])).toEqual([
      ['on-demand', 1, 2],
      ['lru', 1, 2],
      ['on-demand', 1, 4],
      ['lru', 1, 4],
      ['on-demand', 3, 2],
      ['lru', 3, 2],
      ['on-demand', 3, 4],
      ['lru', 3, 4],
    ]);
  });
});

describe('config errors', () => {
  it('an unknown field names its path and its value', () => {
    let err: unknown;
    try {
      validateConfig({ ...base, executor: { maxBatchSize: 2, turbo: 'yes' } }, 'x.yaml');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(UserError);
    expect((err as UserError).oneLine()).toBe('x.yaml: executor.turbo: unknown field (got "yes")');
  });

  it('preflight errors from profiles and capacities name the config file, and nothing starts', async () => {
    let ready = -1;
    const bad = validateConfig({
      ...base,
      model: 'mixtral-8x7b',
      hardware: 'a5000-pcie4-1tb',
      executor: { bufferSlots: 10000 },
    });
    const err = await runExperiment(
      { config: bad, file: 'cfg.yaml', baseDir: process.cwd() },
      { progress: false, onReady: (n) => (ready = n) },
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UserError);
    expect((err as UserError).oneLine()).toMatch(
      /^cfg\.yaml: executor\.bufferSlots: 10000 expert slots do not fit a5000-pcie4-1tb: .* \(got 10000\)$/,
    );
    expect(ready).toBe(-1);

    const unknownModel = validateConfig({ ...base, model: 'no-such-model' });
    const err2 = await runExperiment(
      { config: unknownModel, file: 'cfg.yaml', baseDir: process.cwd() },
      { progress: false },
    ).catch((e: unknown) => e);
    expect((err2 as UserError).oneLine()).toMatch(/^cfg\.yaml: model: unknown model .*\(got "no-such-model"\)$/);
  });

  it('onReady reports the number of runs once preflight has passed', async () => {
    let ready = -1;
    const good = validateConfig({ ...base, workload: { ...base.workload, requests: 1 } });
    const result = await runExperiment(
      { config: good, file: 'cfg.yaml', baseDir: process.cwd() },
      { progress: false, onReady: (n) => (ready = n) },
    );
    expect(ready).toBe(2);
    expect(result.runs).toHaveLength(2);
  });
});
