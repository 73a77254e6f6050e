/**
 * The types and reusable scratch of MoE-Infinity's prefetch ranking (`prefetch-rank.ts`): the
 * ranking options, a ranked set (`Selection`), the row source it reads scores from, and the
 * arrays one ranking after another reuses (no allocation per layer).
 */

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
  /**
   * Which way each `selectPrefetch` call went, for tests (the ways give the same selection;
   * speed only): every cell fitting, a floored scan whose worst were dropped or whose best
   * were heaped, a floored scan that fell short and the plain scan after it, the plain scan
   * alone; and rows a rescan read rather than computed again.
   */
  readonly paths = { all: 0, dropWorst: 0, heapOfCandidates: 0, rescan: 0, scan: 0, rowsReused: 0 };
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
    if (this.filledAt[i] === this.call) {
      this.paths.rowsReused++;
      return;
    }
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
