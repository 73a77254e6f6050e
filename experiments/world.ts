/**
 * The world builder: the one place that wires a resolved run into profiles, cost model,
 * resources, workload and policy, and returns a ready executor.
 *
 * Oracle policies (`definition.oracle === 'needs'`, e.g. belady) first get a recording pass:
 * the same run spec (workload, seed, executor, buffer size) with the `on-demand` policy,
 * wrapped to record every (iteration, MoE layer, activated experts); the recorded sequence is
 * passed read-only as `ctx.oracle`. It is cached per run spec. A world built only to be checked
 * (`WorldOptions.check`, the runner's preflight) skips it: its policy gets an empty sequence (the
 * recording pass builds the same spec with `on-demand`, which the checked world's parts cover).
 */
import { loadHardware, loadModel, loadRuntime } from '../hardware-profiles/load.ts';
import { createCostModel } from '../sim/cost/cost-model.ts';
import { RngStreams } from '../sim/kernel/rng.ts';
import { msToNs } from '../sim/kernel/time.ts';
import type { TraceSink } from '../sim/observe/trace-sink.ts';
import type { ServingPolicy } from '../sim/serving/policy.ts';
import { ServingExecutor, type ServingConfig } from '../sim/serving/serving-executor.ts';
import { ThroughputExecutor, type ThroughputConfig } from '../sim/throughput/throughput-executor.ts';
import { buildWorkload } from '../workloads/config.ts';
import { onDemand } from '../policies/cache/on-demand.ts';
import { recordNeeds } from '../policies/oracle/need-recorder.ts';
import type { NeedTrace, PolicyContext } from '../policies/types.ts';
import type { RunSpec } from './config/expand.ts';
import { checkDerivedCosts } from './world-check.ts';

export interface WorldOptions {
  readonly baseDir: string;
  readonly sink?: TraceSink;
  /** Receives cost-model warnings (e.g. measured-table extrapolation). */
  readonly onWarning?: (message: string) => void;
  /**
   * Preflight only (worlds built to be checked, never run: serving ones with `check`): runs with
   * the same profiles, seed, workload and executor limits share one build of those parts, which
   * is deterministic, so a check repeated on the same inputs can only repeat the first one's
   * outcome.
   */
  readonly checkedParts?: Map<string, Promise<CommonParts>>;
  /** The world is built to be checked, never run (preflight): an oracle policy gets no recording pass. */
  readonly check?: boolean;
}

/** What a checked oracle world's policy gets (`WorldOptions.check`): no steps. */
const UNRECORDED: NeedTrace = { steps: [] };

type CommonParts = Awaited<ReturnType<typeof buildCommonParts>>;

/** Recorded need sequences by run spec (preflight and run build the same spec twice). */
const recordedNeeds = new WeakMap<RunSpec, NeedTrace>();

export async function buildServingWorld(spec: RunSpec, o: WorldOptions): Promise<ServingExecutor> {
  const def = spec.policy.definition;
  let oracle: NeedTrace | undefined;
  if (def.oracle === 'needs' && o.check) oracle = UNRECORDED;
  else if (def.oracle === 'needs') {
    oracle = recordedNeeds.get(spec);
    if (!oracle) {
      oracle = await recordNeedsOf(spec, o);
      recordedNeeds.set(spec, oracle);
    }
  }
  return assemble(
    spec,
    o,
    (ctx, model) => ({
      policy: def.create(spec.policy.params, oracle ? { ...ctx, oracle } : ctx),
      bufferSlots: def.bufferSlots?.(spec.policy.params, model),
      preloadAllExperts: def.servingOverrides?.preloadAllExperts ?? false,
    }),
    o.sink,
  );
}

/**
 * The recording pass of an oracle run: `on-demand` (release after use) with the oracle
 * policy's buffer size, so admission (which depends on VRAM) is the same; no sink.
 */
async function recordNeedsOf(spec: RunSpec, o: WorldOptions): Promise<NeedTrace> {
  const def = spec.policy.definition;
  let trace: NeedTrace | undefined;
  const executor = await assemble(
    spec,
    o,
    (ctx, model) => {
      const recorder = recordNeeds(onDemand.create(onDemand.params.parse({}), ctx));
      trace = recorder.trace;
      return {
        policy: recorder.policy,
        bufferSlots: def.bufferSlots?.(spec.policy.params, model),
        preloadAllExperts: false,
      };
    },
    undefined,
  );
  executor.run();
  return trace!;
}

/**
 * What both families build the same way: profiles, cost model (its rates and derived durations
 * range-checked before anything runs), the run's rng streams and the workload.
 */
function commonParts(spec: RunSpec, o: WorldOptions): Promise<CommonParts> {
  const cache = o.checkedParts;
  if (!cache) return buildCommonParts(spec, o);
  const maxWaitMs = spec.throughput ? undefined : spec.executor.maxWaitMs;
  const key = JSON.stringify([o.baseDir, spec.model, spec.hardware, spec.runtime, spec.seed, spec.workload, maxWaitMs]);
  let parts = cache.get(key);
  if (!parts) {
    parts = buildCommonParts(spec, o);
    cache.set(key, parts);
  }
  return parts;
}

async function buildCommonParts(spec: RunSpec, o: WorldOptions) {
  const model = loadModel(spec.model);
  const hardware = loadHardware(spec.hardware);
  const runtime = loadRuntime(spec.runtime, o.baseDir);
  const cost = createCostModel(model, hardware, { ...(o.onWarning ? { onWarning: o.onWarning } : {}), runtime });
  checkDerivedCosts(model, hardware, cost, runtime, spec.throughput ? undefined : spec.executor.maxWaitMs);
  const streams = new RngStreams(spec.seed);
  const shape = { modelId: model.id, moeLayers: model.moeLayers, experts: model.experts, topK: model.topK };
  const workload = await buildWorkload(spec.workload, shape, streams, o.baseDir);
  return { model, hardware, runtime, cost, streams, workload };
}

interface PolicyWiring {
  readonly policy: ServingPolicy;
  readonly bufferSlots: number | undefined;
  readonly preloadAllExperts: boolean;
}

async function assemble(
  spec: RunSpec,
  o: WorldOptions,
  wire: (ctx: PolicyContext, model: PolicyContext['model']) => PolicyWiring,
  sink: TraceSink | undefined,
): Promise<ServingExecutor> {
  const { model, hardware, runtime, cost, streams, workload } = await commonParts(spec, o);
  const w = wire({ rng: streams.stream(`policy:${spec.policy.label}`), model, hardware, workload }, model);
  const x = spec.executor;
  const config: ServingConfig = {
    batching: x.batching,
    maxBatchSize: x.maxBatchSize,
    maxWaitNs: msToNs(x.maxWaitMs),
    maxBatchTokens: x.maxBatchTokens,
    bufferSlots: w.bufferSlots ?? x.bufferSlots,
    packetBytes: Math.round(x.packetMiB * 1024 * 1024),
    preloadAllExperts: w.preloadAllExperts,
    releaseAfterUse: x.releaseAfterUse,
  };
  return new ServingExecutor({ model, hardware, cost, workload, policy: w.policy, config, sink, runtime });
}

/**
 * The throughput family's world (`executor.kind: throughput`): profiles, cost model, workload
 * (aggregate routing when the workload provides it), the policy's plan hook and the
 * throughput executor. The multinomial routing fallback draws from the `aggregate-fallback`
 * stream, so it never perturbs the workload's own streams.
 */
export async function buildThroughputWorld(spec: RunSpec, o: WorldOptions): Promise<ThroughputExecutor> {
  const x = spec.throughput;
  const def = spec.policy.definition;
  if (!x || !def.createThroughput)
    throw new Error(
      `run ${spec.index} (${spec.policy.label}) does not select the throughput executor and a throughput policy`,
    );
  const { model, hardware, cost, streams, workload } = await commonParts(spec, o);
  const policy = def.createThroughput(spec.policy.params, {
    rng: streams.stream(`policy:${spec.policy.label}`),
    model,
    hardware,
    workload,
  });
  const config: ThroughputConfig = {
    phase: x.phase,
    ...(x.batchSeqs !== undefined ? { batchSeqs: x.batchSeqs } : {}),
    ...(x.maxHostBatches !== undefined ? { maxHostBatches: x.maxHostBatches } : {}),
    ...(x.padPromptTo !== undefined ? { padPromptTo: x.padPromptTo } : {}),
    contextBucketTokens: x.contextBucketTokens,
    kvLayout: x.kvLayout,
    kvPageTokens: x.kvPageTokens,
    packetBytes: Math.round(x.packetMiB * 1024 * 1024),
    memoise: x.memoise,
  };
  return new ThroughputExecutor({
    model,
    hardware,
    cost,
    workload,
    policy,
    config,
    fallbackRng: streams.stream('aggregate-fallback'),
    ...(o.sink ? { sink: o.sink } : {}),
  });
}
