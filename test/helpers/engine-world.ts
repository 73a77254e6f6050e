/**
 * Random worlds for the host-expert mechanisms (policy host-experts: CPU-computed experts, a GPU
 * cache in front of the CPU with capped, gated uploads, Fiddler's per-expert choice, FreeToken's
 * hybrid share, zero-copy reads) on top of the serving worlds of serving-world.ts: a world is a
 * serving world whose policy is replaced by a random `host-experts` spec and whose runtime gets
 * random `hostExperts` properties (per-layer sync, concurrent or serial, zero-copy efficiency)
 * and expert order (llama.cpp's ready-first, or a Python loop's index order).
 * A third of the worlds run a hybrid model (Qwen3.6-35B-A3B shrunk: Gated DeltaNet layers
 * between full-attention layers), the models the engine validation cases run.
 * With `ssd` the experts live on an NVMe drive (the 990 PRO profile added to the testbed) behind
 * a page cache of a random share of the experts' bytes, read with a random queue depth (the SSD
 * tier; zero-copy worlds stay without it, as the tier refuses zero-copy).
 *
 * Not a test file (no `.test.ts`).
 */
import * as fc from 'fast-check';
import { loadDrive, loadHardware, loadRuntime } from '../../hardware-profiles/load.ts';
import type { RuntimeProfile } from '../../hardware-profiles/types.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import { RngStreams } from '../../sim/kernel/rng.ts';
import { msToNs } from '../../sim/kernel/time.ts';
import type { TraceSink } from '../../sim/observe/trace-sink.ts';
import { ServingExecutor, type ServingConfig } from '../../sim/serving/serving-executor.ts';
import { builtinPolicy } from '../../policies/registry.ts';
import type { HostExpertsParams } from '../../policies/engine/host-experts.ts';
import { buildWorkload } from '../../workloads/config.ts';
import { BIG_GPUS, normaliseWorld, worldArb, worldModel, type WorldSpec } from './serving-world.ts';

export interface EngineWorld {
  readonly base: WorldSpec;
  /** Fractions of the model's MoE layers / experts, resolved when the model is known. */
  readonly cpuLayersFraction: number;
  readonly cacheFraction: number;
  readonly uploadsPerLayer: number;
  readonly admitAfterUses: number;
  readonly admitWindow: number;
  readonly miss: HostExpertsParams['miss'];
  readonly cpuShare: number;
  readonly threads: number;
  readonly layerSyncUs: number;
  readonly overlap: 'concurrent' | 'serial';
  readonly zeroCopyEfficiency: number;
  readonly kernels: boolean;
  /** The runtime's expert order: llama.cpp's (ready-first) or a Python loop's (index: HF eager). */
  readonly expertOrder: 'ready-first' | 'index';
  /** The base world's model replaced by a shrunk hybrid (linear-attention) model. */
  readonly hybrid: boolean;
  /** SSD tier: page cache as a share of all expert bytes, and reads in flight; null: none. */
  readonly ssd: { readonly pageCacheShare: number; readonly parallelReads: number } | null;
}

/** The hybrid model of hybrid worlds (256 experts shrunk to the world's; 40 layers to 2–4). */
export const HYBRID_MODEL = 'qwen3.6-35b-a3b';

export const engineWorldArb: fc.Arbitrary<EngineWorld> = fc
  .record({
    base: worldArb({ batching: 'static' })
      .map(normaliseWorld)
      .chain((w) =>
        fc.constantFrom(...BIG_GPUS).map((hardwareId) => ({
          ...w,
          shrink: w.shrink ?? { layers: 3, denseLeading: 0, experts: 8, topK: 2 },
          hardwareId,
        })),
      ),
    // At least one host layer (a world without one has nothing of this file to test).
    cpuLayersFraction: fc.oneof(fc.constant(1), fc.double({ min: 0.34, max: 1, noNaN: true })),
    cacheFraction: fc.oneof(fc.constant(0), fc.double({ min: 0.25, max: 1, noNaN: true })),
    uploadsPerLayer: fc.integer({ min: 0, max: 4 }),
    admitAfterUses: fc.integer({ min: 1, max: 3 }),
    admitWindow: fc.integer({ min: 1, max: 8 }),
    miss: fc.constantFrom('cpu' as const, 'zero-copy' as const, 'fetch' as const, 'cost' as const),
    cpuShare: fc.oneof(fc.constant(0), fc.double({ min: 0, max: 1, noNaN: true })),
    threads: fc.integer({ min: 1, max: 8 }),
    layerSyncUs: fc.constantFrom(0, 5, 50),
    overlap: fc.constantFrom('concurrent' as const, 'serial' as const),
    zeroCopyEfficiency: fc.constantFrom(1, 0.6, 0.25),
    kernels: fc.boolean(),
    expertOrder: fc.constantFrom('ready-first' as const, 'index' as const),
    hybrid: fc.integer({ min: 0, max: 2 }).map((i) => i === 0),
    ssd: fc.option(
      fc.record({
        pageCacheShare: fc.double({ min: 0.05, max: 0.7, noNaN: true }),
        parallelReads: fc.integer({ min: 1, max: 8 }),
      }),
      { nil: null },
    ),
  })
  .map((w) => {
    if (!w.hybrid) return w;
    const s = w.base.shrink ?? { layers: 3, denseLeading: 0, experts: 8, topK: 2 };
    // At least two layers: one Gated DeltaNet layer, then a full-attention one.
    const shrink = { ...s, layers: Math.max(2, s.layers), denseLeading: 0 };
    return { ...w, base: { ...w.base, modelId: HYBRID_MODEL, shrink } };
  });

/** Whether a world runs with the SSD tier (zero-copy does not combine with it). */
export const hasSsd = (w: EngineWorld): boolean => w.ssd !== null && w.miss !== 'zero-copy';

/** The host-experts parameters of a world for its model. */
export function engineParams(w: EngineWorld): HostExpertsParams {
  const m = worldModel(w.base);
  return {
    cpuLayers: Math.max(1, Math.round(w.cpuLayersFraction * m.moeLayers)),
    cacheSlotsPerLayer: Math.floor(w.cacheFraction * m.experts),
    uploadsPerLayer: w.uploadsPerLayer,
    admitAfterUses: w.admitAfterUses,
    admitWindow: w.admitWindow,
    miss: w.miss,
    cpuShare: w.cpuShare,
    threads: w.threads,
    format: w.kernels ? 'iq2_s' : '',
    ...(hasSsd(w) && { ssd: ssdParams(w, m) }),
  };
}

function ssdParams(w: EngineWorld, m: ReturnType<typeof worldModel>): NonNullable<HostExpertsParams['ssd']> {
  const d = m.derived;
  const bytes = Math.max(2 * d.bytesPerExpert, Math.floor(w.ssd!.pageCacheShare * d.allExpertBytes));
  return { pageCacheGiB: bytes / 1024 ** 3, reservedGiB: 0, parallelReads: w.ssd!.parallelReads };
}

function engineRuntime(w: EngineWorld): RuntimeProfile {
  const base = loadRuntime('llamacpp');
  const hostExperts = {
    kernels: w.kernels ? 'llamacpp-cpu-avx2' : null,
    layerSyncNs: w.layerSyncUs * 1000,
    overlap: w.overlap,
    zeroCopyEfficiency: w.zeroCopyEfficiency,
    source: 'random world',
  };
  return { ...base, hostExperts, expertOrder: w.expertOrder };
}

/** Builds the executor of an engine world (the wiring of serving-world.ts `buildWorld`). */
export async function buildEngineWorld(w: EngineWorld, sink?: TraceSink): Promise<ServingExecutor> {
  const spec = w.base;
  const model = worldModel(spec);
  const base = loadHardware(spec.hardwareId);
  const hardware = hasSsd(w) ? { ...base, drive: loadDrive('samsung-990-pro-2tb') } : base;
  const cost = createCostModel(model, hardware, () => {});
  const streams = new RngStreams(spec.seed);
  const shape = { modelId: model.id, moeLayers: model.moeLayers, experts: model.experts, topK: model.topK };
  const workload = await buildWorkload(spec.workload, shape, streams);
  const def = builtinPolicy('host-experts')!;
  const params = def.params.parse(engineParams(w));
  const policy = def.create(params, { rng: streams.stream('policy:host-experts'), model, hardware, workload });
  const config: ServingConfig = {
    batching: spec.batching,
    maxBatchSize: spec.maxBatchSize,
    maxWaitNs: msToNs(spec.maxWaitMs),
    maxBatchTokens: spec.maxBatchTokens,
    bufferSlots: def.bufferSlots!(params, model)!,
    packetBytes: spec.packetBytes,
    preloadAllExperts: false,
  };
  return new ServingExecutor({ model, hardware, cost, workload, policy, config, sink, runtime: engineRuntime(w) });
}
