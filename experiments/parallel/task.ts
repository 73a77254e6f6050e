/**
 * The worker side of a parallel or distributed sweep: simulates one run of an experiment.
 *
 * A worker (a thread of the pool, or a `moesim worker` process) gets the validated config, its
 * folder and a run index; it expands the config itself (policies are code, and a plugin is
 * imported again by path in the worker), checks that its run is the one the submitter meant
 * (same `runKey`), and runs it with exactly the code a serial run uses (`runOne`). Expansions
 * are cached per config, so a worker pays for one only once per experiment.
 */
import { createHash } from 'node:crypto';
import { UserError } from '../../sim/kernel/errors.ts';
import type { RunSpec } from '../config/expand.ts';
import { prepareRuns, runOne, type RunOutput } from '../runner.ts';
import { setHeartbeat } from './sandbox.ts';
import { runKey, toWireError, type RunTask, type WireError } from './wire.ts';

export type TaskResult =
  | { readonly ok: true; readonly output: RunOutput }
  | { readonly ok: false; readonly error: WireError };

const cache = new Map<string, Promise<RunSpec[]>>();

function specsOf(task: RunTask): Promise<RunSpec[]> {
  const id = createHash('sha256')
    .update(JSON.stringify([task.config, task.baseDir, task.file]))
    .digest('hex');
  let p = cache.get(id);
  if (!p) {
    p = prepareRuns(task.config, task.baseDir, task.file);
    // A few experiments at a time at most (a long-lived `moesim worker` serves many).
    if (cache.size >= 4) cache.delete(cache.keys().next().value!);
    cache.set(id, p);
    p.catch(() => cache.delete(id));
  }
  return p;
}

export async function runTask(task: RunTask): Promise<TaskResult> {
  setHeartbeat(task.heartbeat);
  try {
    const specs = await specsOf(task);
    const spec = specs[task.index];
    const key = spec ? runKey(spec, spec.policy.label) : undefined;
    if (key !== task.key) {
      // The worker's setup, not a bug: another checkout, or files the config names that differ.
      throw new UserError(
        `a worker expanded run ${task.index} as ${key ?? 'nothing'}, not ${task.key}: workers need the same moesim checkout and the same files the config names`,
        task.file,
      );
    }
    const output = await runOne(spec!, { baseDir: task.baseDir, file: task.file, timeline: task.timeline });
    return { ok: true, output };
  } catch (err) {
    return { ok: false, error: toWireError(err) };
  } finally {
    setHeartbeat(undefined);
  }
}
