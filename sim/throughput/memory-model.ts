/**
 * What a pass configuration needs in VRAM and host DRAM, exactly as the pass simulation
 * allocates it (`pass-dag.ts` + `pass-sim.ts`), so that a configuration the search accepts can
 * never overflow or deadlock a pool at run time (DESIGN §8: "VRAM: params + expert buffer +
 * dense buffer + GPU KV(b_a) + intermediate state ≤ VRAM; host: KV(B) + model ≤ host").
 *
 * Modules of a layer: its **dense module** (attention projections, norms, router, and the
 * shared experts of a MoE layer or the dense FFN of a dense layer) and, for a MoE layer, its
 * routed experts. The embedding and the LM head are always resident in VRAM.
 *
 * VRAM of a pass (all integers, bytes):
 * - resident: embedding + LM head (when not tied);
 * - cached (S_params): modules chosen by `cachedModules` within `cachedParamBytes`;
 * - weight buffers: `weightSlots` × the largest dense module (granularity `expert`) or the
 *   largest layer (`layer`) still streamed, plus `expertSlots` × one expert (`expert`);
 * - KV on the GPU: host batch × reserved tokens × KV bytes per token per layer × `kvGpuLayers`;
 * - KV staging for GPU attention over host KV: `kvBuffers` in-buffers of one micro-batch's past
 *   KV plus 2 out-buffers of its new KV;
 * - activations (intermediate state of every token of the pass, kept on the GPU between
 *   modules): tokens × (3 hidden vectors + router logits) in BF16;
 * - workspace: the largest of one attention micro-batch's Q/K/V/O, one expert GEMM chunk's
 *   gate/up outputs, the dense FFN chunk, and the LM head's logits (chunks of 1024 sequences).
 * Host DRAM: all weights (the parameter server) + the host-resident KV of the host batch.
 */
import type { ModelProfile } from '../../hardware-profiles/types.ts';
import { ACTIVATION_BYTES } from '../cost/cost-model.ts';
import type { PassConfig, PassShape } from './types.ts';

/** Hidden-state vectors per token kept between modules (input, residual, attention output). */
export const HIDDEN_VECTORS_PER_TOKEN = 3;
/** The LM head computes logits for at most this many sequences at once (FP32 logits). */
export const LM_HEAD_CHUNK_SEQS = 1024;
/** Out-buffers for the new KV of GPU attention micro-batches (double-buffered D2H). */
export const KV_OUT_BUFFERS = 2;

/** Per-layer module facts of a model, computed once. */
export interface ModelModules {
  readonly layers: number;
  /** MoE index of each layer, or -1 for a dense layer. */
  readonly moeIndexOfLayer: readonly number[];
  /** Dense-module bytes of each layer (attention + router + norms + shared experts or dense FFN). */
  readonly denseBytes: readonly number[];
  readonly expertBytes: number;
  readonly experts: number;
  readonly kvBytesPerTokenPerLayer: number;
  /** Layers holding a KV cache (decoder layers). */
  readonly kvLayers: number;
  /** Embedding + LM head bytes, always resident on the GPU. */
  readonly residentBytes: number;
}

const modulesMemo = new WeakMap<ModelProfile, ModelModules>();

export function modelModules(model: ModelProfile): ModelModules {
  let m = modulesMemo.get(model);
  if (m) return m;
  const dv = model.derived;
  const moeIndexOfLayer = Array.from({ length: model.layers }, () => -1);
  model.moeLayerIndices.forEach((l, i) => {
    moeIndexOfLayer[l] = i;
  });
  const denseBytes = moeIndexOfLayer.map(
    (mi) => dv.attentionBytesPerLayer + (mi >= 0 ? dv.sharedExpertBytesPerLayer : dv.denseFfnBytesPerLayer),
  );
  m = {
    layers: model.layers,
    moeIndexOfLayer,
    denseBytes,
    expertBytes: dv.bytesPerExpert,
    experts: model.experts,
    kvBytesPerTokenPerLayer: dv.kvBytesPerTokenPerLayer,
    kvLayers:
      dv.kvBytesPerTokenPerLayer > 0 ? Math.round(dv.kvBytesPerToken / dv.kvBytesPerTokenPerLayer) : model.layers,
    residentBytes: dv.embeddingBytes + (model.tiedEmbeddings ? 0 : dv.lmHeadBytes),
  };
  modulesMemo.set(model, m);
  return m;
}

/** Which modules S_params keeps resident. */
export interface CachedModules {
  /** Per layer: its dense module is resident. */
  readonly denseCached: readonly boolean[];
  /** Per layer: how many of its leading experts (0 .. E-1 in order) are resident. */
  readonly cachedExperts: readonly number[];
  /** Bytes actually cached (≤ the budget). */
  readonly bytes: number;
  /** Of which expert bytes. */
  readonly expertBytes: number;
}

/**
 * The modules cached within `budgetBytes`, greedily in `order`, stopping at the first module
 * that does not fit: `denseFirst` caches every layer's dense module (layer order), then
 * experts layer by layer; `layers` caches whole layers (dense module, then its experts) from
 * the first. Only layers computed on the GPU (`< gpuLayers`) are considered.
 */
export function cachedModules(
  mm: ModelModules,
  budgetBytes: number,
  order: PassConfig['cacheOrder'],
  gpuLayers: number,
): CachedModules {
  const L = mm.layers;
  // Filled, not made by a callback per element (a search calls this per candidate).
  const denseCached = new Array<boolean>(L).fill(false);
  const cachedExperts = new Array<number>(L).fill(0);
  let left = Math.max(0, Math.floor(budgetBytes));
  let bytes = 0;
  let expertBytes = 0;
  const gl = Math.min(L, gpuLayers);
  const takeExperts = (l: number): boolean => {
    if (mm.moeIndexOfLayer[l]! < 0) return true;
    for (let e = 0; e < mm.experts; e++) {
      if (mm.expertBytes > left) return false;
      left -= mm.expertBytes;
      bytes += mm.expertBytes;
      expertBytes += mm.expertBytes;
      cachedExperts[l]!++;
    }
    return true;
  };
  const takeDense = (l: number): boolean => {
    const b = mm.denseBytes[l]!;
    if (b > left) return false;
    left -= b;
    bytes += b;
    denseCached[l] = true;
    return true;
  };
  if (order === 'layers') {
    for (let l = 0; l < gl; l++) if (!takeDense(l) || !takeExperts(l)) break;
  } else {
    let all = true;
    for (let l = 0; l < gl && all; l++) all = takeDense(l);
    if (all) for (let l = 0; l < gl; l++) if (!takeExperts(l)) break;
  }
  return { denseCached, cachedExperts, bytes, expertBytes };
}

/** Bytes of every layer's modules (dense module + all experts). */
export function layerBytes(mm: ModelModules, l: number): number {
  return mm.denseBytes[l]! + (mm.moeIndexOfLayer[l]! >= 0 ? mm.experts * mm.expertBytes : 0);
}

/** VRAM of a pass by component (see the module doc). */
export interface VramBreakdown {
  readonly residentBytes: number;
  readonly cachedBytes: number;
  readonly weightBufferBytes: number;
  readonly expertBufferBytes: number;
  readonly kvResidentBytes: number;
  readonly kvBufferBytes: number;
  readonly activationBytes: number;
  readonly workspaceBytes: number;
  readonly totalBytes: number;
}

/** Sequences of the pass whose attention runs on the CPU: round(ω · seqs). */
export function cpuAttentionSeqs(shape: Pick<PassShape, 'seqs'>, c: Pick<PassConfig, 'omega'>): number {
  return Math.round(c.omega * shape.seqs);
}

export function vramNeeded(
  model: ModelProfile,
  shape: PassShape,
  c: PassConfig,
  cached?: CachedModules,
): VramBreakdown {
  const mm = modelModules(model);
  const L = mm.layers;
  const gl = Math.min(L, c.gpuLayers);
  const cm = cached ?? cachedModules(mm, c.cachedParamBytes, c.cacheOrder, gl);
  const h = model.hiddenSize;
  const kvTok = mm.kvBytesPerTokenPerLayer;

  // Weight buffers: only layers computed on the GPU stream weights.
  let maxDense = 0;
  let maxLayer = 0;
  let anyExpertStreamed = false;
  for (let l = 0; l < gl; l++) {
    const dense = cm.denseCached[l] ? 0 : mm.denseBytes[l]!;
    const streamedExperts = mm.moeIndexOfLayer[l]! >= 0 ? mm.experts - cm.cachedExperts[l]! : 0;
    maxDense = Math.max(maxDense, dense);
    maxLayer = Math.max(maxLayer, dense + streamedExperts * mm.expertBytes);
    if (streamedExperts > 0) anyExpertStreamed = true;
  }
  const weightBufferBytes = c.weightGranularity === 'layer' ? c.weightSlots * maxLayer : c.weightSlots * maxDense;
  const expertBufferBytes = c.weightGranularity === 'expert' && anyExpertStreamed ? c.expertSlots * mm.expertBytes : 0;

  const kvResidentBytes = shape.hostSeqs * shape.reserveTokens * kvTok * Math.min(c.kvGpuLayers, mm.kvLayers, gl);
  const gpuAttnSeqs = shape.seqs - cpuAttentionSeqs(shape, c);
  const micro = Math.min(c.attnMicroSeqs, Math.max(1, gpuAttnSeqs));
  const hostKvGpuAttention = gpuAttnSeqs > 0 && Math.min(c.kvGpuLayers, gl) < gl;
  const kvBufferBytes = hostKvGpuAttention
    ? (shape.pastTokens > 0 ? c.kvBuffers * micro * shape.pastTokens * kvTok : 0) +
      KV_OUT_BUFFERS * micro * shape.newTokens * kvTok
    : 0;

  const tokens = shape.seqs * shape.newTokens;
  const activationBytes = tokens * (HIDDEN_VECTORS_PER_TOKEN * h + model.experts) * ACTIVATION_BYTES;
  const a = model.attention;
  const qkvPerToken =
    a.heads * a.headDim +
    (a.type === 'MLA' ? (a.kvLoraRank ?? 0) + (a.ropeHeadDim ?? 0) : 2 * a.kvHeads * a.headDim) +
    h;
  const attnWs = micro * shape.newTokens * qkvPerToken * ACTIVATION_BYTES;
  const chunk = Math.min(c.expertChunkTokens, Math.max(1, tokens));
  const expertWs = chunk * (2 * model.expertIntermediateSize + h) * ACTIVATION_BYTES;
  const denseWs =
    chunk * (2 * Math.max(model.denseIntermediateSize, model.sharedIntermediateSize) + h) * ACTIVATION_BYTES;
  const lmWs = Math.min(shape.seqs, LM_HEAD_CHUNK_SEQS) * model.vocabSize * 4;
  const workspaceBytes = Math.max(attnWs, expertWs, denseWs, lmWs);

  const totalBytes =
    mm.residentBytes +
    cm.bytes +
    weightBufferBytes +
    expertBufferBytes +
    kvResidentBytes +
    kvBufferBytes +
    activationBytes +
    workspaceBytes;
  return {
    residentBytes: mm.residentBytes,
    cachedBytes: cm.bytes,
    weightBufferBytes,
    expertBufferBytes,
    kvResidentBytes,
    kvBufferBytes,
    activationBytes,
    workspaceBytes,
    totalBytes,
  };
}

/** KV bytes a sequence keeps in host DRAM for `tokens` tokens (layers ≥ kvGpuLayers). */
export function hostKvBytesPerSeq(model: ModelProfile, tokens: number, kvGpuLayers: number): number {
  const mm = modelModules(model);
  return tokens * mm.kvBytesPerTokenPerLayer * Math.max(0, mm.kvLayers - kvGpuLayers);
}

/** Host DRAM of a run: every weight (the parameter server) + the host batch's host KV. */
export function hostNeeded(model: ModelProfile, hostSeqs: number, reserveTokens: number, kvGpuLayers: number): number {
  return model.derived.totalBytes + hostSeqs * hostKvBytesPerSeq(model, reserveTokens, kvGpuLayers);
}

/**
 * Most sequences whose host KV (of `reserveTokens` tokens each) fits in host DRAM beside the
 * weights; Infinity when no KV lives in host DRAM; 0 when the weights alone do not fit.
 */
export function maxHostSeqs(
  model: ModelProfile,
  hostDramBytes: number,
  reserveTokens: number,
  kvGpuLayers: number,
): number {
  const free = hostDramBytes - model.derived.totalBytes;
  if (free < 0) return 0;
  const per = hostKvBytesPerSeq(model, reserveTokens, kvGpuLayers);
  return per > 0 ? Math.floor(free / per) : Number.POSITIVE_INFINITY;
}

/** Why a model cannot run on a host at all (weights larger than host DRAM), or undefined. */
export function hostInfeasibility(model: ModelProfile, hostDramBytes: number): string | undefined {
  if (model.derived.totalBytes <= hostDramBytes) return undefined;
  const gb = (b: number) => (b / 1e9).toFixed(1);
  return `model weights ${gb(model.derived.totalBytes)} GB exceed host DRAM ${gb(hostDramBytes)} GB`;
}
