/**
 * The EAM collection (EAMC) of MoE-Infinity and its incremental matcher (DESIGN §8).
 *
 * `EamCollection`: a fixed-capacity set of past request EAMs (one collection per phase, see
 * `eam.ts`). When a request finishes its EAM fills a free entry, or, once the collection is
 * full, replaces
 * - `most-similar` (the paper): the stored EAM with the highest cosine similarity to it
 *   (smallest cosine distance), so the collection stays recent and diverse: a new pattern
 *   replaces the one closest to it, never a rare one; ties go to the lowest index;
 * - `lfu-access` (the released code, `finish_entry`): the entry matched the fewest times
 *   (an access count incremented for the top-1 match of every layer match, reset to 1 on
 *   insertion); ties go to the lowest index.
 *
 * Storage (counts as Float32: exact integers below 2^24): each entry twice, entry-major
 * (`rows`, read by the batch scores of `prefetcher.ts`) and column-major (`cols`, cell (l, e)
 * of every entry contiguous, for the matcher's per-row update and for replacement), plus per
 * entry and row the squared norm, its prefix sum over rows 0…l, the total and the largest
 * cell. That is 8·L·E + 32·L bytes per entry (Arctic, 35×128: 37 KB; 10 000 entries:
 * 360 MB per phase). Storage grows by doubling up to the capacity.
 *
 * `IncrementalMatcher`: the cosine similarity between the current iteration EAM, restricted to
 * the rows seen so far S, and every stored EAM restricted to the same rows:
 *
 *     sim_n = D_n / sqrt(Q_cur · Q_n),   D_n = Σ_{i∈S} cur_i · stored_n,i,
 *                                        Q_cur = Σ_{i∈S} ‖cur_i‖²,  Q_n = Σ_{i∈S} ‖stored_n,i‖²
 *
 * — one cosine over the L×E matrices with the unseen rows removed (not an average of per-row
 * cosines), so every seen row counts by its mass, as in a cosine of whole EAMs. Per matcher
 * it keeps D_n for every entry, and Q_cur. When row l arrives:
 * - D_n += cur_l · stored_n,l reads only the non-zero cells of cur_l (a decode token of a
 *   top-k model: k cells) through the column-major copy: O(N · nnz(cur_l)), never
 *   O(N · L · E). Rows with ≤ 2 non-zero cells are folded into the scan below (one pass);
 *   rows with ≤ 8 (decode tokens of a batch) take one column pass before it; denser rows
 *   (prefill) go eight columns per pass over D. The counts are integers, so D_n is the same
 *   exact integer however the products are grouped (sums are trees, not chains: independent
 *   additions overlap in the CPU).
 * - Q_n: while rows arrive in layer order 0, 1, … (always, in the executor), S = {0…l} and
 *   Q_n is the precomputed prefix sum of entry n's row norms up to l — read, not updated;
 *   rows in another order fall back to accumulating Q_n += ‖stored_n,l‖² per entry.
 * - Q_cur += ‖cur_l‖².
 * All sums are of integer products in doubles, so the result equals the brute-force cosine
 * exactly (tested on random matrices and row orders). The best `topMatches` entries are kept
 * in the same pass over the N entries by D_n / sqrt(Q_n) (Q_cur is common to all), rejecting
 * most with D_n² ≤ floor²·Q_n before any square root; ties go to the lowest index; entries
 * with similarity 0 never match.
 */
import type { EamShape } from './eam.ts';

export type EamcReplacement = 'most-similar' | 'lfu-access';

const MIN_ALLOC = 16;

export class EamCollection {
  readonly layers: number;
  readonly experts: number;
  private readonly cells: number;
  /** Entries stored. */
  size = 0;
  /** Entries the storage has room for (≤ capacity); the stride of the column-major arrays. */
  private alloc = 0;
  private rows = new Float32Array(0);
  private cols = new Float32Array(0);
  /** ‖row l of entry n‖², at `l * alloc + n`. */
  private rowNorm2 = new Float64Array(0);
  /** Σ_{i ≤ l} ‖row i of entry n‖², at `l * alloc + n` (rows seen in order 0…l). */
  private prefixNorm2 = new Float64Array(0);
  /** Σ of row l of entry n, at `n * layers + l`. */
  private rowTotal = new Float64Array(0);
  /** Largest cell of row l of entry n, at `n * layers + l` (bounds for pruning score rows). */
  private rowMax = new Float64Array(0);
  /** ‖entry n‖² over all rows. */
  private fullNorm2 = new Float64Array(0);
  private access = new Float64Array(0);
  private scratch = new Float64Array(0);
  /** Increments on every insertion or replacement (matchers built on an older version are stale). */
  version = 0;

  constructor(
    shape: EamShape,
    readonly capacity: number,
    readonly replacement: EamcReplacement,
  ) {
    if (!(Number.isInteger(capacity) && capacity >= 1)) throw new RangeError(`EAMC capacity must be a positive integer, got ${capacity}`);
    this.layers = shape.layers;
    this.experts = shape.experts;
    this.cells = shape.layers * shape.experts;
  }

  /** Entries the storage has room for without growing (the column stride). */
  get stride(): number {
    return this.alloc;
  }

  private grow(need: number): void {
    if (need <= this.alloc) return;
    const alloc = Math.min(this.capacity, Math.max(need, MIN_ALLOC, this.alloc * 2));
    const { cells, layers } = this;
    const rows = new Float32Array(alloc * cells);
    rows.set(this.rows.subarray(0, this.size * cells));
    const cols = new Float32Array(cells * alloc);
    const rowNorm2 = new Float64Array(layers * alloc);
    const prefixNorm2 = new Float64Array(layers * alloc);
    for (let c = 0; c < cells; c++) cols.set(this.cols.subarray(c * this.alloc, c * this.alloc + this.size), c * alloc);
    for (let l = 0; l < layers; l++) {
      rowNorm2.set(this.rowNorm2.subarray(l * this.alloc, l * this.alloc + this.size), l * alloc);
      prefixNorm2.set(this.prefixNorm2.subarray(l * this.alloc, l * this.alloc + this.size), l * alloc);
    }
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
    this.scratch = new Float64Array(alloc);
    this.rows = rows;
    this.cols = cols;
    this.rowNorm2 = rowNorm2;
    this.prefixNorm2 = prefixNorm2;
    this.rowTotal = rowTotal;
    this.rowMax = rowMax;
    this.alloc = alloc;
  }

  /**
   * Stores `eam` (L×E counts): in a free entry while there is one, else in place of the entry
   * the replacement rule picks. Returns the entry index. Empty EAMs are ignored (−1).
   */
  insert(eam: ArrayLike<number>): number {
    if (eam.length !== this.cells) throw new RangeError(`EAM has ${eam.length} cells, the collection ${this.cells}`);
    let any = false;
    for (let j = 0; j < this.cells; j++) if (eam[j] !== 0) any = true;
    if (!any) return -1;
    let n: number;
    if (this.size < this.capacity) {
      this.grow(this.size + 1);
      n = this.size++;
    } else {
      n = this.replacement === 'most-similar' ? this.mostSimilar(eam) : this.leastAccessed();
    }
    this.write(n, eam);
    this.access[n] = 1;
    this.version++;
    return n;
  }

  private write(n: number, eam: ArrayLike<number>): void {
    const { experts, layers, alloc } = this;
    const base = n * this.cells;
    let full = 0;
    for (let l = 0; l < layers; l++) {
      let sq = 0;
      let tot = 0;
      let max = 0;
      for (let e = 0; e < experts; e++) {
        const j = l * experts + e;
        const v = eam[j]!;
        this.rows[base + j] = v;
        this.cols[j * alloc + n] = v;
        sq += v * v;
        tot += v;
        if (v > max) max = v;
      }
      this.rowNorm2[l * alloc + n] = sq;
      this.rowTotal[n * layers + l] = tot;
      this.rowMax[n * layers + l] = max;
      full += sq;
      this.prefixNorm2[l * alloc + n] = full;
    }
    this.fullNorm2[n] = full;
  }

  /** Cosine similarity of `eam` (all rows) with every stored entry, into `out[0..size)`. */
  similarities(eam: ArrayLike<number>, out: Float64Array): void {
    const { alloc, size, cols } = this;
    out.fill(0, 0, size);
    // Non-zero cells, then eight columns per pass over `out` (a dense EAM has L·E of them);
    // integer counts: the dot products are exact whatever the grouping.
    const nzJ: number[] = [];
    const nzV: number[] = [];
    let norm = 0;
    for (let j = 0; j < this.cells; j++) {
      const v = eam[j]!;
      if (v === 0) continue;
      norm += v * v;
      nzJ.push(j);
      nzV.push(v);
    }
    let t = 0;
    for (; t + 8 <= nzJ.length; t += 8) {
      // prettier-ignore
      addColumns8(out, cols, size,
        nzJ[t]! * alloc, nzJ[t + 1]! * alloc, nzJ[t + 2]! * alloc, nzJ[t + 3]! * alloc,
        nzJ[t + 4]! * alloc, nzJ[t + 5]! * alloc, nzJ[t + 6]! * alloc, nzJ[t + 7]! * alloc,
        nzV[t]!, nzV[t + 1]!, nzV[t + 2]!, nzV[t + 3]!, nzV[t + 4]!, nzV[t + 5]!, nzV[t + 6]!, nzV[t + 7]!);
    }
    for (; t + 4 <= nzJ.length; t += 4) {
      // prettier-ignore
      addColumns4(out, cols, size,
        nzJ[t]! * alloc, nzJ[t + 1]! * alloc, nzJ[t + 2]! * alloc, nzJ[t + 3]! * alloc,
        nzV[t]!, nzV[t + 1]!, nzV[t + 2]!, nzV[t + 3]!);
    }
    for (; t < nzJ.length; t++) {
      const v = nzV[t]!;
      const off = nzJ[t]! * alloc;
      for (let n = 0; n < size; n++) out[n]! += v * cols[off + n]!;
    }
    for (let n = 0; n < size; n++) {
      const q = norm * this.fullNorm2[n]!;
      out[n] = q > 0 ? out[n]! / Math.sqrt(q) : 0;
    }
  }

  /** The stored entry most similar to `eam` (highest cosine; ties: lowest index). */
  mostSimilar(eam: ArrayLike<number>): number {
    this.similarities(eam, this.scratch);
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

  /** Internal arrays for the matcher (read-only use). */
  get internals(): {
    readonly cols: Float32Array;
    readonly rows: Float32Array;
    readonly rowNorm2: Float64Array;
    readonly prefixNorm2: Float64Array;
    readonly rowTotal: Float64Array;
    readonly rowMax: Float64Array;
  } {
    return {
      cols: this.cols,
      rows: this.rows,
      rowNorm2: this.rowNorm2,
      prefixNorm2: this.prefixNorm2,
      rowTotal: this.rowTotal,
      rowMax: this.rowMax,
    };
  }
}

/**
 * Incremental cosine matching of one iteration EAM (fed row by row) against a collection, and
 * its best matches. Reusable: `reset` starts a new iteration EAM.
 *
 * Fast paths (same values as the general path): while rows arrive in layer order 0, 1, …
 * (always, in the executor) Q_n is read from the collection's prefix norms instead of being
 * accumulated; a row with at most two non-zero cells (a decode token of a top-1/top-2 model)
 * updates D_n and scans in one pass, one with at most eight in two; the scan rejects an entry by D_n² ≤ floor²·Q_n (with a
 * relative margin) before taking a square root.
 */
export class IncrementalMatcher {
  private coll: EamCollection | null = null;
  private version = -1;
  private n = 0;
  private dots = new Float64Array(0);
  /** Q_n, once rows stopped arriving in layer order (see `ordered`). */
  private norms = new Float64Array(0);
  private qCur = 0;
  private readonly seen: Uint8Array;
  private rowsSeen = 0;
  /** Rows seen so far are exactly 0 … rowsSeen−1: Q_n = prefixNorm2[rowsSeen−1][n]. */
  private ordered = true;
  private readonly nzE: Int32Array;
  private readonly nzC: Float64Array;
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
    if (this.dots.length < this.n) {
      this.dots = new Float64Array(coll.capacity > 4 * this.n ? Math.max(this.n * 2, 16) : coll.capacity);
      this.norms = new Float64Array(this.dots.length);
    }
    this.dots.fill(0, 0, this.n);
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
    const E = coll.experts;
    const stride = coll.stride;
    const { cols, rowNorm2, prefixNorm2 } = coll.internals;
    const n = this.n;
    const dots = this.dots;
    const norms = this.norms;

    let nnz = 0;
    for (let e = 0; e < E; e++) {
      const c = counts[e]!;
      if (c === 0) continue;
      this.nzE[nnz] = e;
      this.nzC[nnz] = c;
      nnz++;
      this.qCur += c * c;
    }

    // Q_n: the prefix norms while rows come in order; else accumulate from the last prefix.
    let qArr: Float64Array;
    let qOff: number;
    if (this.ordered && layer === this.rowsSeen) {
      qArr = prefixNorm2;
      qOff = layer * stride;
    } else {
      if (this.ordered) {
        const from = (this.rowsSeen - 1) * stride;
        for (let i = 0; i < n; i++) norms[i] = this.rowsSeen > 0 ? prefixNorm2[from + i]! : 0;
        this.ordered = false;
      }
      const rn = layer * stride;
      for (let i = 0; i < n; i++) norms[i]! += rowNorm2[rn + i]!;
      qArr = norms;
      qOff = 0;
    }
    this.rowsSeen++;

    // Dense rows (prefill): columns eight (then four) per pass over D until at most eight are
    // left; those are added in the scan below (one pass). The counts are integers, so D_n is
    // the same exact integer whatever the grouping.
    const cb = layer * E;
    const nzC = this.nzC;
    const nzE = this.nzE;
    let done = 0;
    while (nnz - done > 8) {
      const c = done;
      if (nnz - done >= 16) {
        // prettier-ignore
        addColumns8(dots, cols, n,
          (cb + nzE[c]!) * stride, (cb + nzE[c + 1]!) * stride, (cb + nzE[c + 2]!) * stride, (cb + nzE[c + 3]!) * stride,
          (cb + nzE[c + 4]!) * stride, (cb + nzE[c + 5]!) * stride, (cb + nzE[c + 6]!) * stride, (cb + nzE[c + 7]!) * stride,
          nzC[c]!, nzC[c + 1]!, nzC[c + 2]!, nzC[c + 3]!, nzC[c + 4]!, nzC[c + 5]!, nzC[c + 6]!, nzC[c + 7]!);
        done += 8;
      } else {
        // prettier-ignore
        addColumns4(dots, cols, n,
          (cb + nzE[c]!) * stride, (cb + nzE[c + 1]!) * stride, (cb + nzE[c + 2]!) * stride, (cb + nzE[c + 3]!) * stride,
          nzC[c]!, nzC[c + 1]!, nzC[c + 2]!, nzC[c + 3]!);
        done += 4;
      }
    }
    // The last ≤ 8 columns in one pass (width 4 or 8; missing columns have coefficient 0 and
    // read column o0: + 0 is exact), then the best M by D_n / sqrt(Q_n) in a second pass (two
    // tight loops in small functions compile better than one fused loop with eight columns).
    const left = nnz - done;
    const width = left === 0 ? 0 : left <= 2 ? 2 : left <= 4 ? 4 : 8;
    const c0 = left > 0 ? nzC[done]! : 0;
    const c1 = left > 1 ? nzC[done + 1]! : 0;
    const c2 = left > 2 ? nzC[done + 2]! : 0;
    const c3 = left > 3 ? nzC[done + 3]! : 0;
    const c4 = left > 4 ? nzC[done + 4]! : 0;
    const c5 = left > 5 ? nzC[done + 5]! : 0;
    const c6 = left > 6 ? nzC[done + 6]! : 0;
    const c7 = left > 7 ? nzC[done + 7]! : 0;
    const o0 = left > 0 ? (cb + nzE[done]!) * stride : 0;
    const o1 = left > 1 ? (cb + nzE[done + 1]!) * stride : o0;
    const o2 = left > 2 ? (cb + nzE[done + 2]!) * stride : o0;
    const o3 = left > 3 ? (cb + nzE[done + 3]!) * stride : o0;
    const o4 = left > 4 ? (cb + nzE[done + 4]!) * stride : o0;
    const o5 = left > 5 ? (cb + nzE[done + 5]!) * stride : o0;
    const o6 = left > 6 ? (cb + nzE[done + 6]!) * stride : o0;
    const o7 = left > 7 ? (cb + nzE[done + 7]!) * stride : o0;
    if (width === 4) addColumns4(dots, cols, n, o0, o1, o2, o3, c0, c1, c2, c3);
    else if (width === 8) addColumns8(dots, cols, n, o0, o1, o2, o3, o4, o5, o6, o7, c0, c1, c2, c3, c4, c5, c6, c7);
    // Width ≤ 2 (a decode token of a top-1/top-2 model) is added inside the scan (one pass).
    const count = selectTop(dots, qArr, qOff, n, this.topMatches, this.top, this.topScore, cols, width === 2 ? c0 : 0, width === 2 ? c1 : 0, o0, o1);
    const score = this.topScore;
    this.topCount = count;
    // Scores were kept without Q_cur; turn them into similarities.
    const qc = Math.sqrt(this.qCur);
    for (let j = 0; j < count; j++) score[j] = score[j]! / qc;
  }

  /** Current similarity of entry `n` (over the rows seen so far). */
  similarity(n: number): number {
    const coll = this.coll;
    if (!coll || this.rowsSeen === 0) return 0;
    const qn = this.ordered ? coll.internals.prefixNorm2[(this.rowsSeen - 1) * coll.stride + n]! : this.norms[n]!;
    const d = this.dots[n]!;
    const q = this.qCur * qn;
    return q > 0 ? d / Math.sqrt(q) : 0;
  }
}

// Row-update kernels: D_n += Σ c_j · column_j[n]. The products are summed as a tree (not a
// chain: independent additions overlap in the CPU); all terms are integers, so the sum is the
// same exact integer in any order.
function addColumns4(dots: Float64Array, cols: Float32Array, n: number, o0: number, o1: number, o2: number, o3: number, c0: number, c1: number, c2: number, c3: number): void {
  for (let i = 0; i < n; i++) dots[i]! += c0 * cols[o0 + i]! + c1 * cols[o1 + i]! + (c2 * cols[o2 + i]! + c3 * cols[o3 + i]!);
}

function addColumns8(
  dots: Float64Array,
  cols: Float32Array,
  n: number,
  o0: number,
  o1: number,
  o2: number,
  o3: number,
  o4: number,
  o5: number,
  o6: number,
  o7: number,
  c0: number,
  c1: number,
  c2: number,
  c3: number,
  c4: number,
  c5: number,
  c6: number,
  c7: number,
): void {
  for (let i = 0; i < n; i++) {
    dots[i]! +=
      c0 * cols[o0 + i]! + c1 * cols[o1 + i]! + (c2 * cols[o2 + i]! + c3 * cols[o3 + i]!) + (c4 * cols[o4 + i]! + c5 * cols[o5 + i]! + (c6 * cols[o6 + i]! + c7 * cols[o7 + i]!));
  }
}

/**
 * After D_n += c0·column o0 + c1·column o1 (both 0 for none), the best `M` entries by
 * D_n / sqrt(Q_n) (D_n > 0) into `top` / `score`, best first, ties to the lower index; returns
 * how many. Rejects an entry by D_n² ≤ floor²·Q_n (with a relative margin) before taking a
 * square root.
 */
// prettier-ignore
function selectTop(dots: Float64Array, qArr: Float64Array, qOff: number, n: number, M: number, top: Int32Array, score: Float64Array,
  cols: Float32Array, c0: number, c1: number, o0: number, o1: number): number {
  const add = c0 !== 0 || c1 !== 0;
  let count = 0;
  let floor = 0; // score of the worst kept match once `count === M`
  let floor2 = 0; // floor² × (1 − 1e-9): a safe pre-filter
  for (let i = 0; i < n; i++) {
    let d = dots[i]!;
    if (add) {
      d += c0 * cols[o0 + i]! + c1 * cols[o1 + i]!;
      dots[i] = d;
    }
    if (d <= 0) continue;
    const q = qArr[qOff + i]!;
    if (count === M && d * d <= floor2 * q) continue;
    const s = d / Math.sqrt(q);
    if (count === M && s <= floor) continue;
    // Insertion into the sorted list (strict >: an equal later index never displaces an earlier one).
    let j = count < M ? count++ : M - 1;
    while (j > 0 && score[j - 1]! < s) {
      score[j] = score[j - 1]!;
      top[j] = top[j - 1]!;
      j--;
    }
    score[j] = s;
    top[j] = i;
    if (count === M) {
      floor = score[M - 1]!;
      floor2 = floor * floor * (1 - 1e-9);
    }
  }
  return count;
}
