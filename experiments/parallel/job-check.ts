/**
 * What a `moesim worker` checks in a job taken from the Redis queue before it imports anything
 * the job names (expanding a config imports its plugin modules, which runs their code):
 * - the job's shape (a task with a config, file, folder, index, run key and timeline flag);
 * - the config hash the submitter computed, against the config received;
 * - no `__proto__` / `constructor` / `prototype` key anywhere, and the config valid as this
 *   moesim validates it (unchanged by validation: a submitter sends a validated config);
 * - the run key well formed and naming the job's index;
 * - every plugin path inside the config's folder or this checkout (the folders the submitting
 *   config can name), after the folder is mapped onto this checkout.
 * The queue is still trusted (README: run it on a trusted network): this stops a malformed or
 * stray job, not someone who can write both a job and files on the worker's disk.
 */
import { createHash } from 'node:crypto';
import { realpathSync } from 'node:fs';
import path from 'node:path';
import { UserError } from '../../sim/kernel/errors.ts';
import { rejectUnsafeKeys, validateConfig } from '../config/load.ts';
import type { RunTask } from './wire.ts';

/** A job of the queue `moesim-runs`. */
export interface JobData {
  readonly task: RunTask;
  /** The submitter's checkout root. */
  readonly root: string;
  /** `configHash(task)` as the submitter computed it. */
  readonly configHash: string;
}

/** The hash a job carries of its config and file (sha256 of their JSON). */
export const configHash = (task: Pick<RunTask, 'config' | 'file'>): string =>
  createHash('sha256')
    .update(JSON.stringify([task.config, task.file]))
    .digest('hex');

const isRecord = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/** `p` is `dir` or inside it. */
const inside = (dir: string, p: string): boolean => {
  const rel = path.relative(dir, p);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
};

const real = (p: string): string => {
  try {
    return realpathSync(p);
  } catch {
    return path.resolve(p);
  }
};

function checkShape(data: unknown): asserts data is JobData {
  const bad = (field: string, value?: unknown) =>
    new UserError('malformed job from the queue', undefined, `job.${field}`, value ?? '(missing)');
  if (!isRecord(data)) throw bad('', data);
  const t = data.task;
  if (!isRecord(t)) throw bad('task', t);
  if (!isRecord(t.config)) throw bad('task.config', t.config);
  for (const k of ['file', 'baseDir', 'key'] as const) if (typeof t[k] !== 'string') throw bad(`task.${k}`, t[k]);
  if (!Number.isSafeInteger(t.index) || (t.index as number) < 0) throw bad('task.index', t.index);
  if (typeof t.timeline !== 'boolean') throw bad('task.timeline', t.timeline);
  if (typeof data.root !== 'string') throw bad('root', data.root);
  if (typeof data.configHash !== 'string') throw bad('configHash', data.configHash);
}

/**
 * The job's task with its config folder mapped onto this checkout (`root` is this checkout's
 * root), once every check above passes.
 * @throws UserError naming the job's field and value
 */
export function checkJob(data: unknown, root: string): RunTask {
  rejectUnsafeKeys(data, undefined, ['job']);
  checkShape(data);
  const { task } = data;
  if (configHash(task) !== data.configHash)
    throw new UserError('the job’s config does not match its hash', task.file, 'job.configHash', data.configHash);
  const config = validateConfig(task.config, task.file);
  if (JSON.stringify(config) !== JSON.stringify(task.config))
    throw new UserError('the job’s config is not one this moesim validated (another version of moesim?)', task.file);
  let key: unknown;
  try {
    key = JSON.parse(task.key);
  } catch {
    key = undefined;
  }
  if (!Array.isArray(key) || key.length !== 4 || key[0] !== task.index || typeof key[1] !== 'string')
    throw new UserError('malformed run key', task.file, 'job.task.key', task.key);
  // The config's folder, on this machine: the same place in this checkout, else as sent (a shared filesystem).
  const rel = path.relative(data.root, task.baseDir);
  const baseDir = rel.startsWith('..') || path.isAbsolute(rel) ? task.baseDir : path.resolve(root, rel);
  const allowed = [real(root), real(baseDir)];
  config.policies.forEach((p, i) => {
    if (!('path' in p) || typeof p.path !== 'string') return;
    const target = real(path.resolve(baseDir, p.path));
    if (!allowed.some((d) => inside(d, target)))
      throw new UserError(
        'a worker loads plugins only from the config’s folder or its own checkout',
        task.file,
        `policies[${i}].path`,
        p.path,
      );
  });
  return { ...task, config, baseDir };
}
