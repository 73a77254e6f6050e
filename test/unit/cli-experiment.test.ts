/**
 * `moesim experiment` end to end through the real command line:
 * - the default experiment (`npm run experiment` with no config: experiments/quickstart.yaml)
 *   prints a table with a row per policy and writes results.json (schema-versioned, with the
 *   documented metric names), timing.json and runs.csv; two runs give byte-identical
 *   results.json;
 * - `--timeline` writes one Chrome trace per run, with slices on the GPU and PCIe tracks and
 *   memory counters;
 * - a config can name a policy plugin by path (the example FIFO plugin), and its label shows up
 *   in the table and the results.
 */
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pooled, REPO_ROOT, runCliAsync, tempDir, type CliResult } from '../helpers/cli.ts';

const dir = tempDir('cli-experiment');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const outA = path.join(dir, 'default-a');
const outB = path.join(dir, 'default-b');
const outPlugin = path.join(dir, 'plugin');
const pluginConfig = path.join(dir, 'plugin.yaml');
// Relative to the config file, as a user would write it.
const pluginPath = path.relative(dir, path.join(REPO_ROOT, 'examples/fifo-cache-policy.ts'));

writeFileSync(
  pluginConfig,
  `name: plugin-and-timeline
model: olmoe
hardware: rtx4090
seeds: [2]
workload:
  requests: 3
  arrival: { kind: offline }
  promptTokens: { kind: fixed, tokens: 8 }
  outputTokens: { kind: fixed, tokens: 3 }
executor: { batching: static, maxBatchSize: 2, packetMiB: 4 }
policies:
  - path: ${JSON.stringify(pluginPath)}
    label: my-fifo
    params: { capacitySlots: 128, prefetchSameExpert: true }
  - name: lru
    capacitySlots: 128
`,
);

let a: CliResult;
let b: CliResult;
let p: CliResult;

beforeAll(async () => {
  // Independent invocations: overlap them.
  const results = await pooled(
    [
      () => runCliAsync(['experiment', '--out', outA]),
      () => runCliAsync(['experiment', '--out', outB]),
      () => runCliAsync(['experiment', pluginConfig, '--out', outPlugin, '--timeline']),
    ],
    3,
  );
  [a, b, p] = [results[0]!, results[1]!, results[2]!];
}, 300_000);

const readJson = (file: string): Record<string, unknown> =>
  JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;

const DISTRIBUTIONS = ['ttftMs', 'ttftQueueMs', 'ttftServiceMs', 'tpotMs', 'e2eMs'] as const;
const SCALARS = [
  'throughputTokPerS',
  'prefillTokPerS',
  'decodeTokPerS',
  'makespanS',
  'gpuBusyFrac',
  'gpuBlockedFrac',
  'h2dBytes',
  'd2hBytes',
  'h2dUtil',
  'pcieGBps',
  'bufferHitRate',
  'cacheHitRate',
  'prefetchHitRate',
  'prefetchWastedBytes',
] as const;

describe('moesim experiment (default config)', () => {
  it('exits 0 and prints a table with a row per policy', () => {
    expect(a.status, a.stderr).toBe(0);
    expect(a.stdout).toMatch(/│\s*policy\s*│/);
    expect(a.stdout).toMatch(/│\s*on-demand\s*│/);
    expect(a.stdout).toMatch(/│\s*lru\s*│/);
    expect(a.stdout).toMatch(/│\s*moe-infinity\s*│/);
    // Diagnostics go to stderr, never into the table.
    expect(a.stdout).not.toMatch(/moesim:/);
    expect(a.stderr).toMatch(/quickstart/);
  });

  it('writes results.json with the schema version, the config and every documented metric', () => {
    const r = readJson(path.join(outA, 'results.json'));
    expect(typeof r.schemaVersion).toBe('number');
    expect(r.config).toMatchObject({ name: 'quickstart', model: expect.any(String), hardware: expect.any(String) });
    expect(r.complete).toBe(true);
    const runs = r.runs as Record<string, unknown>[];
    expect(runs.map((x) => x.policy)).toEqual(['on-demand', 'lru', 'moe-infinity']);
    for (const run of runs) {
      expect(run).toMatchObject({ policy: expect.any(String), seed: expect.any(Number) });
      expect(run.params).toMatchObject({ model: 'mixtral-8x7b', hardware: 'a5000-pcie4-1tb' });
      const m = run.metrics as Record<string, unknown>;
      for (const d of DISTRIBUTIONS) {
        expect(m[d], d).toEqual({
          mean: expect.any(Number),
          p50: expect.any(Number),
          p90: expect.any(Number),
          p99: expect.any(Number),
        });
      }
      for (const s of SCALARS) expect(typeof m[s], s).toBe('number');
      expect(m.peakBytes).toMatchObject({ vram: { total: expect.any(Number) }, host: { total: expect.any(Number) } });
      expect(run.sim).toEqual({ events: expect.any(Number), simulatedS: expect.any(Number) });
      expect((run.sim as { events: number }).events).toBeGreaterThan(0);
    }
  });

  it('writes timing.json and runs.csv', () => {
    const timing = readJson(path.join(outA, 'timing.json'));
    expect((timing.runs as unknown[]).length).toBe(3);
    const csv = readFileSync(path.join(outA, 'runs.csv'), 'utf8').trim().split('\n');
    expect(csv).toHaveLength(4);
    expect(csv[0]).toMatch(/^policy,/);
    expect(csv[0]).toContain('ttftMs.mean');
  });

  it('gives byte-identical results.json and runs.csv when run twice', () => {
    expect(b.status, b.stderr).toBe(0);
    expect(readFileSync(path.join(outB, 'results.json'), 'utf8')).toBe(
      readFileSync(path.join(outA, 'results.json'), 'utf8'),
    );
    expect(readFileSync(path.join(outB, 'runs.csv'), 'utf8')).toBe(readFileSync(path.join(outA, 'runs.csv'), 'utf8'));
  });

  it('writes no timeline without --timeline', () => {
    expect(readdirSync(outA).filter((f) => f.startsWith('timeline-'))).toEqual([]);
  });
});

describe('moesim experiment with a plugin policy and --timeline', () => {
  it('runs the example plugin named by path; its label is in the table and the results', () => {
    expect(p.status, p.stderr).toBe(0);
    expect(p.stdout).toMatch(/│\s*my-fifo\s*│/);
    const runs = readJson(path.join(outPlugin, 'results.json')).runs as {
      policy: string;
      metrics: { requests: number; outputTokens: number };
    }[];
    expect(runs.map((r) => r.policy)).toEqual(['my-fifo', 'lru']);
    for (const r of runs) expect(r.metrics).toMatchObject({ requests: 3, outputTokens: 9 });
  });

  it('writes one Chrome trace per run with GPU and PCIe slices and memory counters', () => {
    const files = readdirSync(outPlugin)
      .filter((f) => /^timeline-.*\.json$/.test(f))
      .sort();
    expect(files).toHaveLength(2);
    for (const f of files) {
      const t = readJson(path.join(outPlugin, f));
      expect(Array.isArray(t.traceEvents), f).toBe(true);
      const events = t.traceEvents as { ph: string; pid: number; name: string; args?: { name?: string } }[];
      const pidOf = (name: string) =>
        events.find((e) => e.ph === 'M' && e.name === 'process_name' && e.args?.name === name)?.pid;
      const gpu = pidOf('gpu');
      const pcie = pidOf('pcie');
      expect(gpu, f).toBeDefined();
      expect(pcie, f).toBeDefined();
      expect(
        events.some((e) => e.ph === 'X' && e.pid === gpu),
        `${f}: GPU slices`,
      ).toBe(true);
      expect(
        events.some((e) => e.ph === 'X' && e.pid === pcie),
        `${f}: PCIe slices`,
      ).toBe(true);
      expect(
        events.some((e) => e.ph === 'C'),
        `${f}: counters`,
      ).toBe(true);
    }
  });

  it('leaves no temporary files behind', () => {
    for (const d of [outA, outPlugin]) expect(readdirSync(d).filter((f) => f.includes('.tmp-'))).toEqual([]);
    expect(existsSync(path.join(outPlugin, 'results.json'))).toBe(true);
  });
});
