/**
 * Runs shared across the experiments of one reproduction: papers' configs repeat runs (MoEpic's
 * min-vram grid holds the same (model, V_e, system, testbed) points as its latency-vs-vram
 * figure), and a run's outcome depends only on what it simulates, not on which config names it.
 * A run whose simulated inputs equal an earlier one's (policy, its parameters, model, hardware,
 * runtime, seed, workload, executor, and the folder relative paths resolve against) is simulated
 * once; each experiment gets the record relabelled with its own index, label, sweep values and
 * seed — the bytes `runOne` would have written — and a timing of zero run seconds for the copy.
 *
 * A built-in policy may name what its simulation reads of its parameters (`SIMULATED_PARAMS`):
 * Pre-gated MoE accepts MoEpic's V_e but is flat in it, so its runs at every V_e are one run.
 *
 * Only built-in policies are shared (a plugin's code may keep state between runs).
 */
import type { RunSpec } from '../../config/expand.ts';
import type { Backend } from '../../parallel/pool.ts';
import type { RunOutput } from '../../runner.ts';
import { builtinPolicy } from '../../../policies/registry.ts';
import { type PreGatedParams, preGatedSimulatedParams } from '../../../policies/prefetch/pre-gated.ts';

/** Built-in policies whose simulation reads less than their parameters: what it reads, as a key part. */
const SIMULATED_PARAMS: Readonly<Record<string, (params: never) => unknown>> = {
  'pre-gated': (p: PreGatedParams) => preGatedSimulatedParams(p),
};

/** The simulated inputs of `spec` as one string; undefined when it must not be shared (a plugin policy). */
export function simulatedKey(spec: RunSpec, baseDir: string): string | undefined {
  const def = spec.policy.definition;
  if (builtinPolicy(def.name) !== def) return undefined;
  const simulated = SIMULATED_PARAMS[def.name];
  return JSON.stringify([
    def.name,
    simulated ? simulated(spec.policy.params as never) : spec.policy.params,
    spec.model,
    spec.hardware,
    spec.runtime ?? null,
    spec.seed,
    spec.workload,
    spec.executor,
    spec.throughput ?? null,
    baseDir,
  ]);
}

/** `out` (simulated for another run with the same key) as `spec`'s own output. */
export function relabel(out: RunOutput, spec: RunSpec, copy: boolean): RunOutput {
  const r = out.record;
  const record = JSON.parse(
    JSON.stringify({
      index: spec.index,
      policy: spec.policy.label,
      params: spec.params,
      seed: spec.seed,
      metrics: r.metrics,
      sim: r.sim,
    }),
  ) as RunOutput['record'];
  const timing = copy
    ? { index: spec.index, policy: spec.policy.label, wallS: 0, eventsPerS: 0, simulatedSPerWallS: 0 }
    : { ...out.timing, index: spec.index, policy: spec.policy.label };
  return { record, timing };
}

/** The runs of every backend made by one `RunSharing` are simulated once per simulated key. */
export class RunSharing {
  private readonly outputs = new Map<string, Promise<RunOutput>>();
  /** Runs answered from another experiment's run. */
  shared = 0;

  /** `backend` with its runs shared (a timeline is never shared: pass the backend as it is then). */
  wrap(backend: Backend, baseDir: string): Backend {
    return {
      concurrency: backend.concurrency,
      close: () => backend.close(),
      run: (spec) => {
        const key = simulatedKey(spec, baseDir);
        if (key === undefined) return backend.run(spec);
        const first = this.outputs.get(key);
        if (first) {
          this.shared++;
          return first.then((out) => relabel(out, spec, true));
        }
        const p = backend.run(spec);
        this.outputs.set(key, p);
        return p.then((out) => relabel(out, spec, false));
      },
    };
  }
}
