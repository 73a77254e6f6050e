/**
 * Derived quantities of a model profile: bytes per module, KV bytes per token, FLOPs per
 * token. Pure functions, no I/O.
 *
 * Notation: h = hiddenSize, i = expertIntermediateSize, m = ffnMatrices (3 for SwiGLU, 2 for a
 * plain MLP), E = experts, V = vocabSize, n_h = heads, n_kv = kvHeads, d = headDim.
 *
 * Parameter counts (what `reference/models.json` computes, so that tests can compare):
 * - FFN of width w: m·h·w weights, plus (m−1)·w + h biases when `ffnBias` (NLLB).
 * - Routed expert: the FFN of width i. Shared experts of a layer: the FFN of width
 *   `sharedIntermediateSize` (all shared experts together), plus a hidden→1 gate (Qwen).
 * - MHA/GQA attention: q = h·n_h·d, k = v = h·n_kv·d, o = n_h·d·h; QKV biases (n_h + 2·n_kv)·d;
 *   output bias h; Q/K norms 2·d ('per-head') or (n_h + n_kv)·d ('full').
 * - MLA attention (DeepSeek; d = nope + rope is the q/k head width, v = vHeadDim):
 *   q: h·q_lora + q_lora (norm) + q_lora·n_h·d, or h·n_h·d without a q LoRA;
 *   kv_a: h·(kv_lora + rope) + kv_lora (norm); kv_b: kv_lora·n_h·(nope + v); o: n_h·v·h.
 * - Encoder-decoder models: decoder layers also carry a cross-attention block (same shape as
 *   self-attention) and one more norm.
 * - Router: h·E per MoE layer. Norms: `normsPerLayer`·h per layer (×2 with LayerNorm bias),
 *   plus one final norm (two for encoder-decoder). Embedding: V·h; LM head V·h (+V bias).
 *   `lmHeadBytes` is the LM-head matrix the `lmHead` op reads even when it is tied to the
 *   embedding; `nonExpertBytes` and `totalBytes` then count the shared matrix once.
 *
 * Bytes = ⌈params × bytes per param⌉ of the module family (see `ModelDtypes`): routed experts,
 * shared experts and dense FFNs use `expertBytesPerParam`; attention, norms, routers and the
 * shared-expert gate `attentionBytesPerParam`; embedding and LM head `embeddingBytesPerParam`.
 *
 * Per-layer quantities of encoder-decoder models (attention bytes, projection FLOPs) are the
 * *average* over all layers (cross-attention spread evenly), so that per-layer × layers gives
 * the model's total; whole-model totals are computed exactly.
 *
 * KV cache per token per layer: 2·n_kv·d elements (K and V) for MHA/GQA; for MLA the
 * compressed latent kv_lora + rope elements (the absorbed form MoE-Gen and FlashMLA cache).
 * Only decoder layers hold a self-attention KV cache (all layers of a decoder-only model);
 * the cross-attention KV of encoder-decoder models (per source token) is not counted.
 *
 * FLOPs: 2 per multiply-add, i.e. 2 × the parameters a token touches, for every projection,
 * expert and the LM head. Attention scores per context token attended, per layer:
 * - MHA/GQA: 2·n_h·d for QKᵀ + 2·n_h·d_v for AV (= 4·n_h·d when d_v = d).
 * - MLA, absorbed form: W_UK is folded into the query and W_UV applied after AV, so scores are
 *   taken directly against the cached latent: 2·n_h·(kv_lora + rope) for QKᵀ + 2·n_h·kv_lora
 *   for AV. The per-token cost of the absorbed matrices equals kv_b's 2·kv_lora·n_h·(nope + v)
 *   and is part of the projection FLOPs. (A kernel that instead decompresses the cache would
 *   pay 2·kv_lora·n_h·(nope + v) per *context* token: ~120× more for DeepSeek-V2/V3.)
 *
 * Hybrid models (`linearAttention`, Qwen3-Next / Qwen3.5 / Qwen3.6 / Qwen3.8): every
 * `fullAttentionInterval`-th layer has full attention (KV cache), the others a Gated DeltaNet
 * block (fixed recurrent state per sequence). The per-layer averages above still total the
 * model; the `fullAttention*` / `linearAttention*` fields price each kind of layer on its own.
 */
import type { LinearAttention, ModelDerived, ModelProfile } from './types.ts';

/**
 * Architecture details that affect byte counts but not the simulator's shapes. `load.ts`
 * attaches them to every loaded profile (`LoadedModelProfile.details`), so a profile can be
 * re-derived after changing, say, its dtypes: `deriveModel({ ...loaded, dtypes })`.
 */
export interface ModelArchitectureDetails {
  /** Encoder layers (0 for decoder-only models). */
  readonly encoderLayers: number;
  /** Decoder layers (= layers for decoder-only models): the layers with a self-attention KV cache. */
  readonly decoderLayers: number;
  readonly normsPerLayer: number;
  readonly normBias: boolean;
  readonly ffnBias: boolean;
  readonly sharedExpertGate: boolean;
  readonly qkvBias: boolean;
  readonly outBias: boolean;
  readonly qkNorm: 'none' | 'per-head' | 'full';
  readonly lmHeadBias: boolean;
}

/** What `deriveModel` needs: a profile without its identity and derived part, plus optional details. */
export type ModelDeriveInput = Omit<ModelProfile, 'id' | 'name' | 'sources' | 'derived'> & {
  readonly details?: Partial<ModelArchitectureDetails>;
};

/** Details assumed when a profile carries none: decoder-only layout, RMSNorm, no biases. */
export function defaultDetails(input: Pick<ModelProfile, 'layers' | 'arch'>): ModelArchitectureDetails {
  return {
    encoderLayers: 0,
    decoderLayers: input.layers,
    normsPerLayer: 2,
    normBias: false,
    ffnBias: false,
    sharedExpertGate: false,
    qkvBias: false,
    outBias: false,
    qkNorm: 'none',
    lmHeadBias: false,
  };
}

/** Parameters of one FFN of width `width` (m·h·w weights, plus biases when `bias`). */
export function ffnParams(hidden: number, width: number, matrices: 2 | 3, bias: boolean, count = 1): number {
  if (width === 0) return 0;
  return matrices * hidden * width + (bias ? (matrices - 1) * width + count * hidden : 0);
}

/** Parameters of one self-attention block's projections (and Q/K norms, MLA's LoRA norms). */
export function attentionParams(m: ModelDeriveInput, d: ModelArchitectureDetails): number {
  const h = m.hiddenSize;
  const a = m.attention;
  if (a.type === 'MLA') {
    const kvLora = need(a.kvLoraRank, 'kvLoraRank');
    const rope = need(a.ropeHeadDim, 'ropeHeadDim');
    const v = need(a.vHeadDim, 'vHeadDim');
    const nope = a.headDim - rope;
    const q =
      a.qLoraRank !== undefined
        ? h * a.qLoraRank + a.qLoraRank + a.qLoraRank * a.heads * a.headDim
        : h * a.heads * a.headDim;
    const kvA = h * (kvLora + rope) + kvLora;
    const kvB = kvLora * a.heads * (nope + v);
    const o = a.heads * v * h;
    return q + kvA + kvB + o;
  }
  const qDim = a.heads * a.headDim;
  const kvDim = a.kvHeads * a.headDim;
  const vDim = a.kvHeads * (a.vHeadDim ?? a.headDim);
  const oIn = a.heads * (a.vHeadDim ?? a.headDim);
  let p = h * qDim + h * kvDim + h * vDim + oIn * h;
  if (a.outputGate === true) p += h * qDim;
  if (d.qkvBias) p += qDim + kvDim + vDim;
  if (d.outBias) p += h;
  if (d.qkNorm === 'per-head') p += 2 * a.headDim;
  else if (d.qkNorm === 'full') p += qDim + kvDim;
  return p;
}

/** Layers with a linear-attention block: all but every `fullAttentionInterval`-th. */
export function linearAttentionLayerCount(layers: number, la: LinearAttention): number {
  return layers - Math.floor(layers / la.fullAttentionInterval);
}

/**
 * Parameters of one Gated DeltaNet block (HF Qwen3-Next `Qwen3NextGatedDeltaNet`): in_proj_qkvz
 * h·(2·Hk·dk + 2·Hv·dv), in_proj_ba h·2·Hv, a depthwise conv over the q/k/v channels
 * (2·Hk·dk + Hv·dv)·kernel, dt_bias and A_log Hv each, the gated norm dv, out_proj Hv·dv·h.
 */
export function gatedDeltaNetParams(h: number, la: LinearAttention): number {
  const qk = la.keyHeads * la.keyHeadDim;
  const v = la.valueHeads * la.valueHeadDim;
  return (
    h * (2 * qk + 2 * v) +
    h * 2 * la.valueHeads +
    (2 * qk + v) * la.convKernel +
    2 * la.valueHeads +
    la.valueHeadDim +
    v * h
  );
}

/**
 * Recurrent state of one sequence in one DeltaNet layer: Hv·dk·dv state elements plus the conv
 * window (kernel−1 columns, bf16). Whole bytes (rounded up, as every byte count): a state of
 * fewer than a byte per element (a user's `stateBytesPerElement: 0.5`) was a fractional
 * allocation the VRAM pool refused mid-run.
 */
export function gatedDeltaNetStateBytes(la: LinearAttention): number {
  const conv = (2 * la.keyHeads * la.keyHeadDim + la.valueHeads * la.valueHeadDim) * (la.convKernel - 1) * 2;
  return Math.ceil(la.valueHeads * la.keyHeadDim * la.valueHeadDim * la.stateBytesPerElement) + conv;
}

/**
 * FLOPs per token of the DeltaNet recurrence in one layer (projections excluded): per value head,
 * decay dk·dv + Sᵀk 2·dk·dv + rank-1 update 2·dk·dv + readout Sᵀq 2·dk·dv = 7·dk·dv; plus the
 * depthwise conv 2·channels·kernel.
 */
export function gatedDeltaNetStateFlops(la: LinearAttention): number {
  const channels = 2 * la.keyHeads * la.keyHeadDim + la.valueHeads * la.valueHeadDim;
  return 7 * la.valueHeads * la.keyHeadDim * la.valueHeadDim + 2 * channels * la.convKernel;
}

/** KV-cache elements per token per layer: 2·n_kv·d (K+V), or kv_lora + rope for MLA. */
export function kvElementsPerTokenPerLayer(attention: ModelProfile['attention']): number {
  if (attention.type === 'MLA')
    return need(attention.kvLoraRank, 'kvLoraRank') + need(attention.ropeHeadDim, 'ropeHeadDim');
  return attention.kvHeads * (attention.headDim + (attention.vHeadDim ?? attention.headDim));
}

/** Attention score + value FLOPs per context token attended, per layer (see header). */
export function attentionScoreFlopsPerContextToken(attention: ModelProfile['attention']): number {
  if (attention.type === 'MLA') {
    const kvLora = need(attention.kvLoraRank, 'kvLoraRank');
    const rope = need(attention.ropeHeadDim, 'ropeHeadDim');
    return 2 * attention.heads * (kvLora + rope) + 2 * attention.heads * kvLora;
  }
  return 2 * attention.heads * attention.headDim + 2 * attention.heads * (attention.vHeadDim ?? attention.headDim);
}

/**
 * Computes every `ModelDerived` field from a profile (formulas in the file header). Byte counts
 * are integers (rounded up per module); FLOPs may be fractional only for encoder-decoder
 * per-layer averages.
 */
export function deriveModel(input: ModelDeriveInput): ModelDerived {
  const d: ModelArchitectureDetails = { ...defaultDetails(input), ...input.details };
  const { dtypes } = input;
  const h = input.hiddenSize;
  const m = input.ffnMatrices;
  const encDec = input.arch === 'encoder-decoder';
  const crossLayers = encDec ? d.decoderLayers : 0;
  const denseLayers = input.layers - input.moeLayers;
  const bytes = (params: number, bytesPerParam: number): number => Math.ceil(params * bytesPerParam);

  // Routed and shared experts, dense FFN.
  const paramsPerExpert = ffnParams(h, input.expertIntermediateSize, m, d.ffnBias);
  const sharedFfnParams = ffnParams(h, input.sharedIntermediateSize, m, d.ffnBias, input.sharedExperts);
  const sharedGateParams = d.sharedExpertGate ? h : 0;
  const denseFfnParams = ffnParams(h, input.denseIntermediateSize, m, d.ffnBias);

  // Attention (self + cross) and norms, totals over the model and per-layer averages.
  const selfAttnParams = attentionParams(input, d);
  const la = input.linearAttention;
  const linearLayers = la ? linearAttentionLayerCount(input.layers, la) : 0;
  const gdnParams = la ? gatedDeltaNetParams(h, la) : 0;
  const totalAttnParams = selfAttnParams * (input.layers - linearLayers + crossLayers) + gdnParams * linearLayers;
  const normSize = h * (d.normBias ? 2 : 1);
  const totalNormParams = normSize * (d.normsPerLayer * input.layers + crossLayers + (encDec ? 2 : 1));
  const attnParamsPerLayer = totalAttnParams / input.layers;
  const layerNormParamsPerLayer = (normSize * (d.normsPerLayer * input.layers + crossLayers)) / input.layers;
  const normParamsPerLayer = normSize * d.normsPerLayer; // one decoder-only layer's norms (hybrid pricing)
  const routerParams = h * input.experts;

  const bytesPerExpert = bytes(paramsPerExpert, dtypes.expertBytesPerParam);
  const sharedExpertBytesPerLayer =
    bytes(sharedFfnParams, dtypes.expertBytesPerParam) + bytes(sharedGateParams, dtypes.attentionBytesPerParam);
  const routerBytesPerLayer = bytes(routerParams, dtypes.attentionBytesPerParam);
  const attentionBytesPerLayer = bytes(
    attnParamsPerLayer + layerNormParamsPerLayer + routerParams,
    dtypes.attentionBytesPerParam,
  );
  const denseFfnBytesPerLayer = bytes(denseFfnParams, dtypes.expertBytesPerParam);
  const embeddingBytes = bytes(input.vocabSize * h, dtypes.embeddingBytesPerParam);
  const lmHeadBiasBytes = bytes(d.lmHeadBias ? input.vocabSize : 0, dtypes.embeddingBytesPerParam);
  const lmHeadBytes = embeddingBytes + lmHeadBiasBytes;

  const nonExpertBytes =
    embeddingBytes +
    (input.tiedEmbeddings ? lmHeadBiasBytes : lmHeadBytes) +
    bytes(totalAttnParams + totalNormParams, dtypes.attentionBytesPerParam) +
    input.moeLayers * (routerBytesPerLayer + sharedExpertBytesPerLayer) +
    denseLayers * denseFfnBytesPerLayer;
  const allExpertBytes = input.moeLayers * input.experts * bytesPerExpert;

  const kvBytesPerTokenPerLayer = bytes(kvElementsPerTokenPerLayer(input.attention), dtypes.kvBytesPerElement);

  return {
    paramsPerExpert,
    bytesPerExpert,
    sharedExpertBytesPerLayer,
    attentionBytesPerLayer,
    routerBytesPerLayer,
    denseFfnBytesPerLayer,
    embeddingBytes,
    lmHeadBytes,
    nonExpertBytes,
    allExpertBytes,
    totalBytes: nonExpertBytes + allExpertBytes,
    kvBytesPerTokenPerLayer,
    kvBytesPerToken: kvBytesPerTokenPerLayer * (d.decoderLayers - linearLayers),
    expertFlopsPerToken: 2 * paramsPerExpert,
    sharedExpertFlopsPerToken: 2 * (sharedFfnParams + sharedGateParams),
    denseFfnFlopsPerToken: 2 * denseFfnParams,
    attentionProjFlopsPerToken: 2 * attnParamsPerLayer,
    attentionScoreFlopsPerContextToken: attentionScoreFlopsPerContextToken(input.attention),
    routerFlopsPerToken: 2 * routerParams,
    lmHeadFlopsPerToken: 2 * input.vocabSize * h,
    ...(la && {
      linearAttentionLayers: linearLayers,
      linearAttentionParamsPerLayer: gdnParams,
      linearStateBytesPerLayer: gatedDeltaNetStateBytes(la),
      linearAttentionFlopsPerToken: 2 * gdnParams + gatedDeltaNetStateFlops(la),
      fullAttentionBytesPerLayer: bytes(selfAttnParams + normParamsPerLayer, dtypes.attentionBytesPerParam),
      linearAttentionBytesPerLayer: bytes(gdnParams + normParamsPerLayer, dtypes.attentionBytesPerParam),
      fullAttentionProjFlopsPerToken: 2 * selfAttnParams,
      recurrentStateBytesPerSequence: linearLayers * gatedDeltaNetStateBytes(la),
    }),
  };
}

/**
 * Total parameters of the model (embedding + LM head unless tied + attention + norms +
 * routers + shared experts + dense FFNs + routed experts), as `models.json` computes it.
 */
export function totalParams(input: ModelDeriveInput): number {
  const unit: ModelDeriveInput = {
    ...input,
    dtypes: { expertBytesPerParam: 1, attentionBytesPerParam: 1, embeddingBytesPerParam: 1, kvBytesPerElement: 1 },
  };
  return deriveModel(unit).totalBytes;
}

function need(v: number | undefined, field: string): number {
  if (v === undefined) throw new RangeError(`MLA attention needs ${field}`);
  return v;
}
