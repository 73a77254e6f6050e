/**
 * Incremental cosine matching of MoE-Infinity's iteration EAM against an EAMC (DESIGN §8; the
 * collection is `eam-collection.ts`). The cosine similarity between the current iteration EAM,
 * restricted to the rows seen so far S, and every stored EAM restricted to the same rows:
 *
 *     sim_n = D_n / sqrt(Q_cur · Q_n),   D_n = Σ_{i∈S} cur_i · stored_n,i,
 *                                        Q_cur = Σ_{i∈S} ‖cur_i‖²,  Q_n = Σ_{i∈S} ‖stored_n,i‖²
 *
 * — one cosine over the L×E matrices without the unseen rows (not an average of per-row cosines): each seen row
 * counts by its mass, as in a cosine of whole EAMs. A matcher keeps D_n per entry, and Q_cur. When row l arrives:
 * - D_n += cur_l · stored_n,l reads only the non-zero cells of cur_l (a decode token of a top-k model: k cells)
 *   through the column-major copy: O(N · nnz(cur_l)), never O(N · L · E). D is i32 in the collection's WASM memory
 *   (WASM backend), packed two entries per double (packed backend) or plain doubles, each while its exactness guard
 *   holds (integer counts and Q_cur · max‖entry‖² within `WASM_LIMIT` / `PACK_LIMIT`); else D moves to plain doubles
 *   for the rest of the match, one column at a time. The counts are integers, so D_n is the same exact integer
 *   however the products are grouped (sums are trees, not chains: independent additions overlap in the CPU).
 * - Q_n: while rows arrive in layer order 0, 1, … (always, in the executor), S = {0…l} and Q_n is the collection's
 *   prefix sum of entry n's row norms up to l — read, not updated; rows in another order fall back to accumulating
 *   Q_n += ‖stored_n,l‖² per entry.
 * - Q_cur += ‖cur_l‖².
 * All sums are of integer products in doubles, so the result equals the brute-force cosine exactly (tested on random
 * matrices and row orders, every backend, bit for bit). The best `topMatches` entries are kept in the same pass over
 * the N entries, in index order, by D_n / sqrt(Q_n) (Q_cur is common to all), rejecting most before any square root
 * by a conservative pre-filter (`eamc-scan.ts`; WASM: `assembly/eamc.ts`, f32(D_n) · r_n against f32(floor · (1 −
 * 1e-6))); an entry is kept or not by its exact score; ties go to the lowest index; entries with similarity 0 never
 * match. The last ≤ 8 columns of a row are added inside the scan (one pass for a decode row). The WASM scan is seeded
 * with the previous row's best M: the lowest of their new scores is a floor M entries reach, so the pre-filter runs
 * from the first block (ties at the floor are kept: the same best M, in the same order).
 */
import type { EamShape } from './eam.ts';
import type { EamCollection } from './eam-collection.ts';
import type { EamcDots } from './eamc-dots.ts';
import {
  addColumns4,
  addColumns8,
  addPackedColumn,
  fitsWasm,
  laneOf,
  MAX_PAIR,
  PACK_LIMIT,
  packable,
  WASM_LIMIT,
} from './eamc-js-kernels.ts';
import { scanPacked2, scanPacked4, selectTop } from './eamc-scan.ts';
import { WASM_MAX_TOP, WASM_RES_SCORE, WASM_RES_SEED, WASM_RES_TOP } from './eamc-wasm.ts';
import type { WasmColumns } from './eamc-wasm-columns.ts';

/**
 * Incremental cosine matching of one iteration EAM (fed row by row) against a collection, and
 * its best matches. Reusable: `reset` starts a new iteration EAM.
 */
export class IncrementalMatcher {
  private coll: EamCollection | null = null;
  private version = -1;
  private n = 0;
  /** D_n: packed (entries 2m, 2m+1 in `dots[m]`) while `packed`, else plain (`dots[n]`). */
  private dots = new Float64Array(0);
  private packed = false;
  /** Q_n, once rows stopped arriving in layer order (see `ordered`). */
  private norms = new Float64Array(0);
  /** 1/sqrt(Q_n) rounded to Float32, for the scan's pre-filter once rows are out of order. */
  private invSqrt = new Float32Array(0);
  private qCur = 0;
  private readonly seen: Uint8Array;
  private rowsSeen = 0;
  /** Every row so far had integer counts (that pack) and the collection was packed at `reset`: D is exact. */
  private exact = true;
  /** Σ of the counts of the rows seen (the packing bound of dot products exported). */
  private l1 = 0;
  /** Rows seen so far are exactly 0 … rowsSeen−1: Q_n = prefixNorm2[rowsSeen−1][n]. */
  private ordered = true;
  private readonly nzE: Int32Array;
  private readonly nzC: Float64Array;
  /** The WASM scan's column offsets (0-7) and coefficients (8-15), set per row (`wasmRow`). */
  private readonly scanArgs = new Float64Array(16);
  /** The current row's Q_n (`qArr` from `qOff`) and 1/sqrt(Q_n) (`rArr`), set by `prepareNorms`. */
  private qArr: Float64Array = new Float64Array(0);
  private qOff = 0;
  private rArr: Float32Array = new Float32Array(0);
  /**
   * D kept as i32 in a block of the collection's WASM memory (`block`, byte offset, of memory
   * generation `blockGen` of `blockCols`) while the collection is `wasm`, every row's counts are
   * integers ≤ 65535 and Q_cur · max‖entry‖² ≤ WASM_LIMIT; else D is plain doubles in `dots`.
   */
  private wasm = false;
  private blockCols: WasmColumns | null = null;
  private blockGen = -1;
  private block = 0;
  /** Best matches (entry indices), best first; `topCount` of them are valid. */
  readonly top: Int32Array;
  readonly topScore: Float64Array;
  topCount = 0;

  constructor(
    shape: EamShape,
    readonly topMatches: number,
  ) {
    this.seen = new Uint8Array(shape.layers);
    this.nzE = new Int32Array(shape.experts);
    this.nzC = new Float64Array(shape.experts);
    this.top = new Int32Array(topMatches);
    this.topScore = new Float64Array(topMatches);
  }

  /** Starts a new (empty) iteration EAM against `coll` as it is now. */
  reset(coll: EamCollection): void {
    this.coll = coll;
    this.version = coll.version;
    this.n = coll.size;
    // One spare double: the packed scan may touch slot ⌈n/2⌉ … of an odd n never past n.
    if (this.dots.length < this.n + 1) {
      this.dots = new Float64Array(coll.capacity > 4 * this.n ? Math.max(this.n * 2, 16) : coll.capacity + 1);
      this.norms = new Float64Array(this.dots.length);
      this.invSqrt = new Float32Array(this.dots.length);
    }
    this.packed = coll.kernel === 'packed';
    this.exact = coll.lanes === 2;
    const wc = coll.wasmColumns;
    this.wasm = wc !== null && this.topMatches <= WASM_MAX_TOP;
    if (wc && this.wasm) {
      if (this.blockCols !== wc || this.blockGen !== wc.gen) {
        this.releaseBlock();
        this.block = wc.acquireBlock();
        this.blockCols = wc;
        this.blockGen = wc.gen;
      }
      const d = this.block >> 2;
      wc.i32.fill(0, d, d + ((this.n + 15) & ~15));
    } else {
      this.releaseBlock();
      this.dots.fill(0, 0, this.n);
    }
    this.l1 = 0;
    this.qCur = 0;
    this.seen.fill(0);
    this.rowsSeen = 0;
    this.ordered = true;
    this.topCount = 0;
  }

  get collection(): EamCollection | null {
    return this.coll;
  }

  /** Entries being matched (the collection's size at `reset`). */
  get entries(): number {
    return this.n;
  }

  /** D kept as i32 in WASM memory so far (for tests). */
  get wasmDots(): boolean {
    return this.wasm;
  }

  /** D kept packed so far (for tests). */
  get packedDots(): boolean {
    return this.packed;
  }

  /** Gives the WASM block back to its collection (if its memory is still the one it came from). */
  private releaseBlock(): void {
    if (this.blockCols) this.blockCols.releaseBlock(this.block, this.blockGen);
    this.blockCols = null;
  }

  /** Moves D out of WASM (i32) into plain doubles, for the rest of the match. */
  private leaveWasm(): void {
    const i32 = this.blockCols!.i32;
    const d = this.block >> 2;
    for (let i = 0; i < this.n; i++) this.dots[i] = i32[d + i]!;
    this.wasm = false;
  }

  /** Unpacks D in place (backwards: slot m goes to 2m, 2m+1 ≥ m), for the rest of the match. */
  private unpackDots(): void {
    const dots = this.dots;
    const n = this.n;
    for (let m = ((n + 1) >> 1) - 1; m >= 0; m--) {
      const p = dots[m]!;
      if (2 * m + 1 < n) dots[2 * m + 1] = laneOf(p, 1);
      dots[2 * m] = laneOf(p, 0);
    }
    this.packed = false;
  }

  /**
   * Adds row `layer` of the iteration EAM (`counts[e]`, length E) and updates every stored
   * entry's similarity and the best matches. Each row may be added once per `reset`.
   */
  addRow(layer: number, counts: ArrayLike<number>): void {
    const coll = this.coll;
    if (!coll) throw new Error('matcher used before reset');
    if (coll.version !== this.version) throw new Error('EAMC changed during a match');
    if (this.seen[layer]) throw new Error(`row ${layer} added twice to one iteration EAM`);
    this.seen[layer] = 1;
    const nnz = this.takeRow(coll, counts);
    const prefix = this.prepareNorms(coll, layer);
    this.rowsSeen++;
    const cb = layer * coll.experts;
    let count: number;
    if (this.wasm) count = this.wasmRow(layer, cb, nnz, prefix);
    else if (this.packed || coll.kernel === 'plain') count = this.jsRow(coll, cb, nnz);
    else {
      // WASM or packed columns, plain D (counts not integers or past 65535, or sums past the
      // kernels' limit): one column at a time, then the scan.
      const { n, dots, nzE, nzC } = this;
      const cols = coll.columns;
      const js = coll.internals.cols;
      const stride = coll.columnStride;
      if (cols.kind === 'wasm')
        for (let t = 0; t < nnz; t++) (cols as WasmColumns).addColumnPlain(dots, n, cb + nzE[t]!, nzC[t]!);
      else for (let t = 0; t < nnz; t++) addPackedColumn(dots, js, n, (cb + nzE[t]!) * stride, nzC[t]!);
      count = selectTop(dots, this.qArr, this.qOff, n, this.topMatches, this.top, this.topScore, js, 0, 0, 0, 0);
    }
    const score = this.topScore;
    this.topCount = count;
    // Scores were kept without Q_cur; turn them into similarities.
    const qc = Math.sqrt(this.qCur);
    for (let j = 0; j < count; j++) score[j] = score[j]! / qc;
  }

  /** The row's non-zero cells into `nzE` / `nzC` (their count), Q_cur and l1 updated; D leaves a representation whose guard fails. */
  private takeRow(coll: EamCollection, counts: ArrayLike<number>): number {
    let nnz = 0;
    let packs = true;
    let fits = true;
    for (let e = 0; e < coll.experts; e++) {
      const c = counts[e]!;
      if (c === 0) continue;
      if (!packable(c)) packs = false;
      if (!fitsWasm(c)) fits = false;
      this.nzE[nnz] = e;
      this.nzC[nnz] = c;
      nnz++;
      this.qCur += c * c;
      this.l1 += c;
    }
    if (!packs) this.exact = false;
    if (this.packed && !(packs && this.qCur * coll.maxEntryNorm2 <= PACK_LIMIT)) this.unpackDots();
    if (this.wasm && !(fits && this.qCur * coll.maxEntryNorm2 <= WASM_LIMIT)) this.leaveWasm();
    return nnz;
  }

  /**
   * Q_n for the row: the prefix norms while rows come in order (returns true), else accumulated
   * from the last prefix (returns false; for WASM also written into the block, where the scan
   * reads them). Sets `qArr`, `qOff`, `rArr`.
   */
  private prepareNorms(coll: EamCollection, layer: number): boolean {
    const stride = coll.stride;
    const n = this.n;
    const { rowNorm2, prefixNorm2, prefixInvSqrt } = coll.internals;
    if (this.ordered && layer === this.rowsSeen) {
      this.qArr = prefixNorm2;
      this.qOff = layer * stride;
      this.rArr = prefixInvSqrt;
      return true;
    }
    const norms = this.norms;
    if (this.ordered) {
      const from = (this.rowsSeen - 1) * stride;
      for (let i = 0; i < n; i++) norms[i] = this.rowsSeen > 0 ? prefixNorm2[from + i]! : 0;
      this.ordered = false;
    }
    const rn = layer * stride;
    for (let i = 0; i < n; i++) norms[i]! += rowNorm2[rn + i]!;
    this.qArr = norms;
    this.qOff = 0;
    this.rArr = this.invSqrt;
    if (this.packed) for (let i = 0; i < n; i++) this.rArr[i] = 1 / Math.sqrt(norms[i]!);
    if (this.wasm) {
      // The scan reads Q_n and 1/sqrt(Q_n) from the block.
      const wc = this.blockCols!;
      const at = wc.blockNorms(this.block);
      wc.f64.set(norms.subarray(0, n), at.q >> 3);
      const r = wc.f32;
      const r0 = at.r >> 2;
      for (let i = 0; i < n; i++) r[r0 + i] = 1 / Math.sqrt(norms[i]!);
    }
    return false;
  }

  /**
   * WASM: D (i32) += the row's columns, eight per pass over D until at most eight are left, then
   * those inside the scan (one pass for the decode tokens of a batch of up to eight cells).
   * Returns the matches kept.
   */
  private wasmRow(layer: number, cb: number, nnz: number, prefix: boolean): number {
    const wc = this.blockCols!;
    const { n, nzE, nzC } = this;
    const d = this.block;
    let done = 0;
    // The scan's paired kernel takes coefficients ≤ 32767: a larger one sends every column through `addColumns`.
    let fuse = 8;
    for (let t = 0; t < nnz; t++) if (nzC[t]! > MAX_PAIR) fuse = 0;
    while (nnz - done > fuse) {
      const w = Math.min(8, nnz - done - fuse);
      wc.addColumns(d, (n + 15) >> 4, nzE, nzC, done, done + w, cb);
      done += w;
    }
    // The excess of counts above 254 of every column of the row (the scan's too: D is then exact when it looks).
    for (let t = 0; t < nnz; t++) wc.addOverflow(d, n, cb + nzE[t]!, nzC[t]!);
    const left = nnz - done;
    const base = wc.colsOff;
    const cs = wc.cs;
    // The fused columns' offsets and coefficients (unused ones: the first offset, coefficient 0).
    const a = this.scanArgs;
    for (let t = 0; t < 8; t++) {
      a[t] = left > t ? base + (cb + nzE[done + t]!) * cs : t > 0 ? a[0]! : base;
      a[8 + t] = left > t ? nzC[done + t]! : 0;
    }
    let qp: number;
    let rp: number;
    if (prefix) {
      const stride = this.coll!.stride;
      qp = wc.qOff + layer * stride * 8;
      rp = wc.rOff + layer * stride * 4;
    } else ({ q: qp, r: rp } = wc.blockNorms(this.block));
    // Seeds: the previous row's best M (the scan's floor from the start; the same result).
    let seeds = 0;
    if (this.topCount === this.topMatches && this.topMatches <= WASM_MAX_TOP) {
      seeds = this.topCount;
      const s32 = wc.i32;
      for (let j = 0; j < seeds; j++) s32[(WASM_RES_SEED >> 2) + j] = this.top[j]!;
    }
    const M = this.topMatches;
    // biome-ignore format: the scan's 23 arguments, grouped as the kernel reads them
    const count = wc.k!.scan(
      d, n, M, qp, rp, left,
      a[0]!, a[1]!, a[2]!, a[3]!, a[4]!, a[5]!, a[6]!, a[7]!,
      a[8]!, a[9]!, a[10]!, a[11]!, a[12]!, a[13]!, a[14]!, a[15]!,
      seeds,
    );
    const i32 = wc.i32;
    const f64 = wc.f64;
    for (let j = 0; j < count; j++) {
      this.top[j] = i32[(WASM_RES_TOP >> 2) + j]!;
      this.topScore[j] = f64[(WASM_RES_SCORE >> 3) + j]!;
    }
    return count;
  }

  /**
   * JS columns, D packed (packed backend) or plain (plain backend): columns eight (then four)
   * per pass over D until at most eight are left (`addDense`), the rest with the scan
   * (`packedTail` / `plainTail`). Returns the matches kept.
   */
  private jsRow(coll: EamCollection, cb: number, nnz: number): number {
    const cols = coll.internals.cols;
    const stride = coll.columnStride;
    const w = this.packed ? (this.n + 1) >> 1 : this.n;
    const done = this.addDense(cols, stride, cb, nnz, w);
    return this.packed
      ? this.packedTail(cols, stride, cb, nnz, done, w)
      : this.plainTail(cols, stride, cb, nnz, done, w);
  }

  /** Dense rows (prefill): D += columns eight (then four) per pass until at most eight are left; returns how many were added. */
  private addDense(cols: Float64Array, stride: number, cb: number, nnz: number, w: number): number {
    const { dots, nzE, nzC } = this;
    const at = (t: number): number => (cb + nzE[t]!) * stride;
    let done = 0;
    while (nnz - done > 8) {
      const c = done;
      if (nnz - done >= 16) {
        // biome-ignore format: eight offsets, then their eight coefficients
        addColumns8(
          dots, cols, w,
          at(c), at(c + 1), at(c + 2), at(c + 3), at(c + 4), at(c + 5), at(c + 6), at(c + 7),
          nzC[c]!, nzC[c + 1]!, nzC[c + 2]!, nzC[c + 3]!, nzC[c + 4]!, nzC[c + 5]!, nzC[c + 6]!, nzC[c + 7]!,
        );
        done += 8;
      } else {
        addColumns4(
          dots,
          cols,
          w,
          at(c),
          at(c + 1),
          at(c + 2),
          at(c + 3),
          nzC[c]!,
          nzC[c + 1]!,
          nzC[c + 2]!,
          nzC[c + 3]!,
        );
        done += 4;
      }
    }
    return done;
  }

  /**
   * Packed D, the last ≤ 8 columns: up to four in one pass, then the last ≤ 4 (two for a decode
   * token of a top-1/top-2 model) inside the scan. Missing columns have coefficient 0 and read
   * the first column (+ 0 is exact).
   */
  private packedTail(cols: Float64Array, stride: number, cb: number, nnz: number, done: number, w: number): number {
    const { dots, nzE, nzC, qArr, rArr, qOff, n, topMatches: M, top, topScore } = this;
    const pre = nnz - done > 4 ? nnz - done - 4 : 0;
    if (pre > 0) {
      const p0 = (cb + nzE[done]!) * stride;
      const p = (t: number): number => (pre > t ? (cb + nzE[done + t]!) * stride : p0);
      const k = (t: number): number => (pre > t ? nzC[done + t]! : 0);
      addColumns4(dots, cols, w, p0, p(1), p(2), p(3), nzC[done]!, k(1), k(2), k(3));
      done += pre;
    }
    const left = nnz - done;
    const k = (t: number): number => (left > t ? nzC[done + t]! : 0);
    const q0 = left > 0 ? (cb + nzE[done]!) * stride : 0;
    const q = (t: number): number => (left > t ? (cb + nzE[done + t]!) * stride : q0);
    if (left <= 2) return scanPacked2(dots, qArr, rArr, qOff, n, M, top, topScore, cols, k(0), k(1), q0, q(1));
    return scanPacked4(dots, qArr, rArr, qOff, n, M, top, topScore, cols, k(0), k(1), k(2), k(3), q0, q(1), q(2), q(3));
  }

  /**
   * Plain D, the last ≤ 8 columns: in one pass (width 4 or 8; missing columns have coefficient 0
   * and read column o0: + 0 is exact), then the best M in a second pass (two tight loops compile
   * better than one fused loop with eight columns); width ≤ 2 is added inside the scan.
   */
  private plainTail(cols: Float64Array, stride: number, cb: number, nnz: number, done: number, w: number): number {
    const { dots, nzE, nzC } = this;
    const left = nnz - done;
    const width = left === 0 ? 0 : left <= 2 ? 2 : left <= 4 ? 4 : 8;
    const c = (t: number): number => (left > t ? nzC[done + t]! : 0);
    const o0 = left > 0 ? (cb + nzE[done]!) * stride : 0;
    const o = (t: number): number => (left > t ? (cb + nzE[done + t]!) * stride : o0);
    if (width === 4) addColumns4(dots, cols, w, o0, o(1), o(2), o(3), c(0), c(1), c(2), c(3));
    else if (width === 8)
      addColumns8(
        dots,
        cols,
        w,
        o0,
        o(1),
        o(2),
        o(3),
        o(4),
        o(5),
        o(6),
        o(7),
        c(0),
        c(1),
        c(2),
        c(3),
        c(4),
        c(5),
        c(6),
        c(7),
      );
    const a0 = width === 2 ? c(0) : 0;
    const a1 = width === 2 ? c(1) : 0;
    return selectTop(
      dots,
      this.qArr,
      this.qOff,
      this.n,
      this.topMatches,
      this.top,
      this.topScore,
      cols,
      a0,
      a1,
      o0,
      o(1),
    );
  }

  /**
   * Adds this match's dot products (the rows seen so far, exact integers) to `into`
   * (`EamcDots.addIteration`); poisons it when they are not exact (non-integer rows or a
   * collection gone plain).
   */
  exportDots(into: EamcDots): void {
    const coll = this.coll;
    if (!coll || !this.exact) into.poison();
    else if (this.wasm) {
      // D lives in the collection's memory: gone if it was replaced since (never, in the policy).
      const wc = this.blockCols!;
      if (coll.columns !== wc || this.blockGen !== wc.gen) into.poison();
      else {
        const d = wc.i32.subarray(this.block >> 2, (this.block >> 2) + this.n);
        into.addIteration(coll, this.version, this.n, d, false, this.seen, this.l1);
      }
    } else into.addIteration(coll, this.version, this.n, this.dots, this.packed, this.seen, this.l1);
  }

  /** Current similarity of entry `n` (over the rows seen so far). */
  similarity(n: number): number {
    const coll = this.coll;
    if (!coll || this.rowsSeen === 0) return 0;
    const qn = this.ordered ? coll.internals.prefixNorm2[(this.rowsSeen - 1) * coll.stride + n]! : this.norms[n]!;
    let d: number;
    if (this.wasm) d = this.blockCols!.i32[(this.block >> 2) + n]!;
    else if (this.packed) d = laneOf(this.dots[n >> 1]!, n);
    else d = this.dots[n]!;
    const q = this.qCur * qn;
    return q > 0 ? d / Math.sqrt(q) : 0;
  }
}
