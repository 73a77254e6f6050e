/**
 * Statistics of a routing trace — real or synthetic — that decide how expert caches and
 * prefetchers fare (DESIGN §6). Computed in one streaming pass: `add` each request, then
 * `result()`. Memory is O(L·E² + tasks·L·E), independent of the trace length.
 *
 * Definitions (S_{t,l} = the k experts of token t at MoE layer l; missing entries are skipped):
 *
 * - **popularityEntropy[l]**: −Σ_e p_e log2 p_e / log2 E over the trace's activation counts at
 *   layer l (1 = perfectly even). Also Gini coefficient and the share of the top 10 % of experts
 *   (at least one expert) in the extended output.
 * - **requestSkew[C]**: `request` = mean over (request, layer) of the share of that request's
 *   activations at that layer that fall on its own C most-used experts; `pooled` = the same
 *   share with all requests pooled into one, averaged over layers. request ≫ pooled means
 *   per-request reuse that global popularity does not explain. All recorded tokens count
 *   (prefill and decode). In-sample, so short requests score high even under uniform routing.
 * - **crossLayerPredictability**: fit succ_l(e) = argmax_f #{t : e ∈ S_{t,l}, f ∈ S_{t,l+1}} on
 *   the whole trace, then the fraction of (t, l, e ∈ S_{t,l}) with succ_l(e) ∈ S_{t,l+1}.
 *   Uniform routing gives ≈ k/E.
 * - **temporalLocality**: P(S_{t,l} ∩ S_{t−1,l} ≠ ∅) over consecutive recorded tokens of a
 *   request at the same layer (the extended output also has the reused share |∩|/k).
 * - **activationRatioByBatch[b]**: expected fraction of a layer's experts touched by one token
 *   from each of b requests (a decode iteration of batch size b), with the requests drawn
 *   uniformly (with replacement) and the token uniformly within each request, averaged over
 *   layers: mean_l (1/E) Σ_e [1 − (1 − p̄_l(e))^b], where p̄_l(e) is the mean over requests of
 *   the fraction of the request's tokens that select e at l. Exact, no sampling.
 * - **taskClusterSimilarity**: cosine of two requests' L×E activation-count matrices, averaged
 *   over all pairs of requests with the same task label (`within`) and with different labels
 *   (`across`). Computed exactly from per-task sums of unit vectors. null without ≥ 2 labels.
 *
 * These follow `../shared/traces/real/README.md` §"Summary statistics", except that the skew
 * uses all tokens for every file (that README uses decode tokens only for the Mixtral file).
 */
import { MISSING, type TraceRequest } from '../trace/format.ts';

export interface Shape {
  readonly moeLayers: number;
  readonly experts: number;
  readonly topK: number;
}

/** The keys `trace stats --json` prints, in this order. */
export interface TraceStats {
  readonly requests: number;
  readonly tokens: number;
  readonly layers: number;
  readonly experts: number;
  readonly topk: number;
  readonly popularityEntropy: number[];
  readonly requestSkew: Record<string, { request: number; pooled: number }>;
  readonly crossLayerPredictability: number | null;
  readonly temporalLocality: number | null;
  readonly activationRatioByBatch: Record<string, number>;
  readonly taskClusterSimilarity: { within: number; across: number } | null;
}

/** Everything `TraceStats` has plus details and baselines (`trace stats --json --extended`). */
export interface ExtendedTraceStats extends TraceStats {
  readonly prefillTokens: number;
  readonly decodeTokens: number;
  /** (token, layer) entries not recorded. */
  readonly missingEntries: number;
  readonly popularityGini: number[];
  readonly popularityTop10Share: number[];
  readonly hottestExpertShare: number[];
  /** Mean |S_t ∩ S_{t−1}| / k. */
  readonly temporalReusedShare: number | null;
  readonly baselines: {
    /** Cross-layer predictability and reused share of uniform routing: k/E. */
    readonly uniformCrossLayer: number;
    /** P(any reuse) of uniform routing: 1 − C(E−k, k)/C(E, k). */
    readonly uniformTemporalLocality: number;
  };
  /** Requests per task label. */
  readonly tasks: Record<string, number>;
  /** Mean cosine of the L×E activation-count matrices over all pairs of requests (null with < 2 requests). */
  readonly requestSimilarity: number | null;
}

/** C values used by default for request skew: k, 2k, 4k (those below E). */
export function defaultSkewC(shape: Shape): number[] {
  const cs = [shape.topK, 2 * shape.topK, 4 * shape.topK].filter((c) => c < shape.experts);
  return cs.length ? cs : [Math.max(1, shape.experts - 1)];
}

export const BATCH_SIZES: readonly number[] = Array.from({ length: 32 }, (_, i) => i + 1);

export class TraceStatsAccumulator {
  private readonly L: number;
  private readonly E: number;
  private readonly k: number;
  private readonly cValues: number[];
  private nRequests = 0;
  private nTokens = 0;
  private nPrefill = 0;
  private nMissing = 0;
  /** L×E activation counts. */
  private readonly pop: Float64Array;
  /** (L−1)×E×E successor pair counts and L×E row occurrence counts. */
  private readonly pairs: Int32Array;
  private readonly pairRows: Float64Array;
  private temporalPairs = 0;
  private temporalAny = 0;
  private temporalShared = 0;
  private readonly skewSum: Float64Array;
  private skewN = 0;
  /** L×E sum over requests of per-request inclusion fractions, and per-layer request counts. */
  private readonly qSum: Float64Array;
  private readonly qN: Float64Array;
  private readonly taskSums = new Map<string, Float64Array>();
  private readonly allSum: Float64Array;
  private allN = 0;
  private readonly taskCounts = new Map<string, number>();
  // scratch
  private readonly cnt: Int32Array;
  private readonly sorted: Int32Array;
  private readonly vec: Float64Array;
  private readonly mark: Int32Array;
  private stamp = 0;

  constructor(shape: Shape, opts: { cValues?: readonly number[] } = {}) {
    this.L = shape.moeLayers;
    this.E = shape.experts;
    this.k = shape.topK;
    this.cValues = [...(opts.cValues ?? defaultSkewC(shape))];
    for (const c of this.cValues) {
      if (!Number.isInteger(c) || c < 1 || c > this.E)
        throw new RangeError(`skew C must be an integer in 1…${this.E}, got ${c}`);
    }
    const { L, E } = this;
    this.pop = new Float64Array(L * E);
    this.pairs = new Int32Array(Math.max(0, L - 1) * E * E);
    this.pairRows = new Float64Array(L * E);
    this.skewSum = new Float64Array(this.cValues.length);
    this.qSum = new Float64Array(L * E);
    this.qN = new Float64Array(L);
    this.cnt = new Int32Array(E);
    this.sorted = new Int32Array(E);
    this.vec = new Float64Array(L * E);
    this.allSum = new Float64Array(L * E);
    this.mark = new Int32Array(E);
  }

  add(r: TraceRequest): void {
    const { L, E, k, cnt, vec, mark, pop } = this;
    const T = r.tokens;
    const ex = r.experts;
    const stride = L * k;
    this.nRequests++;
    this.nTokens += T;
    this.nPrefill += r.prefillRecorded ? Math.min(r.promptTokens, T) : 0;
    vec.fill(0);
    for (let l = 0; l < L; l++) {
      cnt.fill(0);
      let nTok = 0;
      let prevBase = -1;
      for (let t = 0; t < T; t++) {
        const base = t * stride + l * k;
        if (ex[base] === MISSING) {
          this.nMissing++;
          prevBase = -1;
          continue;
        }
        nTok++;
        for (let j = 0; j < k; j++) cnt[ex[base + j]!]!++;
        if (prevBase >= 0) {
          const s = ++this.stamp;
          for (let j = 0; j < k; j++) mark[ex[prevBase + j]!] = s;
          let shared = 0;
          for (let j = 0; j < k; j++) if (mark[ex[base + j]!] === s) shared++;
          this.temporalPairs++;
          this.temporalShared += shared;
          if (shared > 0) this.temporalAny++;
        }
        prevBase = base;
        if (l + 1 < L) {
          const next = base + k;
          if (ex[next] !== MISSING) {
            const pl = l * E * E;
            for (let j = 0; j < k; j++) {
              const e = ex[base + j]!;
              this.pairRows[l * E + e]!++;
              const row = pl + e * E;
              for (let i = 0; i < k; i++) this.pairs[row + ex[next + i]!]!++;
            }
          }
        }
      }
      if (nTok === 0) continue;
      const acts = nTok * k;
      const off = l * E;
      for (let e = 0; e < E; e++) {
        const c = cnt[e]!;
        pop[off + e]! += c;
        vec[off + e] = c;
        this.qSum[off + e]! += c / nTok;
      }
      this.qN[l]!++;
      this.sorted.set(cnt);
      this.sorted.sort();
      for (let ci = 0; ci < this.cValues.length; ci++) {
        const C = this.cValues[ci]!;
        let top = 0;
        for (let i = 0; i < C; i++) top += this.sorted[E - 1 - i]!;
        this.skewSum[ci]! += top / acts;
      }
      this.skewN++;
    }
    let norm = 0;
    for (let i = 0; i < vec.length; i++) norm += vec[i]! * vec[i]!;
    norm = Math.sqrt(norm);
    if (norm > 0) {
      for (let i = 0; i < vec.length; i++) this.allSum[i]! += vec[i]! / norm;
      this.allN++;
    }
    if (r.task !== undefined) {
      if (norm > 0) {
        let sum = this.taskSums.get(r.task);
        if (!sum) {
          sum = new Float64Array(L * E);
          this.taskSums.set(r.task, sum);
        }
        for (let i = 0; i < vec.length; i++) sum[i]! += vec[i]! / norm;
        this.taskCounts.set(r.task, (this.taskCounts.get(r.task) ?? 0) + 1);
      }
    }
  }

  /** Activation counts so far, L×E (layer-major). A copy. */
  layerCounts(): Float64Array {
    return this.pop.slice();
  }

  result(): ExtendedTraceStats {
    const { L, E, k } = this;
    const popularityEntropy: number[] = [];
    const gini: number[] = [];
    const top10: number[] = [];
    const hottest: number[] = [];
    const nTop10 = Math.max(1, Math.round(E / 10));
    const pooledTop = new Float64Array(this.cValues.length);
    let layersWithData = 0;
    const row = new Float64Array(E);
    for (let l = 0; l < L; l++) {
      let total = 0;
      for (let e = 0; e < E; e++) total += this.pop[l * E + e]!;
      if (total === 0) {
        popularityEntropy.push(1);
        gini.push(0);
        top10.push(nTop10 / E);
        hottest.push(1 / E);
        continue;
      }
      layersWithData++;
      let h = 0;
      for (let e = 0; e < E; e++) {
        const p = this.pop[l * E + e]! / total;
        row[e] = p;
        if (p > 0) h -= p * Math.log2(p);
      }
      popularityEntropy.push(E > 1 ? h / Math.log2(E) : 1);
      row.sort(); // ascending
      let g = 0;
      for (let i = 0; i < E; i++) g += (2 * (i + 1) - E - 1) * row[i]!;
      gini.push(g / E);
      let s = 0;
      for (let i = 0; i < nTop10; i++) s += row[E - 1 - i]!;
      top10.push(s);
      hottest.push(row[E - 1]!);
      for (let ci = 0; ci < this.cValues.length; ci++) {
        let c = 0;
        for (let i = 0; i < this.cValues[ci]!; i++) c += row[E - 1 - i]!;
        pooledTop[ci]! += c;
      }
    }

    const requestSkew: Record<string, { request: number; pooled: number }> = {};
    this.cValues.forEach((C, ci) => {
      requestSkew[String(C)] = {
        request: this.skewN ? this.skewSum[ci]! / this.skewN : 0,
        pooled: layersWithData ? pooledTop[ci]! / layersWithData : 0,
      };
    });

    let hits = 0;
    let occ = 0;
    for (let l = 0; l + 1 < L; l++) {
      for (let e = 0; e < E; e++) {
        const n = this.pairRows[l * E + e]!;
        if (n === 0) continue;
        occ += n;
        const base = (l * E + e) * E;
        let best = 0;
        for (let f = 0; f < E; f++) if (this.pairs[base + f]! > best) best = this.pairs[base + f]!;
        hits += best;
      }
    }

    const activationRatioByBatch: Record<string, number> = {};
    for (const b of BATCH_SIZES) {
      let sum = 0;
      let layers = 0;
      for (let l = 0; l < L; l++) {
        const n = this.qN[l]!;
        if (n === 0) continue;
        layers++;
        let touched = 0;
        for (let e = 0; e < E; e++) touched += 1 - Math.pow(1 - this.qSum[l * E + e]! / n, b);
        sum += touched / E;
      }
      activationRatioByBatch[String(b)] = layers ? sum / layers : 0;
    }

    const tasks: Record<string, number> = {};
    for (const [t, n] of [...this.taskCounts].sort((a, b) => (a[0] < b[0] ? -1 : 1))) tasks[t] = n;

    return {
      requests: this.nRequests,
      tokens: this.nTokens,
      layers: L,
      experts: E,
      topk: k,
      popularityEntropy,
      requestSkew,
      crossLayerPredictability: occ > 0 ? hits / occ : null,
      temporalLocality: this.temporalPairs ? this.temporalAny / this.temporalPairs : null,
      activationRatioByBatch,
      taskClusterSimilarity: this.taskSimilarity(),
      prefillTokens: this.nPrefill,
      decodeTokens: this.nTokens - this.nPrefill,
      missingEntries: this.nMissing,
      popularityGini: gini,
      popularityTop10Share: top10,
      hottestExpertShare: hottest,
      temporalReusedShare: this.temporalPairs ? this.temporalShared / (this.temporalPairs * k) : null,
      baselines: {
        uniformCrossLayer: k / E,
        uniformTemporalLocality: 1 - ratioOfBinomials(E, k),
      },
      tasks,
      requestSimilarity:
        this.allN >= 2 ? (dot(this.allSum, this.allSum) - this.allN) / (this.allN * (this.allN - 1)) : null,
    };
  }

  private taskSimilarity(): { within: number; across: number } | null {
    const names = [...this.taskSums.keys()].sort();
    if (names.length < 2) return null;
    let withinSum = 0;
    let withinPairs = 0;
    let acrossSum = 0;
    let acrossPairs = 0;
    for (let a = 0; a < names.length; a++) {
      const sa = this.taskSums.get(names[a]!)!;
      const na = this.taskCounts.get(names[a]!)!;
      withinSum += dot(sa, sa) - na; // Σ_{r≠s} û_r·û_s: ‖Σû‖² minus the n self-products (each 1)
      withinPairs += na * (na - 1);
      for (let b = a + 1; b < names.length; b++) {
        const sb = this.taskSums.get(names[b]!)!;
        acrossSum += dot(sa, sb);
        acrossPairs += na * this.taskCounts.get(names[b]!)!;
      }
    }
    if (withinPairs === 0 || acrossPairs === 0) return null;
    return { within: withinSum / withinPairs, across: acrossSum / acrossPairs };
  }
}

function dot(a: Float64Array, b: Float64Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * b[i]!;
  return s;
}

/** C(E−k, k) / C(E, k): probability that two independent uniform k-sets are disjoint. */
function ratioOfBinomials(E: number, k: number): number {
  if (2 * k > E) return 0;
  let r = 1;
  for (let i = 0; i < k; i++) r *= (E - k - i) / (E - i);
  return r;
}

/** The keys of `TraceStats` only (what `trace stats --json` prints without --extended). */
export function coreStats(s: TraceStats): TraceStats {
  return {
    requests: s.requests,
    tokens: s.tokens,
    layers: s.layers,
    experts: s.experts,
    topk: s.topk,
    popularityEntropy: s.popularityEntropy,
    requestSkew: s.requestSkew,
    crossLayerPredictability: s.crossLayerPredictability,
    temporalLocality: s.temporalLocality,
    activationRatioByBatch: s.activationRatioByBatch,
    taskClusterSimilarity: s.taskClusterSimilarity,
  };
}

/** Statistics of a list of in-memory requests. */
export function statsOf(
  shape: Shape,
  requests: Iterable<TraceRequest>,
  opts: { cValues?: readonly number[] } = {},
): ExtendedTraceStats {
  const acc = new TraceStatsAccumulator(shape, opts);
  for (const r of requests) acc.add(r);
  return acc.result();
}
