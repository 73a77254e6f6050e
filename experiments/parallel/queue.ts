/**
 * Distributed sweeps over Redis with BullMQ. `moesim experiment --queue redis://host:port` is
 * the submitter: it adds one job per run still to simulate to the queue `moesim-runs`, and
 * collects each result from the queue's event stream; the runner writes results.json exactly as
 * for a local sweep (run-index order, atomically after every run). `moesim worker --queue ...`
 * processes join the queue and simulate runs, each on a pool of worker threads (`--jobs`, so the
 * BullMQ event loop stays free to renew its job locks while a run computes).
 *
 * A job carries the validated config, its hash, its folder and the run's index and key: the worker
 * checks all of them (`job-check.ts`) before it expands the config itself, from its own checkout. The config's folder is sent relative to the
 * submitter's checkout when it is inside it (and resolved against the worker's), else as an
 * absolute path (which must then exist on the worker: a shared filesystem). A result comes back
 * as `encode`d JSON; a failure of the run comes back as a result too (not a failed job), so
 * the submitter rethrows the same typed error a serial run would. A worker that dies mid-run
 * leaves its job to BullMQ's stalled-job check, which gives it to another worker; one that stops
 * heartbeating (frozen, partitioned) has its run re-queued by the submitter, and a run over the
 * worker's bound is stopped there (`worker-watchdog.ts`).
 */
import { createConnection } from 'node:net';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Queue, QueueEvents, Worker } from 'bullmq';
import { Redis, type RedisOptions } from 'ioredis';
import { Piscina } from 'piscina';
import { UserError } from '../../sim/kernel/errors.ts';
import type { RunSpec } from '../config/expand.ts';
import type { RunOutput } from '../runner.ts';
import { taskFor, unwrap, type Backend, type MakePluginError, type TaskBase } from './pool.ts';
import type { TaskResult } from './task.ts';
import { decode, encode, toWireError, type RunTask } from './wire.ts';
import { checkJob, configHash, type JobData } from './job-check.ts';
import { YOUNG_GENERATION_MB } from '../heap.ts';
import { DEFAULT_JOB_TIMEOUT_S, JOB_BEAT, MAX_REQUEUES, beatKey, superviseJob } from './worker-watchdog.ts';

export const QUEUE_NAME = 'moesim-runs';

/** This checkout's root (a worker resolves a config's folder against its own). */
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** Parses `redis://[user:password@]host[:port][/db]` (or `rediss://`, TLS) into the Redis client's options. */
export function connectionOf(url: string, field = '--queue'): RedisOptions & { host: string; port: number } {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new UserError('not a URL: expected redis://host:port', undefined, field, url);
  }
  if (u.protocol !== 'redis:' && u.protocol !== 'rediss:')
    throw new UserError('expected a redis:// (or rediss://) URL', undefined, field, url);
  const db = u.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d+$/.test(db))
    throw new UserError('the database after the port must be a number (redis://host:port/0)', undefined, field, url);
  return {
    host: u.hostname || 'localhost',
    port: u.port ? Number(u.port) : 6379,
    ...(u.username ? { username: decodeURIComponent(u.username) } : {}),
    ...(u.password ? { password: decodeURIComponent(u.password) } : {}),
    ...(db !== '' ? { db: Number(db) } : {}),
    ...(u.protocol === 'rediss:' ? { tls: {} } : {}),
    // Required by BullMQ's blocking connections.
    maxRetriesPerRequest: null,
  };
}

/** How long the probe waits for a connection and for Redis's answer to PING (a bounded wait, then one line). */
export const PROBE_TIMEOUT_MS = 5_000;

/**
 * Fails fast, on one line, unless a Redis server answers at the queue's address: nothing listens
 * (the Redis client would retry forever), or something accepts the connection but does not
 * answer `PING` as Redis does within `PROBE_TIMEOUT_MS` (an HTTP server, a silent port).
 * A `-NOAUTH` answer is Redis too (the password goes with the URL to the real client).
 */
export function probe(url: string, field = '--queue'): Promise<void> {
  const { host, port, tls } = connectionOf(url, field);
  if (tls) return probeTcp(host, port, url, field);
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host, port });
    let reply = '';
    const fail = (why: string) => {
      socket.destroy();
      reject(new UserError(`cannot reach Redis at ${host}:${port} (${why})`, undefined, field, url));
    };
    socket.setTimeout(PROBE_TIMEOUT_MS, () =>
      fail(
        reply
          ? 'not a Redis server: its answer to PING was not Redis’s'
          : `no Redis answer to PING in ${PROBE_TIMEOUT_MS / 1000} s: is it a Redis server?`,
      ),
    );
    socket.once('error', (err: NodeJS.ErrnoException) => fail(err.code ?? err.message));
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.on('data', (d: Buffer) => {
      reply += d.toString('latin1');
      if (!reply.includes('\r\n')) return;
      const line = reply.slice(0, reply.indexOf('\r\n'));
      if (line === '+PONG' || /^-(NOAUTH|WRONGPASS|ERR .*auth)/i.test(line)) {
        socket.destroy();
        resolve();
      } else fail(`not a Redis server: it answered PING with ${JSON.stringify(line.slice(0, 40))}`);
    });
  });
}

/** For `rediss://`: only that something listens (the TLS client checks the rest). */
function probeTcp(host: string, port: number, url: string, field: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host, port });
    const fail = (why: string) => {
      socket.destroy();
      reject(new UserError(`cannot reach Redis at ${host}:${port} (${why})`, undefined, field, url));
    };
    socket.setTimeout(PROBE_TIMEOUT_MS, () => fail(`no answer in ${PROBE_TIMEOUT_MS / 1000} s`));
    socket.once('error', (err: NodeJS.ErrnoException) => fail(err.code ?? err.message));
    socket.once('connect', () => {
      socket.end();
      resolve();
    });
  });
}

/**
 * A Redis client for one BullMQ object (each gets its own: Worker and QueueEvents block on
 * theirs). BullMQ is given built clients: its ESM build cannot load ioredis by itself.
 */
function client(url: string, log: (m: string) => void, what: string): Redis {
  const redis = new Redis(connectionOf(url));
  redis.on('error', quietErrors(log, what));
  return redis;
}

const quietErrors = (log: (m: string) => void, what: string) => {
  let said = false;
  return (err: Error) => {
    if (said) return;
    said = true;
    log(`${what}: ${err.message}`);
  };
};

/** The submitter's side: runs go to the queue, results come back from its events. */
export async function queueBackend(
  url: string,
  base: TaskBase,
  makePluginError: MakePluginError,
  log: (m: string) => void,
): Promise<Backend> {
  await probe(url);
  const clients = [client(url, log, `queue ${url}`), client(url, log, `queue events ${url}`)];
  const queue = new Queue<JobData>(QUEUE_NAME, { connection: clients[0]! });
  const events = new QueueEvents(QUEUE_NAME, { connection: clients[1]! });
  queue.on('error', quietErrors(log, `queue ${url}`));
  events.on('error', quietErrors(log, `queue events ${url}`));
  // Listening before any job exists: no completion can be missed.
  await events.waitUntilReady();
  await queue.waitUntilReady();
  const sweep = randomUUID();
  const jobId = (index: number) => `${sweep}-${index}`;
  interface Pending {
    readonly index: number;
    readonly data: JobData;
    /** Times it was re-queued because its worker stopped heartbeating. */
    readonly requeues: number;
    resolve(r: TaskResult): void;
    reject(e: unknown): void;
  }
  const pending = new Map<string, Pending>();
  /** Lowest index that failed: higher runs still waiting in the queue are withdrawn. */
  let failedAt = Infinity;
  const withdrawn = new Error('withdrawn after an earlier run failed');
  const withdrawAbove = async (index: number) => {
    for (const [id, p] of pending) {
      if (p.index <= index) continue;
      try {
        await queue.remove(id);
      } catch {
        // Already taken by a worker: its result is ignored.
      }
      pending.delete(id);
      p.reject(withdrawn);
    }
  };
  events.on('completed', ({ jobId: id, returnvalue }) => {
    const p = pending.get(id);
    if (!p) return;
    pending.delete(id);
    const r = decode<TaskResult>(returnvalue as unknown as string);
    if (!r.ok && p.index < failedAt) {
      failedAt = p.index;
      void withdrawAbove(p.index);
    }
    p.resolve(r);
  });
  events.on('failed', ({ jobId: id, failedReason }) => {
    const p = pending.get(id);
    if (!p) return;
    pending.delete(id);
    p.reject(new Error(`run ${p.index} failed on a moesim worker: ${failedReason}`));
  });
  const options = { removeOnComplete: true, removeOnFail: true, attempts: 1 };
  const onSilent = (ids: readonly string[], resume: string) => {
    for (const id of ids) {
      const p = pending.get(id);
      if (!p) continue;
      pending.delete(id);
      const silence = `its worker stopped heartbeating (no beat for ${JOB_BEAT.ttlMs / 1000} s)`;
      if (p.requeues >= MAX_REQUEUES) {
        const times = `${MAX_REQUEUES + 1} times`;
        p.reject(new UserError(`run ${p.index}: ${silence}, ${times}; ${resume}`, undefined, '--queue', url));
        continue;
      }
      const again = `${jobId(p.index)}-r${p.requeues + 1}`;
      pending.set(again, { ...p, requeues: p.requeues + 1 });
      log(`run ${p.index}: ${silence}; re-queued as job ${again}`);
      void queue.add('run', p.data, { jobId: again, ...options }).catch((err: unknown) => {
        pending.delete(again);
        p.reject(err);
      });
    }
  };
  const stopWatch = watchQueue(queue, clients[0]!, pending, url, base.file, onSilent, (err) => {
    for (const [, p] of pending) p.reject(err);
    pending.clear();
  });
  let announced = false;
  return {
    concurrency: Number.MAX_SAFE_INTEGER,
    run: async (spec: RunSpec): Promise<RunOutput> => {
      const id = jobId(spec.index);
      const task = taskFor(base, spec);
      const data: JobData = { task, root: ROOT, configHash: configHash(task) };
      const result = new Promise<TaskResult>((resolve, reject) =>
        pending.set(id, { index: spec.index, data, requeues: 0, resolve, reject }),
      );
      await queue.add('run', data, { jobId: id, ...options });
      if (!announced) {
        announced = true;
        const workers = await queue.getWorkersCount().catch(() => -1);
        log(
          `runs sent to ${url} (queue ${QUEUE_NAME}); ${workers === 0 ? 'no worker is connected yet: start `moesim worker --queue ' + url + '`' : workers > 0 ? `${workers} worker connection(s)` : 'waiting for workers'}`,
        );
      }
      return unwrap(await result, makePluginError, `moesim worker, run ${spec.index}`);
    },
    close: async () => {
      stopWatch();
      // Runs not simulated (an earlier run failed, or the submitter is stopping) leave the queue;
      // every step bounded, so a lost Redis cannot hold the submitter.
      for (const [id] of pending) await within(queue.remove(id), CLOSE_STEP_MS).catch(() => 0);
      pending.clear();
      await within(events.close(), CLOSE_STEP_MS).catch(() => undefined);
      await within(queue.close(), CLOSE_STEP_MS).catch(() => undefined);
      for (const c of clients) c.disconnect();
    },
  };
}

/**
 * The submitter's liveness check: how often it asks Redis (PING, and the state of up to
 * `JOBS_CHECKED` of its queued runs), and how long Redis may stay silent before the sweep stops.
 */
export const LIVENESS = { everyMs: 2_000, lostAfterMs: 15_000 } as const;
const JOBS_CHECKED = 32;
/** The longest the submitter waits for one step of closing the queue. */
const CLOSE_STEP_MS = 3_000;

const within = <T>(p: Promise<T>, ms: number): Promise<T> =>
  new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no answer in ${ms} ms`)), ms);
    p.then(
      (v) => (clearTimeout(t), resolve(v)),
      (e: unknown) => (clearTimeout(t), reject(e)),
    );
  });

/**
 * Calls `fail` once, with a one-line UserError that says how to resume, when Redis has not
 * answered for `LIVENESS.lostAfterMs`, or when queued runs are gone from Redis without a result
 * (Redis restarted empty, or the queue was flushed) on two checks in a row; calls `onSilent`
 * with the runs active on a worker whose heartbeat key expired, on two checks in a row.
 * Returns its stop.
 */
function watchQueue(
  queue: Queue<JobData>,
  redis: Redis,
  pending: ReadonlyMap<string, unknown>,
  url: string,
  file: string,
  onSilent: (ids: readonly string[], resume: string) => void,
  fail: (err: UserError) => void,
): () => void {
  const resume = `the runs finished so far are kept in the output folder; resume with \`moesim experiment ${file} --out <the same folder> --queue ${url}\` once Redis and a worker are up`;
  let lastAnswer = Date.now();
  let missing = new Set<string>();
  let silent = new Set<string>();
  let busy = false;
  let failed = false;
  const stop = () => clearInterval(timer);
  const lose = (why: string) => {
    if (failed) return;
    failed = true;
    stop();
    fail(new UserError(`lost the Redis queue at ${url} (${why}); ${resume}`, undefined, '--queue', url));
  };
  const tick = async () => {
    if (busy || pending.size === 0) return;
    busy = true;
    try {
      await within(redis.ping(), LIVENESS.everyMs);
      lastAnswer = Date.now();
      const now = new Set<string>();
      const quiet = new Set<string>();
      for (const id of [...pending.keys()].slice(0, JOBS_CHECKED)) {
        const state = await within(queue.getJobState(id), LIVENESS.everyMs);
        if (state === 'unknown') now.add(id);
        else if (state === 'active' && (await within(redis.exists(beatKey(id)), LIVENESS.everyMs)) === 0) quiet.add(id);
      }
      const gone = [...now].filter((id) => missing.has(id) && pending.has(id));
      missing = now;
      const stopped = [...quiet].filter((id) => silent.has(id) && pending.has(id));
      silent = quiet;
      if (stopped.length > 0) onSilent(stopped, resume);
      if (gone.length > 0)
        lose(
          `${gone.length} queued run(s) are gone from Redis without a result: Redis restarted empty or the queue was flushed`,
        );
    } catch {
      if (Date.now() - lastAnswer > LIVENESS.lostAfterMs) lose(`no answer for ${LIVENESS.lostAfterMs / 1000} s`);
    } finally {
      busy = false;
    }
  };
  const timer = setInterval(() => void tick(), LIVENESS.everyMs);
  timer.unref();
  return stop;
}

/**
 * A job's lock lasts this long (renewed at half of it while its run computes) and stalled jobs
 * are looked for this often: a dead worker's run goes to another worker within about twice this,
 * the ~30 s the README promises (BullMQ's defaults, 30 s each, gave 54–82 s).
 */
export const STALLED_CHECK_MS = 15_000;

export interface RunningWorker {
  close(): Promise<void>;
}

/**
 * `moesim worker`: joins the queue and simulates runs, `threads` at a time, until closed; a run
 * longer than `timeoutS` seconds (or plugin code over its budget) is stopped (worker-watchdog.ts).
 */
export async function startWorker(
  url: string,
  threads: number,
  log: (m: string) => void,
  timeoutS: number = DEFAULT_JOB_TIMEOUT_S,
): Promise<RunningWorker> {
  await probe(url);
  const redis = client(url, log, `worker ${url}`);
  const beats = client(url, log, `worker heartbeat ${url}`);
  const pool = new Piscina<RunTask, TaskResult>({
    filename: new URL('./worker-entry.mjs', import.meta.url).href,
    minThreads: 1,
    maxThreads: threads,
    concurrentTasksPerWorker: 1,
    // The young generation of a simulating process (experiments/heap.ts).
    resourceLimits: { maxYoungGenerationSizeMb: YOUNG_GENERATION_MB },
    idleTimeout: 5 * 60_000,
  });
  const worker = new Worker<JobData, string>(
    QUEUE_NAME,
    async (job) => {
      // Checked before anything the job names is imported; a bad job is a failed run, on one line.
      let task: RunTask;
      try {
        task = checkJob(job.data, ROOT);
      } catch (err) {
        log(`job ${job.id}: rejected: ${err instanceof UserError ? err.oneLine() : String(err)}`);
        return encode({ ok: false, error: toWireError(err) } satisfies TaskResult);
      }
      const t0 = Date.now();
      const result = await superviseJob({ pool, task, jobId: job.id!, redis: beats, timeoutS });
      log(
        `${task.config.name}: run ${task.index} ${result.ok ? 'done' : 'failed'} in ${((Date.now() - t0) / 1000).toFixed(1)} s`,
      );
      return encode(result);
    },
    { connection: redis, concurrency: threads, lockDuration: STALLED_CHECK_MS, stalledInterval: STALLED_CHECK_MS },
  );
  worker.on('error', quietErrors(log, `worker ${url}`));
  await worker.waitUntilReady();
  log(`joined ${url} (queue ${QUEUE_NAME}, ${threads} thread${threads === 1 ? '' : 's'})`);
  return {
    close: async () => {
      await worker.close();
      await pool.destroy();
      redis.disconnect();
      beats.disconnect();
    },
  };
}
