/**
 * Small serving worlds for property tests: a real model profile (optionally shrunk to a few
 * layers and experts, with its derived quantities recomputed), a real testbed, a small
 * workload, an executor config and a policy (built-in or the example plugin), wired the way
 * `experiments/world.ts` wires them, plus fast-check arbitraries that generate them.
 *
 * Not a test file (no `.test.ts`).
 */
import * as fc from 'fast-check';
import { deriveModel } from '../../hardware-profiles/derive.ts';
import { listHardware, loadHardware, loadModel } from '../../hardware-profiles/load.ts';
import type { ModelProfile } from '../../hardware-profiles/types.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import { RngStreams } from '../../sim/kernel/rng.ts';
import { msToNs } from '../../sim/kernel/time.ts';
import type { TraceSink } from '../../sim/observe/trace-sink.ts';
import { ServingExecutor, type ServingConfig } from '../../sim/serving/serving-executor.ts';
import { builtinPolicy } from '../../policies/registry.ts';
import type { PolicyDefinition } from '../../policies/types.ts';
import fifoExample from '../../examples/fifo-cache-policy.ts';
import { buildWorkload, WorkloadSchema, type WorkloadConfig } from '../../workloads/config.ts';

/** Decoder-only profiles that shrink cleanly (dense leading layers, shared experts, MLA, GQA between them). */
export const SHRINKABLE_MODELS = ['mixtral-8x7b', 'deepseek-v2-lite', 'olmoe', 'qwen1.5-moe-a2.7b'] as const;

/** Encoder-decoder profiles that shrink cleanly (T5 geometry: an encoder stack, then a decoder stack). */
export const ENCODER_DECODER_MODELS = ['switch-base-128'] as const;

export interface Shrink {
  /** Transformer layers; the first `denseLeading` are dense, the rest MoE. */
  readonly layers: number;
  readonly denseLeading: number;
  readonly experts: number;
  readonly topK: number;
}

/**
 * A real profile with fewer layers / experts; `derived` recomputed by `deriveModel`. A hybrid
 * (linear-attention) profile gets a shorter full-attention interval when the stack is short. An
 * encoder-decoder profile keeps its shape: `layers` encoder layers then `layers` decoder layers,
 * each stack with `denseLeading` dense layers first and MoE layers after.
 */
export function shrinkModel(id: string, s: Shrink | null): ModelProfile {
  const base = loadModel(id);
  if (!s) return base;
  const encDec = base.arch === 'encoder-decoder';
  const layers = encDec ? 2 * s.layers : s.layers;
  const denseLeading = Math.min(s.denseLeading, s.layers - 1);
  const stacks = encDec ? [0, s.layers] : [0];
  const moeLayerIndices = stacks.flatMap((o) =>
    Array.from({ length: s.layers - denseLeading }, (_, i) => o + denseLeading + i),
  );
  const experts = s.experts;
  const topK = Math.min(s.topK, experts);
  const input = {
    ...base,
    layers,
    moeLayers: moeLayerIndices.length,
    moeLayerIndices,
    experts,
    topK,
    // A dense leading layer needs a dense FFN width; borrow the expert width when the profile has none.
    denseIntermediateSize:
      denseLeading > 0 && base.denseIntermediateSize === 0 ? base.expertIntermediateSize : base.denseIntermediateSize,
    details: { ...base.details, encoderLayers: encDec ? s.layers : 0, decoderLayers: s.layers },
    // A hybrid profile keeps both kinds of layer in a short stack: a full-attention layer at
    // least every `layers` layers (every second in a stack of two).
    ...(base.linearAttention && {
      linearAttention: {
        ...base.linearAttention,
        fullAttentionInterval: Math.min(base.linearAttention.fullAttentionInterval, Math.max(2, layers)),
      },
    }),
  };
  return { ...input, id: `${id}-shrunk-${layers}l${experts}e${topK}k`, derived: deriveModel(input) };
}

export type PolicyChoice =
  | { readonly kind: 'on-demand'; readonly keep: boolean }
  | { readonly kind: 'lru'; readonly capacitySlots?: number }
  | { readonly kind: 'fifo'; readonly capacitySlots?: number; readonly prefetchSameExpert: boolean }
  /** MoE-Infinity: prefetches ranked from matched activation matrices, cancels those it no longer wants. */
  | { readonly kind: 'moe-infinity'; readonly raw: Record<string, unknown> }
  /** Pre-gated: prefetches the next layer's predicted experts. */
  | { readonly kind: 'pre-gated'; readonly raw: Record<string, unknown> }
  /** MoEpic (split experts): `budgetFraction` of all experts as the segment cache V_e. */
  | { readonly kind: 'moepic'; readonly budgetFraction: number; readonly raw: Record<string, unknown> };

export interface WorldSpec {
  readonly modelId: string;
  readonly shrink: Shrink | null;
  readonly hardwareId: string;
  readonly workload: WorkloadConfig;
  readonly batching: 'static' | 'continuous';
  readonly maxBatchSize: number;
  readonly maxWaitMs: number;
  readonly maxBatchTokens: number;
  /** Buffer slots as a fraction of all experts (1 slot at 0, all experts at 1). */
  readonly slotsFraction: number;
  readonly packetBytes: number;
  readonly policy: PolicyChoice;
  readonly seed: number;
}

function policyOf(
  choice: PolicyChoice,
  m: ModelProfile,
): { def: PolicyDefinition<unknown>; raw: Record<string, unknown> } {
  switch (choice.kind) {
    case 'moe-infinity':
    case 'pre-gated':
      return { def: builtinPolicy(choice.kind)!, raw: choice.raw };
    case 'moepic':
      return {
        def: builtinPolicy('moepic')!,
        raw: { ...choice.raw, budgetExperts: Math.floor(choice.budgetFraction * allExperts(m) * 100) / 100 },
      };
    case 'on-demand':
      return { def: builtinPolicy('on-demand')!, raw: { keep: choice.keep } };
    case 'lru':
      return {
        def: builtinPolicy('lru')!,
        raw: choice.capacitySlots === undefined ? {} : { capacitySlots: choice.capacitySlots },
      };
    case 'fifo':
      return {
        def: fifoExample as PolicyDefinition<unknown>,
        raw: {
          prefetchSameExpert: choice.prefetchSameExpert,
          ...(choice.capacitySlots === undefined ? {} : { capacitySlots: choice.capacitySlots }),
        },
      };
  }
}

/** The model profile a world runs (shrunk if asked). */
export const worldModel = (spec: WorldSpec): ModelProfile => shrinkModel(spec.modelId, spec.shrink);

export const allExperts = (m: ModelProfile): number => m.moeLayers * m.experts;

/** Slots from a fraction: 1 at 0, every expert at 1. */
export const slotsOf = (m: ModelProfile, fraction: number): number => 1 + Math.floor(fraction * (allExperts(m) - 1));

/**
 * Builds the executor of a world (same wiring as `experiments/world.ts`). Throws whatever the
 * executor's constructor throws (a `UserError` when the buffer does not fit the GPU).
 */
export async function buildWorld(
  spec: WorldSpec,
  sink?: TraceSink,
): Promise<{ executor: ServingExecutor; model: ModelProfile }> {
  const model = worldModel(spec);
  const hardware = loadHardware(spec.hardwareId);
  const cost = createCostModel(model, hardware, () => {});
  const streams = new RngStreams(spec.seed);
  // A variable, not a literal: the workload builder's shape type is growing (modelId, ...).
  const shape = { modelId: model.id, moeLayers: model.moeLayers, experts: model.experts, topK: model.topK };
  const workload = await buildWorkload(spec.workload, shape, streams);
  const { def, raw } = policyOf(spec.policy, model);
  const params = def.params.parse(raw);
  const policy = def.create(params, { rng: streams.stream(`policy:${def.name}`), model, hardware, workload });
  const config: ServingConfig = {
    batching: spec.batching,
    maxBatchSize: spec.maxBatchSize,
    maxWaitNs: msToNs(spec.maxWaitMs),
    maxBatchTokens: spec.maxBatchTokens,
    bufferSlots: def.bufferSlots?.(params, model) ?? slotsOf(model, spec.slotsFraction),
    packetBytes: spec.packetBytes,
    preloadAllExperts: def.servingOverrides?.preloadAllExperts ?? false,
  };
  return { executor: new ServingExecutor({ model, hardware, cost, workload, policy, config, sink }), model };
}

// ---------------------------------------------------------------- arbitraries

export const shrinkArb: fc.Arbitrary<Shrink> = fc
  .record({
    layers: fc.integer({ min: 1, max: 4 }),
    denseLeading: fc.integer({ min: 0, max: 1 }),
    experts: fc.integer({ min: 2, max: 16 }),
    topK: fc.integer({ min: 1, max: 4 }),
  })
  .map((s) => ({ ...s, topK: Math.min(s.topK, s.experts) }));

/** GPUs large enough for every shrunk world's buffer (a comparison across policies must not be refused). */
export const BIG_GPUS = ['h100', 'h200', 'a100-80gb'];

/** A fixed or uniform length distribution of 1..max tokens. */
export const lengthArb = (max: number) =>
  fc.oneof(
    fc.integer({ min: 1, max }).map((tokens) => ({ kind: 'fixed' as const, tokens })),
    fc
      .tuple(fc.integer({ min: 1, max }), fc.integer({ min: 1, max }))
      .map(([a, b]) => ({ kind: 'uniform' as const, min: Math.min(a, b), max: Math.max(a, b) })),
  );

export const workloadArb = (opts: { offlineOnly?: boolean } = {}): fc.Arbitrary<WorkloadConfig> =>
  fc
    .record({
      requests: fc.integer({ min: 1, max: 12 }),
      arrival: opts.offlineOnly
        ? fc.constant({ kind: 'offline' as const })
        : fc.oneof(
            fc.constant({ kind: 'offline' as const }),
            fc.double({ min: 0.5, max: 50, noNaN: true }).map((ratePerS) => ({ kind: 'poisson' as const, ratePerS })),
          ),
      promptTokens: lengthArb(64),
      outputTokens: lengthArb(12),
    })
    // Through the schema, so every field the workload builder knows gets its default.
    .map((w) => WorkloadSchema.parse({ ...w, routing: { kind: 'uniform' } }));

const capacityArb = fc.option(fc.integer({ min: 1, max: 64 }), { nil: undefined });

/** The cache policies without prefetching (on-demand, lru, the fifo example plugin). */
export const cachePolicyArb: fc.Arbitrary<PolicyChoice> = fc.oneof(
  fc.boolean().map((keep) => ({ kind: 'on-demand' as const, keep })),
  capacityArb.map((capacitySlots) => ({
    kind: 'lru' as const,
    ...(capacitySlots === undefined ? {} : { capacitySlots }),
  })),
  fc.tuple(capacityArb, fc.boolean()).map(([capacitySlots, prefetchSameExpert]) => ({
    kind: 'fifo' as const,
    prefetchSameExpert,
    ...(capacitySlots === undefined ? {} : { capacitySlots }),
  })),
);

/** Policies that prefetch (and cancel, and split experts): what the prefetch and cancel invariants guard. */
export const moeInfinityArb: fc.Arbitrary<PolicyChoice> = fc
  .record({
    queueJump: fc.boolean(),
    multiLayerPrefetch: fc.boolean(),
    prefetchAdmission: fc.constantFrom('priority', 'always'),
    cachePriorities: fc.boolean(),
    // EAMs of held-out requests loaded first: without them the first request has nothing to match.
    eamcWarmup: fc.integer({ min: 0, max: 8 }),
  })
  .map((raw) => ({ kind: 'moe-infinity' as const, raw }));
export const preGatedArb: fc.Arbitrary<PolicyChoice> = fc
  .option(fc.integer({ min: 1, max: 4 }), { nil: undefined })
  .map((prefetchK) => ({ kind: 'pre-gated' as const, raw: prefetchK === undefined ? {} : { prefetchK } }));
export const moepicArb: fc.Arbitrary<PolicyChoice> = fc
  .record({
    // Whole percents (fc.double draws mostly edge values, here ~0: no segment cache at all).
    budgetFraction: fc.integer({ min: 0, max: 90 }).map((p) => p / 100),
    theta: fc.constantFrom(0.1, 0.25, 0.5, 0.75, 1),
    prefetch: fc.constantFrom('speculative', 'random', 'none'),
    cache: fc.constantFrom('lcp', 'rnd'),
    configurator: fc.boolean(),
    // Small periods, so the configurator acts within a small run (default 5 000 tokens).
    tau: fc.integer({ min: 5, max: 100 }),
  })
  .map(({ budgetFraction, ...raw }) => ({ kind: 'moepic' as const, budgetFraction, raw }));

/**
 * Every policy. Prefetching policies get most of the weight, MoEpic the most (only it splits
 * experts): the property that guards prefetch, cancellation and split experts must reach each in
 * at least a quarter of its worlds (`helpers/coverage.ts` counts and asserts it).
 */
export const policyArb: fc.Arbitrary<PolicyChoice> = fc.oneof(
  { arbitrary: cachePolicyArb, weight: 1 },
  { arbitrary: moeInfinityArb, weight: 1 },
  { arbitrary: preGatedArb, weight: 1 },
  { arbitrary: moepicArb, weight: 3 },
);

const MIB = 1024 * 1024;

export const worldArb = (
  opts: { offlineOnly?: boolean; batching?: 'static' | 'continuous'; policy?: fc.Arbitrary<PolicyChoice> } = {},
): fc.Arbitrary<WorldSpec> =>
  fc
    .record({
      // Half the worlds run an encoder-decoder model (what the encoder-decoder paths of the executor need).
      modelId: fc.oneof(
        { arbitrary: fc.constantFrom<string>(...SHRINKABLE_MODELS), weight: 1 },
        { arbitrary: fc.constantFrom<string>(...ENCODER_DECODER_MODELS), weight: 1 },
      ),
      // Mostly shrunk (fast); sometimes the full mixtral-8x7b (32 layers × 8 experts) via a null shrink.
      shrink: fc.option(shrinkArb, { nil: null, freq: 6 }),
      hardwareId: fc.constantFrom(...listHardware()),
      workload: workloadArb(opts),
      batching: opts.batching ? fc.constant(opts.batching) : fc.constantFrom('static' as const, 'continuous' as const),
      maxBatchSize: fc.integer({ min: 1, max: 8 }),
      maxWaitMs: fc.constantFrom(0, 1, 20),
      maxBatchTokens: fc.constantFrom(16, 64, 8192),
      // Small buffers most of the time (they stress eviction); sometimes anything up to every expert.
      // Whole percents: fc.double leans so hard on its edge values that most worlds had one slot,
      // where no prefetch can find room.
      slotsFraction: fc.oneof(
        { arbitrary: fc.constant(0), weight: 1 },
        { arbitrary: fc.integer({ min: 1, max: 25 }).map((p) => p / 100), weight: 3 },
        { arbitrary: fc.integer({ min: 1, max: 100 }).map((p) => p / 100), weight: 1 },
      ),
      packetBytes: fc.constantFrom(MIB / 4, MIB, 4 * MIB, 16 * MIB, 64 * MIB),
      policy: opts.policy ?? policyArb,
      seed: fc.integer({ min: 0, max: 10_000 }),
    })
    .map(roomToPrefetch);

const PREFETCHING = new Set<PolicyChoice['kind']>(['moe-infinity', 'pre-gated', 'moepic']);

/**
 * Gives a prefetching policy room to act: at least two MoE layers per stack (they prefetch the
 * next layer) and more buffer slots than the top-k a layer pins (a prefetch takes a free or
 * evictable slot, never a pinned one). Without this, most such worlds never prefetch.
 */
const roomToPrefetch = (w: WorldSpec): WorldSpec => {
  if (!PREFETCHING.has(w.policy.kind)) return w;
  const shrink =
    w.shrink && w.shrink.layers - Math.min(w.shrink.denseLeading, w.shrink.layers - 1) < 2
      ? { ...w.shrink, layers: w.shrink.denseLeading + 2 }
      : w.shrink;
  const m = worldModel({ ...w, shrink });
  const all = allExperts(m);
  // slotsOf = 1 + floor(f · (all − 1)) ≥ topK + 1 when f ≥ topK / (all − 1); half a slot more against rounding.
  const floor = all > 1 ? Math.min(1, (m.topK + 0.5) / (all - 1)) : 0;
  return { ...w, shrink, slotsFraction: Math.max(w.slotsFraction, floor) };
};

/**
 * Keeps full-size worlds small: a full (unshrunk) model is only ever mixtral-8x7b (32 layers ×
 * 8 experts of 336 MiB), with packets of at least 16 MiB and at most 4 requests.
 */
export const normaliseWorld = (w: WorldSpec): WorldSpec =>
  w.shrink !== null
    ? w
    : {
        ...w,
        modelId: 'mixtral-8x7b',
        packetBytes: Math.max(w.packetBytes, 16 * MIB),
        workload: { ...w.workload, requests: Math.min(w.workload.requests, 4) },
      };
