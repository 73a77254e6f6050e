/**
 * The watchdog of a distributed sweep's runs, on both ends of the Redis queue.
 *
 * - On a `moesim worker`, `superviseJob` runs one job on the worker's thread pool and watches it:
 *   plugin code running over the config's `pluginBudgetMs` (the thread's heartbeat, sandbox.ts),
 *   or the whole run over the worker's `--job-timeout`, gets its thread terminated and the job
 *   answered with a one-line failure (a plugin error naming the hook; an error naming the bound).
 *   While the job runs, the worker refreshes a heartbeat key in Redis (`beatKey`) that expires
 *   `JOB_BEAT.ttlMs` after its last refresh.
 * - The submitter (queue.ts) reads those keys: a run that is active but whose key has expired
 *   on two checks in a row belongs to a worker that stopped (frozen, partitioned, its event loop
 *   blocked); it is re-queued once under a new job id, and fails with one line the second time.
 *   A worker that died outright is also recovered by BullMQ's stalled-job check.
 */
import type { Redis } from 'ioredis';
import type { Piscina } from 'piscina';
import { UserError } from '../../sim/kernel/errors.ts';
import { DEFAULT_PLUGIN_BUDGET_MS, newHeartbeat, readHeartbeat } from './sandbox.ts';
import type { TaskResult } from './task.ts';
import { toWireError, type RunTask, type WireError } from './wire.ts';

/**
 * How often a worker refreshes a running job's heartbeat key, and how long the key outlives its
 * last refresh. A few missed refreshes (a loaded machine, a GC pause) are not a stopped worker.
 */
export const JOB_BEAT = { everyMs: 1_000, ttlMs: 5_000 } as const;

/**
 * A worker's default bound on one run's wall time (`moesim worker --job-timeout`, seconds): a
 * run of the shipped experiments takes seconds to minutes, so hours mean it will not finish.
 */
export const DEFAULT_JOB_TIMEOUT_S = 6 * 3600;

/** How many times the submitter re-queues a run whose worker stopped heartbeating before failing it. */
export const MAX_REQUEUES = 1;

/** The Redis key a worker refreshes while it runs job `jobId`. */
export const beatKey = (jobId: string): string => `moesim-runs:beat:${jobId}`;

interface Supervised {
  readonly pool: Piscina<RunTask, TaskResult>;
  readonly task: RunTask;
  readonly jobId: string;
  readonly redis: Redis;
  readonly timeoutS: number;
}

/** Runs one job of a `moesim worker` under the watchdog (see the module comment). */
export async function superviseJob(s: Supervised): Promise<TaskResult> {
  const { pool, task, redis } = s;
  const heartbeat = newHeartbeat();
  const abort = new AbortController();
  const budgetMs = task.config.pluginBudgetMs ?? DEFAULT_PLUGIN_BUDGET_MS;
  const key = beatKey(s.jobId);
  const t0 = Date.now();
  let verdict: TaskResult | undefined;
  const beat = () => redis.set(key, String(Date.now()), 'PX', JOB_BEAT.ttlMs).catch(() => undefined);
  await beat();
  let lastBeat = Date.now();
  const timer = setInterval(
    () => {
      if (Date.now() - lastBeat >= JOB_BEAT.everyMs) {
        lastBeat = Date.now();
        void beat();
      }
      if (verdict) return;
      const plugin = readHeartbeat(heartbeat);
      if (plugin && plugin.ms > budgetMs) verdict = failure(pluginStall(task, plugin.hook, plugin.ms, budgetMs));
      else if (Date.now() - t0 > s.timeoutS * 1000) verdict = failure(overTime(task, s.timeoutS));
      if (verdict) abort.abort();
    },
    Math.min(JOB_BEAT.everyMs, Math.max(10, budgetMs / 4)),
  );
  try {
    return await pool.run({ ...task, heartbeat }, { signal: abort.signal });
  } catch (err) {
    if (verdict) return verdict;
    throw err;
  } finally {
    clearInterval(timer);
    await redis.del(key).catch(() => 0);
  }
}

const failure = (error: WireError): TaskResult => ({ ok: false, error });

/** The plugin entry of the run's policy (its label is the run key's second element). */
function pluginOf(task: RunTask): { label: string; file: string } {
  const label = String((JSON.parse(task.key) as unknown[])[1]);
  const entries = task.config.policies as readonly { path?: string; label?: string; name?: string }[];
  const entry = entries.find((e) => e.path !== undefined && (e.label ?? e.path) === label);
  return { label, file: entry?.path ?? entries.find((e) => e.path !== undefined)?.path ?? '?' };
}

/** A plugin call over its budget: the same error a thread pool's watchdog gives (runner.ts `onStall`). */
function pluginStall(task: RunTask, hook: string, ms: number, budgetMs: number): WireError {
  const { label, file } = pluginOf(task);
  return {
    kind: 'plugin',
    policy: label,
    file,
    hook,
    detail: `still running after ${ms.toFixed(0)} ms, over the budget of ${budgetMs} ms per call (config pluginBudgetMs); its thread was terminated`,
    stack: '',
  };
}

function overTime(task: RunTask, timeoutS: number): WireError {
  return toWireError(
    new UserError(
      `run ${task.index} of ${task.config.name} ran longer than a worker's bound of ${timeoutS} s and was stopped (moesim worker --job-timeout)`,
      task.file,
      '--job-timeout',
      timeoutS,
    ),
  );
}

/**
 * The submitter's side: of `ids` (runs it waits for), those that are active on a worker whose
 * heartbeat key has expired. `state` is BullMQ's job state lookup.
 */
export async function silentJobs(
  redis: Redis,
  ids: readonly string[],
  state: (id: string) => Promise<string>,
): Promise<string[]> {
  const silent: string[] = [];
  for (const id of ids) {
    if ((await state(id)) !== 'active') continue;
    if ((await redis.exists(beatKey(id))) === 0) silent.push(id);
  }
  return silent;
}
