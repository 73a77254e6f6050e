/**
 * Clocks for the benchmarks: a method timed in place (`timeMethod`), every hook of a serving
 * policy timed (`timedPolicy`, `withTimedPolicy`), and the cost of such a clock itself
 * (`timerCost`). Wall time is read here only: policy and simulator code never read a clock.
 */
import { performance } from 'node:perf_hooks';
import type { RunSpec } from '../experiments/config/expand.ts';
import type { PolicyDefinition } from '../policies/types.ts';
import { SERVING_HOOK_NAMES, type ServingHook, type ServingPolicy } from '../sim/serving/policy.ts';
import { interceptPolicy } from '../sim/serving/policy-driver.ts';

/**
 * Replaces `target[key]` (a prototype's method, or an object's own) with one that times each
 * call and reports its ms and arguments to `onTime`; returns the function that puts the
 * original back.
 */
export function timeMethod<T extends object, K extends keyof T>(
  target: T,
  key: K,
  onTime: (ms: number, args: unknown[]) => void,
): () => void {
  const slot = target as Record<K, unknown>;
  const hadOwn = Object.prototype.hasOwnProperty.call(target, key);
  const orig = slot[key] as (...a: unknown[]) => unknown;
  slot[key] = function (this: unknown, ...a: unknown[]) {
    const t0 = performance.now();
    try {
      return orig.apply(this, a);
    } finally {
      onTime(performance.now() - t0, a);
    }
  };
  return () => {
    if (hadOwn) slot[key] = orig;
    else delete slot[key];
  };
}

/** Every hook the serving executor calls on a policy: the typed list of `ServingPolicy`'s hooks. */
export const POLICY_HOOKS: readonly ServingHook[] = SERVING_HOOK_NAMES;

export type PolicyHook = ServingHook;

/**
 * `p` seen through an object whose hooks are timed (ms per call to `onTime`), built by the same
 * `interceptPolicy` as the runner's plugin guard; everything else is read from `p`, and the
 * hooks run on `p` itself (their calls to each other are not timed twice).
 */
export function timedPolicy(p: ServingPolicy, onTime: (hook: PolicyHook, ms: number) => void): ServingPolicy {
  return interceptPolicy(p, (hook, call) => (...args: unknown[]) => {
    const t0 = performance.now();
    try {
      return call(...args);
    } finally {
      onTime(hook, performance.now() - t0);
    }
  });
}

/** `spec` with its policy's hooks timed (`timedPolicy`) in every world built from it. */
export function withTimedPolicy(spec: RunSpec, onTime: (hook: PolicyHook, ms: number) => void): RunSpec {
  const def = spec.policy.definition as PolicyDefinition<unknown>;
  return {
    ...spec,
    policy: {
      ...spec.policy,
      definition: { ...def, create: (params, ctx) => timedPolicy(def.create(params, ctx), onTime) },
    },
  };
}

/**
 * Cost of a clock around a call, per call (ms, best of five rounds of 200 000 calls of an empty
 * function wrapped as `timedPolicy` wraps a hook): `insideMs` is what it adds to the time
 * measured between its two reads, `totalMs` what it adds to the caller's time.
 */
export function timerCost(): { insideMs: number; totalMs: number } {
  const calls = 200_000;
  let inside = 0;
  const probe = timedPolicy(
    { name: 'probe', onIterationEnd: () => undefined } as ServingPolicy,
    (_hook, ms) => (inside += ms),
  );
  let best = { insideMs: Infinity, totalMs: Infinity };
  for (let round = 0; round < 5; round++) {
    inside = 0;
    const t0 = performance.now();
    for (let i = 0; i < calls; i++) probe.onIterationEnd!(undefined as never);
    const total = performance.now() - t0;
    if (total / calls < best.totalMs) best = { insideMs: inside / calls, totalMs: total / calls };
  }
  return best;
}
