/**
 * Shared pieces of the throughput-family baselines: the report of a chosen configuration (the
 * same fields as MoE-Gen's search, with the critical path of the pass as the predicted time),
 * and infeasibility messages.
 */
import { vramNeeded } from '../../sim/throughput/memory-model.ts';
import type { PlanContext } from '../../sim/throughput/policy.ts';
import { predictPassNs, prefillShape, refDecodeShape } from '../../sim/throughput/search.ts';
import type { PassConfig, PassShape, PhasePlan, SearchReport } from '../../sim/throughput/types.ts';

/** One expert GEMM per expert per micro-batch (no chunking): frameworks without module-based batching. */
export const NO_CHUNKING_TOKENS = 1 << 24;

export const gb = (bytes: number): string => (bytes / 1e9).toFixed(1);

/** The report of a configuration at a reference shape: predicted pass time = critical path of its DAG. */
export function report(ctx: PlanContext, ref: PassShape, c: PassConfig): SearchReport {
  const v = vramNeeded(ctx.model, ref, c);
  return {
    B: ref.seqs,
    ba: Math.min(c.attnMicroSeqs, ref.seqs),
    be: Math.min(
      c.expertChunkTokens,
      Math.max(1, Math.ceil((ref.seqs * ref.newTokens * ctx.model.topK) / ctx.model.experts)),
    ),
    omega: c.omega,
    // Weight buffers that hold experts: the expert buffer, or the layer buffers of layer granularity.
    sExpertBytes: c.weightGranularity === 'layer' ? v.weightBufferBytes : v.expertBufferBytes,
    sParamsBytes: v.cachedBytes,
    predictedPassS: predictPassNs(ctx, ref, c) / 1e9,
    refPastTokens: ref.pastTokens,
  };
}

/** A phase plan with its report at the phase's reference shape. */
export function phasePlan(
  ctx: PlanContext,
  phase: 'prefill' | 'decode',
  batchSeqs: number,
  hostSeqs: number,
  c: PassConfig,
): PhasePlan {
  const w = ctx.workload;
  const ref = phase === 'decode' ? refDecodeShape(w, batchSeqs, hostSeqs) : prefillShape(w, batchSeqs, hostSeqs);
  return { batchSeqs, config: c, search: report(ctx, ref, c) };
}

/** The cap on a batch from the workload and a fixed experiment batch. */
export function workloadCap(ctx: PlanContext, own?: number): number {
  return Math.max(1, Math.min(ctx.workload.sequences, ctx.workload.fixedBatchSeqs ?? Infinity, own ?? Infinity));
}
