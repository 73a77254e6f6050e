/**
 * The queue fails loudly (experiments/parallel/queue.ts), against real `redis-server`s this test starts:
 * - `--queue` at a port that accepts TCP but is not Redis (silent, or answering HTTP): exit 2,
 *   one line, within the probe's bounded wait, no output folder;
 * - Redis killed mid-run, and Redis flushed (as if restarted empty) mid-run: the submitter stops
 *   with one line saying how to resume (exit 2) within the liveness bound; resuming afterwards
 *   with a worker gives results.json byte-identical to a serial run;
 * - a worker killed (SIGKILL) while it holds a run: another worker finishes it within about
 *   twice the stalled-job interval (the README's ~30 s); the figure is printed;
 * - the worker watchdog (worker-watchdog.ts): a run over the worker's --job-timeout, and plugin
 *   code over pluginBudgetMs on a worker, fail with one line; a worker that stops heartbeating
 *   (SIGSTOP) has its run re-queued and finished by another worker, byte-identical to serial.
 * Skipped, with the reason, where `redis-server` is not installed.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import path from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LIVENESS, PROBE_TIMEOUT_MS, STALLED_CHECK_MS } from '../../experiments/parallel/queue.ts';
import { JOB_BEAT } from '../../experiments/parallel/worker-watchdog.ts';
import { writePlugin } from '../helpers/cli-cwd.ts';
import { REPO_ROOT, runCliAsync, tempDir } from '../helpers/cli.ts';

const hasRedis = !spawnSync('redis-server', ['--version'], { encoding: 'utf8' }).error;
const SKIP = 'skipped: redis-server is not installed (apt-get install redis-server)';
if (!hasRedis) console.warn(`queue-failures.test.ts: ${SKIP}`);

const BIN = path.join(REPO_ROOT, 'bin/moesim.mjs');

const listen = (server: Server): Promise<number> =>
  new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as { port: number }).port)));
const freePort = async (): Promise<number> => {
  const s = createServer();
  const port = await listen(s);
  await new Promise((r) => s.close(r));
  return port;
};
const exited = (c: ChildProcess): Promise<number | null> =>
  c.exitCode !== null || c.signalCode !== null
    ? Promise.resolve(c.exitCode)
    : new Promise((r) => c.once('exit', (code) => r(code)));
const waitOutput = (c: ChildProcess, re: RegExp, log: { text: string }): Promise<void> =>
  new Promise((resolve, reject) => {
    const on = (d: Buffer) => {
      log.text += d.toString();
      if (re.test(log.text)) resolve();
    };
    c.stdout?.on('data', on);
    c.stderr?.on('data', on);
    c.once('exit', (code) => reject(new Error(`exited (${code}) before ${re}: ${log.text}`)));
  });

async function startRedis(children: ChildProcess[]): Promise<{ url: string; proc: ChildProcess }> {
  const port = await freePort();
  const proc = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  children.push(proc);
  await waitOutput(proc, /Ready to accept connections/, { text: '' });
  return { url: `redis://127.0.0.1:${port}`, proc };
}

/** A moesim process (experiment or worker), its output collected. */
function moesim(
  args: string[],
  children: ChildProcess[],
  env: Record<string, string> = {},
): { proc: ChildProcess; log: { text: string }; done: Promise<{ status: number | null; stderr: string; ms: number }> } {
  const t0 = Date.now();
  const proc = spawn(process.execPath, [BIN, ...args], {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, NO_COLOR: '1', ...env },
  });
  children.push(proc);
  const log = { text: '' };
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  proc.stdout!.on('data', () => undefined);
  const done = exited(proc).then((status) => ({ status, stderr, ms: Date.now() - t0 }));
  return { proc, log, done };
}

const CONFIG = (name: string, plugin?: string) => `name: ${name}
model: olmoe
hardware: rtx4090
seeds: [1, 2]
workload: { requests: 3, promptTokens: { kind: fixed, tokens: 8 }, outputTokens: { kind: fixed, tokens: 3 } }
executor: { maxBatchSize: 2, packetMiB: 4 }
policies:
  - ${plugin ? `path: ${plugin}\n    label: held\n    params: { capacitySlots: 64 }` : 'name: on-demand'}
`;

const lastLine = (s: string) => s.trim().split('\n').at(-1) ?? '';

describe.skipIf(!hasRedis)('the queue fails loudly', () => {
  let dir = '';
  const children: ChildProcess[] = [];
  const servers: Server[] = [];
  beforeAll(() => {
    dir = tempDir('queue-failures');
  });
  afterAll(async () => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    await Promise.all(children.map(exited));
    for (const s of servers) s.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  it('a port that accepts TCP but is not Redis: exit 2, one line, bounded wait, nothing left', async () => {
    const silent = createServer(() => undefined);
    const http = createServer((sock) => sock.end('HTTP/1.1 400 Bad Request\r\n\r\n'));
    servers.push(silent, http);
    const config = path.join(dir, 'plain.yaml');
    writeFileSync(config, CONFIG('plain'));
    for (const [server, says] of [
      [silent, 'no Redis answer to PING'],
      [http, 'not a Redis server'],
    ] as const) {
      const port = await listen(server);
      const out = path.join(dir, `out-${port}`);
      const t0 = Date.now();
      const r = await runCliAsync(['experiment', config, '--out', out, '--queue', `redis://127.0.0.1:${port}`]);
      const ms = Date.now() - t0;
      expect(r.status, r.stderr).toBe(2);
      const lines = r.stderr.trim().split('\n');
      expect(lines, r.stderr).toHaveLength(1);
      expect(lines[0]).toContain(says);
      expect(lines[0]).toContain(`redis://127.0.0.1:${port}`);
      // The probe's own bound, plus the CLI's start-up on a loaded machine.
      expect(ms).toBeLessThan(PROBE_TIMEOUT_MS + 25_000);
      expect(existsSync(out)).toBe(false);
    }
  }, 60_000);

  it('Redis killed, or flushed, mid-run: one line with the resume command, then resume is byte-identical', async () => {
    const config = path.join(dir, 'lost.yaml');
    writeFileSync(config, CONFIG('lost'));
    const serial = await runCliAsync(['experiment', config, '--out', path.join(dir, 'serial'), '--jobs', '1']);
    expect(serial.status, serial.stderr).toBe(0);
    // Killed: no worker, so the runs wait in the queue; then Redis dies.
    const killed = await startRedis(children);
    const out1 = path.join(dir, 'lost-killed');
    const sub1 = moesim(['experiment', config, '--out', out1, '--queue', killed.url], children);
    await waitOutput(sub1.proc, /runs sent to/, sub1.log);
    const tKill = Date.now();
    killed.proc.kill('SIGKILL');
    const r1 = await sub1.done;
    const waited1 = Date.now() - tKill;
    expect(r1.status, r1.stderr).toBe(2);
    expect(lastLine(r1.stderr)).toMatch(
      /lost the Redis queue at redis:\/\/127\.0\.0\.1:\d+ \(no answer for 15 s\).*resume with `moesim experiment .*lost\.yaml --out <the same folder> --queue redis:/,
    );
    expect(waited1).toBeLessThan(LIVENESS.lostAfterMs + 15_000);
    // Flushed (Redis restarted empty): the queued runs are gone.
    const flushed = await startRedis(children);
    const out2 = path.join(dir, 'lost-flushed');
    const sub2 = moesim(['experiment', config, '--out', out2, '--queue', flushed.url], children);
    await waitOutput(sub2.proc, /runs sent to/, sub2.log);
    const tFlush = Date.now();
    const client = new Redis(flushed.url);
    await client.flushall();
    client.disconnect();
    const r2 = await sub2.done;
    expect(r2.status, r2.stderr).toBe(2);
    expect(lastLine(r2.stderr)).toMatch(/gone from Redis without a result.*resume with/);
    expect(Date.now() - tFlush).toBeLessThan(4 * LIVENESS.everyMs + 10_000);
    // Resume with a worker: the same files as a serial run.
    const worker = moesim(['worker', '--queue', flushed.url, '--jobs', '1'], children);
    await waitOutput(worker.proc, /joined redis:/, worker.log);
    const resumed = await runCliAsync(['experiment', config, '--out', out2, '--queue', flushed.url]);
    expect(resumed.status, resumed.stderr).toBe(0);
    expect(readFileSync(path.join(out2, 'results.json'), 'utf8')).toBe(
      readFileSync(path.join(dir, 'serial', 'results.json'), 'utf8'),
    );
    process.stderr.write(
      `queue-failures: Redis killed → submitter stopped after ${(waited1 / 1000).toFixed(1)} s; flushed → ${(r2.ms / 1000).toFixed(1)} s after submit\n`,
    );
    worker.proc.kill('SIGTERM');
    await exited(worker.proc);
  }, 180_000);

  it('a worker killed while it holds a run: another worker finishes it within ~2 × the stalled-job interval', async () => {
    const { url } = await startRedis(children);
    const plugins = path.join(dir, 'plugins');
    mkdirSync(plugins, { recursive: true });
    const hold = path.join(dir, 'hold');
    writeFileSync(hold, '');
    // Sleeps (not spins) in create while the hold file exists, only in the first worker's process
    // (marked by an environment variable, which its worker threads inherit; `process.argv` is not
    // the parent's inside a worker thread, and the submitter's own checks must not be held).
    writePlugin(
      plugins,
      'held',
      `import { existsSync } from 'node:fs';
export default { ...base, name: 'held', create: (p, ctx) => { const a = new Int32Array(new SharedArrayBuffer(4)); while (process.env.MOESIM_TEST_HOLD === "1" && existsSync(${JSON.stringify(hold)})) Atomics.wait(a, 0, 0, 100); return base.create(p, ctx); } };`,
    );
    const config = path.join(dir, 'stalled.yaml');
    writeFileSync(config, CONFIG('stalled', 'plugins/held.ts').replace('seeds: [1, 2]', 'seeds: [1]'));
    const w1 = moesim(['worker', '--queue', url, '--jobs', '1'], children, { MOESIM_TEST_HOLD: '1' });
    await waitOutput(w1.proc, /joined redis:/, w1.log);
    const sub = moesim(['experiment', config, '--out', path.join(dir, 'stalled-out'), '--queue', url], children);
    sub.proc.stderr!.on('data', (d: Buffer) => (sub.log.text += d.toString()));
    w1.proc.stderr!.on('data', (d: Buffer) => (w1.log.text += d.toString()));
    const connection = new Redis(url, { maxRetriesPerRequest: null });
    const queue = new Queue('moesim-runs', { connection });
    const t0 = Date.now();
    while ((await queue.getActiveCount()) === 0) {
      if (Date.now() - t0 > 60_000) throw new Error(`no run became active: ${sub.log.text} | ${w1.log.text}`);
      await new Promise((r) => setTimeout(r, 200));
    }
    await queue.close();
    connection.disconnect();
    // The second worker is up before the kill, so the figure is the recovery, not its start-up.
    const w2 = moesim(['worker', '--queue', url, '--jobs', '1'], children);
    await waitOutput(w2.proc, /joined redis:/, w2.log);
    w1.proc.kill('SIGKILL');
    const tKill = Date.now();
    rmSync(hold);
    const r = await Promise.race([
      sub.done,
      new Promise<never>((_r, rej) =>
        setTimeout(() => rej(new Error(`not finished: ${sub.log.text} | ${w2.log.text}`)), 90_000),
      ),
    ]);
    const recovered = Date.now() - tKill;
    expect(r.status, r.stderr).toBe(0);
    process.stderr.write(
      `queue-failures: a killed worker's run finished by another worker ${(recovered / 1000).toFixed(1)} s after the kill (stalled-job interval ${STALLED_CHECK_MS / 1000} s)\n`,
    );
    expect(recovered).toBeLessThan(2 * STALLED_CHECK_MS + 15_000);
    w2.proc.kill('SIGTERM');
    await exited(w2.proc);
  }, 180_000);
});

/** Waits until the queue has a run active on a worker. */
async function untilActive(url: string, what: () => string): Promise<void> {
  const connection = new Redis(url, { maxRetriesPerRequest: null });
  const queue = new Queue('moesim-runs', { connection });
  const t0 = Date.now();
  try {
    while ((await queue.getActiveCount()) === 0) {
      if (Date.now() - t0 > 60_000) throw new Error(`no run became active: ${what()}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  } finally {
    await queue.close();
    connection.disconnect();
  }
}

describe.skipIf(!hasRedis)('the worker watchdog', () => {
  let dir = '';
  const children: ChildProcess[] = [];
  beforeAll(() => {
    dir = tempDir('queue-watchdog');
  });
  afterAll(async () => {
    for (const c of children) {
      if (c.exitCode !== null || c.signalCode !== null) continue;
      c.kill('SIGCONT');
      c.kill('SIGKILL');
    }
    await Promise.all(children.map(exited));
    if (dir) rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  /** A plugin that, in worker processes marked MOESIM_TEST_HOLD=1 only, sleeps (or spins) in create while `hold` exists. */
  const holdingPlugin = (name: string, hold: string, spin: boolean) => {
    const plugins = path.join(dir, 'plugins');
    mkdirSync(plugins, { recursive: true });
    const wait = spin ? '{}' : 'Atomics.wait(a, 0, 0, 100);';
    writePlugin(
      plugins,
      name,
      `import { existsSync } from 'node:fs';
export default { ...base, name: '${name}', create: (p, ctx) => { const a = new Int32Array(new SharedArrayBuffer(4)); while (process.env.MOESIM_TEST_HOLD === "1" && existsSync(${JSON.stringify(hold)})) ${wait} return base.create(p, ctx); } };`,
    );
    return `plugins/${name}.ts`;
  };

  it('a run over --job-timeout, and plugin code over pluginBudgetMs on a worker: one line each', async () => {
    const { url } = await startRedis(children);
    const hold = path.join(dir, 'hold-bounds');
    writeFileSync(hold, '');
    const slow = path.join(dir, 'slow.yaml');
    writeFileSync(slow, CONFIG('slow', holdingPlugin('sleeper', hold, false)).replace('seeds: [1, 2]', 'seeds: [1]'));
    const spin = path.join(dir, 'spin.yaml');
    writeFileSync(
      spin,
      `${CONFIG('spin', holdingPlugin('spinner', hold, true)).replace('seeds: [1, 2]', 'seeds: [1]')}pluginBudgetMs: 3000\n`,
    );
    // The bound (6 s) is under the sleeper's plugin budget (10 s, the default) and over the spinner's (3 s).
    const w = moesim(['worker', '--queue', url, '--jobs', '1', '--job-timeout', '6'], children, {
      MOESIM_TEST_HOLD: '1',
    });
    await waitOutput(w.proc, /joined redis:/, w.log);
    const outSlow = path.join(dir, 'slow-out');
    const r1 = await runCliAsync(['experiment', slow, '--out', outSlow, '--queue', url]);
    expect(r1.status, r1.stderr).toBe(2);
    expect(lastLine(r1.stderr)).toMatch(/--job-timeout: run 0 of slow ran longer than a worker's bound of 6 s/);
    const r2 = await runCliAsync(['experiment', spin, '--out', path.join(dir, 'spin-out'), '--queue', url]);
    expect(r2.status, r2.stderr).toBe(3);
    expect(lastLine(r2.stderr)).toMatch(/create.*still running after \d+ ms, over the budget of 3000 ms/);
    // One line each: the run's error is the last (before it, only the submitter's progress lines).
    for (const r of [r1, r2]) expect(r.stderr.match(/bound of|over the budget/g), r.stderr).toHaveLength(1);
    // The worker survives both and serves the next run.
    rmSync(hold);
    const ok = await runCliAsync(['experiment', slow, '--out', path.join(dir, 'slow-ok'), '--queue', url]);
    expect(ok.status, ok.stderr).toBe(0);
    w.proc.kill('SIGTERM');
    await exited(w.proc);
  }, 180_000);

  it('a worker that stops heartbeating (SIGSTOP): its run is re-queued and another worker finishes it', async () => {
    const { url } = await startRedis(children);
    const hold = path.join(dir, 'hold-stop');
    writeFileSync(hold, '');
    const config = path.join(dir, 'frozen.yaml');
    // The hold may last while the second worker starts: a budget well over that.
    const frozen = CONFIG('frozen', holdingPlugin('frozen', hold, false)).replace('seeds: [1, 2]', 'seeds: [1]');
    writeFileSync(config, `${frozen}pluginBudgetMs: 120000\n`);
    const serial = await runCliAsync(['experiment', config, '--out', path.join(dir, 'frozen-serial'), '--jobs', '1']);
    expect(serial.status, serial.stderr).toBe(0);
    const w1 = moesim(['worker', '--queue', url, '--jobs', '1'], children, { MOESIM_TEST_HOLD: '1' });
    await waitOutput(w1.proc, /joined redis:/, w1.log);
    const out = path.join(dir, 'frozen-out');
    const sub = moesim(['experiment', config, '--out', out, '--queue', url], children);
    sub.proc.stderr!.on('data', (d: Buffer) => (sub.log.text += d.toString()));
    await untilActive(url, () => sub.log.text);
    const w2 = moesim(['worker', '--queue', url, '--jobs', '1'], children);
    await waitOutput(w2.proc, /joined redis:/, w2.log);
    w1.proc.kill('SIGSTOP');
    const tStop = Date.now();
    rmSync(hold);
    const r = await sub.done;
    const recovered = Date.now() - tStop;
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/run 0: its worker stopped heartbeating \(no beat for 5 s\); re-queued/);
    expect(readFileSync(path.join(out, 'results.json'), 'utf8')).toBe(
      readFileSync(path.join(dir, 'frozen-serial', 'results.json'), 'utf8'),
    );
    process.stderr.write(
      `queue-failures: a frozen worker's run re-queued and finished ${(recovered / 1000).toFixed(1)} s after SIGSTOP (heartbeat TTL ${JOB_BEAT.ttlMs / 1000} s)\n`,
    );
    w1.proc.kill('SIGCONT');
    w1.proc.kill('SIGKILL');
    w2.proc.kill('SIGTERM');
    await Promise.all([exited(w1.proc), exited(w2.proc)]);
  }, 180_000);
});

describe.skipIf(hasRedis)('the queue fails loudly (no Redis here)', () => {
  it(SKIP, () => {});
});
