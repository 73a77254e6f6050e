/**
 * Aggregate routing of a synthetic model: tokens drawn independently from the global
 * per-layer distribution (k distinct experts by weighted draws), as in a decode batch of many
 * independent requests. The inclusion probabilities of that per-token scheme have no closed
 * form for k > 1; they are estimated once from 2^16 tokens per layer (relative standard error
 * ≈ 1/√(65536·q_e), < 3 % for q_e ≥ 1/64).
 */
import type { Rng } from '../../sim/kernel/rng.ts';
import { InclusionAggregateRouter, estimateInclusion, type TokenSampler } from '../aggregate-router.ts';
import { drawDistinctAlias } from '../trace-routing.ts';
import type { SyntheticModel } from './model.ts';

export function syntheticAggregate(model: SyntheticModel, rng: Rng): InclusionAggregateRouter {
  const { L, E, k } = model;
  const alias = model.global.alias;
  const sampler: TokenSampler = (l, r, out) => drawDistinctAlias(alias, l, E, k, r, out, 0);
  const q = k === 1 ? model.global.weights.slice() : k === E ? new Float64Array(L * E).fill(1) : estimateInclusion(L, E, k, sampler, rng);
  return new InclusionAggregateRouter(L, E, k, q, sampler, rng);
}
