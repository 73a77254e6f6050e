/**
 * Cost of one linear-attention (Gated DeltaNet) layer on the GPU for `tokens` decode tokens,
 * each from its own sequence: the block's projections (read once per call, FLOPs per token) and
 * the recurrent state of every sequence (read and written once per token), with no KV growth:
 * the time does not depend on the context length, unlike full attention. Roofline like the
 * other GPU ops (`cost-model.ts`): max(FLOPs at the GEMM efficiency, bytes at the HBM
 * efficiency) plus one kernel launch. Priced here for hybrid models (Qwen3-Next, Qwen3.5/3.6);
 * an executor that walks a hybrid model's layers calls it for the layers `isLinearAttentionLayer`
 * names and the ordinary attention op for the others.
 */
import type { GpuProfile, ModelProfile } from '../../hardware-profiles/types.ts';
import { gemmEfficiency } from './cost-model.ts';
import type { Cost } from './types.ts';
import type { Ns } from '../kernel/time.ts';

/** Whether layer `layer` (0-based) of a hybrid model is a linear-attention layer (all but every interval-th). */
export function isLinearAttentionLayer(model: Pick<ModelProfile, 'linearAttention'>, layer: number): boolean {
  const la = model.linearAttention;
  return la !== undefined && (layer + 1) % la.fullAttentionInterval !== 0;
}

/**
 * @throws RangeError for a model without linear attention or a negative token count
 */
export function linearAttentionCost(model: ModelProfile, gpu: GpuProfile, tokens: number): Cost {
  const dv = model.derived;
  if (!model.linearAttention || dv.linearAttentionParamsPerLayer === undefined) {
    throw new RangeError(`model ${model.id} has no linear-attention layers`);
  }
  if (!(tokens >= 0) || !Number.isFinite(tokens)) throw new RangeError(`tokens must be ≥ 0, got ${tokens}`);
  if (tokens === 0) return { ns: 0 as Ns, bound: 'launch', source: 'roofline', flops: 0, bytes: 0 };
  const weightBytes = Math.ceil(dv.linearAttentionParamsPerLayer * model.dtypes.attentionBytesPerParam);
  const stateBytes = 2 * tokens * (dv.linearStateBytesPerLayer ?? 0);
  const bytes = weightBytes + stateBytes;
  const flops = tokens * (dv.linearAttentionFlopsPerToken ?? 0);
  const flopNs = (flops / (gpu.bf16FlopsPerSec * gemmEfficiency(gpu, tokens))) * 1e9;
  const hbmNs = (bytes / (gpu.hbmBytesPerSec * gpu.hbmEfficiency)) * 1e9;
  const bodyNs = Math.max(flopNs, hbmNs);
  const bound = gpu.kernelLaunchNs > bodyNs ? 'launch' : flopNs > hbmNs ? 'flops' : 'hbm';
  return { ns: Math.ceil(bodyNs + gpu.kernelLaunchNs) as Ns, bound, source: 'roofline', flops, bytes };
}
