/**
 * A counter-based random generator: `reset(a, b, c)` positions it at a point that depends only
 * on (seed, a, b, c) — e.g. (request, token, layer) — so draws for that point are the same
 * whatever order points are visited in and however often. Used where results must not depend
 * on call order (fallback routing of trace replay, expert predictions). The seed comes from a
 * named stream of the run (`routing`, `prediction`); the mixing function is the 32-bit
 * "lowbias32" integer hash (Wellons), the sequence a Weyl increment through it.
 */
export class HashRng {
  private state = 0;

  constructor(private readonly seed: number) {}

  /** Moves to the sub-stream of (a, b, c); returns this. */
  reset(a: number, b = 0, c = 0): this {
    this.state = mix((this.seed ^ mix((a | 0) ^ mix((b | 0) ^ mix((c | 0) + 0x632be5ab)))) >>> 0);
    return this;
  }

  /** Uniform in [0, 1). */
  next(): number {
    this.state = (this.state + 0x9e3779b9) | 0;
    return mix(this.state) / 4294967296;
  }

  /** Uniform integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
}

/** lowbias32: a well-mixing 32-bit integer hash. */
export function mix(x: number): number {
  let h = x | 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x7feb352d);
  h ^= h >>> 15;
  h = Math.imul(h, 0x846ca68b);
  h ^= h >>> 16;
  return h >>> 0;
}

/** A 32-bit seed drawn from a run's named stream. */
export const seedFrom = (rng: { next(): number }): number => Math.floor(rng.next() * 4294967296) >>> 0;
