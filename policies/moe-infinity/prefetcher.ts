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
 *    beat the cells already held) form the ranked set, queued nearest layer first (then by score) — or
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
export class ScoreAccumulator implements RowSource {
  private readonly perCollection = new Map<EamCollection, { slot: Int32Array; stamp: Uint32Array }>();
  private gen = 0;
  private coef = new Float64Array(0);
  private bounds = new Float64Array(0);
  /** Distinct matched entries of the current preparation: collection and index. */
  private readonly entryColl: EamCollection[] = [];
  private entryN = new Int32Array(16);
  private entries = 0;
  private from = 0;
  private rows = 0;

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
    const rows = Math.max(0, to - from);
    this.from = from;
    this.rows = rows;
    this.entries = 0;
    const gen = ++this.gen;
    let memberships = 0;
    for (const g of groups) memberships += g.count;
    if (this.coef.length < memberships * rows) this.coef = new Float64Array(memberships * rows * 2);
    if (this.entryN.length < memberships) this.entryN = new Int32Array(memberships * 2);
    if (this.bounds.length < rows) this.bounds = new Float64Array(L);
    const coef = this.coef;
    for (const g of groups) {
      if (g.count === 0 || !(g.weight > 0)) continue;
      const coll = g.collection;
      const { rowTotal } = coll.internals;
      const sl = this.slots(coll);
      for (let i = from; i < to; i++) {
        let tot = 0;
        for (let j = 0; j < g.count; j++) tot += rowTotal[g.top[j]! * L + i]!;
        if (!(tot > 0)) continue;
        const c = g.weight / tot;
        for (let j = 0; j < g.count; j++) {
          const n = g.top[j]!;
          let u: number;
          if (sl.stamp[n] === gen) {
            u = sl.slot[n]!;
          } else {
            u = this.entries++;
            this.entryColl[u] = coll;
            this.entryN[u] = n;
            sl.stamp[n] = gen;
            sl.slot[n] = u;
            coef.fill(0, u * rows, (u + 1) * rows);
          }
          coef[u * rows + (i - from)]! += c;
        }
      }
    }
    const bounds = this.bounds;
    bounds.fill(0, 0, rows);
    for (let u = 0; u < this.entries; u++) {
      const n = this.entryN[u]!;
      const rowMax = this.entryColl[u]!.internals.rowMax;
      for (let r = 0; r < rows; r++) bounds[r]! += coef[u * rows + r]! * rowMax[n * L + from + r]!;
    }
  }

  /** Upper bound of max_e score(i, e) (after `prepare`). */
  bound(i: number): number {
    const r = i - this.from;
    return r >= 0 && r < this.rows ? this.bounds[r]! : 0;
  }

  /** Writes row i's scores into `out` (L×E) (after `prepare`). */
  fill(i: number, out: Float64Array): void {
    const { layers: L, experts: E } = this.shape;
    const rb = i * E;
    out.fill(0, rb, rb + E);
    const r = i - this.from;
    if (r < 0 || r >= this.rows) return;
    const rows = this.rows;
    const coef = this.coef;
    for (let u = 0; u < this.entries; u++) {
      const c = coef[u * rows + r]!;
      if (c === 0) continue;
      const stored = this.entryColl[u]!.internals.rows;
      const base = this.entryN[u]! * L * E + rb;
      for (let e = 0; e < E; e++) out[rb + e]! += c * stored[base + e]!;
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
  /** The selection. */
  outKeys = new Int32Array(64);
  outScores = new Float64Array(64);
  outUrgency = new Float64Array(64);
  ensure(heap: number, cells: number, keys: number): void {
    if (this.keys.length < heap) {
      this.keys = new Int32Array(heap * 2);
      this.vals = new Float64Array(heap * 2);
    }
    if (this.outKeys.length < cells) {
      this.outKeys = new Int32Array(cells * 2);
      this.outScores = new Float64Array(cells * 2);
      this.outUrgency = new Float64Array(cells * 2);
    }
    if (this.byKey.length < keys) this.byKey = new Float64Array(keys);
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

/** a ranks before b: higher score, then lower key (nearer layer, then lower expert). */
const before = (sa: number, ka: number, sb: number, kb: number): boolean => sa > sb || (sa === sb && ka < kb);

/**
 * The ranked set at layer `layer`: the `budget` best cells of rows l+1 … l+horizon of
 * `scores` (score × proximity, score > 0; ties: nearer layer, then lower expert), in layer
 * order, with urgencies. Rows are scanned nearest first into a heap of the best `budget`
 * (O(K log budget) for K cells, no sort of the whole set); with a `source`, each row is
 * computed into `scores` only if its upper bound × proximity can beat the worst cell held
 * (cells of later rows lose ties, so a bound equal to it cannot). The result lives in
 * `scratch`.
 */
export function selectPrefetch(scores: Float64Array, layer: number, budget: number, o: RankOptions, scratch: RankScratch, source?: RowSource): Selection {
  const E = o.experts;
  const { from, to } = horizonRows(layer, o);
  const maxCells = Math.max(0, to - from) * E;
  const cap = Math.max(0, Math.min(budget, maxCells));
  scratch.ensure(cap + 1, cap, o.layers * E);
  if (cap <= 0) return { count: 0, keys: scratch.outKeys, scores: scratch.outScores, urgency: scratch.outUrgency };
  const ok = scratch.outKeys;
  const os = scratch.outScores;
  const ou = scratch.outUrgency;
  let n = 0;
  if (cap === maxCells) {
    // Every positive cell fits: no selection, already in layer order.
    for (let i = from; i < to; i++) {
      if (source) source.fill(i, scores);
      const f = o.proximity ? proximityFactor(i, layer, o.layers) : 1;
      for (let e = 0; e < E; e++) {
        const raw = scores[i * E + e]!;
        if (!(raw > 0)) continue;
        ok[n] = i * E + e;
        os[n] = raw * f;
        n++;
      }
    }
  } else {
    // The best `cap` cells: appended in row order until `cap` are held (no heap work when
    // fewer exist: already in layer order), then a min-heap (worst on top).
    const hk = scratch.keys;
    const hv = scratch.vals;
    let size = 0;
    let isHeap = false;
    for (let i = from; i < to; i++) {
      const f = o.proximity ? proximityFactor(i, layer, o.layers) : 1;
      if (source) {
        if (isHeap && !(source.bound(i) * f > hv[0]!)) continue;
        source.fill(i, scores);
      }
      const base = i * E;
      for (let e = 0; e < E; e++) {
        const raw = scores[base + e]!;
        if (!(raw > 0)) continue;
        const s = raw * f;
        const key = base + e;
        if (!isHeap) {
          hk[size] = key;
          hv[size] = s;
          if (++size === cap) {
            for (let j = (size >> 1) - 1; j >= 0; j--) siftDown(hk, hv, size, j);
            isHeap = true;
          }
          continue;
        }
        // Worse than (or tied after) the worst kept: skip.
        if (!before(s, key, hv[0]!, hk[0]!)) continue;
        hk[0] = key;
        hv[0] = s;
        siftDown(hk, hv, size, 0);
      }
    }
    if (!isHeap) {
      ok.set(hk.subarray(0, size));
      os.set(hv.subarray(0, size));
    } else {
      // Layer order = key order.
      const byKey = scratch.byKey;
      for (let j = 0; j < size; j++) byKey[hk[j]!] = hv[j]!;
      const sorted = hk.subarray(0, size).slice().sort();
      for (let j = 0; j < size; j++) {
        ok[j] = sorted[j]!;
        os[j] = byKey[sorted[j]!]!;
      }
    }
    n = size;
  }
  let sMax = 0;
  for (let j = 0; j < n; j++) if (os[j]! > sMax) sMax = os[j]!;
  for (let j = 0; j < n; j++) {
    const rel = 1 - os[j]! / sMax;
    ou[j] = o.order === 'nearest-first' ? Math.floor(ok[j]! / E) - layer + rel : 1 + rel;
  }
  return { count: n, keys: ok, scores: os, urgency: ou };
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
  if (o.order === 'nearest-first') idx.sort((a, b) => Math.floor(k[a]! / E) - Math.floor(k[b]! / E) || v[b]! - v[a]! || k[a]! - k[b]!);
  else idx.sort((a, b) => v[b]! - v[a]! || k[a]! - k[b]!);
  if (scoresOut) {
    scoresOut.length = 0;
    for (const j of idx) scoresOut.push(v[j]!);
  }
  return idx.map((j) => k[j]!);
}

function swap(k: Int32Array, v: Float64Array, a: number, b: number): void {
  const tk = k[a]!;
  k[a] = k[b]!;
  k[b] = tk;
  const tv = v[a]!;
  v[a] = v[b]!;
  v[b] = tv;
}

/** Restores the min-heap (worst cell on top) below `j`. */
function siftDown(k: Int32Array, v: Float64Array, size: number, j: number): void {
  for (;;) {
    const l = 2 * j + 1;
    if (l >= size) return;
    const r = l + 1;
    // The worse child (the one that ranks after the other).
    const w = r < size && before(v[l]!, k[l]!, v[r]!, k[r]!) ? r : l;
    if (!before(v[j]!, k[j]!, v[w]!, k[w]!)) return;
    swap(k, v, j, w);
    j = w;
  }
}

/** Dependency prefetch: the first `count` experts of layer l+1 in expert order (none after the last layer). */
export function dependencyRanking(layer: number, layers: number, experts: number, count: number, budget: number): ExpertKey[] {
  if (layer + 1 >= layers) return [];
  const n = Math.max(0, Math.min(count, experts, budget));
  return Array.from({ length: n }, (_, e) => (layer + 1) * experts + e);
}

/** `dependencyRanking` as a selection (urgency 1 + position, score 1). */
export function dependencySelection(layer: number, layers: number, experts: number, count: number, budget: number): Selection {
  const keys = Int32Array.from(dependencyRanking(layer, layers, experts, count, budget));
  return { count: keys.length, keys, scores: new Float64Array(keys.length).fill(1), urgency: Float64Array.from(keys, (_, j) => 1 + j) };
}

/** A max-heap of selection positions by score (ties: lower key first): the admission order. */
export class MaxScoreHeap {
  private readonly a: number[];
  constructor(
    positions: number[],
    private readonly score: Float64Array,
    private readonly key: Int32Array,
  ) {
    this.a = positions;
    for (let j = (this.a.length >> 1) - 1; j >= 0; j--) this.down(j);
  }
  get size(): number {
    return this.a.length;
  }
  private better(x: number, y: number): boolean {
    const sx = this.score[x]!;
    const sy = this.score[y]!;
    return sx > sy || (sx === sy && this.key[x]! < this.key[y]!);
  }
  private down(j: number): void {
    const a = this.a;
    for (;;) {
      const l = 2 * j + 1;
      if (l >= a.length) return;
      const r = l + 1;
      const m = r < a.length && this.better(a[r]!, a[l]!) ? r : l;
      if (!this.better(a[m]!, a[j]!)) return;
      const t = a[m]!;
      a[m] = a[j]!;
      a[j] = t;
      j = m;
    }
  }
  pop(): number {
    const a = this.a;
    const top = a[0]!;
    const last = a.pop()!;
    if (a.length > 0) {
      a[0] = last;
      this.down(0);
    }
    return top;
  }
}

/**
 * The prefetches this policy has in flight, and the decision that turns a new ranked set into
 * cancellations, re-prioritisations and new prefetches.
 */
export class PrefetchQueue {
  /** Keys this policy asked to prefetch that may still be loading. */
  private readonly issued = new Set<ExpertKey>();
  /** Urgency of the current ranked set's keys, valid where `stamp[key] === gen`. */
  private readonly urgencyOf: Float64Array;
  private readonly stamp: Uint32Array;
  private gen = 0;

  /** @param cells L × E (keys are below it). */
  constructor(cells: number) {
    this.urgencyOf = new Float64Array(cells);
    this.stamp = new Uint32Array(cells);
  }

  /** Keys possibly still loading on this policy's behalf (for tests and metrics). */
  get outstanding(): ReadonlySet<ExpertKey> {
    return this.issued;
  }

  /**
   * Decision for the ranked set `sel`: cancel loading prefetches of ours that left it,
   * re-prioritise the loading members to their urgency, and prefetch the `admitted` keys
   * (absent members of the set), most urgent first, at their urgency.
   */
  plan(buffer: BufferView, sel: Selection, admitted: readonly ExpertKey[]): PolicyDecision {
    const gen = ++this.gen;
    for (let j = 0; j < sel.count; j++) {
      this.urgencyOf[sel.keys[j]!] = sel.urgency[j]!;
      this.stamp[sel.keys[j]!] = gen;
    }
    const cancel: ExpertKey[] = [];
    const prefetch: PrefetchRequest[] = [];
    for (const k of this.issued) {
      const e = buffer.entry(k);
      // Completed, dropped, cancelled, or now needed by the GPU (pinned): no longer ours.
      if (!e || e.state !== 'loading' || e.pinned) {
        this.issued.delete(k);
      } else if (this.stamp[k] !== gen) {
        cancel.push(k);
        this.issued.delete(k);
      } else {
        prefetch.push({ key: k, priority: this.urgencyOf[k]! });
      }
    }
    const fresh = admitted.filter((k) => this.stamp[k] === gen && !buffer.has(k));
    fresh.sort((a, b) => this.urgencyOf[a]! - this.urgencyOf[b]! || a - b);
    for (const k of fresh) {
      prefetch.push({ key: k, priority: this.urgencyOf[k]! });
      this.issued.add(k);
    }
    return { cancel, prefetch };
  }

  /** Forgets everything (keys no longer loading are dropped lazily anyway). */
  clear(): void {
    this.issued.clear();
  }
}
