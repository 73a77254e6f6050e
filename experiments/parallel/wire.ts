/**
 * What crosses a thread or a machine between the process that runs an experiment and the
 * workers that simulate its runs: the task (a run named by its config and index), the result
 * (the run's record, timing and timeline) and a failure (rebuilt as the same typed error, so
 * the CLI reports a worker's failure exactly as a serial run's).
 *
 * Worker threads pass these by structured clone; a Redis queue passes them as `encode`d JSON,
 * which keeps the numbers JSON cannot (NaN, ±Infinity, -0) so both give the same values.
 */
import { UserError } from '../../sim/kernel/errors.ts';
import type { ExperimentConfig } from '../config/schema.ts';

/** One run to simulate. The worker expands `config` itself (policies cannot cross threads). */
export interface RunTask {
  readonly config: ExperimentConfig;
  /** The config file (for messages) and its folder (relative paths in the config resolve against it). */
  readonly file: string;
  readonly baseDir: string;
  readonly index: number;
  /** `runKey` of the run as the submitter expanded it; the worker checks its own expansion agrees. */
  readonly key: string;
  readonly timeline: boolean;
  /** Thread pools only: where the worker says which plugin hook runs since when (sandbox.ts). */
  readonly heartbeat?: SharedArrayBuffer;
}

/** A failure, by kind: the user's input, a plugin's fault, or anything else (a bug). */
export type WireError =
  | {
      readonly kind: 'user';
      readonly message: string;
      readonly file?: string;
      readonly field?: string;
      readonly value?: unknown;
    }
  | {
      readonly kind: 'plugin';
      readonly policy: string;
      readonly file: string;
      readonly hook: string;
      readonly simTimeNs?: number;
      readonly detail: string;
      readonly rule?: string;
      readonly stack: string;
    }
  | { readonly kind: 'internal'; readonly name: string; readonly message: string; readonly stack: string };

/** The stable identity of a run: index, policy label, swept params and seed. */
export const runKey = (
  r: { readonly index: number; readonly params: unknown; readonly seed: number },
  policy: string,
): string => JSON.stringify([r.index, policy, r.params, r.seed]);

export function toWireError(err: unknown): WireError {
  if (err instanceof UserError) {
    return {
      kind: 'user',
      message: err.message,
      ...(err.file !== undefined ? { file: err.file } : {}),
      ...(err.field !== undefined ? { field: err.field } : {}),
      ...(err.value !== undefined ? { value: err.value } : {}),
    };
  }
  if (err instanceof Error && err.name === 'PluginError') {
    const p = err as Error & {
      policy: string;
      file: string;
      hook: string;
      simTimeNs?: number;
      detail: string;
      rule?: string;
      original: unknown;
    };
    const stack = p.original instanceof Error ? (p.original.stack ?? p.original.message) : String(p.original);
    return {
      kind: 'plugin',
      policy: p.policy,
      file: p.file,
      hook: p.hook,
      detail: p.detail,
      stack,
      ...(p.simTimeNs !== undefined ? { simTimeNs: p.simTimeNs } : {}),
      ...(p.rule !== undefined ? { rule: p.rule } : {}),
    };
  }
  const e = err instanceof Error ? err : new Error(String(err));
  return { kind: 'internal', name: e.name, message: e.message, stack: e.stack ?? `${e.name}: ${e.message}` };
}

/**
 * The typed error again. `makePluginError` builds the runner's `PluginError` (passed in, so this
 * module does not load the simulator).
 */
export function fromWireError(
  w: WireError,
  makePluginError: (
    policy: string,
    file: string,
    hook: string,
    simTimeNs: number | undefined,
    detail: string,
    rule: string | undefined,
    original: unknown,
  ) => Error,
  where: string,
): Error {
  if (w.kind === 'user') return new UserError(w.message, w.file, w.field, w.value);
  if (w.kind === 'plugin') {
    const original = new Error(w.detail);
    original.stack = w.stack;
    return makePluginError(w.policy, w.file, w.hook, w.simTimeNs, w.detail, w.rule, original);
  }
  const e = new Error(w.message);
  e.name = w.name;
  e.stack = `${w.stack}\n    (in ${where})`;
  return e;
}

const NUM = '$moesim:number';

/** JSON that keeps NaN, ±Infinity and -0 (tagged), for results crossing a Redis queue. */
export const encode = (v: unknown): string =>
  JSON.stringify(v, (_k, x: unknown) =>
    typeof x === 'number' && (!Number.isFinite(x) || Object.is(x, -0))
      ? { [NUM]: Object.is(x, -0) ? '-0' : String(x) }
      : x,
  );

export const decode = <T>(s: string): T =>
  JSON.parse(s, (_k, x: unknown) => {
    if (x !== null && typeof x === 'object' && !Array.isArray(x)) {
      const keys = Object.keys(x);
      if (keys.length === 1 && keys[0] === NUM) return Number((x as Record<string, string>)[NUM]);
    }
    return x;
  }) as T;
