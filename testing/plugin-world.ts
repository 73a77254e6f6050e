/**
 * Small worlds for testing a policy *plugin* the way `moesim experiment` runs it: the plugin is
 * loaded by path from a config, goes through the same preflight (and the same hook-contract
 * guard), and its run is watched by the invariant checker. The tests `moesim new policy`
 * generates use this; it works for any plugin file.
 *
 * ```ts
 * const r = await runPluginWorld(PLUGIN_FILE, { capacitySlots: 32 }, TINY_SERVING_WORLD);
 * expect(r.refused).toBeUndefined();
 * expect(r.violations).toEqual([]);
 * ```
 *
 * Not a test file (no `.test.ts`).
 */
import path from 'node:path';
import * as fc from 'fast-check';
import { listHardware, loadModel } from '../hardware-profiles/load.ts';
import { UserError } from '../sim/kernel/errors.ts';
import { servingMetrics, type RunMetrics } from '../sim/metrics/serving-metrics.ts';
import { throughputMetrics, type ThroughputMetrics } from '../sim/metrics/throughput-metrics.ts';
import type { MemoryRecord, TraceSink } from '../sim/observe/trace-sink.ts';
import { validateConfig } from '../experiments/config/load.ts';
import { preflight } from '../experiments/runner.ts';
import { buildServingWorld, buildThroughputWorld } from '../experiments/world.ts';
import { InvariantChecker } from './invariant-checker.ts';

/** One small world: what an experiment config says about model, machine, workload and executor. */
export interface PluginWorld {
  readonly model: string;
  readonly hardware: string;
  readonly seed: number;
  /** The config's `workload` section. */
  readonly workload: Record<string, unknown>;
  /** The config's `executor` section (`kind: throughput` for the throughput family). */
  readonly executor: Record<string, unknown>;
}

export interface PluginRun {
  /** Set when moesim refused the world before running it (e.g. the buffer does not fit the GPU): valid behaviour. */
  readonly refused?: UserError;
  /** Invariant violations seen during the run (empty = all held). */
  readonly violations: readonly string[];
  /** The run's metrics (serving or throughput family), when it ran. */
  readonly metrics?: RunMetrics | ThroughputMetrics;
}

/** A serving world small enough to run in well under a second. */
export const TINY_SERVING_WORLD: PluginWorld = {
  model: 'olmoe',
  hardware: 'rtx4090',
  seed: 1,
  workload: {
    requests: 4,
    arrival: { kind: 'poisson', ratePerS: 20 },
    promptTokens: { kind: 'fixed', tokens: 8 },
    outputTokens: { kind: 'fixed', tokens: 4 },
  },
  executor: { batching: 'continuous', maxBatchSize: 2, bufferSlots: 'auto' },
};

/** A throughput world: decode of a few sequences of a small model on MoE-Gen's C1 machine. */
export const TINY_THROUGHPUT_WORLD: PluginWorld = {
  model: 'deepseek-v2-lite',
  hardware: 'moe-gen-c1',
  seed: 1,
  workload: {
    requests: 16,
    arrival: { kind: 'offline' },
    promptTokens: { kind: 'fixed', tokens: 64 },
    outputTokens: { kind: 'fixed', tokens: 8 },
  },
  executor: { kind: 'throughput', phase: 'decode' },
};

const SMALL_MODELS = ['olmoe', 'qwen1.5-moe-a2.7b', 'deepseek-v2-lite', 'mixtral-8x7b'] as const;

const lengthArb = (max: number) =>
  fc.oneof(
    fc.integer({ min: 1, max }).map((tokens) => ({ kind: 'fixed', tokens })),
    fc
      .tuple(fc.integer({ min: 1, max }), fc.integer({ min: 1, max }))
      .map(([a, b]) => ({ kind: 'uniform', min: Math.min(a, b), max: Math.max(a, b) })),
  );

/** Random small serving worlds: real small models × every shipped testbed × a few short requests × executor settings. */
export const servingWorldArb: fc.Arbitrary<PluginWorld> = fc
  .record({
    model: fc.constantFrom(...SMALL_MODELS),
    hardware: fc.constantFrom(...listHardware()),
    seed: fc.integer({ min: 0, max: 10_000 }),
    workload: fc.record({
      requests: fc.integer({ min: 1, max: 4 }),
      arrival: fc.oneof(
        fc.constant({ kind: 'offline' }),
        fc.double({ min: 0.5, max: 50, noNaN: true }).map((ratePerS) => ({ kind: 'poisson', ratePerS })),
      ),
      promptTokens: lengthArb(32),
      outputTokens: lengthArb(5),
      routing: fc.constantFrom({ kind: 'uniform' }, { kind: 'synthetic', profile: 'olmoe' }),
    }),
    executor: fc.record({
      batching: fc.constantFrom('static', 'continuous'),
      maxBatchSize: fc.integer({ min: 1, max: 4 }),
      maxWaitMs: fc.constantFrom(0, 20),
      bufferSlots: fc.oneof(fc.constant('auto'), fc.integer({ min: 1, max: 96 })),
      packetMiB: fc.constantFrom(4, 16, 64),
    }),
  })
  .map((w) =>
    w.workload.routing.kind === 'synthetic' && w.model !== 'olmoe'
      ? { ...w, workload: { ...w.workload, routing: { kind: 'uniform' } } }
      : w,
  );

/** Random small throughput worlds: small models × machines × short offline batches × phase. */
export const throughputWorldArb: fc.Arbitrary<PluginWorld> = fc.record({
  model: fc.constantFrom('deepseek-v2-lite', 'qwen1.5-moe-a2.7b', 'mixtral-8x7b'),
  hardware: fc.constantFrom('moe-gen-c1', 'moe-gen-c2', 'rtx4090', 'l4', 't4'),
  seed: fc.integer({ min: 0, max: 10_000 }),
  workload: fc.record({
    requests: fc.integer({ min: 1, max: 64 }),
    arrival: fc.constant({ kind: 'offline' }),
    promptTokens: fc.integer({ min: 8, max: 256 }).map((tokens) => ({ kind: 'fixed', tokens })),
    outputTokens: fc.integer({ min: 1, max: 16 }).map((tokens) => ({ kind: 'fixed', tokens })),
  }),
  executor: fc.record({ kind: fc.constant('throughput'), phase: fc.constantFrom('prefill', 'decode', 'both') }),
});

/** Memory pools never over capacity, categories within use, at every memory record. */
class MemoryChecker implements TraceSink {
  readonly violations: string[] = [];
  onMemory(r: MemoryRecord): void {
    if (this.violations.length >= 20) return;
    if (r.usedBytes > r.capacityBytes)
      this.violations.push(`${r.pool} over capacity at t=${r.timeNs} ns: ${r.usedBytes} > ${r.capacityBytes}`);
    if (r.categoryUsedBytes < 0 || r.categoryUsedBytes > r.usedBytes)
      this.violations.push(
        `${r.pool}.${r.category} = ${r.categoryUsedBytes} outside [0, ${r.usedBytes}] at t=${r.timeNs} ns`,
      );
  }
}

/**
 * Runs the plugin at `pluginFile` (absolute path) with `params` in `world`, exactly as a config
 * naming it by `path:` would, with the invariant checker as a sink. A world that moesim refuses
 * before running (a `UserError`: the buffer or the model does not fit) comes back as `refused`;
 * anything else thrown (a plugin failure, a bug) is rethrown.
 */
export async function runPluginWorld(
  pluginFile: string,
  params: Record<string, unknown>,
  world: PluginWorld,
): Promise<PluginRun> {
  const baseDir = path.dirname(pluginFile);
  const config = validateConfig({
    name: 'plugin-world',
    model: world.model,
    hardware: world.hardware,
    seeds: [world.seed],
    workload: world.workload,
    executor: world.executor,
    policies: [{ path: `./${path.basename(pluginFile)}`, params }],
  });
  const loaded = { config, file: path.join(baseDir, 'plugin-world.yaml'), baseDir };
  let spec;
  try {
    [spec] = await preflight(loaded);
  } catch (err) {
    if (err instanceof UserError) return { refused: err, violations: [] };
    throw err;
  }
  if (!spec) throw new Error('the world expanded to no run');
  if (spec.throughput) {
    const memory = new MemoryChecker();
    const outcome = (await buildThroughputWorld(spec, { baseDir, sink: memory })).run();
    const metrics = throughputMetrics(outcome);
    const violations = [...memory.violations];
    if (!outcome.feasible && !(outcome.infeasibleReason ?? '').trim())
      violations.push('an infeasible plan must say why');
    return { violations, metrics };
  }
  const model = loadModel(spec.model);
  const checker = new InvariantChecker({ experts: model.experts, bytesPerExpert: model.derived.bytesPerExpert });
  const outcome = (await buildServingWorld(spec, { baseDir, sink: checker })).run();
  const violations = checker.finish(outcome);
  return { violations, metrics: servingMetrics(outcome) };
}
