/**
 * Reading and validating experiment configs. Every failure is a `UserError` naming the file,
 * the field path and the offending value (the CLI prints it on one line, exit 2).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import type { z } from 'zod';
import { UserError } from '../../sim/kernel/errors.ts';
import { ExperimentSchema, type ExperimentConfig } from './schema.ts';

/** Formats a zod path as `a.b[2].c`. */
export function formatPath(p: readonly PropertyKey[]): string {
  let out = '';
  for (const k of p) {
    if (typeof k === 'number') out += `[${k}]`;
    else out += out ? `.${String(k)}` : String(k);
  }
  return out;
}

function valueAt(root: unknown, p: readonly PropertyKey[]): unknown {
  let v: unknown = root;
  for (const k of p) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[k as string];
  }
  return v;
}

/** The first zod issue as a UserError (file, field path, value). */
export function zodToUserError(
  err: z.ZodError,
  input: unknown,
  file?: string,
  prefix: readonly PropertyKey[] = [],
): UserError {
  const issue = err.issues[0]!;
  let p: PropertyKey[] = [...issue.path];
  let message = issue.message;
  if (issue.code === 'unrecognized_keys') {
    const keys = (issue as { keys?: string[] }).keys ?? [];
    p = [...p, keys[0] ?? ''];
    message = `unknown field`;
    return new UserError(message, file, formatPath([...prefix, ...p]), valueAt(input, p));
  }
  if (issue.code === 'invalid_union') {
    message = 'does not match any allowed form';
  }
  const value = valueAt(input, p);
  return new UserError(
    message,
    file,
    formatPath([...prefix, ...p]) || undefined,
    value === undefined ? '(missing)' : value,
  );
}

/** Parses YAML or JSON text (by extension; YAML is a superset, so anything else is read as YAML). */
export function parseConfigText(text: string, file: string): unknown {
  try {
    if (file.endsWith('.json')) return JSON.parse(text);
    // prettyErrors: the message's first line then ends with the position ("at line 3, column 5:").
    return YAML.parse(text, { prettyErrors: true });
  } catch (err) {
    const msg = (err instanceof Error ? err.message : String(err)).split('\n')[0]!.replace(/:$/, '');
    throw new UserError(`not valid ${file.endsWith('.json') ? 'JSON' : 'YAML'}: ${msg}`, file);
  }
}

/** Key names that reach an object's prototype when used as a path segment: never a config field. */
export const UNSAFE_KEYS: ReadonlySet<string> = new Set(['__proto__', 'constructor', 'prototype']);

/**
 * Throws a UserError naming the first key, anywhere in `value`, that is or contains (as a dotted
 * path segment, e.g. a sweep key `workload.__proto__.maxBatchSize`) `__proto__`, `constructor`
 * or `prototype`. Such a key could change every object of the process, not one field.
 */
export function rejectUnsafeKeys(value: unknown, file?: string, at: readonly PropertyKey[] = []): void {
  if (value === null || typeof value !== 'object') return;
  if (Array.isArray(value)) {
    value.forEach((v, i) => rejectUnsafeKeys(v, file, [...at, i]));
    return;
  }
  for (const key of Object.keys(value)) {
    const bad = key.split('.').find((seg) => UNSAFE_KEYS.has(seg));
    if (bad !== undefined)
      throw new UserError(`'${bad}' may not be a key or a segment of a key path`, file, formatPath([...at, key]));
    rejectUnsafeKeys((value as Record<string, unknown>)[key], file, [...at, key]);
  }
}

export function validateConfig(raw: unknown, file?: string): ExperimentConfig {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new UserError('an experiment config must be a mapping', file, undefined, raw);
  }
  rejectUnsafeKeys(raw, file);
  const r = ExperimentSchema.safeParse(raw);
  if (!r.success) throw zodToUserError(r.error, raw, file);
  return deepFreeze(r.data);
}

export interface LoadedConfig {
  readonly config: ExperimentConfig;
  readonly file: string;
  /** Folder of the config file: relative paths in it resolve against this. */
  readonly baseDir: string;
}

export function loadConfigFile(file: string): LoadedConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new UserError(code === 'ENOENT' ? 'no such file' : `cannot read (${code ?? String(err)})`, file);
  }
  return { config: validateConfig(parseConfigText(text, file), file), file, baseDir: path.dirname(path.resolve(file)) };
}

export function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object' && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o as Record<string, unknown>)) deepFreeze(v);
  }
  return o;
}
