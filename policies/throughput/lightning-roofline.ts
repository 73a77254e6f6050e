/**
 * MoE-Lightning's hierarchical-roofline batch choice and its optimiser's memory limits
 * (caoshiyi/artifacts fastmoe/backend/optimizer.py, reference-facts §1e), shared by both setups of
 * `moe-lightning-like`.
 */
import { layerBytes, modelModules } from '../../sim/throughput/memory-model.ts';
import type { PlanContext } from '../../sim/throughput/policy.ts';

/** MoE-Lightning's optimiser limits (fastmoe/backend/optimizer.py, reference-facts §1e): GPU peak ≤ 0.86 × GPU memory, host ≤ 0.8 × host memory. */
export const RELEASED_GPU_MEMORY_FRACTION = 0.86;
export const RELEASED_HOST_MEMORY_FRACTION = 0.8;

/** The roofline's per-layer times for a decode batch of N (ns): weight transfer, CPU attention, GPU FFN. */
export function lightningRoofline(
  ctx: PlanContext,
  N: number,
  cores: number,
): { commNs: number; cpuNs: number; gpuNs: number } {
  const { model, hardware: hw, cost, workload: w } = ctx;
  const mm = modelModules(model);
  let maxLayer = 0;
  for (let l = 0; l < model.layers; l++) maxLayer = Math.max(maxLayer, layerBytes(mm, l));
  const commNs = (maxLayer / hw.pcie.h2dBytesPerSec) * 1e9;
  const ctxTokens = w.promptTokens + Math.floor(w.outputTokens / 2);
  const cpuNs = cost.estimate({ kind: 'cpuAttention', tokens: N, contextTokens: N * (ctxTokens + 1), cores }).ns;
  const perExpert = (N * model.topK) / model.experts;
  const gpuNs =
    cost.estimate({ kind: 'attentionProj', tokens: N }).ns +
    cost.estimate({ kind: 'router', tokens: N }).ns +
    (model.sharedExperts > 0 ? cost.estimate({ kind: 'sharedExperts', tokens: N }).ns : 0) +
    model.experts * cost.estimate({ kind: 'expert', tokens: perExpert }).ns;
  return { commNs, cpuNs, gpuNs };
}
