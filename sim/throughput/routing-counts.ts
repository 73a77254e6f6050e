/**
 * Per-expert token counts for the throughput family's passes.
 *
 * The workload's `AggregateRouter` is used when it has one (statistically equivalent to routing
 * the tokens one by one, including popularity skew). Without one, `UniformMultinomialCounts`
 * stands in: the n·k token-slots of a layer spread over the E experts as a multinomial with
 * equal probabilities, drawn as sequential conditional binomials from a named rng stream
 * (`aggregate-fallback`). It ignores that a token's k experts are distinct (variance slightly
 * above the per-token model's) — irrelevant at the batch sizes this family runs.
 */
import type { Rng } from '../kernel/rng.ts';
import type { AggregateRouter } from '../workload.ts';

/** Binomial(n, p) from `rng` (see `Rng.binomial`). */
export const binomialSample = (n: number, p: number, rng: Rng): number => rng.binomial(n, p);

export class UniformMultinomialCounts implements AggregateRouter {
  constructor(
    private readonly experts: number,
    private readonly topK: number,
    private readonly rng: Rng,
  ) {}

  counts(_layer: number, tokens: number, out: Float64Array): void {
    let left = Math.round(tokens * this.topK);
    const E = this.experts;
    for (let e = 0; e < E - 1 && left > 0; e++) {
      const c = binomialSample(left, 1 / (E - e), this.rng);
      out[e]! += c;
      left -= c;
    }
    out[E - 1]! += left;
  }
}
