/**
 * Distributed sweeps (experiments/parallel/queue.ts) against a real Redis this test starts:
 * `redis-server` on a free port (no persistence), two `moesim worker --queue` processes, then
 * `moesim experiment --queue` on a 12-run config (a plugin policy, output.relative,
 * seedSummary, a plot): results.json, runs.csv, the plot and the table are byte-identical to a
 * serial run, and every run was simulated exactly once across the workers. A plugin failing on
 * a worker is reported as in a serial run (exit 3, the same line).
 *
 * Skipped, with the reason, where `redis-server` is not installed (.ci/run installs it).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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

const exited = (child: ChildProcess): Promise<void> => (child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise((resolve) => child.once('exit', () => resolve())));

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
    writeFileSync(small, config('distributed-small', path.relative(dir, path.join(REPO_ROOT, 'examples/fifo-cache-policy.ts'))));
    mkdirSync(path.join(dir, 'plugins'));
    writePlugin(path.join(dir, 'plugins'), 'boom', `export default { ...base, name: 'boom', create: (p, ctx) => { const inner = base.create(p, ctx); return { ...inner, onIterationStart: () => { throw new Error('boom at start'); } }; } };`);
    writeFileSync(thrower, config('distributed-thrower', 'plugins/boom.ts'));
    const port = await freePort();
    const url = `redis://127.0.0.1:${port}`;
    const redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(redis);
    await waitFor(redis, /Ready to accept connections/, 'redis-server');
    const workers = [0, 1].map((i) => {
      const w = spawn(process.execPath, [path.join(REPO_ROOT, 'bin/moesim.mjs'), 'worker', '--queue', url, '--jobs', '1'], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
      w.stderr.on('data', (d: Buffer) => (workerLogs[i] += d.toString()));
      children.push(w);
      return waitFor(w, /joined redis:/, `moesim worker ${i}`);
    });
    [serial] = await Promise.all([runCliAsync(['experiment', small, '--out', path.join(dir, 'serial'), '--jobs', '1']), ...workers]);
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
      expect(readFileSync(path.join(dir, 'queued', f), 'utf8'), f).toBe(readFileSync(path.join(dir, 'serial', f), 'utf8'));
    }
    expect(queued.stdout).toBe(serial.stdout);
    expect(queued.stderr).toMatch(/runs sent to redis:\/\/127\.0\.0\.1:\d+ \(queue moesim-runs\)/);
  });

  it('simulates every run exactly once, on the workers', () => {
    const done = workerLogs.flatMap((l) => [...l.matchAll(/distributed-small: run (\d+) done/g)].map((m) => Number(m[1])));
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
