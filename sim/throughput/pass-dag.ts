/**
 * The task DAG of one pass (DESIGN §7, §8): the single builder that both the critical-path
 * estimator (`estimator.ts`, static, cost-model durations, no contention) and the pass
 * simulation (`pass-sim.ts`, the task-graph executor with contention) consume, so that
 * "simulated ≥ critical path" is a meaningful property.
 *
 * Tasks per GPU layer (`expert` granularity, module-based batching — MoE-Gen):
 * - H2D: the layer's dense module into one of `weightSlots` dense buffers (skipped if cached);
 * - ω part (round(ω·B) sequences): GPU attention projections → D2H of Q → CPU attention over
 *   the host KV (`cpuCores` cores; for MLA with the latent up-projection, `mlaUpProjection`)
 *   → H2D of its output;
 * - GPU part, per micro-batch of b_a sequences: H2D of its past KV into one of `kvBuffers`
 *   staging buffers (decode, host KV) → GPU attention → D2H of its new KV (host KV);
 * - GPU router over every token of the pass (after both parts), shared experts or, in a dense
 *   layer, the dense FFN; the dense buffer is released after its last user;
 * - per expert in order: H2D of its weights into one of `expertSlots` slots (every expert
 *   when `streamAllExperts`, else the routed ones; none if cached) → its ⌈tokens / b_e⌉ GEMM
 *   chunks, one task (they run back to back; each chunk priced and launched on its own); the
 *   slot is released after it, so the next expert streams while the previous one computes.
 * `layer` granularity: one H2D of the whole (uncached part of the) layer into one of
 * `weightSlots` layer buffers, released at the end of the layer. Model-based batching
 * (`perMicroBatch`): attention, router and experts run per micro-batch; with ω = 1 the GPU
 * runs the projections of micro-batch m+1 before the post-attention part of m (CGOPipe).
 * CPU layers (`l ≥ gpuLayers`, llama.cpp): hidden state D2H, CPU projections + router, CPU
 * attention, CPU FFN over the routed experts' weights in host DRAM; H2D back before the next
 * GPU layer. Finally the LM head on the GPU and a join.
 *
 * **Engine order is part of the DAG.** Kernels form one chain (one CUDA stream), chained H2D
 * copies (weights and KV) one chain (MoE-Gen's single host-to-device engine thread, which
 * issues copies in a fixed order), the KV D2H copies one chain, CPU tasks one chain; small
 * activation copies of the CPU-attention path are not chained and have a higher link priority
 * (they overtake bulk copies at packet boundaries). Buffer reuse is a dep: fill f of
 * a ring of n buffers waits for the task that releases fill f − n. Without these edges a
 * critical path would let every copy run at once. With them, the simulated pass differs from
 * the critical path only by contention the DAG does not express: host-DRAM bandwidth shared by
 * DMA and CPU work, the unchained copies sharing the links, memory gating.
 *
 * Routing: per-expert token counts per MoE layer from `counts` (the workload's aggregate
 * router in simulations; `expectedCounts`, even integers, in the estimator).
 *
 * Ids are consecutive integers from 0 in creation order, deps always earlier (creation order is
 * a topological order); a releaser lists its holder as its last dep (the executor checks
 * ancestry depth-first from the last dep).
 *
 * Parts: this file walks the layers and adds the LM head and the join; `pass-dag-layers.ts`
 * builds each layer; `dag-emitter.ts` creates the tasks, chains and buffer rings.
 */
import type { HardwareProfile, ModelProfile } from '../../hardware-profiles/types.ts';
import type { CostModel } from '../cost/types.ts';
import type { TaskSpec } from '../taskgraph/types.ts';
import { DagEmitter, type EarliestFinishes } from './dag-emitter.ts';
import { cachedModules, modelModules, vramNeeded, type CachedModules, type VramBreakdown } from './memory-model.ts';
import { LayerBuilder } from './pass-dag-layers.ts';
import { passConfigProblem, type CountsFn } from './pass-config.ts';
import type { PassConfig, PassShape } from './types.ts';

export { URGENT_PRIORITY } from './dag-emitter.ts';
export { expectedCounts, mlaUpProjection, passConfigProblem, type CountsFn } from './pass-config.ts';

export interface DagInput {
  readonly model: ModelProfile;
  readonly hardware: HardwareProfile;
  readonly cost: CostModel;
  readonly shape: PassShape;
  readonly config: PassConfig;
  readonly counts: CountsFn;
  /** Build only the first `layerLimit` layers (then the LM head): the search's extrapolation. */
  readonly layerLimit?: number;
  /** Give tasks readable labels (timelines, errors). Default false (ids only, faster). */
  readonly labels?: boolean;
  /**
   * Streaming: each task's earliest finish is priced into `finishes` as it is created (ids in
   * order, deps always earlier) and the task is not kept (`PassDag.tasks` is then empty): the
   * estimator's allocation-light path.
   */
  readonly finishes?: EarliestFinishes;
}

export interface PassDag {
  readonly tasks: readonly TaskSpec[];
  /** The final join: the pass ends when it finishes. */
  readonly finalId: number;
  readonly cached: CachedModules;
  readonly vram: VramBreakdown;
  /** Σ routed token-slots over the MoE layers built, and the (MoE layer, expert) pairs. */
  readonly routedTokenSlots: number;
  readonly expertLayerPairs: number;
  /** (MoE layer, expert) pairs with at least one token, per expert GEMM (micro-batches each count theirs). */
  readonly activatedPairs: number;
  /** (MoE layer, expert) pairs with at least one token in the pass, each once (`RoutingTally.passActivatedPairs`). */
  readonly passActivatedPairs: number;
  readonly layersBuilt: number;
  readonly moeLayersBuilt: number;
  /** Per layer built: the task its next layer's compute follows (its last kernel or CPU task). */
  readonly layerEnds: readonly number[];
}

/** Builds the DAG of one pass. Throws RangeError for an invalid configuration. */
export function buildPassDag(inp: DagInput): PassDag {
  const { model, shape, config: c } = inp;
  const problem = passConfigProblem(c, model);
  if (problem) throw new RangeError(`invalid pass configuration: ${problem}`);
  if (!(Number.isSafeInteger(shape.seqs) && shape.seqs >= 1))
    throw new RangeError(`pass seqs must be an integer ≥ 1 (got ${shape.seqs})`);
  const mm = modelModules(model);
  const L = mm.layers;
  const gl = Math.min(L, c.gpuLayers);
  const cached = cachedModules(mm, c.cachedParamBytes, c.cacheOrder, gl);
  const vram = vramNeeded(model, shape, c, cached);
  const layersBuilt = Math.min(L, inp.layerLimit ?? L);
  const streaming = inp.finishes;
  const e = new DagEmitter(inp.labels ?? false, streaming, c.cpuCores);
  const layers = new LayerBuilder({ ...inp, mm, cached }, e);

  let moeLayersBuilt = 0;
  let layerEnd = -1; // last task of the previous layer
  const layerEnds: number[] = [];
  let prevCpuLayer = false;
  for (let l = 0; l < layersBuilt; l++) {
    const mi = mm.moeIndexOfLayer[l]!;
    if (mi >= 0) moeLayersBuilt++;
    const cpuLayer = l >= gl;
    layerEnd = cpuLayer
      ? layers.cpuLayer(l, mi, layerEnd, prevCpuLayer)
      : layers.gpuLayer(l, mi, layerEnd, prevCpuLayer);
    layerEnds.push(layerEnd);
    prevCpuLayer = cpuLayer;
  }

  const lmInput = prevCpuLayer
    ? e.h2d(
        'activations',
        layers.price.actBytes(shape.seqs * shape.newTokens),
        [layerEnd],
        false,
        () => 'hidden H2D (LM head)',
      )
    : -1;
  const lmNs = inp.cost.estimate({ kind: 'lmHead', tokens: shape.seqs }).ns;
  const lm = e.gpu('lmHead', lmNs, [lmInput], () => 'LM head');
  // Every unchained copy feeds a later task in a whole pass and in a truncated one, so the chain
  // tails cover everything; a materialised DAG also joins any task nobody depends on.
  const finalId = e.barrier(
    'sync',
    [lm, e.lastH2d, e.lastD2h, e.lastCpu, ...e.withoutDependents()],
    [],
    () => 'pass end',
  );
  return {
    tasks: e.tasks,
    finalId,
    cached,
    vram,
    routedTokenSlots: layers.tally.routedTokenSlots,
    expertLayerPairs: layers.tally.expertLayerPairs,
    activatedPairs: layers.tally.activatedPairs,
    passActivatedPairs: layers.tally.passActivatedPairs,
    layersBuilt,
    moeLayersBuilt,
    layerEnds,
  };
}
