/**
 * Sweeps at scale (experiments/parallel/):
 * - runs on a pool of worker threads (`jobs: 2`, here under vitest: the worker entry registers
 *   tsx itself) give results.json, runs.csv, the plot and the table byte-identical to one run
 *   at a time in this thread, with a plugin policy (imported by path in each worker),
 *   `output.relative`, `seedSummary` and timelines;
 * - a plugin's failure in a worker is reported exactly as in a serial run (exit 3, same line);
 * - resume: `moesim experiment` killed with SIGKILL after its first run is written, and run
 *   again with the same `--out` (and `--jobs 2`), ends with results.json, runs.csv and a table
 *   byte-identical to an uninterrupted run; an interrupted file of a different config is not
 *   reused (a fresh start, said on stderr);
 * - `--jobs` and `--queue` are checked (one line, exit 2).
 * No timing assertions: the kill waits for results.json to hold a run, however long that takes.
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sweepConfig } from '../helpers/sweep-config.ts';
import { loadConfigFile } from '../../experiments/config/load.ts';
import { runExperiment } from '../../experiments/runner.ts';
import { writePlugin } from '../helpers/cli-cwd.ts';
import { pooled, REPO_ROOT, runCliAsync, tempDir, type CliResult } from '../helpers/cli.ts';

const dir = tempDir('parallel');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const plugin = path.relative(dir, path.join(REPO_ROOT, 'examples/fifo-cache-policy.ts'));
/** 12 runs: 2 rates × 3 policies (one a plugin) × 2 seeds. */
const config = (name: string, requests: number) => sweepConfig(name, plugin, requests);
const small = path.join(dir, 'small.yaml');
writeFileSync(small, config('parallel-small', 6));
const read = (p: string) => readFileSync(p, 'utf8');
const OUTPUTS = ['results.json', 'runs.csv', 'tpot.svg'];

describe('worker threads (jobs: 2) give the outputs of a serial run', () => {
  const serial = path.join(dir, 'serial');
  const threads = path.join(dir, 'threads');
  let a: Awaited<ReturnType<typeof runExperiment>>;
  let b: Awaited<ReturnType<typeof runExperiment>>;
  beforeAll(async () => {
    const loaded = loadConfigFile(small);
    a = await runExperiment(loaded, { outDir: serial, jobs: 1, timeline: true, progress: false });
    b = await runExperiment(loaded, { outDir: threads, jobs: 2, timeline: true, progress: false });
  }, 300_000);

  it('byte-identical results.json, runs.csv, plot and table', () => {
    expect(b.runs).toHaveLength(12);
    for (const f of OUTPUTS) expect(read(path.join(threads, f)), f).toBe(read(path.join(serial, f)));
    expect(b.table).toBe(a.table);
    // output.relative and seedSummary were filled after all runs.
    expect(b.runs.every((r) => typeof r.relative?.h2dBytes === 'number')).toBe(true);
    expect(b.table).toMatch(/h2dBytes\/on-demand/);
    expect(JSON.parse(read(path.join(threads, 'results.json'))).complete).toBe(true);
  });

  it('writes every timeline, in results order and with the same content', () => {
    const timelines = readdirSync(serial)
      .filter((f) => f.startsWith('timeline-'))
      .sort();
    expect(timelines).toHaveLength(12);
    expect(
      readdirSync(threads)
        .filter((f) => f.startsWith('timeline-'))
        .sort(),
    ).toEqual(timelines);
    expect(read(path.join(threads, 'timeline-4-my-fifo.json'))).toBe(
      read(path.join(serial, 'timeline-4-my-fifo.json')),
    );
  });

  it('timing.json has one entry per run, in index order', () => {
    const t = JSON.parse(read(path.join(threads, 'timing.json'))) as { runs: { index: number }[] };
    expect(t.runs.map((r) => r.index)).toEqual([...Array(12).keys()]);
  });
});

describe('resume', () => {
  const killed = path.join(dir, 'killed');
  const whole = path.join(dir, 'whole');
  const resumeConfig = path.join(dir, 'resume.yaml');
  // Runs long enough that the kill lands before the last one (asserted, not assumed).
  writeFileSync(resumeConfig, config('parallel-resume', 40));
  let uninterrupted: CliResult;
  let resumed: CliResult;
  let runsAtKill = 0;

  beforeAll(async () => {
    const [u] = await Promise.all([
      runCliAsync(['experiment', resumeConfig, '--out', whole, '--jobs', '1'], { timeoutMs: 300_000 }),
      (async () => {
        const child = spawn(
          process.execPath,
          [path.join(REPO_ROOT, 'bin/moesim.mjs'), 'experiment', resumeConfig, '--out', killed, '--jobs', '1'],
          { cwd: REPO_ROOT, stdio: 'ignore' },
        );
        const exited = new Promise((resolve) => child.on('exit', resolve));
        const results = path.join(killed, 'results.json');
        for (;;) {
          if (existsSync(results)) {
            const runs = (JSON.parse(read(results)) as { runs: unknown[] }).runs.length;
            if (runs >= 1) {
              child.kill('SIGKILL');
              break;
            }
          }
          if (child.exitCode !== null) break;
          await sleep(20);
        }
        await exited;
        runsAtKill = (JSON.parse(read(results)) as { runs: unknown[] }).runs.length;
      })(),
    ]);
    uninterrupted = u!;
    resumed = await runCliAsync(['experiment', resumeConfig, '--out', killed, '--jobs', '2'], { timeoutMs: 300_000 });
  }, 600_000);

  it('the killed experiment left a partial results.json', () => {
    expect(runsAtKill).toBeGreaterThanOrEqual(1);
    expect(runsAtKill).toBeLessThan(12);
  });

  it('the rerun skips the runs already written and ends byte-identical to an uninterrupted run', () => {
    expect(uninterrupted.status, uninterrupted.stderr).toBe(0);
    expect(resumed.status, resumed.stderr).toBe(0);
    expect(resumed.stderr).toMatch(
      new RegExp(`resuming: ${runsAtKill} of 12 runs already in .*results\\.json, ${12 - runsAtKill} to simulate`),
    );
    for (const f of OUTPUTS) expect(read(path.join(killed, f)), f).toBe(read(path.join(whole, f)));
    expect(resumed.stdout).toBe(uninterrupted.stdout);
    const timing = JSON.parse(read(path.join(killed, 'timing.json'))) as { runs: { index: number }[] };
    expect(timing.runs.map((r) => r.index)).toEqual([...Array(12).keys()]);
  });

  it('does not reuse an interrupted run of a different config: it starts afresh and says so', async () => {
    const out = path.join(dir, 'changed');
    const loaded = loadConfigFile(small);
    await runExperiment(loaded, { outDir: out, jobs: 1, progress: false });
    // Make it an interrupted run of another config: 3 runs kept, a different request count.
    const r = JSON.parse(read(path.join(out, 'results.json'))) as {
      complete: boolean;
      config: { workload: { requests: number } };
      runs: unknown[];
    };
    const before = read(path.join(out, 'results.json'));
    writeFileSync(
      path.join(out, 'results.json'),
      JSON.stringify(
        {
          ...r,
          complete: false,
          config: { ...r.config, workload: { ...r.config.workload, requests: 7 } },
          runs: r.runs.slice(0, 3),
        },
        null,
        2,
      ),
    );
    const log: string[] = [];
    const again = await runExperiment(loaded, { outDir: out, jobs: 1, progress: false, log: (m) => log.push(m) });
    expect(log.join('\n')).toMatch(/interrupted run of a different config: starting afresh/);
    expect(again.runs).toHaveLength(12);
    expect(read(path.join(out, 'results.json'))).toBe(before);
    // The same config, interrupted: resumed.
    writeFileSync(
      path.join(out, 'results.json'),
      JSON.stringify({ ...r, complete: false, runs: r.runs.slice(0, 3) }, null, 2),
    );
    const log2: string[] = [];
    await runExperiment(loaded, { outDir: out, jobs: 1, progress: false, log: (m) => log2.push(m) });
    expect(log2.join('\n')).toMatch(/resuming: 3 of 12 runs/);
    expect(read(path.join(out, 'results.json'))).toBe(before);
  });
});

describe('errors', () => {
  let results: CliResult[];
  const thrower = path.join(dir, 'thrower.yaml');
  beforeAll(async () => {
    const pluginDir = path.join(dir, 'plugins');
    rmSync(pluginDir, { recursive: true, force: true });
    const { mkdirSync } = await import('node:fs');
    mkdirSync(pluginDir);
    writePlugin(
      pluginDir,
      'boom',
      `export default { ...base, name: 'boom', create: (p, ctx) => { const inner = base.create(p, ctx); return { ...inner, onIterationStart: () => { throw new Error('boom at start'); } }; } };`,
    );
    writeFileSync(
      thrower,
      read(small)
        .replace(JSON.stringify(plugin), JSON.stringify('plugins/boom.ts'))
        .replace('name: parallel-small', 'name: parallel-thrower'),
    );
    results = await pooled(
      [
        () => runCliAsync(['experiment', small, '--out', path.join(dir, 'e1'), '--jobs', '0']),
        () => runCliAsync(['experiment', small, '--out', path.join(dir, 'e2'), '--queue', 'http://localhost:1']),
        () => runCliAsync(['experiment', small, '--out', path.join(dir, 'e3'), '--queue', 'redis://127.0.0.1:1']),
        () => runCliAsync(['experiment', thrower, '--out', path.join(dir, 'e4'), '--jobs', '1']),
        () => runCliAsync(['experiment', thrower, '--out', path.join(dir, 'e5'), '--jobs', '2']),
      ],
      2,
    );
  }, 300_000);

  it('--jobs must be a positive whole number', () => {
    expect(results[0]!.status).toBe(2);
    expect(results[0]!.stderr.trim()).toBe(
      'moesim: --jobs: must be a whole number of runs at once, at least 1 (got "0")',
    );
  });

  it('--queue must be a reachable redis:// URL', () => {
    expect(results[1]!.status).toBe(2);
    expect(results[1]!.stderr.trim()).toBe(
      'moesim: --queue: expected a redis:// (or rediss://) URL (got "http://localhost:1")',
    );
    expect(results[2]!.status).toBe(2);
    expect(results[2]!.stderr.trim().split('\n').at(-1)).toMatch(
      /^moesim: --queue: cannot reach Redis at 127\.0\.0\.1:1 \(ECONNREFUSED\)/,
    );
  });

  it("a plugin's failure in a worker thread is reported as in a serial run (exit 3, the same line)", () => {
    const [serial, threads] = [results[3]!, results[4]!];
    expect(serial.status, serial.stderr).toBe(3);
    expect(threads.status, threads.stderr).toBe(3);
    const last = (r: CliResult) => r.stderr.trim().split('\n').at(-1);
    expect(last(serial)).toMatch(
      /^moesim: policy 'my-fifo' \(.*boom\.ts\) threw in hook 'onIterationStart' at t=[\d.]+ s: boom at start$/,
    );
    expect(last(threads)).toBe(last(serial));
    // The runs before the failing one are kept in both.
    expect(read(path.join(dir, 'e5', 'results.json'))).toContain('"complete": false');
  });
});
