/**
 * Expert prediction for speculative prefetchers (DESIGN §6): the `prediction` section of a
 * workload config and the `ExpertPredictor`s behind it. The call contract is documented on
 * `ExpertPredictor` in `sim/workload.ts`.
 *
 * - `profile`: a per-layer accuracy profile a_l. For each token of the range, each of its true
 *   experts at the layer (looked up through the request's router, which generates ahead and
 *   memoises — `RequestRouter.peek`) enters the token's predicted top-k with probability a_l;
 *   each miss is replaced by a wrong expert drawn by popularity. Experts are ranked by the
 *   number of tokens whose predicted top-k names them, then by popularity. The default profile
 *   is lower in the first layers, as observed for next-layer-gate and pre-gate predictors
 *   (Eliseev & Mazur 2023, Mixtral-offloading; Hwang et al. 2024, Pre-gated MoE): its numbers
 *   are assumed, not measured — set them from your predictor.
 * - `oracle`: accuracy 1 at every layer.
 * - `trace`: the ranked predictions carried in the routing trace (`predictions` field); tokens
 *   or layers without one use the profile given as `fallback`.
 * - `none`: no predictor (prefetchers that need one see an empty list).
 *
 * Randomness is counter-based per (request, token, layer) from a seed drawn from the run's
 * `prediction` stream, so predictions do not depend on call order and never disturb routing.
 */
import { z } from 'zod';
import type { Rng } from '../sim/kernel/rng.ts';
import type { ExpertPredictor, RequestRouter, RequestSource, RequestSpec, RoutingSource } from '../sim/workload.ts';
import { AliasTables, aliasScratch } from './random/alias.ts';
import { HashRng, seedFrom } from './random/hash-rng.ts';
import { exactKey, type PredictionMemo, predictionMemo } from './prediction-memo.ts';
import { TraceRouting } from './trace-routing.ts';

const probability = z.number().min(0).max(1);

export const AccuracySchema = z.union([
  probability,
  z.array(probability).min(1),
  z
    .object({
      /** Accuracy at MoE layer 0. */
      first: probability,
      /** Accuracy from layer `rampLayers` on. */
      steady: probability,
      /** Layers over which accuracy rises linearly from `first` to `steady`. */
      rampLayers: z.number().int().nonnegative(),
    })
    .strict(),
]);
export type AccuracyConfig = z.infer<typeof AccuracySchema>;

/** Assumed default: 0.6 at the first MoE layer rising to 0.9 by layer 4. */
export const DEFAULT_ACCURACY: AccuracyConfig = { first: 0.6, steady: 0.9, rampLayers: 4 };

export const PredictionSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('none') }).strict(),
  z.object({ kind: z.literal('profile'), accuracy: AccuracySchema.default(DEFAULT_ACCURACY) }).strict(),
  z.object({ kind: z.literal('oracle') }).strict(),
  z.object({ kind: z.literal('trace'), fallback: AccuracySchema.default(DEFAULT_ACCURACY) }).strict(),
]);
export type PredictionConfig = z.infer<typeof PredictionSchema>;

/**
 * Per-layer accuracies of a config for `layers` MoE layers. An explicit list shorter than the
 * model repeats its last value.
 */
export function accuracyByLayer(a: AccuracyConfig, layers: number): number[] {
  if (typeof a === 'number') return Array.from({ length: layers }, () => a);
  if (Array.isArray(a)) return Array.from({ length: layers }, (_, l) => a[Math.min(l, a.length - 1)]!);
  return Array.from({ length: layers }, (_, l) =>
    a.rampLayers === 0 || l >= a.rampLayers ? a.steady : a.first + ((a.steady - a.first) * l) / a.rampLayers,
  );
}

/** Ranks by score, then popularity, then id; shared by the predictors. */
export class Ranker {
  /** Per layer, the experts by popularity (most popular first, ties by id): the order of equal scores. */
  private readonly popOrder: Int32Array[];
  readonly alias: AliasTables;

  constructor(routing: RoutingSource) {
    const { moeLayers: L, experts: E } = routing;
    this.alias = new AliasTables(L, E);
    const scratch = aliasScratch(E);
    this.popOrder = [];
    for (let l = 0; l < L; l++) {
      const p = routing.popularity?.(l) ?? new Float64Array(E).fill(1 / E);
      this.alias.build(l, p, 0, scratch);
      this.popOrder.push(
        Int32Array.from(Array.from({ length: E }, (_, e) => e).sort((a, b) => p[b]! - p[a]! || a - b)),
      );
    }
  }

  /**
   * Experts by score (highest first), equal scores in popularity order. An insertion sort over
   * the experts taken in popularity order: each goes after every expert placed with a score at
   * least its own, so equal scores keep popularity order. Predictor scores are vote counts, most
   * of them 0 (the least score, placed at the end without a move): O(E + moves), no comparator
   * calls (a sort with a comparator closure was ~13 % of a MoEpic decode run).
   */
  rank(layer: number, score: Float64Array): number[] {
    const order = this.popOrder[layer]!;
    const out: number[] = [];
    for (let r = 0; r < order.length; r++) {
      const e = order[r]!;
      const s = score[e]!;
      let i = out.length;
      out.push(e);
      while (i > 0 && score[out[i - 1]!]! < s) {
        out[i] = out[i - 1]!;
        i--;
      }
      out[i] = e;
    }
    return out;
  }
}

/** Predictions with a per-layer accuracy profile, from the true routing of the request. */
export class ProfilePredictor implements ExpertPredictor {
  readonly accuracyByLayer: readonly number[];
  readonly describe: string;
  private readonly ranker: Ranker;
  private readonly h: HashRng;
  /** Request specs by id (a workload's source: ids are positions, `RequestSpec.id` being dense in arrival order). */
  private readonly specOf: (id: number) => RequestSpec | undefined;
  private readonly shadows = new Map<number, RequestRouter>();
  private truth = new Int32Array(0);
  private readonly score: Float64Array;
  private readonly chosen: Int32Array;
  /** Single-token lists shared with the thread's other runs on the same inputs (see `prediction-memo.ts`). */
  private readonly memo: PredictionMemo | undefined;

  /**
   * @param routing  the workload's routing; its routers must implement `peek`
   * @param requests the workload's requests (to build a private router for a request not admitted yet)
   * @param rng      the run's `prediction` stream (one seed is drawn)
   * @param inputsKey what `routing` and `requests` are a pure function of (the request table's and
   *   the routing's inputs), when known: single-token predictions are then shared with the
   *   thread's other predictors on the same inputs, accuracy and drawn seed
   */
  constructor(
    private readonly routing: RoutingSource,
    requests: readonly RequestSpec[] | RequestSource,
    accuracy: readonly number[],
    rng: Rng,
    describe?: string,
    inputsKey?: string,
  ) {
    if (accuracy.length !== routing.moeLayers)
      throw new RangeError(`accuracy has ${accuracy.length} layers, model has ${routing.moeLayers}`);
    this.accuracyByLayer = accuracy;
    this.ranker = new Ranker(routing);
    this.score = new Float64Array(routing.experts);
    this.chosen = new Int32Array(routing.topK);
    const seed = seedFrom(rng);
    this.h = new HashRng(seed);
    this.memo =
      inputsKey === undefined ? undefined : predictionMemo(exactKey([inputsKey, accuracy, seed]), routing.moeLayers);
    this.specOf = specLookup(requests);
    this.describe = describe ?? `prediction accuracy ${summariseAccuracy(accuracy)}`;
  }

  predict(requestId: number, layer: number, fromToken: number, toToken: number): readonly number[] {
    const memo = this.memo;
    const single =
      memo !== undefined &&
      toToken === fromToken + 1 &&
      fromToken >= 0 &&
      Number.isSafeInteger(fromToken) &&
      layer >= 0 &&
      layer < this.accuracyByLayer.length &&
      Number.isInteger(layer);
    if (single) {
      const kept = memo.get(requestId, layer, fromToken);
      if (kept !== undefined) return kept;
    }
    // Votes in a scratch array (zeroed here; only the ranking is returned).
    const score = this.score;
    score.fill(0);
    this.addVotes(score, requestId, layer, fromToken, toToken);
    const ranked = this.ranker.rank(layer, score);
    if (single) memo.put(requestId, layer, fromToken, ranked);
    return ranked;
  }

  /** Adds one vote per predicted top-k entry of each token in [from, to) to `score`. */
  addVotes(score: Float64Array, requestId: number, layer: number, from: number, to: number): void {
    const { experts: E, topK: k } = this.routing;
    const n = Math.max(0, to - from);
    if (n === 0) return;
    const router = this.routerFor(requestId);
    if (!router?.peek) return;
    if (this.truth.length < n * k) this.truth = new Int32Array(n * k);
    const truth = this.truth;
    router.peek(layer, from, to, truth);
    const acc = this.accuracyByLayer[layer]!;
    const h = this.h;
    const chosen = this.chosen;
    for (let i = 0; i < n; i++) {
      h.reset(requestId, from + i, layer);
      let c = 0;
      let misses = 0;
      for (let j = 0; j < k; j++) {
        if (h.next() < acc) chosen[c++] = truth[i * k + j]!;
        else misses++;
      }
      for (let m = 0; m < misses; m++) {
        let e = -1;
        for (let tries = 0; tries < 64 && e < 0; tries++) {
          e = this.ranker.alias.sample(layer, h.next());
          for (let j = 0; j < k; j++) if (truth[i * k + j] === e) e = -1;
          for (let j = 0; j < c && e >= 0; j++) if (chosen[j] === e) e = -1;
        }
        if (e < 0) {
          // Popularity keeps hitting true or chosen experts: take any other one.
          for (let f = 0; f < E && e < 0; f++) {
            let used = false;
            for (let j = 0; j < k; j++) if (truth[i * k + j] === f) used = true;
            for (let j = 0; j < c; j++) if (chosen[j] === f) used = true;
            if (!used) e = f;
          }
        }
        if (e >= 0) chosen[c++] = e;
      }
      for (let j = 0; j < c; j++) score[chosen[j]!]!++;
    }
  }

  private routerFor(requestId: number): RequestRouter | undefined {
    const live = this.routing.routerOf?.(requestId);
    if (live?.peek) return live;
    let shadow = this.shadows.get(requestId);
    if (!shadow) {
      const spec = this.specOf(requestId);
      if (!spec) return undefined;
      shadow = this.routing.forRequest(spec);
      if (this.shadows.size >= 256) this.shadows.delete(this.shadows.keys().next().value!);
      this.shadows.set(requestId, shadow);
    }
    return shadow;
  }
}

/** Request lookup by id: a source by position (ids are positions), an array through a Map by `id`. */
function specLookup(requests: readonly RequestSpec[] | RequestSource): (id: number) => RequestSpec | undefined {
  if (!Array.isArray(requests)) {
    const src = requests as RequestSource;
    return (id) => (id >= 0 && id < src.count ? src.spec(id) : undefined);
  }
  const byId = new Map<number, RequestSpec>();
  for (const r of requests as readonly RequestSpec[]) byId.set(r.id, r);
  return (id) => byId.get(id);
}

/** Predictions recorded in the replayed trace, with a profile predictor for the gaps. */
export class TracePredictor implements ExpertPredictor {
  private readonly specOf: (id: number) => RequestSpec | undefined;
  readonly describe: string;
  readonly accuracyByLayer?: readonly number[];
  private readonly ranker: Ranker;
  private readonly score: Float64Array;

  constructor(
    private readonly routing: TraceRouting,
    /** The workload's requests (a source: by id = position; an array: by `id`). */
    specs: RequestSource | readonly RequestSpec[],
    private readonly fallback: ProfilePredictor,
  ) {
    this.specOf = specLookup(specs);
    this.ranker = new Ranker(routing);
    this.score = new Float64Array(routing.experts);
    this.describe = `predictions from the trace (gaps: ${fallback.describe})`;
  }

  predict(requestId: number, layer: number, fromToken: number, toToken: number): readonly number[] {
    const { moeLayers: L, topK: k } = this.routing;
    const s = this.routing.storedFor(requestId);
    const spec = this.specOf(requestId);
    // Votes in a scratch array (zeroed here; only the ranking is returned).
    const score = this.score;
    score.fill(0);
    const p = s.predictions;
    for (let t = fromToken; t < toToken; t++) {
      const rec = p && spec ? TraceRouting.recordIndex(s, spec.promptTokens, t) : -1;
      const a = rec >= 0 ? p!.offsets[rec * L + layer]! : 0;
      const b = rec >= 0 ? p!.offsets[rec * L + layer + 1]! : 0;
      if (b > a) {
        const len = b - a;
        // Top-k entries get a full vote; the order inside the list breaks ties (Borda-like).
        for (let r = 0; r < len; r++) score[p!.ids[a + r]!]! += (r < k ? 1 : 0) + (len - r) / (len + 1) / (k + 1);
      } else {
        this.fallback.addVotes(score, requestId, layer, t, t + 1);
      }
    }
    return this.ranker.rank(layer, score);
  }
}

function summariseAccuracy(a: readonly number[]): string {
  const f = (x: number): string => x.toFixed(2);
  const first = a[0]!;
  const last = a[a.length - 1]!;
  return a.every((x) => x === first) ? f(first) : `${f(first)}→${f(last)} over ${a.length} layers`;
}
