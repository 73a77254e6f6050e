/**
 * Rng's distributions on scripted uniform draws: each sampler is fed known values of `next()`
 * and must return the value worked out by hand from its algorithm (inversion, Marsaglia polar,
 * Marsaglia–Tsang, BINV, linear scan, Fisher–Yates), and consume exactly the draws it should —
 * a sampler that draws one uniform too many shifts every later draw of its stream.
 */
import { describe, expect, it } from 'vitest';
import { Rng } from '../../sim/kernel/rng.ts';

/** An Rng whose `next()` returns the given values in order (and fails when they run out). */
class ScriptedRng extends Rng {
  used = 0;
  constructor(private readonly draws: readonly number[]) {
    super('scripted');
  }
  override next(): number {
    const u = this.draws[this.used++];
    if (u === undefined) throw new Error(`draw ${this.used} was not scripted`);
    return u;
  }
}

// normal() on draws (0.75, 0.625): u = 2·0.75 − 1 = 0.5, v = 2·0.625 − 1 = 0.25, s = 0.3125,
// m = √(−2 ln 0.3125 / 0.3125) = 2.728399…; returns u·m = 1.364199…, keeps v·m = 0.682099….
const Z1 = 1.3641998738048209;
const Z2 = 0.6820999369024104;

describe('Rng.int / exponential', () => {
  it('int(n) is ⌊u·n⌋', () => {
    expect(new ScriptedRng([0.5]).int(4)).toBe(2);
    expect(new ScriptedRng([0.999]).int(4)).toBe(3);
    expect(new ScriptedRng([0]).int(4)).toBe(0);
  });

  it('exponential(mean) is −mean·ln(1 − u)', () => {
    // −2 · ln(0.5) = 1.386294…
    expect(new ScriptedRng([0.5]).exponential(2)).toBeCloseTo(1.3862943611198906, 12);
    expect(new ScriptedRng([0]).exponential(2)).toBeCloseTo(0, 15);
  });
});

describe('Rng.normal (Marsaglia polar)', () => {
  it('returns u·m and then the spare v·m without drawing again', () => {
    const r = new ScriptedRng([0.75, 0.625]);
    expect(r.normal()).toBeCloseTo(Z1, 12);
    expect(r.normal()).toBeCloseTo(Z2, 12);
    expect(r.used).toBe(2);
  });

  it('rejects s = 0 and s ≥ 1 and draws a new pair', () => {
    // (0.5, 0.5): u = v = 0, s = 0 (log would be −∞). (0.5, 0): u = 0, v = −1, s = 1 exactly.
    // (0.99, 0.99): s = 2·0.98² > 1. Then (0.75, 0.625) as above.
    const r = new ScriptedRng([0.5, 0.5, 0.5, 0, 0.99, 0.99, 0.75, 0.625]);
    expect(r.normal()).toBeCloseTo(Z1, 12);
    expect(r.used).toBe(8);
  });
});

describe('Rng.gamma (Marsaglia–Tsang)', () => {
  it('shape ≥ 1: d·v·scale on the first accepted (x, u)', () => {
    // shape 2: d = 5/3, c = 1/√15; x = Z1, v = (1 + c·x)³; u = 0.1 < 1 − 0.0331·x⁴ accepts.
    // 5/3 · v · 3 = 12.363072…
    const r = new ScriptedRng([0.75, 0.625, 0.1]);
    expect(r.gamma(2, 3)).toBeCloseTo(12.363072581600527, 10);
    expect(r.used).toBe(3);
  });

  it('shape < 1: gamma(shape + 1) scaled by u^(1/shape), u drawn first', () => {
    // shape 0.5: u = 0.25, then gamma(1.5, 3) on (0.75, 0.625, 0.1): d = 7/6, c = 1/√10.5,
    // 7/6 · (1 + c·Z1)³ · 3 = 10.042721…, times 0.25² = 0.627670….
    const r = new ScriptedRng([0.25, 0.75, 0.625, 0.1]);
    expect(r.gamma(0.5, 3)).toBeCloseTo(0.6276700626968641, 10);
    expect(r.used).toBe(4);
  });

  it('shape exactly 1 takes the Marsaglia–Tsang path, not the u^(1/shape) boost', () => {
    // d = 2/3, c = 1/√6; x = Z1, u = 0.1 < 1 − 0.0331·x⁴ = 0.885 accepts: 2/3 · (1 + c·Z1)³ · 3 = 7.548126….
    const r = new ScriptedRng([0.75, 0.625, 0.1]);
    expect(r.gamma(1, 3)).toBeCloseTo(7.548126209195193, 10);
    expect(r.used).toBe(3);
  });

  it('a normal with v = 1 + c·x ≤ 0 is rejected before u is drawn', () => {
    // shape 1: (0.45, 0.5) gives x = −0.1·√(−2 ln 0.01 / 0.01) = −3.0349 and spare 0; 1 + x/√6 = −0.239 ≤ 0,
    // so the next x is the spare 0: v = 1, u = 0.3 < 1 accepts d·1·1 = 2/3 after three draws in all.
    const r = new ScriptedRng([0.45, 0.5, 0.3]);
    expect(r.gamma(1, 1)).toBeCloseTo(2 / 3, 12);
    expect(r.used).toBe(3);
  });

  it('the squeeze is 1 − 0.0331·x⁴: a u above it and above the exact bound rejects', () => {
    // shape 1: (0.55, 0.5) gives x = 3.0349, v³ = 11.224; squeeze 1 − 0.0331·x⁴ = −1.81 (no);
    // exact: ln u < x²/2 + d(1 − v³ + ln v³) = −0.599, i.e. u < 0.549; u = 0.6 rejects (an x² squeeze,
    // 0.695, would accept 7.48). Then the spare 0 with u = 0.3 accepts 2/3.
    const r = new ScriptedRng([0.55, 0.5, 0.6, 0.3]);
    expect(r.gamma(1, 1)).toBeCloseTo(2 / 3, 12);
    expect(r.used).toBe(4);
  });

  it('shape < 1 with u = 0 gives 0 (MIN_VALUE² underflows), never NaN', () => {
    expect(new ScriptedRng([0, 0.75, 0.625, 0.1]).gamma(0.5, 3)).toBe(0);
  });

  it('rejects non-positive shape or scale', () => {
    expect(() => new ScriptedRng([]).gamma(0, 1)).toThrow(RangeError);
    expect(() => new ScriptedRng([]).gamma(1, 0)).toThrow(RangeError);
    expect(() => new ScriptedRng([]).gamma(1, -1)).toThrow(/shape, scale > 0, got 1, -1/);
  });
});

describe('Rng.binomial', () => {
  it('edge parameters draw nothing', () => {
    const r = new ScriptedRng([]);
    expect(r.binomial(0, 0.3)).toBe(0);
    expect(r.binomial(-2, 0.3)).toBe(0);
    expect(r.binomial(5, 0)).toBe(0);
    expect(r.binomial(5, 1)).toBe(5);
    expect(r.binomial(5, 1.5)).toBe(5);
    expect(r.used).toBe(0);
  });

  it('inverts the CDF for small means (BINV)', () => {
    // n = 3, p = 0.2: P(0) = 0.512, P(1) = 0.384, P(2) = 0.096, P(3) = 0.008.
    // Cumulative 0.512, 0.896, 0.992, 1.
    expect(new ScriptedRng([0.3]).binomial(3, 0.2)).toBe(0);
    expect(new ScriptedRng([0.6]).binomial(3, 0.2)).toBe(1);
    expect(new ScriptedRng([0.95]).binomial(3, 0.2)).toBe(2);
    expect(new ScriptedRng([0.995]).binomial(3, 0.2)).toBe(3);
  });

  it('p > 0.5 is n − binomial(n, 1 − p); p = 0.5 is inverted directly', () => {
    // binomial(3, 0.8) on u = 0.3: 3 − binomial(3, 0.2) = 3 − 0.
    expect(new ScriptedRng([0.3]).binomial(3, 0.8)).toBe(3);
    // On u = 0.995: 3 − binomial(3, 0.2) = 3 − 3 = 0.
    expect(new ScriptedRng([0.995]).binomial(3, 0.8)).toBe(0);
    // n = 2, p = 0.5: P(0) = 0.25, P(1) = 0.5; u = 0.5 ⇒ 1, u = 0.8 ⇒ 2.
    expect(new ScriptedRng([0.5]).binomial(2, 0.5)).toBe(1);
    expect(new ScriptedRng([0.8]).binomial(2, 0.5)).toBe(2);
    // Inversion is the least x with u ≤ F(x): n = 1, p = 0.5, F(0) = 0.5; u = 0.5 exactly ⇒ 0.
    expect(new ScriptedRng([0.5]).binomial(1, 0.5)).toBe(0);
  });

  it('means ≥ 30 use the rounded normal approximation, clamped to 0..n', () => {
    // n = 100, p = 0.4: 40 + √24 · Z1 = 46.68… ⇒ 47 (one normal: two uniforms).
    const r = new ScriptedRng([0.75, 0.625]);
    expect(r.binomial(100, 0.4)).toBe(47);
    expect(r.used).toBe(2);
    // n = 60, p = 0.5: mean exactly 30 takes the normal path: 30 + √15 · Z1 = 35.28… ⇒ 35.
    expect(new ScriptedRng([0.75, 0.625]).binomial(60, 0.5)).toBe(35);
  });

  it('clamps the normal approximation at 0 and n', () => {
    // Draws (0.5 ± 5e-8, 0.5): u' = ±1e-7, v = 0, s = 1e-14, z = u'·√(−2 ln s / s) = ±√(−2 ln 1e-14)
    // = ±8.03. n = 60, p = 0.5: 30 ± √15 · 8.03 = 30 ± 31.1 ⇒ 61 and −1, clamped to 60 and 0.
    expect(new ScriptedRng([0.50000005, 0.5]).binomial(60, 0.5)).toBe(60);
    expect(new ScriptedRng([0.49999995, 0.5]).binomial(60, 0.5)).toBe(0);
  });
});

describe('Rng.weighted', () => {
  it('scans the weights with r = u·Σw, skipping zero weights', () => {
    // Σ = 4: u = 0.2 ⇒ r = 0.8 < 1 ⇒ 0; u = 0.5 ⇒ r = 2: 2 − 1 = 1, 1 − 0 = 1, 1 − 3 < 0 ⇒ 2.
    expect(new ScriptedRng([0.2]).weighted([1, 0, 3])).toBe(0);
    expect(new ScriptedRng([0.5]).weighted([1, 0, 3])).toBe(2);
    // u = 0.25 ⇒ r = 1: 1 − 1 = 0 is not < 0, 0 − 0 = 0 neither, 0 − 3 < 0 ⇒ 2 (never the zero weight).
    expect(new ScriptedRng([0.25]).weighted([1, 0, 3])).toBe(2);
  });

  it('uses a given total instead of summing, and falls back to the last index', () => {
    // total 2 (not the real 4): u = 0.5 ⇒ r = 1 ⇒ index 2 as above; u = 0.4 ⇒ r = 0.8 ⇒ 0.
    expect(new ScriptedRng([0.4]).weighted([1, 0, 3], 2)).toBe(0);
    // total 8: u = 0.9 ⇒ r = 7.2 outlasts every weight ⇒ the last index.
    expect(new ScriptedRng([0.9]).weighted([1, 0, 3], 8)).toBe(2);
    expect(new ScriptedRng([0.9]).weighted(new Float64Array([5, 1]))).toBe(1);
  });
});

describe('Rng.shuffle (Fisher–Yates)', () => {
  it('swaps a[i] with a[⌊u·(i+1)⌋] from the end, drawing n − 1 times', () => {
    // i = 2: j = ⌊0·3⌋ = 0 ⇒ [c, b, a]; i = 1: j = ⌊0.9·2⌋ = 1 ⇒ unchanged.
    const r = new ScriptedRng([0, 0.9]);
    const a = ['a', 'b', 'c'];
    expect(r.shuffle(a)).toBe(a);
    expect(a).toEqual(['c', 'b', 'a']);
    expect(r.used).toBe(2);
    // i = 2: j = ⌊0.5·3⌋ = 1 ⇒ [a, c, b]; i = 1: j = 0 ⇒ [c, a, b].
    expect(new ScriptedRng([0.5, 0]).shuffle(['a', 'b', 'c'])).toEqual(['c', 'a', 'b']);
    const one = new ScriptedRng([]);
    expect(one.shuffle(['x'])).toEqual(['x']);
    expect(one.used).toBe(0);
  });
});
