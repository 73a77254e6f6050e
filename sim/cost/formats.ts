/**
 * Quantised expert formats: bytes per expert tensor from the format's block layout, and the
 * per-tensor mix rules of llama.cpp's named file types (Q4_K_M puts some layers' `ffn_down` in
 * Q6_K). Engines serve experts in these formats, so an expert's bytes on a link or in a slot
 * depend on the format, the tensor and, for mixes, the layer.
 *
 * A block format stores `blockWeights` weights in `blockBytes` bytes along a tensor row (ggml
 * quantises along ne0, the input dimension): a tensor of `rows × rowLen` weights takes
 * `rows · (rowLen / blockWeights) · blockBytes` bytes. When `rowLen` is not a multiple of the
 * block, llama.cpp's quantiser falls back to a 32-weight format (`fallback`), which this file
 * applies the same way. Per-format dequant/kernel rates are profile data
 * (`hardware-profiles/quant-kernels.json`, loaded by `hardware-profiles/quant-kernels.ts`).
 */

/** One storage format: how many weights a block holds and its size in bytes. */
export interface BlockFormat {
  readonly id: string;
  readonly blockWeights: number;
  readonly blockBytes: number;
  /** The format llama.cpp converts to when a row is not a multiple of `blockWeights`. */
  readonly fallback?: string;
  readonly source: string;
}

/** Where the fallback rule comes from. */
export const FALLBACK_SOURCE =
  'llama.cpp src/llama-quant.cpp: a row not a multiple of 256 → IQ4_NL (i-quants, Q2_K, Q3_K), ' +
  'Q5_0 (Q4_K), Q5_1 (Q5_K), Q8_0 (Q6_K)';

const GGML = 'ggml/src/ggml-common.h block_* structs (ggml-org/llama.cpp)';
const fmt = (id: string, blockWeights: number, blockBytes: number, source: string, fallback?: string): BlockFormat => ({
  id,
  blockWeights,
  blockBytes,
  source,
  ...(fallback !== undefined && { fallback }),
});

/** Block formats by id (lower-case). Sources: the struct layouts named in `source`. */
export const BLOCK_FORMATS: Readonly<Record<string, BlockFormat>> = Object.freeze({
  bf16: fmt('bf16', 1, 2, 'bfloat16: 2 bytes per weight'),
  f16: fmt('f16', 1, 2, 'IEEE half: 2 bytes per weight'),
  q8_0: fmt('q8_0', 32, 34, `${GGML}: fp16 d + 32 int8`),
  q4_0: fmt('q4_0', 32, 18, `${GGML}: fp16 d + 16 B nibbles`),
  q5_0: fmt('q5_0', 32, 22, `${GGML}: fp16 d + 4 B high bits + 16 B nibbles`),
  q5_1: fmt('q5_1', 32, 24, `${GGML}: fp16 d, m + 4 B high bits + 16 B nibbles`),
  iq4_nl: fmt('iq4_nl', 32, 18, `${GGML}: fp16 d + 16 B non-linear nibbles`),
  q2_k: fmt('q2_k', 256, 84, `${GGML}: block_q2_K (2.625 bpw)`, 'iq4_nl'),
  q3_k: fmt('q3_k', 256, 110, `${GGML}: block_q3_K (3.4375 bpw)`, 'iq4_nl'),
  q4_k: fmt('q4_k', 256, 144, `${GGML}: block_q4_K (4.5 bpw)`, 'q5_0'),
  q5_k: fmt('q5_k', 256, 176, `${GGML}: block_q5_K (5.5 bpw)`, 'q5_1'),
  q6_k: fmt('q6_k', 256, 210, `${GGML}: block_q6_K (6.5625 bpw)`, 'q8_0'),
  iq1_s: fmt('iq1_s', 256, 50, `${GGML}: block_iq1_s (1.5625 bpw)`, 'iq4_nl'),
  iq1_m: fmt('iq1_m', 256, 56, `${GGML}: block_iq1_m (1.75 bpw)`, 'iq4_nl'),
  iq2_xxs: fmt('iq2_xxs', 256, 66, `${GGML}: block_iq2_xxs (2.0625 bpw)`, 'iq4_nl'),
  iq2_xs: fmt('iq2_xs', 256, 74, `${GGML}: block_iq2_xs (2.3125 bpw)`, 'iq4_nl'),
  iq2_s: fmt('iq2_s', 256, 82, `${GGML}: block_iq2_s (2.5625 bpw)`, 'iq4_nl'),
  iq3_xxs: fmt('iq3_xxs', 256, 98, `${GGML}: block_iq3_xxs (3.0625 bpw)`, 'iq4_nl'),
  iq3_s: fmt('iq3_s', 256, 110, `${GGML}: block_iq3_s (3.4375 bpw)`, 'iq4_nl'),
  iq4_xs: fmt('iq4_xs', 256, 136, `${GGML}: block_iq4_xs (4.25 bpw)`, 'iq4_nl'),
  mxfp4: fmt('mxfp4', 32, 17, 'OCP Microscaling spec v1.0: 32 FP4 (E2M1) + one E8M0 scale = 17 B; ggml block_mxfp4'),
  nvfp4: fmt('nvfp4', 16, 9, 'NVIDIA NVFP4: 16 FP4 (E2M1) + one FP8 E4M3 scale = 9 B (per-tensor FP32 scale ignored)'),
  'mlx-4bit-g64': fmt(
    'mlx-4bit-g64',
    64,
    36,
    'MLX affine quantisation, bits 4 group_size 64: 32 B + bf16 scale + bias',
  ),
  'hqq-4bit-g64': fmt('hqq-4bit-g64', 64, 36, 'mobiusml/hqq nbits=4 group_size=64: 32 B + fp16 scale + fp16 zero'),
  'hqq-2bit-g16': fmt(
    'hqq-2bit-g16',
    16,
    8,
    'mobiusml/hqq nbits=2 group_size=16: 4 B + fp16 scale + zero (no meta-quant)',
  ),
});

/** The three tensors of a gated expert (a plain MLP has `up` and `down`). */
export type ExpertTensor = 'gate' | 'up' | 'down';

/** A named file type: the block format of each expert tensor in each layer. */
export interface FormatMix {
  readonly id: string;
  readonly source: string;
  tensorFormat(tensor: ExpertTensor, layer: number, layers: number): string;
}

/**
 * llama.cpp's `use_more_bits`: the first and last eighth of the layers, and every third layer
 * in between, get more bits for `ffn_down` (integer division as in C; i < n/8 is tested first,
 * so the modulo never sees a negative operand).
 */
export function useMoreBits(layer: number, layers: number): boolean {
  const eighth = Math.floor(layers / 8);
  return layer < eighth || layer >= Math.floor((7 * layers) / 8) || (layer - eighth) % 3 === 2;
}

const QUANT = 'llama.cpp src/llama-quant.cpp llama_tensor_get_type (ffn_down branch)';
const uniform = (id: string): FormatMix => ({
  id,
  source: `one format for every expert tensor: ${id}`,
  tensorFormat: () => id,
});

/** Named mixes. A block format's id is also a uniform mix. */
export const FORMAT_MIXES: Readonly<Record<string, FormatMix>> = Object.freeze({
  q4_k_m: {
    id: 'q4_k_m',
    source: `${QUANT}: gate/up Q4_K; ffn_down Q6_K where use_more_bits(i, n), else Q4_K`,
    tensorFormat: (t, i, n) => (t === 'down' && useMoreBits(i, n) ? 'q6_k' : 'q4_k'),
  },
  q5_k_m: {
    id: 'q5_k_m',
    source: `${QUANT}: gate/up Q5_K; ffn_down Q6_K where use_more_bits(i, n), else Q5_K`,
    tensorFormat: (t, i, n) => (t === 'down' && useMoreBits(i, n) ? 'q6_k' : 'q5_k'),
  },
  q4_k_s: {
    id: 'q4_k_s',
    source: `${QUANT}: Q4_K; ffn_down Q5_K in the first n/8 layers`,
    tensorFormat: (t, i, n) => (t === 'down' && i < Math.floor(n / 8) ? 'q5_k' : 'q4_k'),
  },
});

/** The mix for a format id: a named mix, or a block format used uniformly. @throws RangeError naming the id */
export function formatMix(id: string): FormatMix {
  const mix = FORMAT_MIXES[id];
  if (mix) return mix;
  if (BLOCK_FORMATS[id]) return uniform(id);
  const known = [...Object.keys(FORMAT_MIXES), ...Object.keys(BLOCK_FORMATS)];
  throw new RangeError(`unknown expert format "${id}" (known: ${known.join(', ')})`);
}

/** Bits per weight of a block format (8 · blockBytes / blockWeights). */
export function bitsPerWeight(id: string): number {
  const f = BLOCK_FORMATS[id];
  if (!f) throw new RangeError(`unknown block format "${id}"`);
  return (8 * f.blockBytes) / f.blockWeights;
}

/** The block format actually stored for a row of `rowLen` weights (llama.cpp's fallback when it does not divide). */
export function storedFormat(id: string, rowLen: number): BlockFormat {
  const f = BLOCK_FORMATS[id];
  if (!f) throw new RangeError(`unknown block format "${id}"`);
  if (rowLen % f.blockWeights === 0) return f;
  if (f.fallback === undefined) {
    throw new RangeError(`row length ${rowLen} is not a multiple of ${id}'s ${f.blockWeights}-weight block`);
  }
  return storedFormat(f.fallback, rowLen);
}

/** Bytes of one `rows × rowLen` tensor in a block format (with the fallback applied). */
export function tensorBytes(id: string, rows: number, rowLen: number): number {
  const f = storedFormat(id, rowLen);
  return rows * (rowLen / f.blockWeights) * f.blockBytes;
}

/** The shape of one routed expert. */
export interface ExpertShape {
  readonly hiddenSize: number;
  readonly expertIntermediateSize: number;
  readonly ffnMatrices: 2 | 3;
}

/** Bytes of each tensor of one expert in one layer, with the stored format of each. */
export interface ExpertBytes {
  readonly gate: number;
  readonly up: number;
  readonly down: number;
  readonly total: number;
  readonly formats: { readonly gate?: string; readonly up: string; readonly down: string };
}

/**
 * Bytes of one expert of layer `layer` (0-based among `layers` MoE layers) in format `mixId`.
 * gate/up are `inter × hidden` (rows of `hidden` weights), down is `hidden × inter` (rows of
 * `inter` weights), as ggml stores them.
 */
export function expertBytes(shape: ExpertShape, mixId: string, layer: number, layers: number): ExpertBytes {
  const mix = formatMix(mixId);
  const h = shape.hiddenSize;
  const i = shape.expertIntermediateSize;
  const gated = shape.ffnMatrices === 3;
  const gf = gated ? storedFormat(mix.tensorFormat('gate', layer, layers), h).id : undefined;
  const uf = storedFormat(mix.tensorFormat('up', layer, layers), h).id;
  const df = storedFormat(mix.tensorFormat('down', layer, layers), i).id;
  const gate = gf === undefined ? 0 : tensorBytes(gf, i, h);
  const up = tensorBytes(uf, i, h);
  const down = tensorBytes(df, h, i);
  const formats = { ...(gf !== undefined && { gate: gf }), up: uf, down: df };
  return { gate, up, down, total: gate + up + down, formats };
}

/** Bytes of one expert in every layer, in layer order. */
export function expertBytesByLayer(shape: ExpertShape, mixId: string, layers: number): number[] {
  return Array.from({ length: layers }, (_, l) => expertBytes(shape, mixId, l, layers).total);
}

/**
 * Mean bytes per expert parameter over all layers: the single `expertBytesPerParam` a model
 * profile with one bytes-per-expert figure carries (per-layer sizes differ for mixes).
 */
export function meanExpertBytesPerParam(shape: ExpertShape, mixId: string, layers: number): number {
  const total = expertBytesByLayer(shape, mixId, layers).reduce((a, b) => a + b, 0);
  const params = shape.ffnMatrices * shape.hiddenSize * shape.expertIntermediateSize;
  return total / (layers * params);
}
