/**
 * The world builder: the one place that wires a resolved run into profiles, cost model,
 * resources, workload and policy, and returns a ready executor.
 */
import { loadHardware, loadModel } from '../hardware-profiles/load.ts';
import { createCostModel } from '../sim/cost/cost-model.ts';
import { RngStreams } from '../sim/kernel/rng.ts';
import { msToNs } from '../sim/kernel/time.ts';
import type { TraceSink } from '../sim/observe/trace-sink.ts';
import { ServingExecutor, type ServingConfig } from '../sim/serving/serving-executor.ts';
import { buildWorkload } from '../workloads/config.ts';
import type { RunSpec } from './config/expand.ts';

export interface WorldOptions {
  readonly baseDir: string;
  readonly sink?: TraceSink;
  /** Receives cost-model warnings (e.g. measured-table extrapolation). */
  readonly onWarning?: (message: string) => void;
}

export async function buildServingWorld(spec: RunSpec, o: WorldOptions): Promise<ServingExecutor> {
  const model = loadModel(spec.model);
  const hardware = loadHardware(spec.hardware);
  const cost = createCostModel(model, hardware, o.onWarning);
  const streams = new RngStreams(spec.seed);
  const shape = { modelId: model.id, moeLayers: model.moeLayers, experts: model.experts, topK: model.topK };
  const workload = await buildWorkload(spec.workload, shape, streams);
  const def = spec.policy.definition;
  const policy = def.create(spec.policy.params, { rng: streams.stream(`policy:${spec.policy.label}`), model, hardware, workload });
  const x = spec.executor;
  const config: ServingConfig = {
    batching: x.batching,
    maxBatchSize: x.maxBatchSize,
    maxWaitNs: msToNs(x.maxWaitMs),
    maxBatchTokens: x.maxBatchTokens,
    bufferSlots: def.bufferSlots?.(spec.policy.params, model) ?? x.bufferSlots,
    packetBytes: Math.round(x.packetMiB * 1024 * 1024),
    preloadAllExperts: def.servingOverrides?.preloadAllExperts ?? false,
  };
  return new ServingExecutor({ model, hardware, cost, workload, policy, config, sink: o.sink });
}
