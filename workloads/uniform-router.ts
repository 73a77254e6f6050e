/**
 * Uniform top-k routing: every token picks k distinct experts uniformly at random, independently
 * at each layer. The null model of routing (no popularity skew, no locality); the baseline the
 * trace statistics compare against.
 *
 * The experts of (request, token, layer) are a pure function of the run seed and those three
 * numbers (a counter-based generator), so routing does not depend on the order requests are
 * admitted or routed in — policies that batch differently still see the same routing — and
 * `peek` can answer for any token at any time.
 */
import type { Rng } from '../sim/kernel/rng.ts';
import type { RequestRouter, RequestSpec, RoutingSource } from '../sim/workload.ts';
import { HashRng, seedFrom } from './random/hash-rng.ts';
import { InclusionAggregateRouter } from './aggregate-router.ts';

export class UniformRouting implements RoutingSource {
  private readonly seed: number;

  /** @param rng the run's `routing` stream (one 32-bit seed is drawn from it) */
  constructor(
    readonly moeLayers: number,
    readonly experts: number,
    readonly topK: number,
    rng: Rng,
  ) {
    if (topK > experts) throw new RangeError(`topK ${topK} > experts ${experts}`);
    this.seed = seedFrom(rng);
  }

  forRequest(request: RequestSpec): RequestRouter {
    const { experts, topK } = this;
    const h = new HashRng(this.seed);
    const id = request.id;
    const fill = (layer: number, fromToken: number, toToken: number, out: Int32Array): void => {
      if (out.length < (toToken - fromToken) * topK)
        throw new RangeError(`out has ${out.length} entries, needs ${(toToken - fromToken) * topK}`);
      let o = 0;
      for (let t = fromToken; t < toToken; t++) {
        h.reset(id, t, layer);
        o = drawDistinctUniform(h, experts, topK, out, o);
      }
    };
    return { route: fill, peek: fill };
  }

  routerOf(requestId: number): RequestRouter | undefined {
    return this.forRequest({ id: requestId, arrivalNs: 0 as never, promptTokens: 1, outputTokens: 1 });
  }

  popularity(_layer: number): Float64Array {
    return new Float64Array(this.experts).fill(1 / this.experts);
  }

  /** Aggregate counts: exact inclusion k/E per expert. */
  aggregate(rng: Rng): InclusionAggregateRouter {
    const { moeLayers: L, experts: E, topK: k } = this;
    const q = new Float64Array(L * E).fill(k / E);
    return new InclusionAggregateRouter(L, E, k, q, (_l, r, out) => void drawDistinctUniform(r, E, k, out, 0), rng);
  }
}

/** Writes k distinct uniform experts at out[o … o+k); returns o + k. */
export function drawDistinctUniform(rng: { next(): number }, E: number, k: number, out: Int32Array, o: number): number {
  const start = o;
  while (o - start < k) {
    const e = Math.floor(rng.next() * E);
    let dup = false;
    for (let j = start; j < o; j++) if (out[j] === e) dup = true;
    if (!dup) out[o++] = e;
  }
  return o;
}
