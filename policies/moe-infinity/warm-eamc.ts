/**
 * EAMC warm-up for MoE-Infinity (`eamcWarmup`): the EAMs of held-out requests, routed as the
 * serving executor routes them, loaded into the policy's collections before the run, so a run
 * can start from a trained collection as the paper's does.
 */
import type { ModelProfile } from '../../hardware-profiles/types.ts';
import type { RequestRouter, RequestSpec, Workload } from '../../sim/workload.ts';
import type { MoeInfinityPolicy } from './policy.ts';

/**
 * Loads the prefill and decode EAMs of `n` held-out requests into the policy's EAMC: the run's
 * request specs cycled under ids past the run's, routed as the serving executor routes them
 * (encoder-decoder models: encoder MoE layers over the prompt, decoder MoE layers one token per
 * output position; decoder-only: every layer over the prompt, then each decode input token).
 */
export function warmEamc(policy: MoeInfinityPolicy, n: number, model: ModelProfile, workload: Workload): void {
  const specs = workload.requests;
  if (specs.length === 0) return;
  const { layers: L, experts: E } = policy.shape;
  const k = model.topK;
  const decoderLayers = (model as { details?: { decoderLayers?: number } }).details?.decoderLayers ?? model.layers;
  const encoderLayers = model.arch === 'encoder-decoder' ? model.layers - decoderLayers : 0;
  const firstDecoderMoe =
    encoderLayers > 0
      ? Math.max(
          0,
          model.moeLayerIndices.findIndex((li) => li >= encoderLayers),
        )
      : 0;
  let scratch = new Int32Array(1024);
  const route = (router: RequestRouter, layer: number, from: number, to: number, into: Float64Array): void => {
    const need = (to - from) * k;
    if (need <= 0) return;
    if (scratch.length < need) scratch = new Int32Array(need * 2);
    router.route(layer, from, to, scratch);
    for (let j = 0; j < need; j++) into[layer * E + scratch[j]!]! += 1;
  };
  for (let i = 0; i < n; i++) {
    const base = specs[i % specs.length]!;
    const spec: RequestSpec = { ...base, id: specs.length + i };
    const router = workload.routing.forRequest(spec);
    const prefill = new Float64Array(L * E);
    const decode = new Float64Array(L * E);
    const P = spec.promptTokens;
    if (encoderLayers > 0) {
      for (let l = 0; l < L; l++)
        route(router, l, l < firstDecoderMoe ? 0 : P, l < firstDecoderMoe ? P : P + 1, prefill);
      for (let t = 1; t < spec.outputTokens; t++)
        for (let l = firstDecoderMoe; l < L; l++) route(router, l, P + t, P + t + 1, decode);
    } else {
      for (let l = 0; l < L; l++) route(router, l, 0, P, prefill);
      for (let t = P; t < P + spec.outputTokens - 1; t++)
        for (let l = 0; l < L; l++) route(router, l, t, t + 1, decode);
    }
    policy.preload('prefill', [prefill]);
    if (spec.outputTokens > 1) policy.preload('decode', [decode]);
  }
}
