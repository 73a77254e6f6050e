/**
 * `output.thresholds` (experiments/outputs/thresholds.ts): the smallest grid point meeting each
 * target, on hand-made results; a run without its table (`reproduce`) writes the same files.
 */
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  checkThresholds,
  findThresholds,
  renderThresholds,
  renderThresholdsPlot,
  ThresholdsSchema,
  type ThresholdRun,
} from '../../experiments/outputs/thresholds.ts';
import { validateConfig } from '../../experiments/config/load.ts';
import { expandRuns } from '../../experiments/config/expand.ts';
import { UserError } from '../../sim/kernel/errors.ts';
import { tempDir } from '../helpers/cli.ts';

const GiB = 2 ** 30;
const run = (
  policy: string,
  x: number,
  tpot: number,
  vramGiB: number,
  extra: Record<string, unknown> = {},
  seed = 1,
): ThresholdRun => ({
  policy,
  seed,
  params: { model: 'm', hardware: 'h', 'policy.budgetExperts': x, ...extra },
  metrics: { tpotMs: { mean: tpot }, peakBytes: { vram: { total: vramGiB * GiB } } },
});

describe('thresholds', () => {
  const spec = ThresholdsSchema.parse({
    x: 'policy.budgetExperts',
    metric: 'tpotMs.mean',
    targets: [100, 150, 40],
    report: 'peakBytes.vram.total',
    unit: 'GiB',
  });

  it('smallest x meeting each target, report in GiB, not reached with the best value', () => {
    // A: TPOT 200, 140, 90 at 10, 20, 30 (given out of order); B: 160, 120 (never ≤ 100).
    const runs = [
      run('A', 30, 90, 7),
      run('A', 10, 200, 5),
      run('A', 20, 140, 6),
      run('B', 10, 160, 5.5),
      run('B', 20, 120, 6.5),
    ];
    const rows = findThresholds(spec, runs);
    const at = (p: string, t: number) => rows.find((r) => r.policy === p && r.target === t)!;
    expect(at('A', 100)).toMatchObject({ reached: true, x: 30, metric: 90, report: 7 });
    expect(at('A', 150)).toMatchObject({ reached: true, x: 20, metric: 140, report: 6 });
    expect(at('A', 40)).toMatchObject({ reached: false, best: 90 });
    expect(at('B', 150)).toMatchObject({ reached: true, x: 20, report: 6.5 });
    expect(at('B', 100)).toMatchObject({ reached: false, best: 120 });
    const table = renderThresholds(spec, rows, 'markdown');
    expect(table).toContain('| A | 7.00 (budgetExperts 30) | 6.00 (budgetExperts 20) | not reached (best 90.0) |');
  });

  it('the SVG: report vs target, one line per policy (reached targets only)', async () => {
    const rows = findThresholds(spec, [run('A', 10, 90, 5), run('B', 10, 200, 6)]);
    const svg = await renderThresholdsPlot(spec, rows);
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg).toContain("X-axis titled 'tpotMs.mean target'");
    expect(svg).toContain('peakBytes vram total (GiB)');
  });

  it('the smallest meeting point even when a larger one does not (no monotonicity assumed); seeds averaged', () => {
    const runs = [run('A', 10, 120, 1), run('A', 20, 90, 2), run('A', 30, 110, 3), run('A', 10, 80, 1, {}, 2)];
    // x = 10: mean(120, 80) = 100 ≤ 100.
    const rows = findThresholds(
      ThresholdsSchema.parse({ x: 'policy.budgetExperts', metric: 'metrics.tpotMs.mean', targets: [100, 95] }),
      runs,
    );
    expect(rows.map((r) => [r.target, r.x, r.report])).toEqual([
      [100, 10, 10],
      [95, 20, 20],
    ]);
  });

  it('per-case targets and groups; direction above', () => {
    const perCase = ThresholdsSchema.parse({
      x: 'policy.budgetExperts',
      metric: 'tpotMs.mean',
      targets: { Q: [100], M: [150] },
    });
    const runs = [
      run('A', 10, 120, 1, { case: 'Q' }),
      run('A', 20, 100, 2, { case: 'Q' }),
      run('A', 10, 140, 1, { case: 'M' }),
    ];
    const rows = findThresholds(perCase, runs);
    expect(rows.map((r) => [r.case, r.policy, r.target, r.x])).toEqual([
      ['Q', 'A', 100, 20],
      ['M', 'A', 150, 10],
    ]);
    const above = findThresholds(
      ThresholdsSchema.parse({ x: 'policy.budgetExperts', metric: 'tpotMs.mean', targets: [130], direction: 'above' }),
      runs.slice(0, 2),
    );
    expect(above[0]).toMatchObject({ reached: false, best: 120 });
  });

  it('other varying parameters make their own rows', () => {
    const runs = [
      run('A', 10, 90, 1, { 'workload.requests': 4 }),
      run('A', 10, 200, 1, { 'workload.requests': 8 }),
      run('A', 20, 100, 2, { 'workload.requests': 8 }),
    ];
    const rows = findThresholds(
      ThresholdsSchema.parse({ x: 'policy.budgetExperts', metric: 'tpotMs.mean', targets: [100] }),
      runs,
    );
    expect(rows.map((r) => [r.point, r.x])).toEqual([
      ['workload.requests=4', 10],
      ['workload.requests=8', 20],
    ]);
  });

  it('config checks: x must be a run parameter, per-case targets must match the cases', async () => {
    expect(() => checkThresholds(spec, new Set(['policy']), [])).toThrow(UserError);
    const perCase = ThresholdsSchema.parse({ x: 'policy.budgetExperts', metric: 'tpotMs.mean', targets: { Q: [1] } });
    expect(() => checkThresholds(perCase, new Set(['policy.budgetExperts']), ['Q', 'M'])).toThrow(
      /no thresholds.targets/,
    );
    expect(() => checkThresholds(perCase, new Set(['policy.budgetExperts']), ['M'])).toThrow(/names no case/);
    const config = validateConfig(
      {
        model: 'mixtral-8x7b-hqq',
        hardware: 'a6000-xeon8358p-512gb',
        workload: {
          requests: 1,
          arrival: { kind: 'offline' },
          promptTokens: { kind: 'fixed', tokens: 8 },
          outputTokens: { kind: 'fixed', tokens: 2 },
        },
        policies: [{ name: 'moepic', budgetExperts: 64 }],
        output: { thresholds: { x: 'policy.theta', metric: 'tpotMs.mean', targets: [1] } },
      },
      't.yaml',
    );
    await expect(expandRuns(config, '.', 't.yaml')).rejects.toThrow(/thresholds.x/);
  });
});

describe('runExperiment without its table (`table: false`, as `reproduce` runs it)', () => {
  it('writes the same files, threshold outputs included, and returns no table', async () => {
    const { runExperiment } = await import('../../experiments/runner.ts');
    const dir = tempDir('no-table');
    try {
      const config = validateConfig(
        {
          name: 'no-table',
          model: 'mixtral-8x7b-hqq',
          hardware: 'a6000-xeon8358p-512gb',
          runtime: 'hf-eager-moepic-hqq',
          workload: {
            requests: 2,
            arrival: { kind: 'offline' },
            promptTokens: { kind: 'fixed', tokens: 8 },
            outputTokens: { kind: 'fixed', tokens: 3 },
          },
          executor: { batching: 'static', maxBatchSize: 1, maxWaitMs: 0 },
          sweep: { 'policy.budgetExperts': [32, 256] },
          policies: [{ name: 'mixtral-offloading' }],
          output: {
            thresholds: {
              name: 'th',
              x: 'policy.budgetExperts',
              metric: 'tpotMs.mean',
              targets: [1e9, 1e-9],
              report: 'peakBytes.vram.total',
              unit: 'GiB',
            },
            plots: [{ name: 'p', x: 'policy.budgetExperts', y: 'metrics.tpotMs.mean', series: 'policy', kind: 'line' }],
          },
        },
        path.join(dir, 'no-table.yaml'),
      );
      const loaded = { config, file: path.join(dir, 'no-table.yaml'), baseDir: dir };
      const withTable = await runExperiment(loaded, { outDir: path.join(dir, 'a'), jobs: 1, progress: false });
      const without = await runExperiment(loaded, {
        outDir: path.join(dir, 'b'),
        jobs: 1,
        progress: false,
        table: false,
      });
      expect(withTable.table).toMatch(/mixtral-offloading/);
      expect(without.table).toBe('');
      const files = readdirSync(path.join(dir, 'a')).sort();
      expect(files).toEqual(expect.arrayContaining(['results.json', 'runs.csv', 'th.json', 'th.svg', 'p.svg']));
      expect(readdirSync(path.join(dir, 'b')).sort()).toEqual(files);
      for (const f of files) {
        if (f === 'timing.json') continue;
        expect(readFileSync(path.join(dir, 'b', f), 'utf8'), f).toBe(readFileSync(path.join(dir, 'a', f), 'utf8'));
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
