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
 *   denser rows (prefill) go four columns per pass over D.
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
    // Non-zero cells, then four columns per pass over `out` (a dense EAM has L·E of them).
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
    for (; t + 4 <= nzJ.length; t += 4) {
      const v0 = nzV[t]!;
      const v1 = nzV[t + 1]!;
      const v2 = nzV[t + 2]!;
      const v3 = nzV[t + 3]!;
      const o0 = nzJ[t]! * alloc;
      const o1 = nzJ[t + 1]! * alloc;
      const o2 = nzJ[t + 2]! * alloc;
      const o3 = nzJ[t + 3]! * alloc;
      for (let n = 0; n < size; n++) out[n]! += v0 * cols[o0 + n]! + v1 * cols[o1 + n]! + v2 * cols[o2 + n]! + v3 * cols[o3 + n]!;
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
 * updates D_n and scans in one pass; the scan rejects an entry by D_n² ≤ floor²·Q_n (with a
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

    if (nnz > 2) {
      // Dense rows (prefill): four columns per pass over D, then the rest one by one.
      const cb = layer * E;
      let j = 0;
      for (; j + 4 <= nnz; j += 4) {
        const c0 = this.nzC[j]!;
        const c1 = this.nzC[j + 1]!;
        const c2 = this.nzC[j + 2]!;
        const c3 = this.nzC[j + 3]!;
        const o0 = (cb + this.nzE[j]!) * stride;
        const o1 = (cb + this.nzE[j + 1]!) * stride;
        const o2 = (cb + this.nzE[j + 2]!) * stride;
        const o3 = (cb + this.nzE[j + 3]!) * stride;
        for (let i = 0; i < n; i++) dots[i]! += c0 * cols[o0 + i]! + c1 * cols[o1 + i]! + c2 * cols[o2 + i]! + c3 * cols[o3 + i]!;
      }
      for (; j < nnz; j++) {
        const c = this.nzC[j]!;
        const off = (cb + this.nzE[j]!) * stride;
        for (let i = 0; i < n; i++) dots[i]! += c * cols[off + i]!;
      }
    }
    // One pass over the entries (for ≤ 2 non-zero cells also D_n += c0·stored(l, e0) + c1·stored(l, e1)),
    // keeping the best M by D_n / sqrt(Q_n). No closure here: its captured, mutated locals
    // would live in a heap context and slow the loop down.
    const fused = nnz <= 2;
    const c0 = fused && nnz > 0 ? this.nzC[0]! : 0;
    const c1 = fused && nnz > 1 ? this.nzC[1]! : 0;
    const o0 = fused && nnz > 0 ? (layer * E + this.nzE[0]!) * stride : 0;
    const o1 = fused && nnz > 1 ? (layer * E + this.nzE[1]!) * stride : o0;
    const M = this.topMatches;
    const top = this.top;
    const score = this.topScore;
    let count = 0;
    let floor = 0; // score of the worst kept match once `count === M`
    let floor2 = 0; // floor² × (1 − 1e-9): a safe pre-filter
    for (let i = 0; i < n; i++) {
      let d = dots[i]!;
      if (fused) {
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
