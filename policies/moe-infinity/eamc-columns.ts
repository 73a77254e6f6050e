/**
 * The EAMC's column-major storage behind one interface (`EamcColumns`), with its JS backend
 * (`JsColumns`); the WASM backend is `eamc-wasm-columns.ts`. A collection (`eam-collection.ts`)
 * keeps its entries entry-major itself and a column-major copy (cell (l, e) of every entry
 * contiguous) in one backend, for the matcher's row updates and replacement's dot products:
 * - `packed` (JS): two entries' integer counts per double, `count(2m) + count(2m+1) · 2^26`;
 * - `plain` (JS): one Float32-rounded value per double (a count that does not pack was stored);
 * - `wasm`: u8 counts in a WebAssembly memory, SIMD kernels (where `build/eamc.wasm` exists).
 * Every backend computes the same exact dot products (integers in doubles or i32), so every
 * decision is the same whichever runs.
 */
import { addColumns, addPackedColumn, INV_LANE, LANE, PACK_LIMIT, unpackPairs } from './eamc-js-kernels.ts';

export type EamcKernelKind = 'wasm' | 'packed' | 'plain';

/** What a dot product's caller knows of its coefficients (for the backends' exactness guards). */
export interface DotGuard {
  /** Every coefficient packs (an integer in [0, 2^24]). */
  readonly packs: boolean;
  /** Every coefficient fits the WASM kernels (an integer in [0, 65535]). */
  readonly fits: boolean;
  /** ‖x‖² · max_n ‖entry n‖² (Cauchy–Schwarz bound of every D_n²). */
  readonly bound: number;
}

/** The column-major copy of a collection's entries, and its dot products. */
export interface EamcColumns {
  readonly kind: EamcKernelKind;
  /** Σ_{i ≤ l} ‖row i of entry n‖², at `l * alloc + n` (stored here: the WASM scan reads it in its memory). */
  readonly prefixNorm2: Float64Array;
  /** 1/sqrt(prefixNorm2) rounded to Float32, at `l * alloc + n` (one spare value at the end). */
  readonly prefixInvSqrt: Float32Array;
  /** Values per column. */
  readonly columnStride: number;
  /** Room for `alloc` entries, keeping the first `size` (columns and prefix norms). */
  resize(alloc: number, size: number): void;
  /** A copy of the backend's whole state (storage, layout, prefix norms). */
  clone(): EamcColumns;
  /** Sets entry `n`'s count in column `j` (`old`: its previous, Float32-rounded, value). */
  set(j: number, n: number, old: number, v: number): void;
  /**
   * out[n] = (src[n], or 0 without `src`) + Σ_t vals[t] · count(cells[t], n) for n < size: the
   * exact dot products (integer counts; `src[n]` ≤ the full D_n where the caller passes one).
   */
  dots(
    src: Float64Array | null,
    cells: readonly number[],
    vals: readonly number[],
    guard: DotGuard,
    size: number,
    out: Float64Array,
  ): void;
  /** The count of entry `n` in column `j`. */
  count(j: number, n: number): number;
}

/** The JS backend: `packed` (two counts per double) while every stored count packs, else `plain`. */
export class JsColumns implements EamcColumns {
  readonly kind: 'packed' | 'plain';
  /** The column copy: column j at `j * slots`. */
  cols = new Float64Array(0);
  /** Doubles per column: ceil(alloc / lanes). */
  private slots = 0;
  private alloc = 0;
  private packedScratch = new Float64Array(0);
  prefixNorm2 = new Float64Array(0);
  prefixInvSqrt = new Float32Array(1);

  constructor(
    private readonly cells: number,
    private readonly layers: number,
    lanes: 1 | 2,
  ) {
    this.kind = lanes === 2 ? 'packed' : 'plain';
  }

  /**
   * A JS backend rebuilt from the entry-major copy `rows` (`size` entries, room for `alloc`),
   * keeping prefix norms laid out for `alloc` (copied): how a collection leaves WASM (`lanes`
   * 2) or packing (1), for good.
   */
  static fromRows(
    rows: Float32Array,
    cells: number,
    layers: number,
    alloc: number,
    size: number,
    lanes: 1 | 2,
    prefix: { prefixNorm2: Float64Array; prefixInvSqrt: Float32Array },
  ): JsColumns {
    const c = new JsColumns(cells, layers, lanes);
    const slots = Math.ceil(alloc / lanes);
    const cols = new Float64Array(cells * slots);
    for (let n = 0; n < size; n++) {
      const base = n * cells;
      if (lanes === 1) {
        for (let j = 0; j < cells; j++) cols[j * slots + n] = rows[base + j]!;
        continue;
      }
      const scale = (n & 1) === 1 ? LANE : 1;
      const slot = n >> 1;
      for (let j = 0; j < cells; j++) {
        const v = rows[base + j]!;
        if (v !== 0) cols[j * slots + slot]! += v * scale;
      }
    }
    c.cols = cols;
    c.slots = slots;
    c.alloc = alloc;
    c.prefixNorm2 = prefix.prefixNorm2.slice();
    c.prefixInvSqrt = prefix.prefixInvSqrt.slice();
    c.packedScratch = new Float64Array(Math.ceil(alloc / 2));
    return c;
  }

  /** A copy of this backend's whole state (`EamCollection.copyFrom`). */
  clone(): JsColumns {
    const c = new JsColumns(this.cells, this.layers, this.kind === 'packed' ? 2 : 1);
    c.cols = this.cols.slice();
    c.slots = this.slots;
    c.alloc = this.alloc;
    c.packedScratch = new Float64Array(this.packedScratch.length);
    c.prefixNorm2 = this.prefixNorm2.slice();
    c.prefixInvSqrt = this.prefixInvSqrt.slice();
    return c;
  }

  get columnStride(): number {
    return this.slots;
  }

  resize(alloc: number, size: number): void {
    const { cells, layers } = this;
    const lanes = this.kind === 'packed' ? 2 : 1;
    const slots = Math.ceil(alloc / lanes);
    const used = Math.ceil(size / lanes);
    const cols = new Float64Array(cells * slots);
    const prefixNorm2 = new Float64Array(layers * alloc);
    const prefixInvSqrt = new Float32Array(layers * alloc + 1);
    for (let c = 0; c < cells; c++) cols.set(this.cols.subarray(c * this.slots, c * this.slots + used), c * slots);
    for (let l = 0; l < layers; l++) {
      prefixNorm2.set(this.prefixNorm2.subarray(l * this.alloc, l * this.alloc + size), l * alloc);
      prefixInvSqrt.set(this.prefixInvSqrt.subarray(l * this.alloc, l * this.alloc + size), l * alloc);
    }
    this.cols = cols;
    this.slots = slots;
    this.prefixNorm2 = prefixNorm2;
    this.prefixInvSqrt = prefixInvSqrt;
    this.packedScratch = new Float64Array(Math.ceil(alloc / 2));
    this.alloc = alloc;
  }

  set(j: number, n: number, _old: number, v: number): void {
    const cols = this.cols;
    if (this.kind === 'plain') {
      cols[j * this.slots + n] = Math.fround(v);
      return;
    }
    // Replace this entry's lane, keep the other's.
    const at = j * this.slots + (n >> 1);
    const p = cols[at]!;
    const hi = Math.floor(p * INV_LANE);
    cols[at] = (n & 1) === 1 ? p - hi * LANE + v * LANE : hi * LANE + v;
  }

  dots(
    src: Float64Array | null,
    cells: readonly number[],
    vals: readonly number[],
    guard: DotGuard,
    size: number,
    out: Float64Array,
  ): void {
    const { cols, slots } = this;
    const offs = cells.map((j) => j * slots);
    if (this.kind === 'plain') {
      if (src) out.set(src.subarray(0, size));
      else out.fill(0, 0, size);
      addColumns(out, cols, size, offs, vals);
    } else if (guard.packs && guard.bound <= PACK_LIMIT) {
      // Two entries per double: half the passes' work; every D_n < 2^26, so no carry.
      const half = (size + 1) >> 1;
      const packed = this.packedScratch;
      if (!src) packed.fill(0, 0, half);
      else
        for (let m = 0; m < half; m++) {
          const a = 2 * m;
          packed[m] = src[a]! + (a + 1 < size ? src[a + 1]! : 0) * LANE;
        }
      addColumns(packed, cols, half, offs, vals);
      unpackPairs(packed, half, size, out);
    } else {
      // Sums past the packing limit: one column at a time, its lanes unpacked on the fly.
      if (src) out.set(src.subarray(0, size));
      else out.fill(0, 0, size);
      for (let t = 0; t < offs.length; t++) addPackedColumn(out, cols, size, offs[t]!, vals[t]!);
    }
  }

  count(j: number, n: number): number {
    if (this.kind === 'plain') return this.cols[j * this.slots + n]!;
    const p = this.cols[j * this.slots + (n >> 1)]!;
    const hi = Math.floor(p * INV_LANE);
    return (n & 1) === 1 ? hi : p - hi * LANE;
  }
}
