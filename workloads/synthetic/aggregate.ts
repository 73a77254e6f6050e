/**
 * Aggregate routing of a synthetic model: tokens drawn independently from the global
 * per-layer distribution (k distinct experts by successive weighted draws), as in a decode
 * batch of many independent requests. The inclusion probabilities of that scheme are computed
 * by `successiveInclusion` (exact up to quadrature error).
 */
import type { Rng } from '../../sim/kernel/rng.ts';
import { InclusionAggregateRouter, successiveInclusion, type TokenSampler } from '../aggregate-router.ts';
import { drawDistinctAlias } from '../trace-routing.ts';
import type { SyntheticModel } from './model.ts';

export function syntheticAggregate(model: SyntheticModel, rng: Rng): InclusionAggregateRouter {
  const { L, E, k } = model;
  const alias = model.global.alias;
  const sampler: TokenSampler = (l, r, out) => drawDistinctAlias(alias, l, E, k, r, out, 0);
  const q = new Float64Array(L * E);
  for (let l = 0; l < L; l++) q.set(successiveInclusion(model.global.weights.subarray(l * E, (l + 1) * E), k), l * E);
  return new InclusionAggregateRouter(L, E, k, q, sampler, rng);
}
