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

/** Scratch for `rankPrefetch`, reusable across calls. */
export class RankScratch {
  keys = new Int32Array(64);
  vals = new Float64Array(64);
  ensure(n: number): void {
    if (this.keys.length < n) {
      this.keys = new Int32Array(n * 2);
      this.vals = new Float64Array(n * 2);
    }
  }
}

/** a ranks before b: higher score, then lower key (nearer layer, then lower expert). */
const before = (sa: number, ka: number, sb: number, kb: number): boolean => sa > sb || (sa === sb && ka < kb);

/**
 * The ranked set at layer `layer`: the `budget` best cells of rows l+1 … l+horizon of
 * `scores` (score × proximity, score > 0), in queue order. Pure; O(K log budget) for K cells.
 */
export function rankPrefetch(scores: Float64Array, layer: number, budget: number, o: RankOptions, scratch = new RankScratch()): ExpertKey[] {
  if (budget <= 0) return [];
  const E = o.experts;
  const { from, to } = horizonRows(layer, o);
  scratch.ensure(budget + 1);
  // A min-heap (worst on top) of the best `budget` cells.
  const hk = scratch.keys;
  const hv = scratch.vals;
  let size = 0;
  for (let i = from; i < to; i++) {
    const f = o.proximity ? proximityFactor(i, layer, o.layers) : 1;
    const base = i * E;
    for (let e = 0; e < E; e++) {
      const raw = scores[base + e]!;
      if (!(raw > 0)) continue;
      const s = raw * f;
      const key = base + e;
      if (size === budget) {
        // Worse than (or tied after) the worst kept: skip.
        if (!before(s, key, hv[0]!, hk[0]!)) continue;
        hk[0] = key;
        hv[0] = s;
        siftDown(hk, hv, size, 0);
      } else {
        let j = size++;
        hk[j] = key;
        hv[j] = s;
        while (j > 0) {
          const p = (j - 1) >> 1;
          if (!before(hv[p]!, hk[p]!, hv[j]!, hk[j]!)) break; // parent is worse: heap holds
          swap(hk, hv, j, p);
          j = p;
        }
      }
    }
  }
  const picked: { key: number; s: number }[] = [];
  for (let j = 0; j < size; j++) picked.push({ key: hk[j]!, s: hv[j]! });
  if (o.order === 'nearest-first') {
    picked.sort((a, b) => Math.floor(a.key / E) - Math.floor(b.key / E) || b.s - a.s || a.key - b.key);
  } else {
    picked.sort((a, b) => b.s - a.s || a.key - b.key);
  }
  return picked.map((p) => p.key);
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

/**
 * The prefetches this policy has in flight, and the decision that turns a new ranked set into
 * cancellations, re-prioritisations and new prefetches.
 */
export class PrefetchQueue {
  /** Keys this policy asked to prefetch that may still be loading. */
  private readonly issued = new Set<ExpertKey>();

  /** Keys possibly still loading on this policy's behalf (for tests and metrics). */
  get outstanding(): ReadonlySet<ExpertKey> {
    return this.issued;
  }

  /**
   * Decision for the ranked set `ranked` (queue order): cancel loading prefetches of ours that
   * left the set, (re-)issue every non-resident member with priority 1 + its position.
   */
  plan(buffer: BufferView, ranked: readonly ExpertKey[]): PolicyDecision {
    const want = new Set(ranked);
    const cancel: ExpertKey[] = [];
    for (const k of this.issued) {
      const e = buffer.entry(k);
      // Completed, dropped, cancelled, or now needed by the GPU (pinned): no longer ours.
      if (!e || e.state !== 'loading' || e.pinned) {
        this.issued.delete(k);
        continue;
      }
      if (!want.has(k)) {
        cancel.push(k);
        this.issued.delete(k);
      }
    }
    const prefetch: PrefetchRequest[] = [];
    for (let j = 0; j < ranked.length; j++) {
      const k = ranked[j]!;
      const e = buffer.entry(k);
      if (e && (e.state === 'resident' || e.pinned)) continue;
      prefetch.push({ key: k, priority: 1 + j });
      this.issued.add(k);
    }
    return { cancel, prefetch };
  }

  /** Forgets everything (keys no longer loading are dropped lazily anyway). */
  clear(): void {
    this.issued.clear();
  }
}
