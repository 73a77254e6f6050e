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
 * leaves its job to BullMQ's stalled-job check, which gives it to another worker.
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
  if (u.protocol !== 'redis:' && u.protocol !== 'rediss:') throw new UserError('expected a redis:// (or rediss://) URL', undefined, field, url);
  const db = u.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d+$/.test(db)) throw new UserError('the database after the port must be a number (redis://host:port/0)', undefined, field, url);
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

/** Fails fast, on one line, when nothing listens at the queue's address (the Redis client would retry forever). */
export function probe(url: string, field = '--queue'): Promise<void> {
  const { host, port } = connectionOf(url, field);
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host, port });
    const fail = (why: string) => {
      socket.destroy();
      reject(new UserError(`cannot reach Redis at ${host}:${port} (${why})`, undefined, field, url));
    };
    socket.setTimeout(5000, () => fail('no answer in 5 s'));
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
export async function queueBackend(url: string, base: TaskBase, makePluginError: MakePluginError, log: (m: string) => void): Promise<Backend> {
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
  let announced = false;
  return {
    concurrency: Number.MAX_SAFE_INTEGER,
    run: async (spec: RunSpec): Promise<RunOutput> => {
      const id = jobId(spec.index);
      const result = new Promise<TaskResult>((resolve, reject) => pending.set(id, { index: spec.index, resolve, reject }));
      const task = taskFor(base, spec);
      await queue.add('run', { task, root: ROOT, configHash: configHash(task) }, { jobId: id, removeOnComplete: true, removeOnFail: true, attempts: 1 });
      if (!announced) {
        announced = true;
        const workers = await queue.getWorkersCount().catch(() => -1);
        log(`runs sent to ${url} (queue ${QUEUE_NAME}); ${workers === 0 ? 'no worker is connected yet: start `moesim worker --queue ' + url + '`' : workers > 0 ? `${workers} worker connection(s)` : 'waiting for workers'}`);
      }
      return unwrap(await result, makePluginError, `moesim worker, run ${spec.index}`);
    },
    close: async () => {
      // Runs not simulated (an earlier run failed, or the submitter is stopping) leave the queue.
      for (const [id] of pending) await queue.remove(id).catch(() => 0);
      pending.clear();
      await events.close();
      await queue.close();
      for (const c of clients) c.disconnect();
    },
  };
}

export interface RunningWorker {
  close(): Promise<void>;
}

/** `moesim worker`: joins the queue and simulates runs, `threads` at a time, until closed. */
export async function startWorker(url: string, threads: number, log: (m: string) => void): Promise<RunningWorker> {
  await probe(url);
  const redis = client(url, log, `worker ${url}`);
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
      const result = await pool.run(task);
      log(`${task.config.name}: run ${task.index} ${result.ok ? 'done' : 'failed'} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      return encode(result);
    },
    { connection: redis, concurrency: threads },
  );
  worker.on('error', quietErrors(log, `worker ${url}`));
  await worker.waitUntilReady();
  log(`joined ${url} (queue ${QUEUE_NAME}, ${threads} thread${threads === 1 ? '' : 's'})`);
  return {
    close: async () => {
      await worker.close();
      await pool.destroy();
      redis.disconnect();
    },
  };
}
