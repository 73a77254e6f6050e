/**
 * What moesim does around a plugin's code so that a plugin cannot break the run, only fail it.
 *
 * - `runPluginCode` runs one call of plugin code (its factory or a hook): `process.exit` is
 *   replaced by a throw while it runs (and restored after), the call's wall time is checked
 *   against the budget, and a heartbeat (a shared buffer the main thread reads) says which hook
 *   is running since when, so the main thread can terminate a worker stuck in a loop.
 * - `readOnly` gives a plugin a read-only view of the executor's objects: a write throws.
 * - `probeImport` imports a plugin module on a throwaway worker thread first, so a module that
 *   loops or exits at import fails the run with one line instead of hanging or exiting.
 */
import { Worker } from 'node:worker_threads';
import { performance } from 'node:perf_hooks';
import { SERVING_HOOK_NAMES } from '../../sim/serving/policy.ts';

/** Wall-time budget of one hook call and of a plugin's import (config `pluginBudgetMs`): generous, a hook is µs. */
export const DEFAULT_PLUGIN_BUDGET_MS = 10_000;

/** Names a heartbeat can hold (index + 1 in slot 1; 0 = no plugin code running). */
export const PLUGIN_CODE_NAMES: readonly string[] = ['create', ...SERVING_HOOK_NAMES];

/**
 * Slot 0: wall-clock start (ms since the epoch) of the plugin call under way, 0 when none; slot 1: its
 * name's index + 1. Read and written with Atomics: a plain 64-bit access to shared memory may tear, and a
 * torn read once showed a call running for 1.8e12 ms.
 */
let heartbeat: BigInt64Array | undefined;

/** Set by a worker thread for the task it runs (the main thread reads the same buffer). */
export function setHeartbeat(buf: SharedArrayBuffer | undefined): void {
  heartbeat = buf ? new BigInt64Array(buf) : undefined;
}

export const newHeartbeat = (): SharedArrayBuffer => new SharedArrayBuffer(16);

/** The plugin call a heartbeat shows running, and for how long (ms), or undefined. */
export function readHeartbeat(buf: SharedArrayBuffer): { hook: string; ms: number } | undefined {
  const a = new BigInt64Array(buf);
  const start = Number(Atomics.load(a, 0));
  if (start === 0) return undefined;
  return { hook: PLUGIN_CODE_NAMES[Number(Atomics.load(a, 1)) - 1] ?? 'unknown', ms: wallMs() - start };
}

// Wall-clock ms comparable across threads: a worker's performance.timeOrigin is not on the same
// clock as the main thread's on Node 20 (the watchdog read a call as running for 1.8e12 ms), so
// the heartbeat uses Date.now(). The watchdog is runner code, not model code.
const wallMs = (): number => Date.now();

/** Thrown by the replaced `process.exit`: a plugin asked to end the process. */
export class PluginExit extends Error {
  constructor(code: unknown) {
    super(`called process.exit(${code === undefined ? '' : String(code)}); a plugin may not end the process`);
  }
}

let depth = 0;
let realExit: typeof process.exit | undefined;

/**
 * Runs `f`, plugin code named `name`, under the rules above. Over `budgetMs` → throws (the
 * caller's hook wrapper turns it into the plugin's error naming the hook).
 */
export function runPluginCode<T>(name: string, budgetMs: number, f: () => T): T {
  if (depth++ === 0) {
    realExit = process.exit;
    process.exit = ((code?: unknown) => {
      throw new PluginExit(code);
    }) as typeof process.exit;
    if (heartbeat) {
      Atomics.store(heartbeat, 1, BigInt(PLUGIN_CODE_NAMES.indexOf(name) + 1));
      Atomics.store(heartbeat, 0, BigInt(wallMs()));
    }
  }
  const t0 = performance.now();
  try {
    const r = f();
    const ms = performance.now() - t0;
    if (ms > budgetMs)
      throw new Error(`took ${ms.toFixed(0)} ms, over the budget of ${budgetMs} ms per call (config pluginBudgetMs)`);
    return r;
  } finally {
    if (--depth === 0) {
      process.exit = realExit!;
      if (heartbeat) Atomics.store(heartbeat, 0, 0n);
    }
  }
}

/** A callback handed to a method of a view's object, seeing its arguments read-only. */
const readOnlyCallback = (a: unknown): unknown =>
  typeof a === 'function' ? (...xs: unknown[]) => (a as (...b: unknown[]) => unknown)(...xs.map(readOnly)) : a;

/** The message of a write to a read-only view. */
const denied = (what: string, prop: PropertyKey): never => {
  throw new TypeError(
    `tried to ${what} '${String(prop)}' of a read-only view (views and their objects are the executor's)`,
  );
};

const proxies = new WeakMap<object, object>();

/**
 * `v` seen read-only, to any depth: reads as the object itself (methods run on the real object,
 * their results read-only too); any write, delete or defineProperty throws a TypeError.
 */
export function readOnly<T>(v: T): T {
  if ((typeof v !== 'object' && typeof v !== 'function') || v === null) return v;
  const target = v as unknown as object;
  const known = proxies.get(target);
  if (known) return known as T;
  const p: object = new Proxy(target, {
    get(t, prop) {
      const x = Reflect.get(t, prop, t) as unknown;
      if (typeof x === 'function') {
        if (typeof t === 'function') return readOnly(x);
        // Array methods are generic: run on the proxy, so callbacks see read-only elements. Other
        // methods (private fields, typed arrays, Map) run on the object; callbacks get read-only arguments.
        const self = Array.isArray(t) ? p : t;
        return (...args: unknown[]) =>
          readOnly((x as (...a: unknown[]) => unknown).apply(self, args.map(readOnlyCallback)));
      }
      return readOnly(x);
    },
    apply(t, self, args) {
      return readOnly(Reflect.apply(t as (...a: unknown[]) => unknown, self, args));
    },
    set: (_t, prop) => denied('set', prop),
    deleteProperty: (_t, prop) => denied('delete', prop),
    defineProperty: (_t, prop) => denied('define', prop),
    setPrototypeOf: () => denied('set the prototype of', 'object'),
    getOwnPropertyDescriptor(t, prop) {
      const d = Reflect.getOwnPropertyDescriptor(t, prop);
      // A proxy must report non-configurable properties as they are.
      if (d && 'value' in d && d.configurable) d.value = readOnly(d.value);
      return d;
    },
  });
  proxies.set(target, p);
  return p as T;
}

/**
 * Imports the plugin module `file` on a throwaway worker thread within `budgetMs`. Resolves with
 * undefined when it loaded or failed to load (the real import reports a load failure), or with
 * what went wrong: it called process.exit, or did not finish in time (the thread is terminated).
 */
export function probeImport(file: string, budgetMs: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    const w = new Worker(new URL('./probe-entry.mjs', import.meta.url), {
      workerData: { file },
      stdout: true,
      stderr: true,
    });
    let done = false;
    const finish = (why: string | undefined): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      void w.terminate();
      resolve(why);
    };
    let timer: NodeJS.Timeout | undefined;
    w.on('message', (m) => {
      if (m !== 'ready') return finish(undefined);
      timer = setTimeout(
        () => finish(`did not finish importing within ${budgetMs} ms (config pluginBudgetMs)`),
        budgetMs,
      );
    });
    w.on('error', () => finish(undefined));
    w.on('exit', (code) => finish(`called process.exit(${code}) at import; a plugin may not end the process`));
  });
}
