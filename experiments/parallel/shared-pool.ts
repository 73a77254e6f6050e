/**
 * One pool of worker threads shared by several experiments (`moesim reproduce`): the threads
 * start once, and the cores stay busy across configs instead of draining at the end of each.
 *
 * Each experiment gets a `Backend` of its own (`backendFor`), whose runs carry that experiment's
 * task base (config, folder). The runs wait in one list ordered by (experiment rank, run index):
 * a free thread always takes the lowest, so the experiments run mostly one after another (a
 * worker's cache of expanded configs stays warm) and the next one starts as soon as a thread
 * would otherwise idle. A backend offers one run more than there are threads, so an experiment
 * writing its results between runs never leaves a thread without work.
 */
import { Piscina } from 'piscina';
import type { RunSpec } from '../config/expand.ts';
import type { RunOutput } from '../runner.ts';
import { YOUNG_GENERATION_MB } from '../heap.ts';
import { taskFor, unwrap, type Backend, type MakePluginError, type TaskBase } from './pool.ts';
import type { TaskResult } from './task.ts';

export interface SharedPool {
  /** The backend of the experiment of rank `rank` (lower ranks run first). Its `close` does nothing. */
  backendFor(base: TaskBase, rank: number): Backend;
  /** Stops the threads (after the runs under way). */
  close(): Promise<void>;
}

interface Waiting {
  readonly rank: number;
  readonly index: number;
  readonly start: () => void;
}

/** A pool of `threads` worker threads; `onRunDone` is called after every run (the progress bar). */
export function sharedThreadPool(
  threads: number,
  makePluginError: MakePluginError,
  onRunDone: () => void = () => {},
): SharedPool {
  const pool = new Piscina<ReturnType<typeof taskFor>, TaskResult>({
    filename: new URL('./worker-entry.mjs', import.meta.url).href,
    minThreads: threads,
    maxThreads: threads,
    concurrentTasksPerWorker: 1,
    resourceLimits: { maxYoungGenerationSizeMb: YOUNG_GENERATION_MB },
    idleTimeout: 60_000,
  });
  const waiting: Waiting[] = [];
  let busy = 0;
  const next = (): void => {
    while (busy < threads && waiting.length > 0) {
      let best = 0;
      for (let i = 1; i < waiting.length; i++) {
        const w = waiting[i]!;
        const b = waiting[best]!;
        if (w.rank < b.rank || (w.rank === b.rank && w.index < b.index)) best = i;
      }
      const [w] = waiting.splice(best, 1);
      busy++;
      w!.start();
    }
  };
  const submit = (base: TaskBase, rank: number, spec: RunSpec): Promise<RunOutput> =>
    new Promise<TaskResult>((resolve, reject) => {
      waiting.push({
        rank,
        index: spec.index,
        start: () => {
          pool
            .run(taskFor(base, spec))
            .then(resolve, reject)
            .finally(() => {
              busy--;
              onRunDone();
              next();
            });
        },
      });
      next();
    }).then((r) => unwrap(r, makePluginError, `worker thread, run ${spec.index}`));
  return {
    backendFor: (base, rank) => ({
      concurrency: threads + 1,
      run: (spec) => submit(base, rank, spec),
      close: async () => {},
    }),
    close: () => pool.destroy(),
  };
}
