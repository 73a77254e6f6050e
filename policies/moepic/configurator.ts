/**
 * MoEpic's cache configurator (paper §3.4, Algorithm 1): per-layer VRAM budgets V_i and split
 * ratios θ_i from observed statistics, by a divide-and-conquer search.
 *
 * Statistics per layer i over q observed decode tokens (§3.4.2):
 * - H_i(C): activated experts whose LCP rank (by cache priority, before the token) is < C, over
 *   q·K — the hit rate a cache of the C highest-priority experts would have had;
 * - P_i(y): tokens whose y-th predicted expert was activated, over q;
 * - PH_i(y, C): tokens whose y-th predicted expert had LCP rank < C, over q.
 *
 * ExpertSplit (Eqs. 5–7, 9–11; lines 29–35): T_wind^1 = T_head + T_att; for each layer, for each
 * cache size C ∈ [max(1, ⌈V_i⌉), N], θ = V_i / C,
 *   m(C) = K·H_i(C)·θ + Σ_{y ≤ Y} [1 − PH_i(y, C)·θ]·P_i(y),
 * Y the most prefetches with Σ_{y ≤ Y} [1 − PH_i(y, C)·θ]·T_load ≤ T_wind^i; keep the C of the
 * largest m; then T_hide = m·T_exp, T_miss = (K − m)·T_load, exposed 𝒯^i = max(0, T_miss −
 * T_hide), T_wind^(i+1) = T_moe − min(T_hide, T_miss) + T_att (the paper's approximation of
 * α + βθ by m and β(1−θ) + γ by K − m). A layer with V_i = 0 caches nothing (θ = 0).
 *
 * VramAllocation (lines 13–27): T1 = split(V); T2 = split(V + ζV_e) and T3 = split(V − ζV_e),
 * every layer shifted at once (the chained windows); i1 = argmax (T1 − T2), i2 = argmin over
 * i ≠ i1 of (T3 − T1); move ζV_e from i2 to i1; T4 = split(V); stop and roll back when
 * Σ(T4 − T1) ≥ 0. The total Σ V_i never changes (a move conserves it); a layer never goes below
 * 0 or above N experts.
 */

export interface ModuleTimes {
  /** Per-module times of one decode token (ns), as profiled (MoEpic Alg. 1 inputs). */
  readonly attNs: number;
  readonly moeNs: number;
  readonly headNs: number;
  /** Loading one whole expert. */
  readonly loadNs: number;
}

export class SplitStats {
  readonly rankHist: Float64Array[];
  readonly predHit: Float64Array[];
  readonly predRank: Float64Array[];
  readonly tokens: Float64Array;
  readonly acts: Float64Array;
  constructor(
    readonly layers: number,
    readonly experts: number,
  ) {
    this.rankHist = Array.from({ length: layers }, () => new Float64Array(experts));
    this.predHit = Array.from({ length: layers }, () => new Float64Array(experts));
    this.predRank = Array.from({ length: layers }, () => new Float64Array(experts * experts));
    this.tokens = new Float64Array(layers);
    this.acts = new Float64Array(layers);
    this.act = new Uint8Array(experts);
  }

  /**
   * One decode token at `layer`: `rankOf[e]` = LCP rank of expert e before the token,
   * `activated` its experts, `predicted` the ranked prediction made for it (may be empty).
   */
  observe(layer: number, rankOf: Int32Array, activated: readonly number[], predicted: readonly number[]): void {
    const E = this.experts;
    const act = this.act;
    const hist = this.rankHist[layer]!;
    for (let i = 0; i < activated.length; i++) {
      const e = activated[i]!;
      act[e] = 1;
      hist[rankOf[e]!]!++;
    }
    this.tokens[layer]!++;
    this.acts[layer]! += activated.length;
    const n = Math.min(predicted.length, E);
    const hit = this.predHit[layer]!;
    const pr = this.predRank[layer]!;
    for (let y = 0; y < n; y++) {
      const e = predicted[y]!;
      if (act[e]) hit[y]!++;
      pr[y * E + rankOf[e]!]!++;
    }
    for (let i = 0; i < activated.length; i++) act[activated[i]!] = 0;
  }

  /** Scratch: activated experts of the token being observed (cleared after each). */
  private readonly act: Uint8Array;
}

export interface LayerModel {
  /** H(C) for C = 0..N. */
  readonly h: Float64Array;
  /** P(y) for y = 0..N−1. */
  readonly p: Float64Array;
  /** PH(y, C) at [y·(N+1) + C]. */
  readonly ph: Float64Array;
}

/** Cumulative per-layer model of the statistics (prior when nothing was observed: uniform). */
export function layerModels(s: SplitStats, topK: number): LayerModel[] {
  const E = s.experts;
  return Array.from({ length: s.layers }, (_, l) => {
    const q = s.tokens[l]!;
    const h = new Float64Array(E + 1);
    const p = new Float64Array(E);
    const ph = new Float64Array(E * (E + 1));
    if (q === 0) {
      for (let c = 0; c <= E; c++) h[c] = c / E;
      for (let y = 0; y < E; y++) {
        p[y] = topK / E;
        for (let c = 0; c <= E; c++) ph[y * (E + 1) + c] = c / E;
      }
      return { h, p, ph };
    }
    let acc = 0;
    for (let c = 1; c <= E; c++) {
      acc += s.rankHist[l]![c - 1]!;
      h[c] = acc / (q * topK);
    }
    for (let y = 0; y < E; y++) {
      p[y] = s.predHit[l]![y]! / q;
      let a = 0;
      for (let c = 1; c <= E; c++) {
        a += s.predRank[l]![y * E + c - 1]!;
        ph[y * (E + 1) + c] = a / q;
      }
    }
    return { h, p, ph };
  });
}

export interface SplitResult {
  readonly exposed: Float64Array;
  readonly theta: Float64Array;
  readonly cache: Int32Array;
}

/** ExpertSplit of Algorithm 1 for budgets `v` (expert units). */
export function expertSplit(
  v: ArrayLike<number>,
  models: readonly LayerModel[],
  experts: number,
  topK: number,
  t: ModuleTimes,
): SplitResult {
  const L = models.length;
  const E = experts;
  const exposed = new Float64Array(L);
  const theta = new Float64Array(L);
  const cache = new Int32Array(L);
  const tExp = t.moeNs / topK;
  let wind = t.headNs + t.attNs;
  for (let i = 0; i < L; i++) {
    const m = models[i]!;
    const vi = v[i]!;
    let bestM = -1;
    let bestC = 0;
    let bestTheta = 0;
    const cFrom = vi > 0 ? Math.max(1, Math.ceil(vi - 1e-9)) : 0;
    const cTo = vi > 0 ? E : 0;
    for (let c = cFrom; c <= cTo; c++) {
      const th = c === 0 ? 0 : Math.min(1, vi / c);
      let mi = topK * m.h[c]! * th;
      let used = 0;
      for (let y = 0; y < E; y++) {
        const frac = 1 - m.ph[y * (E + 1) + c]! * th;
        const cost = frac * t.loadNs;
        if (used + cost > wind) break;
        used += cost;
        mi += frac * m.p[y]!;
      }
      if (mi > bestM + 1e-12) {
        bestM = mi;
        bestC = c;
        bestTheta = th;
      }
    }
    const mi = Math.min(topK, Math.max(0, bestM));
    const hide = mi * tExp;
    const miss = (topK - mi) * t.loadNs;
    exposed[i] = Math.max(0, miss - hide);
    theta[i] = bestTheta;
    cache[i] = bestC;
    wind = t.moeNs - Math.min(hide, miss) + t.attNs;
  }
  return { exposed, theta, cache };
}

const sum = (a: ArrayLike<number>): number => {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]!;
  return s;
};

/**
 * VramAllocation of Algorithm 1: moves budget in steps of `step` (= ζ·V_e) until the total
 * exposed latency stops improving. Returns the budgets and the split of the final budgets.
 */
export function vramAllocation(
  v0: ArrayLike<number>,
  step: number,
  models: readonly LayerModel[],
  experts: number,
  topK: number,
  t: ModuleTimes,
  maxIterations = 100_000,
): { v: Float64Array; split: SplitResult; iterations: number } {
  const L = models.length;
  const v = Float64Array.from(v0);
  let iterations = 0;
  for (; iterations < maxIterations; iterations++) {
    const t1 = expertSplit(v, models, experts, topK, t).exposed;
    const t2 = expertSplit(
      Array.from(v, (x) => Math.min(experts, x + step)),
      models,
      experts,
      topK,
      t,
    ).exposed;
    const t3 = expertSplit(
      Array.from(v, (x) => Math.max(0, x - step)),
      models,
      experts,
      topK,
      t,
    ).exposed;
    let i1 = -1;
    for (let i = 0; i < L; i++)
      if (v[i]! + step <= experts + 1e-9 && (i1 < 0 || t1[i]! - t2[i]! > t1[i1]! - t2[i1]!)) i1 = i;
    let i2 = -1;
    for (let i = 0; i < L; i++)
      if (i !== i1 && v[i]! - step >= -1e-9 && (i2 < 0 || t3[i]! - t1[i]! < t3[i2]! - t1[i2]!)) i2 = i;
    if (i1 < 0 || i2 < 0) break;
    v[i1]! += step;
    v[i2]! -= step;
    const t4 = expertSplit(v, models, experts, topK, t).exposed;
    if (sum(t4) - sum(t1) >= 0) {
      v[i1]! -= step;
      v[i2]! += step;
      break;
    }
  }
  for (let i = 0; i < L; i++) if (v[i]! < 1e-9) v[i] = 0;
  return { v, split: expertSplit(v, models, experts, topK, t), iterations };
}
