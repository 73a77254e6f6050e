/**
 * The throughput executor from the config's side: `executor.kind: throughput` selects it,
 * family mismatches are input errors naming the policy entry, a model that does not fit the
 * testbed is reported as infeasible (a recorded run, never a crash), `cases` vary several paths
 * together, and results carry the search's configuration beside the simulated pass.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { validateConfig } from '../../experiments/config/load.ts';
import { expandRuns } from '../../experiments/config/expand.ts';
import { runExperiment, throughputMetricsOf } from '../../experiments/runner.ts';
import { UserError } from '../../sim/kernel/errors.ts';

const baseDir = process.cwd();
const out = mkdtempSync(path.join(tmpdir(), 'moesim-throughput-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

const config = (o: Record<string, unknown> = {}) => ({
  name: 'throughput-test',
  model: 'deepseek-v2-lite',
  hardware: 'moe-gen-c1',
  workload: {
    requests: 64,
    arrival: { kind: 'offline' },
    promptTokens: { kind: 'fixed', tokens: 64 },
    outputTokens: { kind: 'fixed', tokens: 8 },
  },
  executor: { kind: 'throughput', phase: 'both' },
  policies: [{ name: 'moe-gen-h' }, { name: 'deepspeed-like' }],
  ...o,
});

async function expectUserError(p: Promise<unknown>, field: RegExp): Promise<UserError> {
  let err: unknown;
  try {
    await p;
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(UserError);
  expect((err as UserError).field ?? '').toMatch(field);
  return err as UserError;
}

describe('throughput executor: config', () => {
  it('defaults the executor to serving; kind throughput takes its own options, strictly', () => {
    const serving = validateConfig({ ...config(), executor: undefined, policies: [{ name: 'lru' }] });
    expect(serving.executor.kind).toBe('serving');
    const t = validateConfig(config());
    expect(t.executor).toMatchObject({
      kind: 'throughput',
      phase: 'both',
      contextBucketTokens: 64,
      memoise: true,
      kvLayout: 'contiguous',
    });
    expect(() => validateConfig(config({ executor: { kind: 'throughput', maxBatchSize: 8 } }))).toThrow(UserError);
  });

  it('a policy whose family does not match the executor is an input error naming policies[i]', async () => {
    const e1 = await expectUserError(
      expandRuns(validateConfig(config({ policies: [{ name: 'moe-gen-g' }, { name: 'lru' }] })), baseDir),
      /^policies\[1\]$/,
    );
    expect(e1.message).toMatch(/does not run on the throughput executor/);
    const e2 = await expectUserError(
      expandRuns(
        validateConfig({ ...config(), executor: undefined, policies: [{ name: 'lru' }, { name: 'moe-gen-h' }] }),
        baseDir,
      ),
      /^policies\[1\]$/,
    );
    expect(e2.message).toMatch(/needs the throughput executor/);
  });

  it('cases vary several paths together; a case label is kept, not applied', async () => {
    const runs = await expandRuns(
      validateConfig(
        config({
          cases: [
            { case: 'a', model: 'deepseek-v2-lite', 'workload.outputTokens.tokens': 4 },
            { case: 'b', model: 'mixtral-8x7b', 'workload.outputTokens.tokens': 16 },
          ],
          sweep: { 'policy.omega': [0, 1] },
          policies: [{ name: 'moe-gen-h' }],
        }),
      ),
      baseDir,
    );
    expect(runs.map((r) => [r.params.case, r.model, r.workload.outputTokens, r.params['policy.omega']])).toEqual([
      ['a', 'deepseek-v2-lite', { kind: 'fixed', tokens: 4 }, 0],
      ['a', 'deepseek-v2-lite', { kind: 'fixed', tokens: 4 }, 1],
      ['b', 'mixtral-8x7b', { kind: 'fixed', tokens: 16 }, 0],
      ['b', 'mixtral-8x7b', { kind: 'fixed', tokens: 16 }, 1],
    ]);
    expect(runs.every((r) => r.throughput?.kind === 'throughput')).toBe(true);
    await expectUserError(
      expandRuns(validateConfig(config({ cases: [{ 'executor.kind': 'serving' }] })), baseDir),
      /^cases\[0\]/,
    );
  });
});

describe('throughput executor: runs', () => {
  it('reports a model larger than host DRAM as infeasible, with the reason, beside feasible runs', async () => {
    const loaded = {
      config: validateConfig(
        config({
          cases: [
            { case: 'fits', model: 'deepseek-v2-lite' },
            { case: 'too big', model: 'deepseek-r1-fp8' },
          ],
        }),
      ),
      baseDir,
      file: 'inline.yaml',
    };
    const result = await runExperiment(loaded, { outDir: out, progress: false });
    const json = JSON.parse(readFileSync(path.join(out, 'results.json'), 'utf8')) as {
      complete: boolean;
      runs: { params: { case: string }; metrics: Record<string, unknown> }[];
    };
    expect(json.complete).toBe(true);
    const tooBig = json.runs.filter((r) => r.params.case === 'too big');
    expect(tooBig).toHaveLength(2);
    for (const r of tooBig) {
      expect(r.metrics.feasible).toBe(false);
      expect(String(r.metrics.infeasibleReason)).toMatch(/model weights 672\.9 GB exceed host DRAM 274\.9 GB/);
      expect(r.metrics.decodeTokPerS).toBeUndefined();
    }
    expect(result.table).toMatch(/infeasible: model weights 672\.9 GB exceed host DRAM/);
    const fits = result.runs.filter((r) => r.params.case === 'fits').map((r) => throughputMetricsOf(r)!);
    for (const m of fits) {
      expect(m.feasible).toBe(true);
      expect(m.decodeTokPerS).toBeGreaterThan(0);
      expect(m.prefillTokPerS).toBeGreaterThan(0);
      expect(m.outputTokens).toBe(64 * 8);
      expect(m.search).toMatchObject({
        B: expect.any(Number),
        ba: expect.any(Number),
        be: expect.any(Number),
        omega: expect.any(Number),
      });
      // The prediction (critical path, expected routing) beside the simulation of the same pass shape.
      expect(m.search!.predictedPassS).toBeGreaterThan(0);
      expect(m.search!.simulatedPassS!).toBeGreaterThanOrEqual(m.search!.criticalPathS!);
      expect(m.gpuBusyFracByModule).toHaveProperty('expert');
      expect(m.peakBytes!.vram!.total!).toBeLessThanOrEqual(m.peakBytes!.vram!.capacity!);
    }
  });

  it('the same config and seed give byte-identical results', async () => {
    const loaded = { config: validateConfig(config()), baseDir, file: 'inline.yaml' };
    const a = path.join(out, 'a');
    const b = path.join(out, 'b');
    await runExperiment(loaded, { outDir: a, progress: false });
    await runExperiment(loaded, { outDir: b, progress: false });
    expect(readFileSync(path.join(a, 'results.json'), 'utf8')).toBe(readFileSync(path.join(b, 'results.json'), 'utf8'));
  });
});
