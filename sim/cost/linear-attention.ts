/**
 * Which layers of a hybrid model (Qwen3-Next, Qwen3.5/3.6, Qwen3.8 Flash Next) are linear
 * attention (Gated DeltaNet). The HF configs give it as `full_attention_interval` (every
 * interval-th layer is full attention: `layer_types` lists "linear_attention" ×3 then
 * "full_attention", repeated), read into the model profile's `linearAttention`. The serving
 * executor's layer walk asks it per layer; the cost model's `linearAttention` op prices the block.
 */
import type { ModelProfile } from '../../hardware-profiles/types.ts';

/** Whether layer `layer` (0-based) of a hybrid model is a linear-attention layer (all but every interval-th). */
export function isLinearAttentionLayer(model: Pick<ModelProfile, 'linearAttention'>, layer: number): boolean {
  const la = model.linearAttention;
  return la !== undefined && (layer + 1) % la.fullAttentionInterval !== 0;
}
