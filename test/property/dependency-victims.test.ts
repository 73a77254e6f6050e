/**
 * dependency-prefetch (the deepspeed-like baseline) chooses its eviction victims from its own
 * stamp order, without reading the executor's candidate list. Property: on random serving
 * worlds (shrunk real models, both batchings, small buffers, `cache: lru | none`,
 * `replaceQueue`), that order makes exactly the choices of the reference rule
 * (`dependencyVictimByScan`: the least recent stamp among the candidates, a prefetch never
 * taking its own layer's experts) — same victim or refusal at every `chooseVictim` call, same
 * outcome. Coverage (counted over the runs, asserted): demand evictions, prefetch evictions and
 * refused prefetches all occur.
 *
 * Replay a failure: fast-check prints `{ seed, path }`; pass them to `fc.assert`.
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadHardware } from '../../hardware-profiles/load.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import { UserError } from '../../sim/kernel/errors.ts';
import { RngStreams } from '../../sim/kernel/rng.ts';
import { msToNs } from '../../sim/kernel/time.ts';
import type { ServingPolicy } from '../../sim/serving/policy.ts';
import { ServingExecutor } from '../../sim/serving/serving-executor.ts';
import { createDependencyPrefetch, DependencyPrefetchParams } from '../../policies/prefetch/dependency-prefetch.ts';
import { buildWorkload } from '../../workloads/config.ts';
import { BIG_GPUS, slotsOf, worldArb, worldModel, type WorldSpec } from '../helpers/serving-world.ts';

const seed = process.env['MOESIM_FC_SEED'] ? Number(process.env['MOESIM_FC_SEED']) : undefined;

interface Choice {
  readonly reason: string;
  readonly forKey: number;
  readonly victim: number | undefined;
}

/** Runs the world with dependency-prefetch (`byScan`: the reference victim rule), recording every victim choice. */
async function run(w: WorldSpec, raw: Record<string, unknown>, byScan: boolean) {
  const model = worldModel(w);
  const hardware = loadHardware(w.hardwareId);
  const streams = new RngStreams(w.seed);
  const shape = { modelId: model.id, moeLayers: model.moeLayers, experts: model.experts, topK: model.topK };
  const workload = await buildWorkload(w.workload, shape, streams);
  const inner = createDependencyPrefetch('dependency-prefetch', DependencyPrefetchParams.parse(raw), {
    victimByScan: byScan,
  });
  const choices: Choice[] = [];
  const policy: ServingPolicy = {
    ...inner,
    chooseVictim(view, q) {
      const victim = inner.chooseVictim!(view, q);
      choices.push({ reason: q.reason, forKey: q.forKey, victim });
      return victim;
    },
  };
  const executor = new ServingExecutor({
    model,
    hardware,
    cost: createCostModel(model, hardware, () => {}),
    workload,
    policy,
    config: {
      batching: w.batching,
      maxBatchSize: w.maxBatchSize,
      maxWaitNs: msToNs(w.maxWaitMs),
      maxBatchTokens: w.maxBatchTokens,
      bufferSlots: slotsOf(model, w.slotsFraction),
      packetBytes: w.packetBytes,
      preloadAllExperts: false,
    },
  });
  const outcome = executor.run();
  return { choices, outcome };
}

describe('dependency-prefetch victims: stamp order = reference scan', () => {
  it('same victim (or refusal) at every eviction, same outcome, on random worlds', async () => {
    const seen = { demand: 0, prefetch: 0, refused: 0 };
    await fc.assert(
      fc.asyncProperty(
        worldArb().map((w) => ({ ...w, hardwareId: BIG_GPUS[w.seed % BIG_GPUS.length]! })),
        fc.constantFrom('lru', 'none'),
        fc.boolean(),
        async (w, cache, replaceQueue) => {
          const raw = { cache, replaceQueue };
          let fast;
          try {
            fast = await run(w, raw, false);
          } catch (err) {
            if (err instanceof UserError) return; // the buffer does not fit the GPU
            throw err;
          }
          const ref = await run(w, raw, true);
          expect(fast.choices).toEqual(ref.choices);
          expect(JSON.stringify(fast.outcome)).toBe(JSON.stringify(ref.outcome));
          for (const c of fast.choices) {
            if (c.victim === undefined) seen.refused++;
            else if (c.reason === 'demand') seen.demand++;
            else seen.prefetch++;
          }
        },
      ),
      { numRuns: 40, ...(seed !== undefined ? { seed } : {}) },
    );
    expect(seen.demand).toBeGreaterThan(0);
    expect(seen.prefetch).toBeGreaterThan(0);
    expect(seen.refused).toBeGreaterThan(0);
  }, 120_000);
});
