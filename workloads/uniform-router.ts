/**
 * Uniform top-k routing: every token picks k distinct experts uniformly at random, independently
 * at each layer. The null model of routing (no popularity skew, no locality); the placeholder
 * routing of the foundation and the baseline the trace statistics compare against.
 */
import type { Rng } from '../sim/kernel/rng.ts';
import type { RequestRouter, RequestSpec, RoutingSource } from '../sim/workload.ts';

export class UniformRouting implements RoutingSource {
  constructor(
    readonly moeLayers: number,
    readonly experts: number,
    readonly topK: number,
    private readonly rng: Rng,
  ) {
    if (topK > experts) throw new RangeError(`topK ${topK} > experts ${experts}`);
  }

  forRequest(_request: RequestSpec): RequestRouter {
    const { experts, topK, rng } = this;
    return {
      route(_layer, fromToken, toToken, out) {
        let o = 0;
        for (let t = fromToken; t < toToken; t++) {
          const start = o;
          while (o - start < topK) {
            const e = rng.int(experts);
            let dup = false;
            for (let j = start; j < o; j++) if (out[j] === e) dup = true;
            if (!dup) out[o++] = e;
          }
        }
      },
    };
  }
}
