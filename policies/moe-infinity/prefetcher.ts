/**
 * MoE-Infinity's prefetcher (DESIGN §8, "Prefetch"): activation probabilities → a ranked
 * multi-layer prefetch through one sequential PCIe queue, re-ranked and cancelled as rows of
 * the iteration EAM arrive.
 *
 * 1. Activation probabilities. After layer l is routed, each matched iteration EAM's best
 *    EAMC entries are summed (`MatchAggregate`) and each row normalised: p(i, e) = share of the
 *    matched requests' tokens at layer i routed to e. A batch's score of (i, e) is the expected
 *    number of its tokens routed there, Σ_r tokens_r · p_r(i, e) (`accumulateScores`): for one
 *    request it ranks exactly as the paper's activation ratio.
 * 2. Proximity. Future layer i is scaled by 1 − (i − l)/L (`layerProximity`); layers
 *    l+1 … l+horizon are considered (horizon = all remaining layers with
 *    `multiLayerPrefetch`, else 1).
 * 3. Ranking. The `budget` best cells (score > 0; ties: nearer layer, then lower expert) form
 *    the ranked set, queued nearest layer first (then by score) — or purely by score with
 *    `queueOrder: 'score'` — with priorities 1, 2, … (lower is more urgent) on the one H2D
 *    queue.
 * 4. Re-ranking (`PrefetchQueue.plan`). At every layer the ranked set is recomputed: still
 *    queued prefetches in it are re-prioritised, ones no longer in it are cancelled (only
 *    while loading: completed ones stay cached, and a prefetch the GPU now needs is the
 *    executor's, pinned, never cancelled), new ones are issued. Resident members of the set
 *    are protected from eviction (cache priority maximal, `cache-priority.ts`).
 *
 * Without request tracing (`dependencyRanking`): the first n experts of layer l+1 in expert
 * order — DeepSpeed-style dependency prefetch, the first row of the paper's ablation.
 */
import type { BufferView, ExpertKey, PolicyDecision, PrefetchRequest } from '../../sim/serving/policy.ts';
import type { MatchAggregate } from './eam-collection.ts';

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

/**
 * Adds `weight` × the aggregate's row-normalised shares of rows [from, to) into `out`
 * (L×E, row-major): the expected tokens routed to each cell by `weight` tokens that follow
 * the matched EAMs.
 */
export function accumulateScores(out: Float64Array, agg: MatchAggregate, weight: number, experts: number, from: number, to: number): void {
  for (let i = from; i < to; i++) {
    const tot = agg.rowTotal[i]!;
    if (!(tot > 0)) continue;
    const f = weight / tot;
    const base = i * experts;
    for (let e = 0; e < experts; e++) out[base + e]! += f * agg.sum[base + e]!;
  }
}

/** Scratch for `selectPrefetch`, reusable across calls (the returned selection lives in it). */
export class RankScratch {
  /** Heap of the selection (cell indices and their scores). */
  keys = new Int32Array(64);
  vals = new Float64Array(64);
  /** Positive cells in layer order, and whether each is selected. */
  cellKeys = new Int32Array(64);
  cellVals = new Float64Array(64);
  selected = new Uint8Array(64);
  /** The selection. */
  outKeys = new Int32Array(64);
  outScores = new Float64Array(64);
  outUrgency = new Float64Array(64);
  ensure(heap: number, cells: number): void {
    if (this.keys.length < heap) {
      this.keys = new Int32Array(heap * 2);
      this.vals = new Float64Array(heap * 2);
    }
    if (this.cellKeys.length < cells) {
      this.cellKeys = new Int32Array(cells * 2);
      this.cellVals = new Float64Array(cells * 2);
      this.selected = new Uint8Array(cells * 2);
      this.outKeys = new Int32Array(cells * 2);
      this.outScores = new Float64Array(cells * 2);
      this.outUrgency = new Float64Array(cells * 2);
    }
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
 * order, with urgencies. O(K log budget) for K cells, no sort. The result lives in `scratch`.
 */
export function selectPrefetch(scores: Float64Array, layer: number, budget: number, o: RankOptions, scratch: RankScratch): Selection {
  const E = o.experts;
  const { from, to } = horizonRows(layer, o);
  scratch.ensure(Math.max(0, budget) + 1, Math.max(0, to - from) * E);
  const empty = { count: 0, keys: scratch.outKeys, scores: scratch.outScores, urgency: scratch.outUrgency };
  if (budget <= 0) return empty;
  // 1. Positive cells, in layer (then expert) order.
  const ck = scratch.cellKeys;
  const cv = scratch.cellVals;
  let cells = 0;
  for (let i = from; i < to; i++) {
    const f = o.proximity ? proximityFactor(i, layer, o.layers) : 1;
    const base = i * E;
    for (let e = 0; e < E; e++) {
      const raw = scores[base + e]!;
      if (!(raw > 0)) continue;
      ck[cells] = base + e;
      cv[cells] = raw * f;
      cells++;
    }
  }
  // 2. Select the best `budget` (a min-heap of cell indices, worst on top), unless all fit.
  const sel = scratch.selected;
  if (cells <= budget) {
    sel.fill(1, 0, cells);
  } else {
    sel.fill(0, 0, cells);
    const hk = scratch.keys;
    const hv = scratch.vals;
    let size = 0;
    for (let c = 0; c < cells; c++) {
      const s = cv[c]!;
      const key = ck[c]!;
      if (size === budget) {
        // Worse than (or tied after) the worst kept: skip.
        if (!before(s, key, hv[0]!, ck[hk[0]!]!)) continue;
        hk[0] = c;
        hv[0] = s;
        siftDown(hk, hv, ck, size, 0);
      } else {
        let j = size++;
        hk[j] = c;
        hv[j] = s;
        while (j > 0) {
          const p = (j - 1) >> 1;
          if (!before(hv[p]!, ck[hk[p]!]!, hv[j]!, ck[hk[j]!]!)) break; // parent is worse: heap holds
          swap(hk, hv, j, p);
          j = p;
        }
      }
    }
    for (let j = 0; j < size; j++) sel[hk[j]!] = 1;
  }
  // 3. Compact, with urgencies.
  const ok = scratch.outKeys;
  const os = scratch.outScores;
  const ou = scratch.outUrgency;
  let n = 0;
  let sMax = 0;
  for (let c = 0; c < cells; c++) {
    if (!sel[c]) continue;
    ok[n] = ck[c]!;
    os[n] = cv[c]!;
    if (cv[c]! > sMax) sMax = cv[c]!;
    n++;
  }
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

/** Restores the min-heap (worst cell on top) below `j`; `k` holds cell indices into `keys`. */
function siftDown(k: Int32Array, v: Float64Array, keys: Int32Array, size: number, j: number): void {
  for (;;) {
    const l = 2 * j + 1;
    if (l >= size) return;
    const r = l + 1;
    // The worse child (the one that ranks after the other).
    const w = r < size && before(v[l]!, keys[k[l]!]!, v[r]!, keys[k[r]!]!) ? r : l;
    if (!before(v[j]!, keys[k[j]!]!, v[w]!, keys[k[w]!]!)) return;
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
