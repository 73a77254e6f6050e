/**
 * Records the expert needs of a run: a policy wrapper that forwards every hook to the wrapped
 * policy and, at each `onLayerRouted`, appends (iteration, MoE layer, activated experts) to a
 * `NeedTrace`. The world builder runs a recording pass with `on-demand` wrapped in it for
 * policies that ask for `oracle: 'needs'` (belady).
 */
import type { LayerRouting, ServingPolicy, ServingView } from '../../sim/serving/policy.ts';
import type { NeedStep, NeedTrace } from '../types.ts';

export interface NeedRecorder {
  /** The wrapped policy, recording. */
  readonly policy: ServingPolicy;
  /** The steps recorded so far (the same array grows as the run goes). */
  readonly trace: NeedTrace;
}

export function recordNeeds(inner: ServingPolicy): NeedRecorder {
  const steps: NeedStep[] = [];
  const policy: ServingPolicy = {
    name: inner.name,
    init: inner.init?.bind(inner),
    onIterationStart: inner.onIterationStart?.bind(inner),
    onLayerRouted(view: ServingView, routing: LayerRouting) {
      steps.push({ iteration: view.iteration, layer: routing.layer, experts: routing.activated.slice() });
      return inner.onLayerRouted?.(view, routing);
    },
    afterUse: inner.afterUse?.bind(inner),
    onPrefetchDone: inner.onPrefetchDone?.bind(inner),
    chooseVictim: inner.chooseVictim?.bind(inner),
    onIterationEnd: inner.onIterationEnd?.bind(inner),
    onRequestFinished: inner.onRequestFinished?.bind(inner),
  };
  return { policy, trace: { steps } };
}
