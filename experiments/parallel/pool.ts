/**
 * How the runs of a sweep are executed: a `Backend` simulates one run and resolves with its
 * output (or rejects with the run's typed error). Three exist: in this thread, one at a time
 * (`--jobs 1`, and whenever the caller passes trace sinks); a pool of worker threads (piscina,
 * `--jobs N`); and a Redis queue served by `moesim worker` processes (`./queue.ts`).
 *
 * `runInIndexOrder` dispatches the runs in index order, at most `concurrency` at a time. On the
 * first failure it dispatches nothing more, lets the runs under way finish, and throws the
 * failure of the lowest index: every lower run was dispatched and succeeded, so that is the
 * error a serial run would have stopped at.
 */
import { Piscina } from 'piscina';
import type { RunSpec } from '../config/expand.ts';
import type { RunOutput } from '../runner.ts';
import type { TaskResult } from './task.ts';
import { fromWireError, runKey, type RunTask, type WireError } from './wire.ts';
import { YOUNG_GENERATION_MB } from '../heap.ts';
import { DEFAULT_PLUGIN_BUDGET_MS, newHeartbeat, readHeartbeat } from './sandbox.ts';

export interface Backend {
  /** How many runs may be under way at once. */
  readonly concurrency: number;
  run(spec: RunSpec): Promise<RunOutput>;
  close(): Promise<void>;
}

/** What every task of one experiment shares. */
export type TaskBase = Omit<RunTask, 'index' | 'key'>;

export type MakePluginError = Parameters<typeof fromWireError>[1];

export const taskFor = (base: TaskBase, spec: RunSpec): RunTask => ({
  ...base,
  index: spec.index,
  key: runKey(spec, spec.policy.label),
});

export function unwrap(r: TaskResult, makePluginError: MakePluginError, where: string): RunOutput {
  if (r.ok) return r.output;
  throw fromWireError(r.error as WireError, makePluginError, where);
}

/** The error of a run whose plugin code ran over its budget (`hook`, for `ms`): the thread was terminated. */
export type OnStall = (spec: RunSpec, hook: string, ms: number, budgetMs: number) => Error;

/**
 * A pool of `threads` worker threads (piscina), each loading TypeScript through tsx. With
 * `onStall`, a watchdog reads each run's heartbeat (sandbox.ts): plugin code running longer than
 * the budget (a loop cannot be interrupted on its own thread) has its thread terminated and the
 * run fails with `onStall`'s error.
 */
export function threadBackend(
  threads: number,
  base: TaskBase,
  makePluginError: MakePluginError,
  onStall?: OnStall,
): Backend {
  const pool = new Piscina<RunTask, TaskResult>({
    filename: new URL('./worker-entry.mjs', import.meta.url).href,
    minThreads: threads,
    maxThreads: threads,
    // One run per thread at a time: runs are CPU-bound.
    concurrentTasksPerWorker: 1,
    // The young generation of a simulating process (experiments/heap.ts).
    resourceLimits: { maxYoungGenerationSizeMb: YOUNG_GENERATION_MB },
    idleTimeout: 60_000,
  });
  const budgetMs = base.config.pluginBudgetMs ?? DEFAULT_PLUGIN_BUDGET_MS;
  const run = async (spec: RunSpec): Promise<RunOutput> => {
    const where = `worker thread, run ${spec.index}`;
    if (!onStall) return unwrap(await pool.run(taskFor(base, spec)), makePluginError, where);
    const heartbeat = newHeartbeat();
    const abort = new AbortController();
    let stalled: Error | undefined;
    const timer = setInterval(
      () => {
        const beat = readHeartbeat(heartbeat);
        if (beat && beat.ms > budgetMs && !stalled) {
          stalled = onStall(spec, beat.hook, beat.ms, budgetMs);
          abort.abort();
        }
      },
      Math.min(1000, Math.max(10, budgetMs / 4)),
    );
    try {
      return unwrap(
        await pool.run({ ...taskFor(base, spec), heartbeat }, { signal: abort.signal }),
        makePluginError,
        where,
      );
    } catch (err) {
      throw stalled ?? err;
    } finally {
      clearInterval(timer);
    }
  };
  return { concurrency: threads, run, close: () => pool.destroy() };
}

/** Runs `run` over `items` in order, at most `concurrency` at a time (see the module comment). */
export async function runInIndexOrder<T>(
  items: readonly T[],
  concurrency: number,
  run: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const failed: { at: number; err: unknown }[] = [];
  const lane = async (): Promise<void> => {
    while (failed.length === 0 && next < items.length) {
      const at = next++;
      try {
        await run(items[at]!);
      } catch (err) {
        failed.push({ at, err });
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, items.length)) }, lane));
  if (failed.length > 0) throw failed.reduce((a, b) => (b.at < a.at ? b : a)).err;
}
