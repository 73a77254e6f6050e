/**
 * flexgen-like — FlexGen's zig-zag block schedule applied to an MoE model (model-based
 * batching; Sheng et al., "FlexGen", ICML 2023).
 *
 * Reproduces the FlexGen baseline of MoE-Gen (arXiv 2503.09716): a block of `gpuBatches`
 * micro-batches of `gpuBatchSeqs` sequences shares each layer's weights — a whole layer
 * (attention + every expert) is loaded once into one of two layer buffers (the next one loads
 * meanwhile) and reused by every micro-batch of the block, which runs attention, router and
 * each routed expert over its own tokens; the KV cache lives in host memory and each
 * micro-batch's KV is copied to the GPU for attention (FlexGen's default, no CPU delegation)
 * and its new KV copied back. The block is bounded by host memory (KV) and the micro-batch by
 * GPU memory; prompts are prefilled in passes of as many of the block's sequences as the GPU
 * holds the activations of. Like FlexGen's LP policy search, the two sizes are chosen by the critical-path
 * estimator, maximising block size / pass time.
 *
 * `batching: model` (default, the MoE-Gen paper's FlexGen*, its own re-implementation with
 * model-based batching, arXiv 2503.09716 §3, §5.1): the block is one unified batch — its prompts
 * are prefilled together through every module and the same block decodes — so the block is
 * bounded by what that prefill keeps on the GPU (activations of every prompt token, the
 * attention and expert working sets) beside the two layer buffers; MoE-Gen §4.1: "the batch
 * size for model-based batching is constrained by the module with the highest memory usage".
 * `batching: block`: FlexGen's own zig-zag block, bounded only by host memory for its KV, with
 * prompts prefilled in passes of as many sequences as the GPU holds (FlexGen, ICML'23).
 *
 * When to use: the "weights reused across micro-batches, KV in host memory, but experts run
 * per micro-batch" point of comparison: expert GEMMs stay small however large the block.
 *
 * Known gaps: FlexGen's compression (4-bit weights/KV), CPU delegation of attention, partial
 * weight/KV placement percentages and activation offloading are not modelled (activations of
 * the whole block stay on the GPU); its LP is replaced by a coordinate search on our
 * estimator.
 */
import { z } from 'zod';
import { hostInfeasibility, maxHostSeqs, vramNeeded } from '../../sim/throughput/memory-model.ts';
import type { PlanContext, ThroughputPolicy } from '../../sim/throughput/policy.ts';
import {
  coordinateSearch,
  largestSatisfying,
  powersOfTwoUpTo,
  predictPassNs,
  prefillShape,
  refDecodeShape,
  worstDecodeShape,
} from '../../sim/throughput/search.ts';
import { defaultPassConfig, type PassConfig, type PlanResult } from '../../sim/throughput/types.ts';
import { gb, NO_CHUNKING_TOKENS, phasePlan, workloadCap } from './common.ts';
import { defineThroughputPolicy } from './define.ts';

const positiveInt = z.number().int().positive();
const Params = z
  .object({
    /** Sequences per GPU micro-batch (FlexGen's gpu_batch_size); default searched. */
    gpuBatchSeqs: positiveInt.optional(),
    /** Micro-batches per block (num_gpu_batches); default searched up to `maxGpuBatches`. */
    gpuBatches: positiveInt.optional(),
    maxGpuBatches: positiveInt.default(64),
    kvBuffers: positiveInt.default(2),
    /** `model`: MoE-Gen's FlexGen* (the block prefilled as one batch on the GPU); `block`: FlexGen's own block, bounded by host memory. */
    batching: z.enum(['model', 'block']).default('model'),
  })
  .strict();

function config(layers: number, b: number, kvBuffers: number): PassConfig {
  return {
    ...defaultPassConfig(layers),
    attnMicroSeqs: b,
    expertBatching: 'perMicroBatch',
    expertChunkTokens: NO_CHUNKING_TOKENS,
    weightGranularity: 'layer',
    weightSlots: 2,
    prefetch: true,
    streamAllExperts: true,
    kvGpuLayers: 0,
    kvBuffers,
  };
}

/**
 * The grids of the (b, n) search: the fixed value or powers of two up to the cap; with
 * model-based batching, b's grid also gets the largest unified batch whose prefill fits.
 */
function searchGrids(
  p: z.infer<typeof Params>,
  cap: number,
  fits: (b: number, n: number) => boolean,
): { bGrid: readonly number[]; nGrid: readonly number[] } {
  let bGrid = p.gpuBatchSeqs !== undefined ? [p.gpuBatchSeqs] : powersOfTwoUpTo(Math.min(cap, 1024));
  if (p.batching === 'model' && p.gpuBatchSeqs === undefined) {
    // The largest unified batch (one micro-batch) whose prefill fits: the grid's powers of two may straddle it.
    const one = largestSatisfying(1, Math.min(cap, 1 << 16), (x) => fits(x, 1));
    if (one >= 1 && !bGrid.includes(one)) bGrid = [...bGrid.filter((v) => v < one), one];
  }
  const nGrid =
    p.gpuBatches !== undefined ? [p.gpuBatches] : powersOfTwoUpTo(Math.max(1, Math.min(p.maxGpuBatches, cap)));
  return { bGrid, nGrid };
}

function plan(ctx: PlanContext, p: z.infer<typeof Params>): PlanResult {
  const { model, hardware: hw, workload: w } = ctx;
  const hostWhy = hostInfeasibility(model, hw.hostDramBytes);
  if (hostWhy) return { feasible: false, reason: hostWhy };
  const L = model.layers;
  const reserve = w.promptTokens + w.outputTokens;
  const hostMax = maxHostSeqs(model, hw.hostDramBytes, reserve, 0);
  if (hostMax < 1)
    return {
      feasible: false,
      reason: `host DRAM left after the weights (${gb(hw.hostDramBytes - model.derived.totalBytes)} GB) cannot hold one sequence's KV`,
    };
  const cap = Math.min(workloadCap(ctx), hostMax);
  const vram = hw.gpu.vramBytes;
  // The block is sized for decode; prompts are prefilled in passes of as many of the block's
  // sequences as fit on the GPU (see `prefillSeqs`).
  const prefillSeqs = (b: number, block: number): number =>
    largestSatisfying(
      1,
      block,
      (s) => vramNeeded(model, prefillShape(w, s, block), config(L, Math.min(b, s), p.kvBuffers)).totalBytes <= vram,
    );
  const fits = (b: number, n: number): boolean => {
    const block = b * n;
    if (block > cap || b > block) return false;
    const c = config(L, b, p.kvBuffers);
    // Model-based batching: the block's prompts go through each module together.
    if (p.batching === 'model' && vramNeeded(model, prefillShape(w, block, block), c).totalBytes > vram) return false;
    if (w.phases.decode)
      return (
        vramNeeded(model, worstDecodeShape(w, block, block), c).totalBytes <= vram &&
        (!w.phases.prefill || prefillSeqs(b, block) >= 1)
      );
    return vramNeeded(model, prefillShape(w, block, block), c).totalBytes <= vram;
  };
  const evaluate = ({ b, n }: { b: number; n: number }): number | undefined => {
    if (!fits(b, n)) return undefined;
    const block = b * n;
    const c = config(L, b, p.kvBuffers);
    return w.phases.decode
      ? block / predictPassNs(ctx, refDecodeShape(w, block, block), c, { mode: 'extrapolate' })
      : (block * w.promptTokens) / predictPassNs(ctx, prefillShape(w, block, block), c, { mode: 'extrapolate' });
  };
  const { bGrid, nGrid } = searchGrids(p, cap, fits);
  const found = coordinateSearch({
    start: { b: bGrid[0]!, n: nGrid[0]! },
    axes: [
      { key: 'b', values: bGrid },
      { key: 'n', values: nGrid },
    ],
    evaluate,
  });
  if (!found) {
    const need = vramNeeded(model, worstDecodeShape(w, 1, 1), config(L, 1, p.kvBuffers));
    return {
      feasible: false,
      reason: `two layer buffers (${gb(need.weightBufferBytes)} GB) + one micro-batch's KV and activations exceed VRAM (${gb(vram)} GB)`,
    };
  }
  const { b, n } = found.best;
  const block = b * n;
  const c = config(L, b, p.kvBuffers);
  const bp = w.phases.prefill ? (p.batching === 'model' ? block : prefillSeqs(b, block)) : block;
  return {
    feasible: true,
    plan: {
      hostBatchSeqs: block,
      prefill: phasePlan(ctx, 'prefill', bp, block, config(L, Math.min(b, bp), p.kvBuffers)),
      decode: phasePlan(ctx, 'decode', block, block, c),
      notes: [
        `block of ${n} micro-batches × ${b} sequences${p.batching === 'model' ? ' (prefilled as one batch on the GPU)' : ''}`,
      ],
    },
  };
}

export const flexgenLike = defineThroughputPolicy({
  name: 'flexgen-like',
  summary:
    'model-based batching, layer weights reused across the micro-batches of a block, KV in host memory copied in for GPU attention',
  params: Params,
  createThroughput: (p): ThroughputPolicy => ({ name: 'flexgen-like', plan: (ctx) => plan(ctx, p) }),
});
