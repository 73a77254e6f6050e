/**
 * Named, seeded random streams derived from one master seed.
 *
 * Every consumer asks for its own stream by name (`arrivals`, `lengths`, `routing`,
 * `prediction`, `policy:<name>` ...). A stream's sequence depends only on the master seed and
 * its name, so adding a consumer (say, a new policy) never perturbs the others. The generator
 * is seedrandom's Alea: fast, 32-bit resolution, portable and deterministic. seedrandom seeds
 * it (its Mash hash of the name); the generator step itself is Alea's, run here on the state
 * seedrandom hands over, so `next()` is a monomorphic method V8 inlines, not a call through one
 * of many per-stream closures (same sequence, bit for bit: test/unit/kernel.test.ts).
 */
import seedrandom from 'seedrandom';

export class Rng {
  /**
   * Alea's state (seedrandom/lib/alea.js): s0, s1, s2 and c, in a typed array. As object fields
   * these doubles would be boxed: every `next()` would allocate a heap number (16 B); typed-array
   * stores allocate nothing (history: docs/PERFORMANCE.md).
   */
  private readonly st = new Float64Array(4);
  private spareNormal: number | null = null;

  constructor(seed: string) {
    const st = (
      seedrandom.alea(seed, { state: true }) as unknown as {
        state(): { s0: number; s1: number; s2: number; c: number };
      }
    ).state();
    this.st[0] = st.s0;
    this.st[1] = st.s1;
    this.st[2] = st.s2;
    this.st[3] = st.c;
  }

  /**
   * Uniform in [0, 1): one step of Alea (2091639 · s0 + c · 2^-32, as seedrandom computes it).
   * seedrandom takes the carry as `c = t | 0`; here it is `Math.floor(t)`, the same value (t is
   * in [0, 2091640): s0 ∈ [0, 1), c < 2091639), kept a double. The carry is the step's serial
   * chain (the next t needs it): `| 0` is a truncation to int32 and back to a double for the
   * multiply, `Math.floor` one rounding instruction (SSE4.1 roundsd), on the draws' serial chain
   * (figures: docs/PERFORMANCE.md; the same sequence: test/unit/kernel.test.ts).
   */
  next(): number {
    const st = this.st;
    const t = 2091639 * st[0]! + st[3]! * 2.3283064365386963e-10;
    st[0] = st[1]!;
    st[1] = st[2]!;
    const c = Math.floor(t);
    st[3] = c;
    return (st[2] = t - c);
  }

  /**
   * Alea's state (s0, s1, s2, c), live: for a hot loop that runs the step of `next()` on local
   * copies and writes them back (the same sequence; `SyntheticRequestRouter.genToken`), as V8
   * keeps locals in registers but not a typed array's elements.
   */
  get aleaState(): Float64Array {
    return this.st;
  }

  private prng(): number {
    return this.next();
  }

  /** Uniform integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.prng() * n);
  }

  /** Exponential with the given mean. */
  exponential(mean: number): number {
    return -mean * Math.log(1 - this.prng());
  }

  /** Standard normal (Marsaglia polar method). */
  normal(): number {
    if (this.spareNormal !== null) {
      const s = this.spareNormal;
      this.spareNormal = null;
      return s;
    }
    for (;;) {
      const u = 2 * this.prng() - 1;
      const v = 2 * this.prng() - 1;
      const s = u * u + v * v;
      if (s > 0 && s < 1) {
        const m = Math.sqrt((-2 * Math.log(s)) / s);
        this.spareNormal = v * m;
        return u * m;
      }
    }
  }

  /** Gamma(shape, scale) by Marsaglia–Tsang; shape < 1 via the boost u^(1/shape). */
  gamma(shape: number, scale: number): number {
    if (!(shape > 0) || !(scale > 0)) throw new RangeError(`gamma needs shape, scale > 0, got ${shape}, ${scale}`);
    if (shape < 1) {
      const u = this.prng();
      return this.gamma(shape + 1, scale) * Math.pow(u === 0 ? Number.MIN_VALUE : u, 1 / shape);
    }
    const d = shape - 1 / 3;
    const c = 1 / Math.sqrt(9 * d);
    for (;;) {
      let x: number;
      let v: number;
      do {
        x = this.normal();
        v = 1 + c * x;
      } while (v <= 0);
      v = v * v * v;
      const u = this.prng();
      if (u < 1 - 0.0331 * x * x * x * x) return d * v * scale;
      if (Math.log(u) < 0.5 * x * x + d * (1 - v + Math.log(v))) return d * v * scale;
    }
  }

  /**
   * Binomial(n, p): exact inversion (BINV, expected O(mean) steps) for means below 30, a rounded
   * normal approximation above (clamped to 0..n). Used to draw multinomial counts as sequential
   * conditional binomials (aggregate routing).
   */
  binomial(n: number, p: number): number {
    if (n <= 0 || p <= 0) return 0;
    if (p >= 1) return n;
    if (p > 0.5) return n - this.binomial(n, 1 - p);
    const mean = n * p;
    if (mean < 30) {
      const q = 1 - p;
      const s = p / q;
      const a = (n + 1) * s;
      let r = Math.pow(q, n);
      let u = this.prng();
      let x = 0;
      while (u > r) {
        u -= r;
        x++;
        if (x > n) return n;
        r *= a / x - s;
        if (r <= 0) break;
      }
      return Math.min(x, n);
    }
    const v = Math.round(mean + Math.sqrt(mean * (1 - p)) * this.normal());
    return Math.min(n, Math.max(0, v));
  }

  /** Index drawn from unnormalised non-negative weights (linear scan). */
  weighted(weights: ArrayLike<number>, total?: number): number {
    let sum = total ?? 0;
    if (total === undefined) for (let i = 0; i < weights.length; i++) sum += weights[i]!;
    let r = this.prng() * sum;
    for (let i = 0; i < weights.length; i++) {
      r -= weights[i]!;
      if (r < 0) return i;
    }
    return weights.length - 1;
  }

  /** Fisher–Yates shuffle in place. */
  shuffle<T>(a: T[]): T[] {
    for (let i = a.length - 1; i > 0; i--) {
      const j = this.int(i + 1);
      const t = a[i]!;
      a[i] = a[j]!;
      a[j] = t;
    }
    return a;
  }
}

/** The set of named streams of one simulation run. */
export class RngStreams {
  private readonly streams = new Map<string, Rng>();

  constructor(readonly masterSeed: number) {}

  /** The stream called `name`; created on first use, the same object afterwards. */
  stream(name: string): Rng {
    let s = this.streams.get(name);
    if (!s) {
      s = new Rng(`moesim:${this.masterSeed}:${name}`);
      this.streams.set(name, s);
    }
    return s;
  }
}
