/**
 * Distributed sweeps (experiments/parallel/queue.ts) against a real Redis this test starts:
 * `redis-server` on a free port (no persistence), two `moesim worker --queue` processes, then
 * `moesim experiment --queue` on a 12-run config (a plugin policy, output.relative,
 * seedSummary, a plot): results.json, runs.csv, the plot and the table are byte-identical to a
 * serial run, and every run was simulated exactly once across the workers. A plugin failing on
 * a worker is reported as in a serial run (exit 3, the same line). Hostile jobs pushed straight
 * onto the queue (a `__proto__` sweep path, a plugin outside the config's folder, a wrong config
 * hash) are refused before anything is imported, and the sweep after them is still identical.
 *
 * Skipped, with the reason, where `redis-server` is not installed (.ci/run installs it).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { configHash } from '../../experiments/parallel/job-check.ts';
import { sweepConfig } from '../helpers/sweep-config.ts';
import { writePlugin } from '../helpers/cli-cwd.ts';
import { REPO_ROOT, runCliAsync, tempDir, type CliResult } from '../helpers/cli.ts';

const hasRedis = !spawnSync('redis-server', ['--version'], { encoding: 'utf8' }).error;
const SKIP = 'skipped: redis-server is not installed (apt-get install redis-server; .ci/run does)';
if (!hasRedis) console.warn(`distributed-sweep.test.ts: ${SKIP}`);

const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });

/** Resolves once `child`'s output (stdout or stderr) matches `re`; rejects if it exits first. */
const waitFor = (child: ChildProcess, re: RegExp, what: string): Promise<void> =>
  new Promise((resolve, reject) => {
    let seen = '';
    const on = (d: Buffer) => {
      seen += d.toString();
      if (re.test(seen)) resolve();
    };
    child.stdout?.on('data', on);
    child.stderr?.on('data', on);
    child.once('exit', (code) => reject(new Error(`${what} exited (${code}) before ${re}: ${seen}`)));
  });

const exited = (child: ChildProcess): Promise<void> =>
  child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise((resolve) => child.once('exit', () => resolve()));

const HOSTILE_JOBS = 3;

/**
 * Pushes jobs a worker must refuse: a `__proto__` sweep path, a plugin outside the config's
 * folder (which would write `evil-ran` if imported), and a config that does not match its hash.
 * Resolves once the workers have said so.
 */
async function pushHostileJobs(url: string, dir: string, logs: readonly string[]): Promise<void> {
  const evil = path.join(tmpdir(), `moesim-evil-${process.pid}.ts`);
  writeFileSync(
    evil,
    `import { writeFileSync } from 'node:fs'; writeFileSync(${JSON.stringify(path.join(dir, 'evil-ran'))}, 'x'); export default {};`,
  );
  const base = JSON.parse(readFileSync(path.join(dir, 'serial', 'results.json'), 'utf8')).config;
  const task = (config: unknown) => ({
    config,
    file: 'hostile.yaml',
    baseDir: dir,
    index: 0,
    key: JSON.stringify([0, 'x', {}, 1]),
    timeline: false,
  });
  const proto = JSON.parse(
    JSON.stringify({ ...base, sweep: {} }).replace('"sweep":{}', '"sweep":{"workload.__proto__.maxBatchSize":[8]}'),
  );
  const outside = { ...base, policies: [{ path: evil, params: {} }] };
  const jobs = [task(proto), task(outside), task(base)].map((t, i) => ({
    task: t,
    root: REPO_ROOT,
    configHash: i === 2 ? 'not-the-hash' : configHash(t as never),
  }));
  const connection = new Redis(url, { maxRetriesPerRequest: null });
  const queue = new Queue('moesim-runs', { connection });
  for (const [i, data] of jobs.entries())
    await queue.add('run', data, { jobId: `hostile-${i}`, removeOnComplete: true, removeOnFail: true });
  const t0 = Date.now();
  while (logs.join('').split(' rejected: ').length - 1 < HOSTILE_JOBS && Date.now() - t0 < 30_000)
    await new Promise((r) => setTimeout(r, 200));
  await queue.close();
  connection.disconnect();
  rmSync(evil, { force: true });
}

describe.skipIf(!hasRedis)('moesim experiment --queue with two moesim workers', () => {
  // Made in beforeAll: a skipped suite leaves nothing behind.
  let dir = '';
  const children: ChildProcess[] = [];
  const workerLogs: string[] = ['', ''];
  let serial: CliResult;
  let queued: CliResult;
  let thrownSerial: CliResult;
  let thrownQueued: CliResult;
  const config = (name: string, pluginPath: string) => sweepConfig(name, pluginPath);
  let small = '';
  let thrower = '';

  beforeAll(async () => {
    dir = tempDir('distributed');
    small = path.join(dir, 'small.yaml');
    thrower = path.join(dir, 'thrower.yaml');
    writeFileSync(
      small,
      config('distributed-small', path.relative(dir, path.join(REPO_ROOT, 'examples/fifo-cache-policy.ts'))),
    );
    mkdirSync(path.join(dir, 'plugins'));
    writePlugin(
      path.join(dir, 'plugins'),
      'boom',
      `export default { ...base, name: 'boom', create: (p, ctx) => { const inner = base.create(p, ctx); return { ...inner, onIterationStart: () => { throw new Error('boom at start'); } }; } };`,
    );
    writeFileSync(thrower, config('distributed-thrower', 'plugins/boom.ts'));
    const port = await freePort();
    const url = `redis://127.0.0.1:${port}`;
    const redis = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    children.push(redis);
    await waitFor(redis, /Ready to accept connections/, 'redis-server');
    const workers = [0, 1].map((i) => {
      const w = spawn(
        process.execPath,
        [path.join(REPO_ROOT, 'bin/moesim.mjs'), 'worker', '--queue', url, '--jobs', '1'],
        { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
      );
      w.stderr.on('data', (d: Buffer) => (workerLogs[i] += d.toString()));
      children.push(w);
      return waitFor(w, /joined redis:/, `moesim worker ${i}`);
    });
    [serial] = await Promise.all([
      runCliAsync(['experiment', small, '--out', path.join(dir, 'serial'), '--jobs', '1']),
      ...workers,
    ]);
    await pushHostileJobs(url, dir, workerLogs);
    queued = await runCliAsync(['experiment', small, '--out', path.join(dir, 'queued'), '--queue', url]);
    [thrownSerial, thrownQueued] = await Promise.all([
      runCliAsync(['experiment', thrower, '--out', path.join(dir, 'thrown-serial'), '--jobs', '1']),
      runCliAsync(['experiment', thrower, '--out', path.join(dir, 'thrown-queued'), '--queue', url]),
    ]);
  }, 300_000);

  afterAll(async () => {
    // Workers leave the queue on SIGTERM; then Redis stops.
    for (const c of children.slice(1)) c.kill('SIGTERM');
    await Promise.all(children.slice(1).map(exited));
    children[0]?.kill('SIGTERM');
    if (children[0]) await exited(children[0]);
    if (dir) rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  it('writes results.json, runs.csv, the plot and the table byte-identical to a serial run', () => {
    expect(serial.status, serial.stderr).toBe(0);
    expect(queued.status, queued.stderr).toBe(0);
    for (const f of ['results.json', 'runs.csv', 'tpot.svg']) {
      expect(readFileSync(path.join(dir, 'queued', f), 'utf8'), f).toBe(
        readFileSync(path.join(dir, 'serial', f), 'utf8'),
      );
    }
    expect(queued.stdout).toBe(serial.stdout);
    expect(queued.stderr).toMatch(/runs sent to redis:\/\/127\.0\.0\.1:\d+ \(queue moesim-runs\)/);
  });

  it('rejects hostile jobs before importing anything, and is not poisoned by them', () => {
    const rejected = workerLogs
      .join('')
      .split('\n')
      .filter((l) => / rejected: /.test(l));
    expect(rejected.length, workerLogs.join('')).toBe(HOSTILE_JOBS);
    expect(rejected.join('\n')).toContain('__proto__');
    expect(rejected.join('\n')).toContain('only from the config’s folder');
    expect(rejected.join('\n')).toContain('does not match');
    expect(existsSync(path.join(dir, 'evil-ran'))).toBe(false);
  });

  it('simulates every run exactly once, on the workers', () => {
    const done = workerLogs.flatMap((l) =>
      [...l.matchAll(/distributed-small: run (\d+) done/g)].map((m) => Number(m[1])),
    );
    expect(done.sort((a, b) => a - b)).toEqual([...Array(12).keys()]);
  });

  it("reports a plugin's failure on a worker as a serial run does (exit 3, the same line)", () => {
    expect(thrownSerial.status, thrownSerial.stderr).toBe(3);
    expect(thrownQueued.status, thrownQueued.stderr).toBe(3);
    const last = (r: CliResult) => r.stderr.trim().split('\n').at(-1);
    expect(last(thrownQueued)).toBe(last(thrownSerial));
    expect(last(thrownSerial)).toMatch(/threw in hook 'onIterationStart'.*boom at start$/);
  });
});

describe.skipIf(hasRedis)('moesim experiment --queue (no Redis here)', () => {
  it(SKIP, () => {});
});
