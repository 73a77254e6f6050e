/**
 * The one place a serving policy's hooks are called or wrapped.
 *
 * - `PolicyDriver` is what the executor's parts call: every hook through it, any error a hook
 *   throws turned into a `PolicyError` naming the policy, the hook and the simulated time, and
 *   expert keys a decision names checked. The per-layer and per-expert hooks have a method each
 *   (a try/catch inline, no closure per call); the rare ones go through `call`.
 * - `interceptPolicy` wraps every hook of a policy (the typed list `SERVING_HOOKS`) in one
 *   function, keeping its settings: the runner's plugin guard checks results through it and the
 *   bench's timer times each call through it, so neither can drop a hook the policy wrote.
 */
import { PolicyError, SimError } from '../kernel/errors.ts';
import type { Ns } from '../kernel/time.ts';
import {
  SERVING_HOOK_NAMES,
  SERVING_SETTING_NAMES,
  type EvictionQuery,
  type ExpertKey,
  type KeepTop,
  type LayerRouting,
  type PolicyDecision,
  type ServingHook,
  type ServingPolicy,
  type ServingView,
} from './policy.ts';

/** A hook's function, untyped: what an interceptor receives and returns. */
export type AnyHook = (...args: unknown[]) => unknown;

/**
 * `p` with each hook it has replaced by `around(hook, call)` (`call` runs the policy's own hook
 * on `p`), and each setting it has copied. Anything else (a policy's own fields) is read from
 * `p` through the prototype, so code that inspects the policy still sees it.
 */
export function interceptPolicy(
  p: ServingPolicy,
  around: (hook: ServingHook, call: AnyHook) => AnyHook,
): ServingPolicy {
  const out = Object.create(p) as Record<string, unknown>;
  const src = p as unknown as Record<string, unknown>;
  for (const s of SERVING_SETTING_NAMES) if (src[s] !== undefined) out[s] = src[s];
  for (const hook of SERVING_HOOK_NAMES) {
    const f = src[hook];
    if (typeof f !== 'function') continue;
    out[hook] = around(hook, (...args: unknown[]) => (f as AnyHook).apply(p, args));
  }
  return out as unknown as ServingPolicy;
}

/** Calls a policy's hooks for the executor, with its error rules. */
export class PolicyDriver {
  constructor(
    readonly policy: ServingPolicy,
    private readonly clock: { readonly now: Ns },
    /** Expert keys are 0 … keyCount − 1 (MoE layers × experts). */
    private readonly keyCount: number,
  ) {}

  get name(): string {
    return this.policy.name;
  }

  /** Runs `f` (a call of `hook`), wrapping what it throws. */
  call<T>(hook: ServingHook, f: () => T): T {
    try {
      return f();
    } catch (err) {
      throw this.failure(hook, err);
    }
  }

  /**
   * What to throw when a policy hook threw `err`: simulator errors as they are, anything else
   * wrapped in a PolicyError naming the hook.
   */
  failure(hook: string, err: unknown): unknown {
    if (err instanceof PolicyError || err instanceof SimError) return err;
    const msg = err instanceof Error ? err.message : String(err);
    const wrapped = new PolicyError(msg, this.clock.now, this.policy.name, hook);
    if (err instanceof Error && err.stack) wrapped.stack = `${wrapped.name}: ${wrapped.message}\n${err.stack}`;
    return wrapped;
  }

  /** A PolicyError for what the policy asked, at the current time (`hook`: a hook, or the decision field). */
  error(message: string, hook: string): PolicyError {
    return new PolicyError(message, this.clock.now, this.policy.name, hook);
  }

  /** True for a valid expert key; anything else is the policy's error. */
  validKey(key: unknown, hook: ServingHook): key is ExpertKey {
    if (typeof key === 'number' && Number.isInteger(key) && key >= 0 && key < this.keyCount) return true;
    throw this.error(`invalid expert key ${String(key)}`, hook);
  }

  onLayerRouted(view: ServingView, routing: LayerRouting): PolicyDecision | void {
    try {
      return this.policy.onLayerRouted!(view, routing);
    } catch (err) {
      throw this.failure('onLayerRouted', err);
    }
  }

  onLayerDone(view: ServingView, layer: number): PolicyDecision | void {
    try {
      return this.policy.onLayerDone!(view, layer);
    } catch (err) {
      throw this.failure('onLayerDone', err);
    }
  }

  afterUse(view: ServingView, key: ExpertKey): boolean | void | KeepTop {
    try {
      return this.policy.afterUse!(view, key);
    } catch (err) {
      throw this.failure('afterUse', err);
    }
  }

  chooseVictim(view: ServingView, query: EvictionQuery): ExpertKey | undefined {
    try {
      return this.policy.chooseVictim!(view, query);
    } catch (err) {
      throw this.failure('chooseVictim', err);
    }
  }
}
