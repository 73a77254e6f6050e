/**
 * MoE-Infinity's prefetcher (DESIGN §8, "Prefetch"): activation probabilities → a ranked
 * multi-layer prefetch through one sequential PCIe queue, re-ranked and cancelled as rows of
 * the iteration EAM arrive.
 *
 * 1. Activation probabilities. After layer l is routed, each matched iteration EAM's best
 *    EAMC entries are summed and each row normalised: p(i, e) = share of the matched
 *    requests' tokens at layer i routed to e. A batch's score of (i, e) is the expected number
 *    of its tokens routed there, Σ_g tokens_g · p_g(i, e) over its matched iteration EAMs
 *    (`ScoreAccumulator`): for one request it ranks exactly as the paper's activation ratio.
 * 2. Proximity. Future layer i is scaled by 1 − (i − l)/L (`layerProximity`); layers
 *    l+1 … l+horizon are considered (horizon = all remaining layers with
 *    `multiLayerPrefetch`, else 1).
 * 3. Ranking (`selectPrefetch`). The `budget` best cells (score > 0; ties: nearer layer,
 *    then lower expert; rows scanned nearest first, a row skipped when its score bound cannot
 *    beat the cells already held; after a ranking of the previous layer, only cells and rows
 *    reaching 0.9 × its worst selected score are looked at, the rest provably outranked when at
 *    least `budget` cells reach it — else the plain scan) form the ranked set, queued nearest
 *    layer first (then by score) — or
 *    purely by score with `queueOrder: 'score'`. The queue position is encoded in the H2D
 *    priority (lower is more urgent, ≥ 1) without sorting: nearest-first
 *    u = (i − l) + (1 − s/s_max), by score u = 1 + (1 − s/s_max).
 * 4. Re-ranking (`PrefetchQueue.plan`). At every layer the ranked set is recomputed: still
 *    queued prefetches in it are re-prioritised, ones no longer in it are cancelled (only
 *    while loading: completed ones stay cached, and a prefetch the GPU now needs is the
 *    executor's, pinned, never cancelled), and the absent members the policy admits are
 *    issued (admission: `cache-priority.ts`). Resident members of the set are protected from
 *    eviction (cache priority maximal).
 *
 * Without request tracing (`dependencySelection`): the first n experts of layer l+1 in expert
 * order — DeepSpeed-style dependency prefetch, the first row of the paper's ablation (still
 * re-ranked per layer: stale next-layer prefetches are cancelled).
 */
import type { BufferView, ExpertKey, PolicyDecision, PrefetchRequest } from '../../sim/serving/policy.ts';
import type { EamShape } from './eam.ts';
import type { EamCollection } from './eam-collection.ts';

export type QueueOrder = 'nearest-first' | 'score';

export interface RankOptions {
  readonly layers: number;
  readonly experts: number;
  /** Future layers considered: l+1 … l+horizon (clamped to the last layer). */
  readonly horizon: number;
  /** Scale layer i by 1 − (i − l)/L. */
  readonly proximity: boolean;
  readonly order: QueueOrder;
}

/** Layer-proximity factor of future layer `i` seen from current layer `l` (DESIGN §8). */
export const proximityFactor = (i: number, l: number, layers: number): number => 1 - (i - l) / layers;

/** The rows (future layers) a ranking at layer `l` reads: [from, to). */
export function horizonRows(layer: number, o: Pick<RankOptions, 'layers' | 'horizon'>): { from: number; to: number } {
  return { from: layer + 1, to: Math.min(o.layers, layer + 1 + o.horizon) };
}

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

/** Scores computed a row at a time, with an upper bound per row (see `ScoreAccumulator`). */
export interface RowSource {
  bound(i: number): number;
  fill(i: number, out: Float64Array): void;
}

/** Scratch for `selectPrefetch`, reusable across calls (the returned selection lives in it). */
export class RankScratch {
  /** Heap of the selection: cell keys and their scores. */
  keys = new Int32Array(64);
  vals = new Float64Array(64);
  /** Score × proximity by key, for the selected keys. */
  byKey = new Float64Array(64);
  /** Held cells by row, a bit per expert (⌈E/32⌉ words a row); all zero between calls. */
  private mask = new Uint32Array(0);
  /** Candidates of a floored scan (`collectScan`): key, score × proximity, row; the highest score; positions dropped (all zero between calls); heap of the worst. */
  candKeys = new Int32Array(64);
  candScores = new Float64Array(64);
  candRows = new Int32Array(64);
  candMax = 0;
  candDrop = new Uint8Array(64);
  dropHeap = new Int32Array(64);
  /**
   * Rows of `scores` computed from the source during the current `selectPrefetch` call (where
   * `filledAt[i] === call`): a rescan after the floored scan reads them instead of computing
   * them again (the same values: the source is not changed during a call).
   */
  filledAt = new Uint32Array(0);
  call = 0;
  /** The layer of the last ranking that selected from a heap (−2: none) and its worst selected score (the next layer's floor guess). */
  lastLayer = -2;
  lastWorst = 0;
  /** The selection. */
  outKeys = new Int32Array(64);
  outScores = new Float64Array(64);
  outUrgency = new Float64Array(64);
  /** Layer of each selected cell. */
  outRow = new Int32Array(64);
  /** The selection returned by the last call (rewritten by every call). */
  readonly selection: { count: number; keys: Int32Array; scores: Float64Array; urgency: Float64Array } = {
    count: 0,
    keys: this.outKeys,
    scores: this.outScores,
    urgency: this.outUrgency,
  };
  ensure(heap: number, cells: number, keys: number): void {
    if (this.keys.length < heap) {
      this.keys = new Int32Array(heap * 2);
      this.vals = new Float64Array(heap * 2);
    }
    if (this.outKeys.length < cells) {
      this.outKeys = new Int32Array(cells * 2);
      this.outScores = new Float64Array(cells * 2);
      this.outUrgency = new Float64Array(cells * 2);
      this.outRow = new Int32Array(cells * 2);
    }
    if (this.byKey.length < keys) {
      this.byKey = new Float64Array(keys);
      this.candKeys = new Int32Array(keys);
      this.candScores = new Float64Array(keys);
      this.candRows = new Int32Array(keys);
      this.candDrop = new Uint8Array(keys);
      this.dropHeap = new Int32Array(keys);
    }
  }
  /** Row i of `scores` from `source`, unless this call computed it already. */
  fill(source: RowSource, i: number, scores: Float64Array): void {
    if (this.filledAt[i] === this.call) return;
    source.fill(i, scores);
    this.filledAt[i] = this.call;
  }
  /** The row masks, `words` of them at least (zero). */
  rowMask(words: number): Uint32Array {
    if (this.mask.length < words) this.mask = new Uint32Array(words);
    return this.mask;
  }
  /** The selection of `count` cells in the output arrays. */
  result(count: number): Selection {
    const s = this.selection;
    s.count = count;
    s.keys = this.outKeys;
    s.scores = this.outScores;
    s.urgency = this.outUrgency;
    return s;
  }
}

/**
 * A ranked set: `count` cells in layer (then expert) order with their score × proximity and
 * their urgency — the H2D priority of their prefetch (≥ 1, lower first), a monotone function
 * of the queue position: nearest-first u = (i − l) + (1 − s/s_max), score u = 1 + (1 − s/s_max).
 * Arrays may be longer than `count`.
 */
export interface Selection {
  readonly count: number;
  readonly keys: Int32Array;
  readonly scores: Float64Array;
  readonly urgency: Float64Array;
}

/**
 * The ranked set at layer `layer`: the `budget` best cells of rows l+1 … l+horizon of
 * `scores` (score × proximity, score > 0; ties: nearer layer, then lower expert), in layer
 * order, with urgencies. Rows are scanned nearest first into a heap of the best `budget`
 * (O(K log budget) for K cells, no sort of the whole set); with a `source`, each row is
 * computed into `scores` only if its upper bound × proximity can beat the worst cell held
 * (cells of later rows lose ties, so a bound equal to it cannot). The result lives in
 * `scratch` (valid until its next use).
 *
 * Floor (a fast path, same result). When the previous call on `scratch` ranked layer l − 1,
 * its selection's worst score × `FLOOR_GUESS` is taken as a floor: only cells at or above it
 * are collected, rows whose bound is below it skipped (`collectScan`). If at least `budget`
 * cells reach the floor, every cell below it is beaten by `budget` others, so the selection
 * is the best `budget` of the collected ones: up to twice the budget, the collected minus
 * their worst (`dropWorst`), beyond that a heap of the best of them (`heapOfCandidates`); if
 * fewer reach it, the plain scan (rows the floored scan computed are not computed again).
 * Successive layers' selections have close worst scores (a layer's match changes little): on
 * the quickstart workload 97 % of floored rankings keep ~59 of ~72 collected.
 */
export function selectPrefetch(
  scores: Float64Array,
  layer: number,
  budget: number,
  o: RankOptions,
  scratch: RankScratch,
  source?: RowSource,
): Selection {
  const E = o.experts;
  const L = o.layers;
  const from = layer + 1;
  const to = Math.min(L, layer + 1 + o.horizon);
  const maxCells = Math.max(0, to - from) * E;
  const cap = Math.max(0, Math.min(budget, maxCells));
  scratch.ensure(cap + 1, cap, L * E);
  if (scratch.filledAt.length < L) scratch.filledAt = new Uint32Array(L);
  // A new call: no row computed yet (0 is never a call number).
  if (++scratch.call === 2 ** 32) {
    scratch.filledAt.fill(0);
    scratch.call = 1;
  }
  const guessed = scratch.lastLayer === layer - 1 ? scratch.lastWorst * FLOOR_GUESS : 0;
  scratch.lastLayer = -2;
  if (cap <= 0) return scratch.result(0);
  const proximity = o.proximity;
  const ok = scratch.outKeys;
  const os = scratch.outScores;
  const ou = scratch.outUrgency;
  const orow = scratch.outRow;
  let n = 0;
  if (cap === maxCells) {
    // Every positive cell fits: no selection, already in layer order.
    for (let i = from; i < to; i++) {
      if (source) source.fill(i, scores);
      const f = proximity ? proximityFactor(i, layer, L) : 1;
      const base = i * E;
      for (let e = 0; e < E; e++) {
        const raw = scores[base + e]!;
        if (!(raw > 0)) continue;
        ok[n] = base + e;
        os[n] = raw * f;
        orow[n] = i;
        n++;
      }
    }
  } else {
    const hk = scratch.keys;
    const hv = scratch.vals;
    // A floor only when it is positive and finite (NaN or ∞ from odd scores: no floor).
    const floored = guessed > 0 && guessed < Infinity;
    let size = -1;
    if (floored) {
      const n = collectScan(scores, layer, from, to, o, guessed, scratch, source);
      if (n >= cap && n - cap <= cap) return dropWorst(n, cap, layer, o, scratch);
      // Far more than the budget: a heap of the best of them; too few reached the floor: rescan without it.
      if (n >= cap) size = heapOfCandidates(n, cap, scratch);
    }
    if (size < 0) size = heapScan(scores, layer, from, to, cap, o, scratch, source);
    if (size < cap) {
      // Fewer positive cells than the budget: all of them, already in layer order.
      for (let j = 0; j < size; j++) {
        const k = hk[j]!;
        ok[j] = k;
        os[j] = hv[j]!;
        orow[j] = Math.floor(k / E);
      }
      n = size;
    } else {
      // Layer order = key order: each held cell sets its bit in its row's mask, then the rows
      // are walked in order, their set bits lowest first (urgencies computed on the way).
      const byKey = scratch.byKey;
      const W = (E + 31) >>> 5;
      const mask = scratch.rowMask(L * W);
      let sMax = 0;
      for (let j = 0; j < size; j++) {
        const k = hk[j]!;
        const v = hv[j]!;
        byKey[k] = v;
        if (v > sMax) sMax = v;
        const i = (k / E) | 0;
        const e = k - i * E;
        mask[i * W + (e >>> 5)]! |= 1 << (e & 31);
      }
      scratch.lastLayer = layer;
      scratch.lastWorst = hv[0]!;
      const nearest = o.order === 'nearest-first';
      let m = 0;
      for (let i = from; i < to; i++) {
        const mb = i * W;
        for (let w = 0; w < W; w++) {
          let bits = mask[mb + w]!;
          if (bits === 0) continue;
          mask[mb + w] = 0;
          const kb = i * E + (w << 5);
          while (bits !== 0) {
            const low = bits & -bits;
            const k = kb + 31 - Math.clz32(low);
            bits ^= low;
            const s = byKey[k]!;
            ok[m] = k;
            os[m] = s;
            ou[m] = nearest ? i - layer + (1 - s / sMax) : 1 + (1 - s / sMax);
            m++;
          }
        }
      }
      return scratch.result(m);
    }
  }
  let sMax = 0;
  for (let j = 0; j < n; j++) if (os[j]! > sMax) sMax = os[j]!;
  if (o.order === 'nearest-first') {
    for (let j = 0; j < n; j++) ou[j] = orow[j]! - layer + (1 - os[j]! / sMax);
  } else {
    for (let j = 0; j < n; j++) ou[j] = 1 + (1 - os[j]! / sMax);
  }
  return scratch.result(n);
}

/**
 * The cells of rows [from, to) at or above `floor` (> 0), in key order, into the scratch's
 * candidate arrays (key, score × proximity, row), rows whose bound is below the floor skipped;
 * their count. The highest score is left in `scratch.candMax`.
 */
function collectScan(
  scores: Float64Array,
  layer: number,
  from: number,
  to: number,
  o: RankOptions,
  floor: number,
  scratch: RankScratch,
  source?: RowSource,
): number {
  const E = o.experts;
  const L = o.layers;
  const proximity = o.proximity;
  const ck = scratch.candKeys;
  const cv = scratch.candScores;
  const cr = scratch.candRows;
  let n = 0;
  let max = 0;
  for (let i = from; i < to; i++) {
    const f = proximity ? proximityFactor(i, layer, L) : 1;
    if (source) {
      if (source.bound(i) * f < floor) continue;
      scratch.fill(source, i, scores);
    }
    const base = i * E;
    for (let e = 0; e < E; e++) {
      const raw = scores[base + e]!;
      if (!(raw > 0)) continue;
      const s = raw * f;
      if (s < floor) continue;
      ck[n] = base + e;
      cv[n] = s;
      cr[n] = i;
      if (s > max) max = s;
      n++;
    }
  }
  scratch.candMax = max;
  return n;
}

/**
 * The selection from `n` ≥ `cap` candidates (`collectScan`, key order): all but the n − cap
 * worst (score, then higher key), found with a heap of the worst held (best of them on top:
 * a candidate enters when it ranks after it), then listed in key order with urgencies. The
 * highest candidate score is the selection's s_max (the best candidate is always selected).
 */
function dropWorst(n: number, cap: number, layer: number, o: RankOptions, scratch: RankScratch): Selection {
  const cv = scratch.candScores;
  const drop = scratch.candDrop;
  const d = n - cap;
  if (d > 0) {
    // From the last candidate back (farther rows, lower proximity first: the worst are then
    // mostly met early, and nearer candidates rarely enter).
    const h = scratch.dropHeap;
    for (let j = 0; j < d; j++) h[j] = n - 1 - j;
    for (let j = (d >> 1) - 1; j >= 0; j--) siftBest(h, cv, d, j);
    for (let j = n - 1 - d; j >= 0; j--) {
      // Positions follow key order: an earlier candidate wins a tie against every held one.
      if (!(cv[h[0]!]! > cv[j]!)) continue;
      h[0] = j;
      siftBest(h, cv, d, 0);
    }
    for (let j = 0; j < d; j++) drop[h[j]!] = 1;
  }
  const ck = scratch.candKeys;
  const cr = scratch.candRows;
  const ok = scratch.outKeys;
  const os = scratch.outScores;
  const ou = scratch.outUrgency;
  const sMax = scratch.candMax;
  const nearest = o.order === 'nearest-first';
  let worst = Infinity;
  let m = 0;
  for (let j = 0; j < n; j++) {
    if (drop[j] !== 0) {
      drop[j] = 0;
      continue;
    }
    const s = cv[j]!;
    if (s < worst) worst = s;
    ok[m] = ck[j]!;
    os[m] = s;
    ou[m] = nearest ? cr[j]! - layer + (1 - s / sMax) : 1 + (1 - s / sMax);
    m++;
  }
  scratch.lastLayer = layer;
  scratch.lastWorst = worst;
  return scratch.result(m);
}

/**
 * The best `cap` of `n` ≥ `cap` ≥ 1 candidates of a floored scan into the scratch's heap (worst
 * on top), as `heapScan` builds it over those cells: the candidates are in key order, so the
 * same appends, the same heapify and the same replacements (a candidate enters only with a
 * strictly higher score than the worst held). Returns `cap`.
 */
function heapOfCandidates(n: number, cap: number, scratch: RankScratch): number {
  const ck = scratch.candKeys;
  const cv = scratch.candScores;
  const hk = scratch.keys;
  const hv = scratch.vals;
  for (let j = 0; j < cap; j++) {
    hk[j] = ck[j]!;
    hv[j] = cv[j]!;
  }
  for (let j = (cap >> 1) - 1; j >= 0; j--) siftDown(hk, hv, cap, j);
  for (let j = cap; j < n; j++) {
    const s = cv[j]!;
    if (!(s > hv[0]!)) continue;
    hk[0] = ck[j]!;
    hv[0] = s;
    siftDown(hk, hv, cap, 0);
  }
  return cap;
}

/**
 * Restores the heap of candidate positions `h` (best on top: higher score, then lower position)
 * below `j`.
 */
function siftBest(h: Int32Array, v: Float64Array, size: number, j: number): void {
  const x = h[j]!;
  const vx = v[x]!;
  for (;;) {
    let c = 2 * j + 1;
    if (c >= size) break;
    let pc = h[c]!;
    let vc = v[pc]!;
    if (c + 1 < size) {
      const pr = h[c + 1]!;
      const vr = v[pr]!;
      if (vr > vc || (vr === vc && pr < pc)) {
        c++;
        pc = pr;
        vc = vr;
      }
    }
    if (!(vc > vx || (vc === vx && pc < x))) break;
    h[j] = pc;
    j = c;
  }
  h[j] = x;
}

/** Fraction of the previous layer's worst selected score taken as the next ranking's floor. */
export const FLOOR_GUESS = 0.9;

/**
 * The scan of `selectPrefetch` (cap < the horizon's cells, no floor): the best `cap` cells of
 * rows [from, to) into the scratch's heap (`keys` / `vals`) — a min-heap (worst on top) when
 * `cap` are held, else the cells in key order — and their count. Rows a floored scan of the
 * same call computed are read, not computed again.
 */
function heapScan(
  scores: Float64Array,
  layer: number,
  from: number,
  to: number,
  cap: number,
  o: RankOptions,
  scratch: RankScratch,
  source?: RowSource,
): number {
  // The best `cap` cells: appended in row order until `cap` are held (no heap work when
  // fewer exist: already in layer order), then a min-heap (worst on top). Keys grow along
  // the scan, so a new cell tied with the worst held one ranks after it: only a strictly
  // higher score enters.
  const E = o.experts;
  const L = o.layers;
  const proximity = o.proximity;
  const hk = scratch.keys;
  const hv = scratch.vals;
  let size = 0;
  let isHeap = false;
  for (let i = from; i < to; i++) {
    const f = proximity ? proximityFactor(i, layer, L) : 1;
    if (source) {
      if (isHeap && !(source.bound(i) * f > hv[0]!)) continue;
      scratch.fill(source, i, scores);
    }
    const base = i * E;
    let e = 0;
    if (!isHeap) {
      for (; e < E; e++) {
        const raw = scores[base + e]!;
        if (!(raw > 0)) continue;
        hk[size] = base + e;
        hv[size] = raw * f;
        if (++size === cap) {
          for (let j = (size >> 1) - 1; j >= 0; j--) siftDown(hk, hv, size, j);
          isHeap = true;
          e++;
          break;
        }
      }
    }
    for (; e < E; e++) {
      const raw = scores[base + e]!;
      if (!(raw > 0)) continue;
      const s = raw * f;
      // Worse than (or tied after) the worst kept: skip.
      if (!(s > hv[0]!)) continue;
      hk[0] = base + e;
      hv[0] = s;
      siftDown(hk, hv, size, 0);
    }
  }
  return size;
}

/**
 * The ranked set in exact queue order (nearest-first: layer, then score descending, then
 * key; score: score descending, then key). The reference `selectPrefetch`'s urgencies follow.
 * When `scoresOut` is given it receives each returned key's score × proximity, in order.
 */
export function rankPrefetch(
  scores: Float64Array,
  layer: number,
  budget: number,
  o: RankOptions,
  scratch = new RankScratch(),
  scoresOut?: number[],
): ExpertKey[] {
  const sel = selectPrefetch(scores, layer, budget, o, scratch);
  const E = o.experts;
  const idx = Array.from({ length: sel.count }, (_, j) => j);
  const k = sel.keys;
  const v = sel.scores;
  if (o.order === 'nearest-first')
    idx.sort((a, b) => Math.floor(k[a]! / E) - Math.floor(k[b]! / E) || v[b]! - v[a]! || k[a]! - k[b]!);
  else idx.sort((a, b) => v[b]! - v[a]! || k[a]! - k[b]!);
  if (scoresOut) {
    scoresOut.length = 0;
    for (const j of idx) scoresOut.push(v[j]!);
  }
  return idx.map((j) => k[j]!);
}

/**
 * Restores the min-heap (worst cell on top) below `j`: the cell at `j` moves down past every
 * child it ranks before (a hole moves down; no double crosses a call).
 */
function siftDown(k: Int32Array, v: Float64Array, size: number, j: number): void {
  const key = k[j]!;
  const val = v[j]!;
  for (;;) {
    const l = 2 * j + 1;
    if (l >= size) break;
    const r = l + 1;
    // The worse child (the one that ranks after the other).
    let w = l;
    let kw = k[l]!;
    let vw = v[l]!;
    if (r < size) {
      const kr = k[r]!;
      const vr = v[r]!;
      if (vw > vr || (vw === vr && kw < kr)) {
        w = r;
        kw = kr;
        vw = vr;
      }
    }
    if (!(val > vw || (val === vw && key < kw))) break;
    k[j] = kw;
    v[j] = vw;
    j = w;
  }
  k[j] = key;
  v[j] = val;
}

/** Dependency prefetch: the first `count` experts of layer l+1 in expert order (none after the last layer). */
export function dependencyRanking(
  layer: number,
  layers: number,
  experts: number,
  count: number,
  budget: number,
): ExpertKey[] {
  if (layer + 1 >= layers) return [];
  const n = Math.max(0, Math.min(count, experts, budget));
  return Array.from({ length: n }, (_, e) => (layer + 1) * experts + e);
}

/** `dependencyRanking` as a selection (urgency 1 + position, score 1). */
export function dependencySelection(
  layer: number,
  layers: number,
  experts: number,
  count: number,
  budget: number,
): Selection {
  const keys = Int32Array.from(dependencyRanking(layer, layers, experts, count, budget));
  return {
    count: keys.length,
    keys,
    scores: new Float64Array(keys.length).fill(1),
    urgency: Float64Array.from(keys, (_, j) => 1 + j),
  };
}

/**
 * A max-heap of selection positions by score (ties: lower key first): the admission order.
 * Reusable: write the positions into `a`, then `build`.
 */
export class MaxScoreHeap {
  /** The positions (the heap once built). */
  a = new Int32Array(64);
  size = 0;
  private score: Float64Array = new Float64Array(0);
  private key: Int32Array = new Int32Array(0);

  /** Room for `n` positions in `a` (its content is lost when it grows). */
  ensure(n: number): Int32Array {
    if (this.a.length < n) this.a = new Int32Array(n * 2);
    return this.a;
  }

  /** Orders positions a[0 … count) by `score` (then `key`). */
  build(count: number, score: Float64Array, key: Int32Array): void {
    this.size = count;
    this.score = score;
    this.key = key;
    for (let j = (count >> 1) - 1; j >= 0; j--) this.down(j, this.a[j]!);
  }

  /** Moves the hole at `j` down until position `x` fits there. */
  private down(j: number, x: number): void {
    const a = this.a;
    const n = this.size;
    const score = this.score;
    const key = this.key;
    const sx = score[x]!;
    const kx = key[x]!;
    for (;;) {
      const l = 2 * j + 1;
      if (l >= n) break;
      const r = l + 1;
      let m = l;
      let pm = a[l]!;
      let sm = score[pm]!;
      if (r < n) {
        const pr = a[r]!;
        const sr = score[pr]!;
        if (sr > sm || (sr === sm && key[pr]! < key[pm]!)) {
          m = r;
          pm = pr;
          sm = sr;
        }
      }
      if (!(sm > sx || (sm === sx && key[pm]! < kx))) break;
      a[j] = pm;
      j = m;
    }
    a[j] = x;
  }

  pop(): number {
    const a = this.a;
    const top = a[0]!;
    const last = a[--this.size]!;
    if (this.size > 0) this.down(0, last);
    return top;
  }
}

/**
 * The prefetches this policy has in flight, and the decision that turns a new ranked set into
 * cancellations, re-prioritisations and new prefetches.
 */
export class PrefetchQueue {
  /** Keys this policy asked to prefetch that may still be loading, in the order they were issued. */
  private issued: Int32Array;
  private issuedCount = 0;
  /** Urgency of the current ranked set's keys, valid where `stamp[key] === gen`. */
  private readonly urgencyOf: Float64Array;
  private readonly stamp: Uint32Array;
  private gen = 0;
  private fresh: Int32Array;
  /** Marks keys added to `issued` by the current call (an admitted key listed twice is issued once). */
  private readonly issuedGen: Uint32Array;

  /** @param cells L × E (keys are below it). */
  constructor(cells: number) {
    this.urgencyOf = new Float64Array(cells);
    this.stamp = new Uint32Array(cells);
    this.issued = new Int32Array(Math.max(16, cells));
    this.fresh = new Int32Array(Math.max(16, cells));
    this.issuedGen = new Uint32Array(cells);
  }

  /** Keys possibly still loading on this policy's behalf (for tests and metrics). */
  get outstanding(): ReadonlySet<ExpertKey> {
    return new Set(this.issued.subarray(0, this.issuedCount));
  }

  /**
   * Decision for the ranked set `sel`: cancel loading prefetches of ours that left it,
   * re-prioritise the loading members to their urgency, and prefetch the `admitted` keys
   * (absent members of the set; the first `admittedCount`), most urgent first, at their urgency.
   */
  plan(
    buffer: BufferView,
    sel: Selection,
    admitted: ArrayLike<ExpertKey>,
    admittedCount = admitted.length,
  ): PolicyDecision {
    const gen = ++this.gen;
    const urgencyOf = this.urgencyOf;
    const stamp = this.stamp;
    const selKeys = sel.keys;
    const selUrgency = sel.urgency;
    for (let j = 0, n = sel.count; j < n; j++) {
      const k = selKeys[j]!;
      urgencyOf[k] = selUrgency[j]!;
      stamp[k] = gen;
    }
    const cancel: ExpertKey[] = [];
    const prefetch: PrefetchRequest[] = [];
    // In issue order; keys no longer ours are dropped, the others keep their order.
    const issued = this.issued;
    let kept = 0;
    for (let r = 0; r < this.issuedCount; r++) {
      const k = issued[r]!;
      const e = buffer.entry(k);
      // Completed, dropped, cancelled, or now needed by the GPU (pinned): no longer ours.
      if (!e || e.state !== 'loading' || e.pinned) continue;
      if (stamp[k] !== gen) {
        cancel.push(k);
        continue;
      }
      prefetch.push({ key: k, priority: urgencyOf[k]! });
      issued[kept++] = k;
    }
    this.issuedCount = kept;
    // Fresh prefetches, most urgent first (ties: lower key); few, so an insertion sort.
    if (this.fresh.length < admittedCount) this.fresh = new Int32Array(admittedCount * 2);
    const fresh = this.fresh;
    let f = 0;
    for (let j = 0; j < admittedCount; j++) {
      const k = admitted[j]!;
      if (stamp[k] !== gen || buffer.has(k)) continue;
      const u = urgencyOf[k]!;
      let p = f++;
      while (p > 0) {
        const q = fresh[p - 1]!;
        const uq = urgencyOf[q]!;
        if (!(u < uq || (u === uq && k < q))) break;
        fresh[p] = q;
        p--;
      }
      fresh[p] = k;
    }
    if (this.issuedCount + f > issued.length) {
      const grown = new Int32Array((this.issuedCount + f) * 2);
      grown.set(issued.subarray(0, this.issuedCount));
      this.issued = grown;
    }
    for (let j = 0; j < f; j++) {
      const k = fresh[j]!;
      prefetch.push({ key: k, priority: urgencyOf[k]! });
      if (this.issuedGen[k] === gen) continue;
      this.issuedGen[k] = gen;
      this.issued[this.issuedCount++] = k;
    }
    return { cancel, prefetch };
  }

  /** Forgets everything (keys no longer loading are dropped lazily anyway). */
  clear(): void {
    this.issuedCount = 0;
  }
}
