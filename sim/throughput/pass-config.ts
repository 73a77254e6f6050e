/**
 * The pass model's inputs checked and derived (`pass-dag.ts` builds the DAG of a pass): a
 * configuration's validity against a model, expected per-expert token counts, and the cost of
 * MLA attention's absorbed up-projections on the CPU.
 */
import type { ModelProfile } from '../../hardware-profiles/types.ts';
import type { PassConfig } from './types.ts';

/**
 * Per-expert token counts of one MoE layer: fills `out` (length = experts; it is zeroed first
 * by the caller) with the token-slots routed to each expert for `tokens` tokens (Σ = tokens·k).
 */
export type CountsFn = (moeLayer: number, tokens: number, out: Float64Array) => void;

/**
 * Even counts (the estimator's routing): the tokens·k token-slots of a layer spread over the E
 * experts as evenly as integers allow (⌊n/E⌋ or ⌈n/E⌉ each, the extra ones rotating with the
 * layer), so a small batch activates min(E, n) experts, as real routing would (up to the overlap
 * of random choices), instead of every expert with a fraction of a token.
 */
export function expectedCounts(topK: number): CountsFn {
  return (layer, tokens, out) => {
    const E = out.length;
    const n = Math.round(tokens * topK);
    const q = Math.floor(n / E);
    const r = n - q * E;
    // Expert e gets the extra one when (e − layer·r) mod E < r: the r experts from (layer·r) mod E
    // on, cyclically (filled directly: no modulo per expert, a search prices many layers).
    out.fill(q, 0, E);
    const first = (((layer * r) % E) + E) % E;
    for (let j = 0; j < r; j++) out[(first + j) % E] = q + 1;
  };
}

/**
 * MLA (DeepSeek) attention on the CPU over the cached latent: per new token, the absorbed
 * up-projections cost 2·n_h·nope·kv_lora (W_UK into the query) + 2·n_h·kv_lora·v (W_UV out of
 * the attended latent) FLOPs, and the task reads the kv_b weights (kv_lora·n_h·(nope + v)
 * parameters) once. Zero for other attention types. (The GPU projections kernel of the same
 * tokens still prices the whole projection, kv_b included: a small double count.)
 */
export function mlaUpProjection(model: ModelProfile): { readonly flopsPerToken: number; readonly bytes: number } {
  const a = model.attention;
  if (a.type !== 'MLA' || a.kvLoraRank === undefined) return { flopsPerToken: 0, bytes: 0 };
  const nope = a.headDim - (a.ropeHeadDim ?? 0);
  const v = a.vHeadDim ?? a.headDim;
  return {
    flopsPerToken: 2 * a.heads * nope * a.kvLoraRank + 2 * a.heads * a.kvLoraRank * v,
    bytes: Math.ceil(a.kvLoraRank * a.heads * (nope + v) * model.dtypes.attentionBytesPerParam),
  };
}

/** Checks a configuration against a model; returns the first problem, or undefined. */
export function passConfigProblem(c: PassConfig, model: ModelProfile): string | undefined {
  const posInt = (v: number) => Number.isSafeInteger(v) && v >= 1;
  if (!posInt(c.attnMicroSeqs)) return `attnMicroSeqs must be an integer ≥ 1 (got ${c.attnMicroSeqs})`;
  if (!(c.omega >= 0 && c.omega <= 1)) return `omega must be in [0, 1] (got ${c.omega})`;
  if (c.expertBatching === 'perMicroBatch' && c.omega !== 0 && c.omega !== 1)
    return `perMicroBatch batching needs omega 0 or 1 (got ${c.omega})`;
  if (c.expertBatching === 'perMicroBatch' && c.weightGranularity !== 'layer')
    return 'perMicroBatch batching needs layer weight granularity';
  if (!posInt(c.cpuCores)) return `cpuCores must be an integer ≥ 1 (got ${c.cpuCores})`;
  if (!(Number.isSafeInteger(c.kvGpuLayers) && c.kvGpuLayers >= 0))
    return `kvGpuLayers must be an integer ≥ 0 (got ${c.kvGpuLayers})`;
  if (!posInt(c.kvBuffers)) return `kvBuffers must be an integer ≥ 1 (got ${c.kvBuffers})`;
  if (!posInt(c.expertChunkTokens)) return `expertChunkTokens must be an integer ≥ 1 (got ${c.expertChunkTokens})`;
  if (!posInt(c.expertSlots)) return `expertSlots must be an integer ≥ 1 (got ${c.expertSlots})`;
  if (!posInt(c.weightSlots)) return `weightSlots must be an integer ≥ 1 (got ${c.weightSlots})`;
  if (!(Number.isSafeInteger(c.cachedParamBytes) && c.cachedParamBytes >= 0))
    return `cachedParamBytes must be an integer ≥ 0 (got ${c.cachedParamBytes})`;
  if (!(Number.isSafeInteger(c.gpuLayers) && c.gpuLayers >= 0 && c.gpuLayers <= model.layers))
    return `gpuLayers must be an integer in [0, ${model.layers}] (got ${c.gpuLayers})`;
  return undefined;
}
