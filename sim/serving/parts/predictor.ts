/**
 * The batch predictor `ServingView.predict` answers with: the workload's per-request predictor
 * (ranked experts of a layer for a request's tokens), and for a batch a Borda count over the
 * requests' ranked lists (a request's r-th of n experts scores n − r), ties by expert index.
 */
import type { ExpertPredictor } from '../../workload.ts';
import type { IterationState } from './state.ts';

export function predictBatch(
  p: ExpertPredictor | undefined,
  it: IterationState | null,
  experts: number,
  layer: number,
): readonly number[] {
  if (!p || !it) return [];
  if (it.batch.length === 1) {
    const s = it.batch[0]!;
    return p.predict(s.spec.id, layer, s.processed, s.processed + it.tokens[0]!);
  }
  const score = new Float64Array(experts);
  for (let i = 0; i < it.batch.length; i++) {
    const s = it.batch[i]!;
    const ranked = p.predict(s.spec.id, layer, s.processed, s.processed + it.tokens[i]!);
    ranked.forEach((e, r) => (score[e]! += ranked.length - r));
  }
  return [...score.keys()].filter((e) => score[e]! > 0).sort((a, b) => score[b]! - score[a]! || a - b);
}
