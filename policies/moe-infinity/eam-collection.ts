/**
 * The EAM collection (EAMC) of MoE-Infinity (DESIGN §8): a fixed-capacity set of past request
 * EAMs (one collection per phase, see `eam.ts`). When a request finishes its EAM fills a free
 * entry, or, once the collection is full, replaces
 * - `most-similar` (the paper): the stored EAM with the highest cosine similarity to it
 *   (smallest cosine distance), so the collection stays recent and diverse: a new pattern
 *   replaces the one closest to it, never a rare one; ties go to the lowest index;
 * - `lfu-access` (the released code, `finish_entry`): the entry matched the fewest times
 *   (an access count incremented for the top-1 match of every layer match, reset to 1 on
 *   insertion); ties go to the lowest index.
 *
 * Storage: each entry twice, entry-major here (`rows`, Float32, read by the batch scores of
 * `score-accumulator.ts`) and column-major in a backend (`eamc-columns.ts`: packed JS doubles,
 * plain JS doubles or u8 counts in WASM memory, `eamc-wasm-columns.ts`), plus per entry and row
 * the squared norm, its prefix sum over rows 0…l (and 1/sqrt of it in Float32, for the scan's
 * pre-filter), the total and the largest cell. A collection starts on the WASM backend where
 * `build/eamc.wasm` is built (else packed; MOESIM_EAMC_KERNEL=js forces JS) and only moves one
 * way: a stored count that is not an integer in [0, 65535], or a size past a 32-bit memory,
 * leaves WASM for packed; a count that does not pack (non-integer, negative or above 2^24; never
 * in the simulator, where counts are token counts) leaves packed for plain. Every backend's dot
 * products are the same exact integers (or, plain, the same doubles), so every decision is the
 * same, bit for bit (property-tested, `test/property/eamc-*.test.ts`). Storage grows by doubling
 * up to the capacity. Bytes per entry: packed 8·L·E + 36·L, WASM L·E + 36·L, plain 12·L·E + 36·L.
 *
 * Replacement (`most-similar`) computes D_n = x · entry n for every entry through the backend and
 * the cosine as the matcher does (`eamc-matcher.ts`), D_n / sqrt(‖x‖² · ‖entry n‖²). When the
 * request was alone in its matched group in every iteration of the phase, its matchers already
 * computed D_n over every row but the last (`EamcDots`, `eamc-dots.ts`): insertion then adds only
 * the rows not matched and recomputes only the entries written since (an entry's `writtenAt`
 * version), the same exact integers. Measured speeds and what was tried: docs/PERFORMANCE.md.
 */
import type { EamShape } from './eam.ts';
import { type EamcColumns, type EamcKernelKind, JsColumns } from './eamc-columns.ts';
import type { EamcDots } from './eamc-dots.ts';
import { fitsWasm, MIN_ALLOC, packable } from './eamc-js-kernels.ts';
import { eamcWasmModule } from './eamc-wasm.ts';
import { WasmColumns } from './eamc-wasm-columns.ts';

export { EamcDots } from './eamc-dots.ts';
export { IncrementalMatcher } from './eamc-matcher.ts';

export type EamcReplacement = 'most-similar' | 'lfu-access';

export class EamCollection {
  readonly layers: number;
  readonly experts: number;
  private readonly cells: number;
  /** Entries stored. */
  size = 0;
  /** Entries the storage has room for (≤ capacity); the stride of the per-row arrays. */
  private alloc = 0;
  /** The column-major copy and its kernels. */
  private backend: EamcColumns;
  /** Largest ‖entry n‖² ever stored (an upper bound: the packing limit). */
  private maxNorm2 = 0;
  private rows = new Float32Array(0);
  /** ‖row l of entry n‖², at `l * alloc + n`. */
  private rowNorm2 = new Float64Array(0);
  /** Σ of row l of entry n, at `n * layers + l`. */
  private rowTotal = new Float64Array(0);
  /** Largest cell of row l of entry n, at `n * layers + l` (bounds for pruning score rows). */
  private rowMax = new Float64Array(0);
  /** ‖entry n‖² over all rows. */
  private fullNorm2 = new Float64Array(0);
  private access = new Float64Array(0);
  /** The collection version at which entry n was last written (a dot-product hint older than it is stale for n). */
  private writtenAt = new Float64Array(0);
  private scratch = new Float64Array(0);
  private scratch2 = new Float64Array(0);
  /** Increments on every insertion or replacement (matchers built on an older version are stale). */
  version = 0;
  /**
   * Largest share of stale entries (written since a hint) for which `similaritiesFromHint`
   * still completes the hint (each costs a dot product over all L·E cells); above it the column
   * passes of `similarities` are cheaper. Either way the values are the same (tests set 1).
   */
  hintStaleLimit = 1 / 8;

  constructor(
    shape: EamShape,
    readonly capacity: number,
    readonly replacement: EamcReplacement,
    /** `js` forces the JS kernels; `wasm` (the default) uses the WASM ones where `build/eamc.wasm` exists. */
    options: { kernel?: 'wasm' | 'js' } = {},
  ) {
    if (!(Number.isInteger(capacity) && capacity >= 1))
      throw new RangeError(`EAMC capacity must be a positive integer, got ${capacity}`);
    this.layers = shape.layers;
    this.experts = shape.experts;
    this.cells = shape.layers * shape.experts;
    const module = options.kernel === 'js' ? null : eamcWasmModule();
    this.backend = module
      ? new WasmColumns(module, this.cells, this.layers)
      : new JsColumns(this.cells, this.layers, 2);
  }

  /**
   * The column-major storage and kernels: `wasm` (u8 columns, SIMD kernels), `packed` (JS, two
   * entries per double) or `plain` (JS, one Float32-rounded value per double). A collection
   * starts `wasm` where the module is built (else `packed`) and only ever moves right.
   */
  get kernel(): EamcKernelKind {
    return this.backend.kind;
  }

  /** The column-major backend (for the matcher; replaced when the collection changes kernel or grows out of WASM). */
  get columns(): EamcColumns {
    return this.backend;
  }

  /** The WASM backend, laid out (a matcher can use its kernels), else null. */
  get wasmColumns(): WasmColumns | null {
    const b = this.backend;
    return b instanceof WasmColumns && b.ready ? b : null;
  }

  /** Entries the storage has room for without growing (the stride of the per-row arrays). */
  get stride(): number {
    return this.alloc;
  }

  /** Entries per double of the column-major copy (2: packed, 1: plain); 2 while `kernel` is `wasm` (every count an exact integer). */
  get lanes(): 1 | 2 {
    return this.backend.kind === 'plain' ? 1 : 2;
  }

  /** Values per column of the column-major copy (doubles; u8 counts, padded to 16, while `kernel` is `wasm`). */
  get columnStride(): number {
    return this.backend.columnStride;
  }

  /** An upper bound of every stored entry's ‖entry‖² (for the packing limit). */
  get maxEntryNorm2(): number {
    return this.maxNorm2;
  }

  /** Moves the column copy to a JS backend rebuilt from `rows`, for good (`lanes` 2: leaving WASM; 1: leaving packing). */
  private rebuildJs(lanes: 1 | 2): void {
    const b = this.backend;
    this.backend = JsColumns.fromRows(this.rows, this.cells, this.layers, this.alloc, this.size, lanes, b);
  }

  /**
   * Makes this collection a copy of `src` (same shape, capacity and replacement): its entries,
   * norms, access counts, versions and backend state, so that every later decision is the same
   * as `src`'s would be. A warm-up shared by several runs is done once and copied.
   */
  copyFrom(src: EamCollection): void {
    if (src.cells !== this.cells || src.capacity !== this.capacity || src.replacement !== this.replacement)
      throw new RangeError('EamCollection.copyFrom: a collection of another shape, capacity or replacement');
    this.size = src.size;
    this.alloc = src.alloc;
    this.backend = src.backend.clone();
    this.maxNorm2 = src.maxNorm2;
    this.rows = src.rows.slice();
    this.rowNorm2 = src.rowNorm2.slice();
    this.rowTotal = src.rowTotal.slice();
    this.rowMax = src.rowMax.slice();
    this.fullNorm2 = src.fullNorm2.slice();
    this.access = src.access.slice();
    this.writtenAt = src.writtenAt.slice();
    this.scratch = new Float64Array(src.scratch.length);
    this.scratch2 = new Float64Array(src.scratch2.length);
    this.version = src.version;
  }

  /** Bytes this collection's storage holds (rows, per-row arrays, column copy): a memo's budget. */
  get storageBytes(): number {
    return (
      this.rows.byteLength +
      8 * (this.rowNorm2.length + this.rowTotal.length + this.rowMax.length) +
      this.cells * this.alloc
    );
  }

  private grow(need: number): void {
    if (need <= this.alloc) return;
    const alloc = Math.min(this.capacity, Math.max(need, MIN_ALLOC, this.alloc * 2));
    const { cells, layers } = this;
    const rows = new Float32Array(alloc * cells);
    rows.set(this.rows.subarray(0, this.size * cells));
    const rowNorm2 = new Float64Array(layers * alloc);
    for (let l = 0; l < layers; l++)
      rowNorm2.set(this.rowNorm2.subarray(l * this.alloc, l * this.alloc + this.size), l * alloc);
    // A 32-bit WASM memory holds at most 4 GiB: a collection that would not fit leaves WASM.
    if (this.backend.kind === 'wasm' && WasmColumns.tooLarge(cells, layers, alloc)) this.rebuildJs(2);
    this.backend.resize(alloc, this.size);
    const rowTotal = new Float64Array(alloc * layers);
    rowTotal.set(this.rowTotal.subarray(0, this.size * layers));
    const rowMax = new Float64Array(alloc * layers);
    rowMax.set(this.rowMax.subarray(0, this.size * layers));
    const grow1 = (a: Float64Array) => {
      const b = new Float64Array(alloc);
      b.set(a.subarray(0, this.size));
      return b;
    };
    this.fullNorm2 = grow1(this.fullNorm2);
    this.access = grow1(this.access);
    this.writtenAt = grow1(this.writtenAt);
    this.scratch = new Float64Array(alloc);
    this.rows = rows;
    this.rowNorm2 = rowNorm2;
    this.rowTotal = rowTotal;
    this.rowMax = rowMax;
    this.alloc = alloc;
  }

  /**
   * Stores `eam` (L×E counts): in a free entry while there is one, else in place of the entry
   * the replacement rule picks. Returns the entry index. Empty EAMs are ignored (−1).
   */
  insert(eam: ArrayLike<number>, hint?: EamcDots): number {
    if (eam.length !== this.cells) throw new RangeError(`EAM has ${eam.length} cells, the collection ${this.cells}`);
    let any = false;
    let packs = true;
    let fits = true;
    for (let j = 0; j < this.cells; j++) {
      const v = eam[j]!;
      if (v !== 0) any = true;
      if (!packable(v)) packs = false;
      if (!fitsWasm(v)) fits = false;
    }
    if (!any) return -1;
    if (!fits && this.backend.kind === 'wasm') this.rebuildJs(2);
    if (!packs && this.backend.kind === 'packed') this.rebuildJs(1);
    let n: number;
    if (this.size < this.capacity) {
      this.grow(this.size + 1);
      n = this.size++;
    } else {
      n = this.replacement === 'most-similar' ? this.mostSimilar(eam, hint) : this.leastAccessed();
    }
    this.write(n, eam);
    this.access[n] = 1;
    this.version++;
    this.writtenAt[n] = this.version;
    return n;
  }

  private write(n: number, eam: ArrayLike<number>): void {
    const { experts, layers, alloc } = this;
    const base = n * this.cells;
    const cols = this.backend;
    const { prefixNorm2, prefixInvSqrt } = cols;
    let full = 0;
    for (let l = 0; l < layers; l++) {
      let sq = 0;
      let tot = 0;
      let max = 0;
      for (let e = 0; e < experts; e++) {
        const j = l * experts + e;
        const v = eam[j]!;
        const old = this.rows[base + j]!;
        this.rows[base + j] = v;
        // The column copy always equals `rows` (zero in unused entries): a cell left as it was
        // (mostly zero to zero) skips its strided write.
        if (old !== Math.fround(v)) cols.set(j, n, old, v);
        sq += v * v;
        tot += v;
        if (v > max) max = v;
      }
      this.rowNorm2[l * alloc + n] = sq;
      this.rowTotal[n * layers + l] = tot;
      this.rowMax[n * layers + l] = max;
      full += sq;
      prefixNorm2[l * alloc + n] = full;
      prefixInvSqrt[l * alloc + n] = 1 / Math.sqrt(full);
    }
    this.fullNorm2[n] = full;
    if (full > this.maxNorm2) this.maxNorm2 = full;
  }

  /** Cosine similarity of `eam` (all rows) with every stored entry, into `out[0..size)`. */
  similarities(eam: ArrayLike<number>, out: Float64Array): void {
    // Non-zero cells, then the backend's column passes (a dense EAM has L·E of them); integer
    // counts: the dot products are exact whatever the grouping.
    const nzJ: number[] = [];
    const nzV: number[] = [];
    let norm = 0;
    let packs = true;
    let fits = true;
    for (let j = 0; j < this.cells; j++) {
      const v = eam[j]!;
      if (v === 0) continue;
      if (!packable(v)) packs = false;
      if (!fitsWasm(v)) fits = false;
      norm += v * v;
      nzJ.push(j);
      nzV.push(v);
    }
    this.backend.dots(null, nzJ, nzV, { packs, fits, bound: norm * this.maxNorm2 }, this.size, out);
    this.toCosines(norm, out);
  }

  /** out[n] = D_n / sqrt(‖x‖² · ‖entry n‖²) (0 where that is 0), for n < size. */
  private toCosines(norm: number, out: Float64Array): void {
    for (let n = 0; n < this.size; n++) {
      const q = norm * this.fullNorm2[n]!;
      out[n] = q > 0 ? out[n]! / Math.sqrt(q) : 0;
    }
  }

  /**
   * `similarities` from a hint: `hint` holds the exact dot products of `eam`'s rows `hint.rows`
   * with entries 0 … hint.size−1 as they were at `hint.version` (a matcher's D, see
   * `EamcDots`). Completed here: the rows not covered are added column by column (as in
   * `similarities`), and an entry written since `hint.version` (or past `hint.size`) gets a
   * fresh dot product over all rows from its entry-major copy. Every count is an integer, so
   * every D_n is the same exact integer as `similarities` computes, and the cosine is the same
   * expression: bit for bit. Returns false (nothing done) unless the collection is packed
   * (integer counts), `eam` packs and the hint is this collection's.
   */
  similaritiesFromHint(eam: ArrayLike<number>, hint: EamcDots, out: Float64Array): boolean {
    if (hint.collection !== this || !hint.valid || this.lanes !== 2 || hint.version > this.version) return false;
    const { size, cells, experts } = this;
    const hs = Math.min(hint.size, size);
    const hv = hint.version;
    const writtenAt = this.writtenAt;
    // Stale entries (written since the hint, or past it) are recomputed over all rows from the
    // entry-major copy; when there are many, the column passes of `similarities` are cheaper.
    const stale = (n: number): boolean => n >= hs || writtenAt[n]! > hv;
    let staleCount = size - hs;
    for (let n = 0; n < hs; n++) if (writtenAt[n]! > hv) staleCount++;
    if (staleCount > size * this.hintStaleLimit) return false;
    const nzJ: number[] = [];
    const nzV: number[] = [];
    let norm = 0;
    let fits = true;
    for (let j = 0; j < cells; j++) {
      const v = eam[j]!;
      if (v === 0) continue;
      if (!packable(v)) return false;
      norm += v * v;
      const l = (j / experts) | 0;
      if (!hint.rows[l]) {
        if (!fitsWasm(v)) fits = false;
        nzJ.push(j);
        nzV.push(v);
      }
    }
    // Stale entries start from 0: their fresh dot product replaces whatever the missing rows add below.
    const src = this.scratch2.length >= size ? this.scratch2 : (this.scratch2 = new Float64Array(this.alloc));
    for (let n = 0; n < size; n++) src[n] = stale(n) ? 0 : hint.dot(n);
    // The hint's D_n (each ≤ the full D_n) plus the missing rows.
    this.backend.dots(src, nzJ, nzV, { packs: true, fits, bound: norm * this.maxNorm2 }, size, out);
    // Entries written since the hint: a fresh dot product over all rows (entry-major copy;
    // the missing rows' columns were added to a zero lane above and are overwritten).
    const rowsF = this.rows;
    for (let n = 0; n < size; n++) {
      if (!stale(n)) continue;
      const base = n * cells;
      let d = 0;
      for (let j = 0; j < cells; j++) {
        const v = eam[j]!;
        if (v !== 0) d += v * rowsF[base + j]!;
      }
      out[n] = d;
    }
    this.toCosines(norm, out);
    return true;
  }

  /**
   * The stored entry most similar to `eam` (highest cosine; ties: lowest index). With a valid
   * `hint` (dot products of `eam` already accumulated by a matcher) the dot products are
   * completed from it (`similaritiesFromHint`), else computed in full; the same values either way.
   */
  mostSimilar(eam: ArrayLike<number>, hint?: EamcDots): number {
    if (!(hint && this.similaritiesFromHint(eam, hint, this.scratch))) this.similarities(eam, this.scratch);
    let best = 0;
    for (let n = 1; n < this.size; n++) if (this.scratch[n]! > this.scratch[best]!) best = n;
    return best;
  }

  private leastAccessed(): number {
    let best = 0;
    for (let n = 1; n < this.size; n++) if (this.access[n]! < this.access[best]!) best = n;
    return best;
  }

  /** Records that entry `n` was the best match of a layer match (the `lfu-access` rule counts these). */
  noteMatched(n: number): void {
    this.access[n]!++;
  }

  accessCount(n: number): number {
    return this.access[n]!;
  }

  /** Entry `n`'s counts, entry-major (a view: do not modify). */
  entry(n: number): Float32Array {
    if (!(n >= 0 && n < this.size)) throw new RangeError(`EAMC entry ${n} of ${this.size}`);
    return this.rows.subarray(n * this.cells, (n + 1) * this.cells);
  }

  /** Σ of row `layer` of entry `n`. */
  rowSum(n: number, layer: number): number {
    return this.rowTotal[n * this.layers + layer]!;
  }

  /** The count of entry `n` in column `j` of the column-major copy (for tests). */
  columnCount(j: number, n: number): number {
    return this.backend.count(j, n);
  }

  /** Internal arrays for the matcher and tests (read-only use). */
  get internals(): {
    /** The JS column-major copy (empty unless `kernel` is `packed` or `plain`). */
    readonly cols: Float64Array;
    /** The WASM u8 columns (column j at j · columnStride, counts above 254 as 255; empty unless `kernel` is `wasm`). */
    readonly cols8: Uint8Array;
    readonly rows: Float32Array;
    readonly rowNorm2: Float64Array;
    readonly prefixNorm2: Float64Array;
    readonly prefixInvSqrt: Float32Array;
    readonly rowTotal: Float64Array;
    readonly rowMax: Float64Array;
  } {
    const b = this.backend;
    return {
      cols: b instanceof JsColumns ? b.cols : EMPTY_F64,
      cols8: b instanceof WasmColumns ? b.cols8 : EMPTY_U8,
      rows: this.rows,
      rowNorm2: this.rowNorm2,
      prefixNorm2: b.prefixNorm2,
      prefixInvSqrt: b.prefixInvSqrt,
      rowTotal: this.rowTotal,
      rowMax: this.rowMax,
    };
  }
}

const EMPTY_F64 = new Float64Array(0);
const EMPTY_U8 = new Uint8Array(0);
