/**
 * Walker/Vose alias tables: O(E) to build, O(1) and one uniform draw per sample.
 *
 * Several tables (one per MoE layer) live side by side in one `Float32Array` of acceptance
 * probabilities and one `Uint16Array` of aliases (E ≤ 65 535), so the hot path allocates nothing.
 */

export class AliasTables {
  readonly prob: Float32Array;
  readonly alias: Uint16Array;
  /** The normalised weights of each table (for exact draws that exclude some outcomes). */
  readonly weights: Float32Array;

  /** `count` tables of `size` outcomes each, initially all uniform. */
  constructor(
    readonly count: number,
    readonly size: number,
  ) {
    if (size > 65535) throw new RangeError(`alias tables support at most 65535 outcomes, got ${size}`);
    this.prob = new Float32Array(count * size).fill(1);
    this.alias = new Uint16Array(count * size);
    this.weights = new Float32Array(count * size).fill(1 / size);
    for (let t = 0; t < count; t++) for (let i = 0; i < size; i++) this.alias[t * size + i] = i;
  }

  /**
   * Builds table `t` from non-negative weights `w[wOff … wOff+size)`. All-zero (or non-finite)
   * weights give a uniform table.
   */
  build(t: number, w: ArrayLike<number>, wOff: number, scratch: AliasScratch): void {
    const n = this.size;
    const off = t * n;
    let total = 0;
    for (let i = 0; i < n; i++) total += w[wOff + i]!;
    if (!(total > 0) || !Number.isFinite(total)) {
      for (let i = 0; i < n; i++) {
        this.prob[off + i] = 1;
        this.alias[off + i] = i;
        this.weights[off + i] = 1 / n;
      }
      return;
    }
    for (let i = 0; i < n; i++) this.weights[off + i] = w[wOff + i]! / total;
    const { scaled, small, large } = scratch;
    let ns = 0;
    let nl = 0;
    for (let i = 0; i < n; i++) {
      const s = (w[wOff + i]! * n) / total;
      scaled[i] = s;
      if (s < 1) small[ns++] = i;
      else large[nl++] = i;
    }
    while (ns > 0 && nl > 0) {
      const s = small[--ns]!;
      const g = large[nl - 1]!;
      this.prob[off + s] = scaled[s]!;
      this.alias[off + s] = g;
      scaled[g] = scaled[g]! + scaled[s]! - 1;
      if (scaled[g]! < 1) {
        nl--;
        small[ns++] = g;
      }
    }
    // Leftovers are 1 up to rounding.
    while (nl > 0) {
      const g = large[--nl]!;
      this.prob[off + g] = 1;
      this.alias[off + g] = g;
    }
    while (ns > 0) {
      const s = small[--ns]!;
      this.prob[off + s] = 1;
      this.alias[off + s] = s;
    }
  }

  /**
   * One sample from table `t` conditioned on not being any of `chosen[from … to)`, by a linear
   * scan (O(size)); with `u` uniform in [0, 1). If every other outcome has weight 0, a uniform
   * one among those not chosen.
   */
  sampleExcluding(t: number, u: number, chosen: ArrayLike<number>, from: number, to: number): number {
    const n = this.size;
    const off = t * n;
    let rest = 0;
    for (let i = 0; i < n; i++) if (!among(chosen, from, to, i)) rest += this.weights[off + i]!;
    if (rest > 0) {
      let r = u * rest;
      let last = -1;
      for (let i = 0; i < n; i++) {
        if (among(chosen, from, to, i)) continue;
        const wi = this.weights[off + i]!;
        if (wi > 0) last = i;
        r -= wi;
        if (r < 0 && wi > 0) return i;
      }
      if (last >= 0) return last;
    }
    let pick = Math.floor(u * (n - (to - from)));
    for (let i = 0; i < n; i++) if (!among(chosen, from, to, i) && pick-- === 0) return i;
    return -1;
  }

  /** One sample from table `t`, given a uniform u in [0, 1). */
  sample(t: number, u: number): number {
    const x = u * this.size;
    const i = x | 0;
    const off = t * this.size + i;
    return x - i < this.prob[off]! ? i : this.alias[off]!;
  }
}

export interface AliasScratch {
  readonly scaled: Float64Array;
  readonly small: Int32Array;
  readonly large: Int32Array;
}

export const aliasScratch = (size: number): AliasScratch => ({
  scaled: new Float64Array(size),
  small: new Int32Array(size),
  large: new Int32Array(size),
});

function among(a: ArrayLike<number>, from: number, to: number, v: number): boolean {
  for (let i = from; i < to; i++) if (a[i] === v) return true;
  return false;
}
