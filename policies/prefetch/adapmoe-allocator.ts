/**
 * AdapMoE's cache-size allocator (PKU-SEC-Lab/AdapMoE `src/dp.py`), fed by statistics observed
 * online.
 *
 * The original: a dynamic programme picks per-layer cache sizes s_l ≥ 1 with Σ s_l = T that
 * minimise the expected number of on-demand loads Σ_l f(l, s_l), where f(l, s) combines the
 * layer's next-layer-gate prediction accuracy acc_l, its top-1-only fraction r_l, and the
 * probability of cache misses under *uniformly random* routing (for Mixtral: 8 experts, top-2),
 * with acc_l and r_l hard-coded from offline Mixtral measurements. Written for k experts and one
 * speculative prefetch, its f is exactly E[misses] − acc_l · P(at least one miss).
 *
 * Here the same objective is estimated from what the run has seen so far, per layer:
 * - E[misses] at cache size s: the layer's LRU *miss curve*, from stack distances (Mattson et
 *   al. — LRU is a stack algorithm, so one pass gives the misses of every size at once). Each
 *   routed step references its activated experts together: an expert at recency position d
 *   (0 = most recent; E = never seen) misses in an LRU of size s iff d ≥ s.
 * - P(at least one miss) counted over the steps where a prediction was made (where the single
 *   prefetch can save a load): the step misses at size s iff its largest distance is ≥ s.
 * - acc_l: the fraction of activated experts that were in the predicted top list made for the
 *   layer one layer earlier (observed recall of the predictor).
 * - r_l (adaptive gating's top-1-only fraction) is absent: adaptive gating changes the model's
 *   routing, which a simulator replaying routing cannot do; the observed curves already reflect
 *   whatever number of experts steps activate.
 * So f(l, s) = misses_l(s) − acc_l · stepsWithMiss_l(s), in counts over the same steps for every
 * layer (every iteration routes every layer), minimised by the same DP.
 */

export class LayerStats {
  /** Per layer: experts in recency order, most recent first. */
  private readonly recency: number[][];
  /** Per layer: needs by recency distance (index experts = never seen). */
  readonly missHist: Float64Array[];
  /** Per layer: predicted steps by their largest distance. */
  readonly stepMaxHist: Float64Array[];
  readonly predictedNeeds: Float64Array;
  readonly predictedHits: Float64Array;
  /** Scratch of `observe`: distances and sorted indices of the step's experts, and a mark per expert. */
  private readonly dist: Int32Array;
  private readonly idx: Int32Array;
  private readonly mark: Uint8Array;

  constructor(
    readonly layers: number,
    readonly experts: number,
  ) {
    this.recency = Array.from({ length: layers }, () => []);
    this.missHist = Array.from({ length: layers }, () => new Float64Array(experts + 1));
    this.stepMaxHist = Array.from({ length: layers }, () => new Float64Array(experts + 1));
    this.predictedNeeds = new Float64Array(layers);
    this.predictedHits = new Float64Array(layers);
    this.dist = new Int32Array(experts);
    this.idx = new Int32Array(experts);
    this.mark = new Uint8Array(experts);
  }

  /**
   * A routed step of `layer`: `activated` ascending (distinct experts); `predicted` the list
   * predicted for it one layer earlier, or null if no prediction was made. The recency list is
   * updated in place (no allocation per step: AdapMoE observes every routed layer).
   */
  observe(layer: number, activated: readonly number[], predicted: readonly number[] | null): void {
    const order = this.recency[layer]!;
    const E = this.experts;
    const hist = this.missHist[layer]!;
    const k = activated.length;
    const dist = this.dist;
    const mark = this.mark;
    let maxD = 0;
    let fresh = 0;
    for (let i = 0; i < k; i++) {
      const e = activated[i]!;
      const at = order.indexOf(e);
      const d = at < 0 ? E : at;
      if (at < 0) fresh++;
      hist[d]!++;
      if (d > maxD) maxD = d;
      dist[i] = d;
      mark[e] = 1;
    }
    if (predicted) {
      this.stepMaxHist[layer]![maxD]!++;
      for (const e of activated) {
        this.predictedNeeds[layer]!++;
        if (predicted.includes(e)) this.predictedHits[layer]!++;
      }
    }
    // The step's experts become the most recent, in their previous recency order (unseen ones
    // last, ascending): the others keep their order behind them.
    const n = order.length;
    for (let j = 0; j < fresh; j++) order.push(0);
    let w = n + fresh - 1;
    for (let i = n - 1; i >= 0; i--) {
      const e = order[i]!;
      if (mark[e] === 0) order[w--] = e;
    }
    // Insertion sort of the step's indices by (distance, expert).
    const idx = this.idx;
    for (let i = 0; i < k; i++) {
      let j = i;
      while (
        j > 0 &&
        (dist[idx[j - 1]!]! > dist[i]! || (dist[idx[j - 1]!]! === dist[i]! && activated[idx[j - 1]!]! > activated[i]!))
      ) {
        idx[j] = idx[j - 1]!;
        j--;
      }
      idx[j] = i;
    }
    for (let i = 0; i < k; i++) {
      const e = activated[idx[i]!]!;
      order[i] = e;
      mark[e] = 0;
    }
  }

  accuracy(layer: number): number {
    const n = this.predictedNeeds[layer]!;
    return n > 0 ? this.predictedHits[layer]! / n : 0;
  }

  /** f(layer, s) for s = 0 .. experts: expected on-demand loads with a cache of s experts. */
  cost(layer: number): Float64Array {
    const E = this.experts;
    const hist = this.missHist[layer]!;
    const steps = this.stepMaxHist[layer]!;
    const acc = this.accuracy(layer);
    const f = new Float64Array(E + 1);
    let misses = 0;
    let stepsWithMiss = 0;
    for (let s = E; s >= 0; s--) {
      misses += hist[s]!;
      stepsWithMiss += steps[s]!;
      f[s] = misses - acc * stepsWithMiss;
    }
    return f;
  }
}

/**
 * Sizes s_l ∈ [minSlots, maxSlots] with Σ s_l = min(total, layers · maxSlots) minimising
 * Σ cost[l][s_l] (exact DP); ties are broken deterministically (smallest size first while filling
 * the table). Throws RangeError when total < layers · minSlots.
 *
 * Only the cells that lie on some path to the total are filled: after layer l the partial sum t
 * must be reachable ((l+1)·minSlots ≤ t ≤ (l+1)·maxSlots) and must still reach the total with the
 * layers left; each cell reads only reachable cells of the layer before. Every filled cell holds
 * the value and choice `allocateSlotsFull` gives it (same sums, same order, same strict
 * comparison), and the backtrack from the total visits filled cells only, so the sizes are the
 * same; the work drops from layers · total · maxSlots to about half of it in the middle of the
 * range and to almost nothing near layers · minSlots or layers · maxSlots (AdapMoE reallocates
 * every few iterations, and for 24 layers × 60 experts the full table cost ~10 ms a call).
 * Each cell's minimum over s is searched from the previous cell's choice outwards with bounds
 * (`boundedArgmin`) when the layer's cost and the row it reads are non-increasing — as miss
 * curves are; checked on the values, else every s is read — with the same value and tie-break.
 */
export function allocateSlots(
  cost: readonly Float64Array[],
  total: number,
  minSlots: number,
  maxSlots: number,
): Int32Array {
  const L = cost.length;
  if (total < L * minSlots) throw new RangeError(`a budget of ${total} slots cannot give ${L} layers ${minSlots} each`);
  const T = Math.min(total, L * maxSlots);
  // Two rows, swapped per layer: a layer reads only the cells [pLo, pHi] the layer before filled
  // (every unreachable one left at Infinity), so each row is reset over its own range only.
  let prev = new Float64Array(T + 1);
  let cur = new Float64Array(T + 1);
  prev[0] = 0;
  let pLo = 0;
  let pHi = 0;
  const choice = new Int32Array(L * (T + 1));
  for (let l = 0; l < L; l++) {
    const f = cost[l]!;
    const row = l * (T + 1);
    const left = L - 1 - l;
    const tLo = Math.max((l + 1) * minSlots, T - left * maxSlots);
    const tHi = Math.min((l + 1) * maxSlots, T - left * minSlots);
    if (tLo <= tHi) cur.fill(Infinity, tLo, tHi + 1);
    // Bounded search when both sides are monotone (checked on the values themselves), else every s.
    const bounded = nonIncreasing(f, minSlots, maxSlots) && nonIncreasing(prev, pLo, pHi);
    let guess = -1;
    for (let t = tLo; t <= tHi; t++) {
      // prev[t − s] is reachable iff l·minSlots ≤ t − s ≤ l·maxSlots.
      const sLo = Math.max(minSlots, t - l * maxSlots);
      const sHi = Math.min(maxSlots, t, t - l * minSlots);
      if (sLo > sHi) continue;
      const bestS = bounded
        ? boundedArgmin(prev, f, t, sLo, sHi, Math.min(Math.max(guess, sLo), sHi))
        : firstArgmin(prev, f, t, sLo, sHi);
      if (bestS >= 0) {
        cur[t] = prev[t - bestS]! + f[bestS]!;
        choice[row + t] = bestS;
        guess = bestS;
      }
    }
    const done = cur;
    cur = prev;
    prev = done;
    pLo = tLo;
    pHi = tHi;
  }
  return backtrack(choice, L, T);
}

/** The first s in [sLo, sHi] with the least finite prev[t − s] + f[s] (−1 when none is finite). */
function firstArgmin(prev: Float64Array, f: Float64Array, t: number, sLo: number, sHi: number): number {
  let best = Infinity;
  let bestS = -1;
  for (let s = sLo; s <= sHi; s++) {
    const v = prev[t - s]! + f[s]!;
    if (v < best) {
      best = v;
      bestS = s;
    }
  }
  return bestS;
}

/**
 * `firstArgmin` when f is non-increasing on [sLo, sHi] and prev non-increasing over the cells
 * read: from `guess` (the previous total's choice: the choice moves little from one total to the
 * next) up, then down, each walk stopped once a bound shows that no further s can win. Upward,
 * every s' ≥ s has prev[t − s'] ≥ prev[t − s] and f[s'] ≥ f[sHi]; downward, every s' ≤ s has
 * prev[t − s'] ≥ prev[t − sLo] and f[s'] ≥ f[s]; rounded addition is monotone, so the sum of the
 * bounds bounds every later sum as computed. Ties go to the smaller s, as in `firstArgmin`.
 */
function boundedArgmin(
  prev: Float64Array,
  f: Float64Array,
  t: number,
  sLo: number,
  sHi: number,
  guess: number,
): number {
  let best = prev[t - guess]! + f[guess]!;
  let bestS = guess;
  const fMin = f[sHi]!;
  for (let s = guess + 1; s <= sHi; s++) {
    const p = prev[t - s]!;
    if (p + fMin >= best) break;
    const v = p + f[s]!;
    if (v < best) {
      best = v;
      bestS = s;
    }
  }
  const pMin = prev[t - sLo]!;
  for (let s = guess - 1; s >= sLo; s--) {
    const fs = f[s]!;
    if (pMin + fs > best) break;
    const v = prev[t - s]! + fs;
    if (v <= best) {
      best = v;
      bestS = s;
    }
  }
  return best < Infinity ? bestS : -1;
}

/** Whether a[i + 1] ≤ a[i] for every i in [from, to) (false on NaN). */
function nonIncreasing(a: Float64Array, from: number, to: number): boolean {
  for (let i = from; i < to; i++) if (!(a[i + 1]! <= a[i]!)) return false;
  return true;
}

/** The sizes along the choices from the total back to layer 0. */
function backtrack(choice: Int32Array, L: number, T: number): Int32Array {
  const sizes = new Int32Array(L);
  let t = T;
  for (let l = L - 1; l >= 0; l--) {
    const s = choice[l * (T + 1) + t]!;
    sizes[l] = s;
    t -= s;
  }
  return sizes;
}

/** `allocateSlots` filling the whole table (the reference its property test compares with). */
export function allocateSlotsFull(
  cost: readonly Float64Array[],
  total: number,
  minSlots: number,
  maxSlots: number,
): Int32Array {
  const L = cost.length;
  if (total < L * minSlots) throw new RangeError(`a budget of ${total} slots cannot give ${L} layers ${minSlots} each`);
  const T = Math.min(total, L * maxSlots);
  let prev = new Float64Array(T + 1).fill(Infinity);
  prev[0] = 0;
  const choice = new Int32Array(L * (T + 1));
  for (let l = 0; l < L; l++) {
    const cur = new Float64Array(T + 1).fill(Infinity);
    const f = cost[l]!;
    for (let t = 0; t <= T; t++) {
      for (let s = minSlots; s <= maxSlots && s <= t; s++) {
        const v = prev[t - s]! + f[s]!;
        if (v < cur[t]!) {
          cur[t] = v;
          choice[l * (T + 1) + t] = s;
        }
      }
    }
    prev = cur;
  }
  return backtrack(choice, L, T);
}

/** Equal split of `total` over `layers`, the remainder to the first layers, each within [1, maxSlots]. */
export function equalSlots(layers: number, total: number, maxSlots: number): Int32Array {
  const T = Math.min(total, layers * maxSlots);
  const sizes = new Int32Array(layers).fill(Math.floor(T / layers));
  for (let l = 0; l < T % layers; l++) sizes[l]!++;
  return sizes;
}
