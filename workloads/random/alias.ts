/**
 * Walker/Vose alias tables: O(E) to build, O(1) and one uniform draw per sample.
 *
 * Several tables (one per MoE layer) live side by side in one `Float32Array` of acceptance
 * probabilities and one `Uint16Array` of aliases (E ≤ 65 535), so the hot path allocates nothing.
 */

export class AliasTables {
  readonly prob: Float32Array;
  readonly alias: Uint16Array;

  /** `count` tables of `size` outcomes each, initially all uniform. */
  constructor(
    readonly count: number,
    readonly size: number,
  ) {
    if (size > 65535) throw new RangeError(`alias tables support at most 65535 outcomes, got ${size}`);
    this.prob = new Float32Array(count * size).fill(1);
    this.alias = new Uint16Array(count * size);
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
      }
      return;
    }
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
