/**
 * MoE-Infinity's activation scores (DESIGN §8, "Prefetch", step 1): each matched iteration
 * EAM's best EAMC entries summed, each row normalised, weighted by the group's tokens — the
 * scores the prefetch ranking (`prefetch-rank.ts`) reads a row at a time.
 */
import type { EamShape } from './eam.ts';
import type { EamCollection } from './eam-collection.ts';
import type { RowSource } from './rank-scratch.ts';

/** One matched iteration EAM: its best entries in a collection, and the tokens it stands for. */
export interface MatchedGroup {
  readonly collection: EamCollection;
  readonly top: ArrayLike<number>;
  readonly count: number;
  /** Tokens of the iteration the group stands for. */
  readonly weight: number;
}

/**
 * Activation scores of a batch: for rows i in [from, to),
 *
 *     score(i, e) = Σ_g weight_g · Σ_{n ∈ top_g} stored_n(i, e) / Σ_{n ∈ top_g} rowSum_n(i)
 *
 * — each group's best matches summed, each row normalised (activation probabilities), then
 * weighted by the group's tokens (expected tokens routed to each cell). Computed as
 * Σ_n c_n(i) · stored_n(i, e) over the distinct matched entries n, with the coefficient
 * c_n(i) = Σ_{g ∋ n} weight_g / Σ_{m ∈ top_g} rowSum_m(i): requests of a batch that share
 * matches read each stored row once. `prepare` computes the coefficients
 * (O(memberships · rows)) and, per row, an upper bound of its best score,
 * Σ_n c_n(i) · max_e stored_n(i, e); `fill` computes one row (O(distinct entries · E)), so a
 * ranking can skip rows whose bound cannot beat what it already holds. Stateless between
 * calls (nothing to keep in sync when the best matches change).
 */
type StoredRows = EamCollection['internals']['rows'];

export class ScoreAccumulator implements RowSource {
  private readonly perCollection = new Map<EamCollection, { slot: Int32Array; stamp: Uint32Array }>();
  private gen = 0;
  /** Coefficient c_u(r) of entry u for row from + r, at `u * rows + r` (general case). */
  private coef = new Float64Array(0);
  /**
   * One matched group of distinct entries (one request, or one phase of a batch): every
   * entry's coefficient for a row is that row's `rowCoef[r]` (no coefficient matrix).
   */
  private uniform = false;
  private rowCoef = new Float64Array(0);
  private bounds = new Float64Array(0);
  /** Distinct matched entries of the current preparation: their collection's stored rows and row maxima, and the entry's offset in them. */
  private readonly entryRows: StoredRows[] = [];
  private readonly entryMax: EamCollection['internals']['rowMax'][] = [];
  private entryN = new Int32Array(16);
  private entryBase = new Int32Array(16);
  private entries = 0;
  private from = 0;
  private rows = 0;
  /** Per-row gather (general case): coefficient, stored rows and offset of the entries with a non-zero coefficient. */
  private gc = new Float64Array(16);
  private gb = new Int32Array(16);
  private readonly gr: StoredRows[] = [];
  /**
   * Rows computed under the current matches, kept while the next preparation has the very same
   * single group (collection and its version, weight, best matches in the same order): their
   * scores are then bit-for-bit the same (`fill` copies them). Row i is kept where
   * `cachedAt[i] === cacheEpoch`. Rows (and their coefficients and bounds) are kept only once a
   * preparation repeats the last one's matches (`keeping`): matches mostly change from one
   * layer to the next, and keeping rows that are never read again costs a copy each.
   */
  private keeping = false;
  private cache = new Float64Array(0);
  private cachedAt = new Uint32Array(0);
  private cacheEpoch = 1;
  private sigColl: EamCollection | null = null;
  private sigVersion = -1;
  private sigWeight = NaN;
  private sigTop = new Int32Array(16);
  private sigCount = -1;
  /** Coefficient and bound of row i prepared under the current matches, where `rowAt[i] === cacheEpoch`. */
  private rowAt = new Float64Array(0);
  private coefOf = new Float64Array(0);
  private boundOf = new Float64Array(0);

  constructor(private readonly shape: EamShape) {}

  private slots(coll: EamCollection): { slot: Int32Array; stamp: Uint32Array } {
    let s = this.perCollection.get(coll);
    if (!s || s.slot.length < coll.size) {
      const n = Math.max(16, coll.stride);
      s = { slot: new Int32Array(n), stamp: new Uint32Array(n) };
      this.perCollection.set(coll, s);
    }
    return s;
  }

  /** Coefficients and row bounds for rows [from, to). */
  prepare(groups: readonly MatchedGroup[], from: number, to: number): void {
    const L = this.shape.layers;
    const LE = L * this.shape.experts;
    const rows = Math.max(0, to - from);
    this.from = from;
    this.rows = rows;
    this.entries = 0;
    let memberships = 0;
    let live = 0;
    let single: MatchedGroup | null = null;
    for (let gi = 0; gi < groups.length; gi++) {
      const g = groups[gi]!;
      memberships += g.count;
      if (g.count === 0 || !(g.weight > 0)) continue;
      live++;
      single = g;
    }
    if (this.entryN.length < memberships) {
      this.entryN = new Int32Array(memberships * 2);
      this.entryBase = new Int32Array(memberships * 2);
    }
    if (this.bounds.length < rows) this.bounds = new Float64Array(L);
    if (this.rowCoef.length < rows) this.rowCoef = new Float64Array(L);
    if (live === 1 && this.prepareSingle(single!, from, to, ++this.gen, L, LE)) return;
    const gen = ++this.gen;
    this.uniform = false;
    this.cacheEpoch++;
    this.sigColl = null;
    if (this.coef.length < memberships * rows) this.coef = new Float64Array(memberships * rows * 2);
    const coef = this.coef;
    const entryN = this.entryN;
    for (let gi = 0; gi < groups.length; gi++) {
      const g = groups[gi]!;
      if (g.count === 0 || !(g.weight > 0)) continue;
      const coll = g.collection;
      const internals = coll.internals;
      const rowTotal = internals.rowTotal;
      const top = g.top;
      const count = g.count;
      const sl = this.slots(coll);
      const stamp = sl.stamp;
      const slot = sl.slot;
      for (let i = from; i < to; i++) {
        let tot = 0;
        for (let j = 0; j < count; j++) tot += rowTotal[top[j]! * L + i]!;
        if (!(tot > 0)) continue;
        const c = g.weight / tot;
        const r = i - from;
        for (let j = 0; j < count; j++) {
          const n = top[j]!;
          let u: number;
          if (stamp[n] === gen) {
            u = slot[n]!;
          } else {
            u = this.entries++;
            this.entryRows[u] = internals.rows;
            this.entryMax[u] = internals.rowMax;
            entryN[u] = n;
            this.entryBase[u] = n * LE;
            stamp[n] = gen;
            slot[n] = u;
            coef.fill(0, u * rows, (u + 1) * rows);
          }
          coef[u * rows + r]! += c;
        }
      }
    }
    const bounds = this.bounds;
    bounds.fill(0, 0, rows);
    for (let u = 0; u < this.entries; u++) {
      const n = entryN[u]!;
      const rowMax = this.entryMax[u]!;
      const cb = u * rows;
      const mb = n * L + from;
      for (let r = 0; r < rows; r++) bounds[r]! += coef[cb + r]! * rowMax[mb + r]!;
    }
  }

  /**
   * `prepare` for one group of distinct entries: the same entries in the same order, the same
   * coefficients (each row's weight / Σ row totals, for every entry) and the same bounds as the
   * general case, without the coefficient matrix. False (nothing done) when an entry repeats.
   */
  private prepareSingle(g: MatchedGroup, from: number, to: number, gen: number, L: number, LE: number): boolean {
    const coll = g.collection;
    const top = g.top;
    const count = g.count;
    const sl = this.slots(coll);
    const stamp = sl.stamp;
    for (let j = 0; j < count; j++) {
      const n = top[j]!;
      if (stamp[n] === gen) return false;
      stamp[n] = gen;
    }
    // Same matches as the last preparation: rows kept in the cache stay valid.
    let same =
      this.sigColl === coll &&
      this.sigVersion === coll.version &&
      this.sigWeight === g.weight &&
      this.sigCount === count;
    if (same) {
      const sig = this.sigTop;
      for (let j = 0; j < count; j++) {
        if (sig[j] !== top[j]) {
          same = false;
          break;
        }
      }
    }
    if (!same) {
      this.cacheEpoch++;
      this.sigColl = coll;
      this.sigVersion = coll.version;
      this.sigWeight = g.weight;
      this.sigCount = count;
      if (this.sigTop.length < count) this.sigTop = new Int32Array(count * 2);
      for (let j = 0; j < count; j++) this.sigTop[j] = top[j]!;
    }
    this.keeping = same;
    this.uniform = true;
    const internals = coll.internals;
    const rowTotal = internals.rowTotal;
    const rowMax = internals.rowMax;
    const rows = to - from;
    const rowCoef = this.rowCoef;
    const bounds = this.bounds;
    if (this.rowAt.length < L) {
      this.rowAt = new Float64Array(L);
      this.coefOf = new Float64Array(L);
      this.boundOf = new Float64Array(L);
    }
    const epoch = this.cacheEpoch;
    const rowAt = this.rowAt;
    let any = false;
    for (let i = from; i < to; i++) {
      const r = i - from;
      // A row prepared under the same matches: its coefficient (and bound, below) as then.
      if (rowAt[i] === epoch) {
        rowCoef[r] = this.coefOf[i]!;
        if (rowCoef[r] !== 0) any = true;
        continue;
      }
      let tot = 0;
      for (let j = 0; j < count; j++) tot += rowTotal[top[j]! * L + i]!;
      // 0 + c: the general case's accumulated coefficient, exactly.
      rowCoef[r] = tot > 0 ? 0 + g.weight / tot : 0;
      if (tot > 0) any = true;
    }
    // Entries exist once some row has a positive total (the general case assigns them then).
    const entries = any ? count : 0;
    for (let u = 0; u < entries; u++) {
      const n = top[u]!;
      this.entryRows[u] = internals.rows;
      this.entryN[u] = n;
      this.entryBase[u] = n * LE;
    }
    this.entries = entries;
    for (let r = 0; r < rows; r++) {
      const i = from + r;
      if (rowAt[i] === epoch) {
        bounds[r] = this.boundOf[i]!;
        continue;
      }
      const c = rowCoef[r]!;
      let b = 0;
      for (let u = 0; u < entries; u++) b += c * rowMax[this.entryN[u]! * L + i]!;
      bounds[r] = b;
      // With no entries every coefficient is 0 and every bound 0: nothing to keep.
      if (same && entries > 0) {
        rowAt[i] = epoch;
        this.coefOf[i] = c;
        this.boundOf[i] = b;
      }
    }
    return true;
  }

  /** Upper bound of max_e score(i, e) (after `prepare`). */
  bound(i: number): number {
    const r = i - this.from;
    return r >= 0 && r < this.rows ? this.bounds[r]! : 0;
  }

  /**
   * Writes row i's scores into `out` (L×E) (after `prepare`): out(i, e) = Σ_u c_u(i) ·
   * stored_u(i, e), summed over the entries u in order (from 0), entries with c_u(i) = 0 left out.
   */
  fill(i: number, out: Float64Array): void {
    const E = this.shape.experts;
    const rb = i * E;
    const r = i - this.from;
    if (r < 0 || r >= this.rows) {
      out.fill(0, rb, rb + E);
      return;
    }
    const cache = this.cache;
    if (this.uniform) {
      if (this.cachedAt[i] === this.cacheEpoch) {
        for (let e = 0; e < E; e++) out[rb + e] = cache[rb + e]!;
        return;
      }
      const c = this.rowCoef[r]!;
      const m = c === 0 ? 0 : this.entries;
      const stored = m > 0 ? this.entryRows[0]! : null;
      const base = this.entryBase;
      let e = 0;
      for (; e + 4 <= E; e += 4) {
        let a0 = 0;
        let a1 = 0;
        let a2 = 0;
        let a3 = 0;
        for (let u = 0; u < m; u++) {
          const b = base[u]! + rb + e;
          a0 += c * stored![b]!;
          a1 += c * stored![b + 1]!;
          a2 += c * stored![b + 2]!;
          a3 += c * stored![b + 3]!;
        }
        out[rb + e] = a0;
        out[rb + e + 1] = a1;
        out[rb + e + 2] = a2;
        out[rb + e + 3] = a3;
      }
      for (; e < E; e++) {
        let a = 0;
        for (let u = 0; u < m; u++) a += c * stored![base[u]! + rb + e]!;
        out[rb + e] = a;
      }
      if (!this.keeping) return;
      let keep = cache;
      if (keep.length < this.shape.layers * E) {
        keep = this.cache = new Float64Array(this.shape.layers * E);
        this.cachedAt = new Uint32Array(this.shape.layers);
      }
      for (let k = rb, end = rb + E; k < end; k++) keep[k] = out[k]!;
      this.cachedAt[i] = this.cacheEpoch;
      return;
    }
    // General case: gather the entries with a non-zero coefficient for this row.
    const rows = this.rows;
    const coef = this.coef;
    if (this.gc.length < this.entries) {
      this.gc = new Float64Array(this.entries * 2);
      this.gb = new Int32Array(this.entries * 2);
    }
    const gc = this.gc;
    const gb = this.gb;
    const gr = this.gr;
    let m = 0;
    for (let u = 0; u < this.entries; u++) {
      const c = coef[u * rows + r]!;
      if (c === 0) continue;
      gc[m] = c;
      gb[m] = this.entryBase[u]! + rb;
      gr[m] = this.entryRows[u]!;
      m++;
    }
    let e = 0;
    for (; e + 4 <= E; e += 4) {
      let a0 = 0;
      let a1 = 0;
      let a2 = 0;
      let a3 = 0;
      for (let t = 0; t < m; t++) {
        const c = gc[t]!;
        const st = gr[t]!;
        const b = gb[t]! + e;
        a0 += c * st[b]!;
        a1 += c * st[b + 1]!;
        a2 += c * st[b + 2]!;
        a3 += c * st[b + 3]!;
      }
      out[rb + e] = a0;
      out[rb + e + 1] = a1;
      out[rb + e + 2] = a2;
      out[rb + e + 3] = a3;
    }
    for (; e < E; e++) {
      let a = 0;
      for (let t = 0; t < m; t++) a += gc[t]! * gr[t]![gb[t]! + e]!;
      out[rb + e] = a;
    }
  }

  /** All rows [from, to) into `out` (other rows untouched). */
  compute(groups: readonly MatchedGroup[], from: number, to: number, out: Float64Array): void {
    this.prepare(groups, from, to);
    for (let i = from; i < to; i++) this.fill(i, out);
  }
}
