/**
 * moepic — MoEpic (Yan, Liu, Xu, Huang, "Accelerating Mixture-of-Expert Inference with Adaptive
 * Expert Split Mechanism", arXiv 2509.08342; DESIGN §8): split experts, an LCP-managed cache of
 * top segments, a speculative prefetcher of bottoms (or whole experts) and a cache configurator.
 *
 * Memory (§3.4.1): the expert budget V_e = `budgetExperts` whole experts is the executor's
 * segment cache; layer i holds the top segments (fraction θ_i) of C_i experts within V_i = θ_i·C_i
 * expert units; the buffer (`bufferExperts`; the paper's U_b = K experts, §4.1; default 2K slots) holds
 * prefetched bottoms / whole experts and on-demand loads (default 2K slots: see `bufferExperts`). Initially V_i = V_e/L, θ_i = 0.5
 * (C_i = 2V_i, at most N; Alg. 1 line 4) and the cached experts are random (§3.4.2). The
 * buffer defaults to 2K slots (see `bufferExperts`).
 *
 * Per layer i (§3.2): when layer i routes, prefetching for i stops (its unneeded loading
 * prefetches are cancelled and stale prefetched entries dropped); the executor fetches the
 * missing segments at top priority and computes the present ones meanwhile (ready-first); the
 * prefetches for layer i+1 are issued in descending predicted score (`view.predict(i+1)`, the
 * workload's next-layer-gate predictor), a bottom when the top is cached, else the whole expert,
 * at priorities below every on-demand fetch (so they start once layer i's misses have loaded),
 * as many as the buffer has slots. Layer 0 is predicted at the iteration's start (the paper uses
 * the previous token's last layer: the predictor's layer-0 accuracy stands for it).
 *
 * Cache manager (§3.3): a whole expert that was loaded (a top miss) replaces the layer's lowest
 * LCP-priority top (`cache: lcp`) — or a random one (`cache: rnd`, the "w/o LCP" ablation) — and
 * keeps its first θ_i as the new top (no bytes move; the slot is freed).
 *
 * Configurator (§3.4.2, `configurator.ts`): every τ = 5,000 processed tokens (prefill included),
 * at the next request boundary (the paper: "only when the device is idle"), from the statistics
 * of decode tokens: new V_i, θ_i, C_i; then each layer's top-C_i experts by priority get tops of
 * θ_i (reshaping: drops first, then loads at the lowest link priority; the moved bytes count).
 * Profiled inputs (T_att, T_moe, T_head, T_load) come from `view.estimateNs`: the cost model's
 * uncontended decode times under the run's runtime — what profiling the deployment measures.
 *
 * Switches for the paper's ablation (Table 3): `prefetch: random` (w/o SP: random experts within
 * the window), `cache: rnd` (w/o LCP), `configurator: false` (w/o CCA: uniform V_i, θ = 0.5).
 * Split-ratio study (Fig 4b): `configurator: false`, `theta` fixed (0 = prefetch only), and
 * `prefetch: none` with θ = 1 (cache only).
 *
 * Known gaps: the buffer counts slots of whole experts (a bottom takes a slot; the paper's
 * byte buffer could hold more bottoms than K); reshaping a top to another θ reloads the whole new
 * top; LCP and statistics see an iteration's tokens at once (see `lcp.ts`).
 */
import { z } from 'zod';
import { UserError } from '../../sim/kernel/errors.ts';
import type { Rng } from '../../sim/kernel/rng.ts';
import type {
  ExpertKey,
  KeepTop,
  PolicyDecision,
  PrefetchRequest,
  ServingPolicy,
  ServingView,
  TopRequest,
} from '../../sim/serving/policy.ts';
import type { ModelProfile } from '../../hardware-profiles/types.ts';
import { definePolicy } from '../types.ts';
import { iterationTokens, LCP_OMEGA, LCP_RHO, LcpScores } from '../cache/lcp.ts';
import { layerModels, SplitStats, vramAllocation, type ModuleTimes } from './configurator.ts';
import { OrderedKeys } from './ordered-keys.ts';

/** An empty key list for decisions (never mutated). */
const NO_KEYS: ExpertKey[] = [];

export const MoepicParams = z
  .object({
    /** V_e: VRAM for cached expert segments, in whole experts (paper defaults: Qwen 240, Mixtral 96). */
    budgetExperts: z.number().nonnegative(),
    /**
     * U_b: the prefetch / on-demand buffer in whole-expert slots. Default 2 × top-k: the paper's
     * U_b is K experts of bytes (§4.1), but its prefetches for layer i+1 overlap layer i's MoE
     * compute (§3.2, Fig 3d) while layer i's K loaded experts / bottoms are in use, which needs room
     * beside them; moesim's buffer counts whole-expert slots (a bottom takes one), so K slots would
     * leave prefetching only layer i+1's attention as a window. How the paper shares its buffer is
     * not stated (settings-moepic.md §4a.8); `bufferExperts: <K>` runs the literal K.
     */
    bufferExperts: z.number().int().positive().optional(),
    /** Initial (and, without the configurator, fixed) split ratio θ (Alg. 1 line 4: 0.5). 0: no tops (prefetch only). */
    theta: z.number().min(0).max(1).default(0.5),
    prefetch: z.enum(['speculative', 'random', 'none']).default('speculative'),
    cache: z.enum(['lcp', 'rnd']).default('lcp'),
    configurator: z.boolean().default(true),
    /** τ: processed tokens between reconfigurations (§4.1: 5,000). */
    tau: z.number().int().positive().default(5000),
    /** ζ: budget step as a fraction of V_e (§4.1: 0.01). */
    zeta: z.number().gt(0).lt(1).default(0.01),
    omega: z.number().positive().default(LCP_OMEGA),
    rho: z.number().gt(0).lt(1).default(LCP_RHO),
    /** Decode context (tokens) at which T_att is profiled (default: 200, an MMLU prompt plus some output). */
    profileContextTokens: z.number().int().positive().default(200),
  })
  .strict();
export type MoepicParams = z.infer<typeof MoepicParams>;

export interface MoepicPolicy extends ServingPolicy {
  /** Current per-layer budgets (expert units), split ratios and cache sizes. */
  config(): { v: number[]; theta: number[]; cache: number[] };
  readonly stats: () => SplitStats;
}

export function createMoepic(name: string, p: MoepicParams, model: ModelProfile, rng: Rng): MoepicPolicy {
  const L = model.moeLayers;
  const E = model.experts;
  const K = model.topK;
  const B = model.derived.bytesPerExpert;
  if (p.budgetExperts > L * E)
    throw new UserError(
      `moepic budgetExperts ${p.budgetExperts} exceeds the model's ${L * E} experts`,
      undefined,
      'budgetExperts',
      p.budgetExperts,
    );
  const v = new Float64Array(L).fill(p.budgetExperts / L);
  const theta = new Float64Array(L);
  const cacheSize = new Int32Array(L);
  const setUniform = (th: number): void => {
    for (let l = 0; l < L; l++) {
      if (th <= 0 || v[l]! <= 0) {
        theta[l] = 0;
        cacheSize[l] = 0;
        continue;
      }
      const fits = Math.min(E, Math.floor(v[l]! / th + 1e-9));
      if (fits < 1 && !p.configurator) {
        // A fixed θ whose one top would not fit the layer's budget: no top at all (prefetch only).
        theta[l] = 0;
        cacheSize[l] = 0;
        continue;
      }
      const c = Math.max(1, fits);
      cacheSize[l] = c;
      // θ = V_i / C_i, except when C_i is capped by N with θ fixed (Fig 4b's θ = 0.1 uses what fits).
      theta[l] = Math.min(1, p.configurator ? v[l]! / c : th);
    }
  };
  setUniform(p.theta);
  const scores = new LcpScores(L, E, p.omega, p.rho);
  const stats = new SplitStats(L, E);
  /** Keys with a top, per layer, in the segment cache's order (kept in step with the executor's segment cache). */
  const tops: OrderedKeys[] = Array.from({ length: L }, () => new OrderedKeys(L * E));
  /**
   * Per layer: 1 once the policy has asked for a top of fraction ≥ 1 there (sticky). Tops are
   * created only with the fractions the policy gives (initial tops, `keepTop`, `loadTops`), so
   * without the mark no top of the layer holds a whole expert and the prefetch walks skip the
   * segment cache's lookup.
   */
  const wholeTops = new Uint8Array(L);
  const noteFraction = (l: number, f: number): void => {
    if (f >= 1) wholeTops[l] = 1;
  };
  let topsDirty = false;
  const predictedFor: (readonly number[])[] = Array.from({ length: L }, () => []);
  let tokensSeen = 0;
  let nextConfigAt = p.tau;
  let reconfigurations = 0;
  let configuratorIterations = 0;
  let reshapeBytes = 0;
  let requestEnded = false;
  let times: ModuleTimes | null = null;
  const slots = p.bufferExperts ?? 2 * K;
  const rankOf = new Int32Array(E);

  const topFraction = (l: number): number => theta[l]!;

  const ranking = (l: number): number[] => {
    if (p.cache === 'lcp') return scores.ranked(l);
    const ids = Array.from({ length: E }, (_, e) => e);
    for (let i = ids.length - 1; i > 0; i--) {
      const j = rng.int(i + 1);
      [ids[i], ids[j]] = [ids[j]!, ids[i]!];
    }
    return ids;
  };

  const syncTops = (view: ServingView): void => {
    if (!topsDirty) return;
    topsDirty = false;
    for (const s of tops) s.clear();
    for (const k of view.segments!.keys()) tops[Math.floor(k / E)]!.add(k);
  };

  const predictionFor = (view: ServingView, l: number): readonly number[] => {
    if (p.prefetch === 'random') {
      const ids = Array.from({ length: E }, (_, e) => e);
      for (let i = ids.length - 1; i > 0; i--) {
        const j = rng.int(i + 1);
        [ids[i], ids[j]] = [ids[j]!, ids[i]!];
      }
      if (p.configurator) predictedFor[l] = view.predict(l);
      return ids;
    }
    const pred = view.predict(l);
    predictedFor[l] = pred;
    return pred;
  };

  const prefetchLayer = (view: ServingView, l: number): PrefetchRequest[] => {
    if (p.prefetch === 'none' || l >= L) {
      if (p.configurator && l < L) predictedFor[l] = view.predict(l);
      return [];
    }
    const ranked = predictionFor(view, l);
    const out: PrefetchRequest[] = [];
    for (const e of ranked) {
      if (out.length >= slots) break;
      const key = view.keyOf(l, e);
      if ((wholeTops[l] === 1 && view.segments!.topFraction(key) >= 1) || view.buffer.has(key)) continue;
      out.push({ key, priority: 1 + out.length });
    }
    return out;
  };

  const profile = (view: ServingView): ModuleTimes => {
    if (times) return times;
    const est = view.estimateNs!;
    const moe =
      est({ kind: 'router', tokens: 1 }) +
      (model.sharedExperts > 0 ? est({ kind: 'sharedExperts', tokens: 1 }) : 0) +
      K * est({ kind: 'expert', tokens: 1 }) +
      est({ kind: 'idleExperts', count: E - K });
    times = {
      attNs: est({ kind: 'attention', tokens: 1, contextTokens: p.profileContextTokens }),
      moeNs: moe,
      headNs: est({ kind: 'lmHead', tokens: 1 }),
      loadNs: est({ kind: 'transfer', bytes: B, direction: 'h2d' }),
    };
    return times;
  };

  const reconfigure = (view: ServingView): PolicyDecision => {
    const t = profile(view);
    const res = vramAllocation(v, p.zeta * p.budgetExperts, layerModels(stats, K), E, K, t);
    configuratorIterations += res.iterations;
    reconfigurations++;
    v.set(res.v);
    theta.set(res.split.theta);
    cacheSize.set(res.split.cache);
    // Reshape: each layer's top-C_i experts by priority get tops of θ_i.
    syncTops(view);
    const drop: ExpertKey[] = [];
    const load: TopRequest[] = [];
    for (let l = 0; l < L; l++) {
      const want = new Set(
        ranking(l)
          .slice(0, cacheSize[l]!)
          .map((e) => view.keyOf(l, e)),
      );
      for (const k of tops[l]!) if (!want.has(k) || view.segments!.topFraction(k) !== theta[l]) drop.push(k);
      for (const k of want)
        if (!tops[l]!.has(k) || view.segments!.topFraction(k) !== theta[l]) load.push({ key: k, fraction: theta[l]! });
    }
    for (const r of load) reshapeBytes += view.segments!.topBytes(r.fraction);
    for (let l = 0; l < L; l++) if (cacheSize[l]! > 0) noteFraction(l, theta[l]!);
    topsDirty = true;
    return { dropTops: drop, loadTops: load };
  };

  return {
    name,
    segmentCacheBytes: Math.round(p.budgetExperts * B) + L * E,
    computeOrder: 'ready-first',
    stats: () => stats,
    config: () => ({ v: Array.from(v), theta: Array.from(theta), cache: Array.from(cacheSize) }),
    initialTops() {
      const out: TopRequest[] = [];
      for (let l = 0; l < L; l++) {
        if (theta[l]! <= 0) continue;
        const ids = Array.from({ length: E }, (_, e) => e);
        for (let i = 0; i < cacheSize[l]!; i++) {
          const j = i + rng.int(E - i);
          [ids[i], ids[j]] = [ids[j]!, ids[i]!];
          const key = l * E + ids[i]!;
          out.push({ key, fraction: theta[l]! });
          noteFraction(l, theta[l]!);
          tops[l]!.add(key);
        }
      }
      return out;
    },
    onIterationStart(view) {
      syncTops(view);
      return { prefetch: prefetchLayer(view, view.firstLayer) };
    },
    onLayerRouted(view, routing) {
      const l = routing.layer;
      if (p.configurator && allDecode(view)) {
        // Ranks by priority before this token (the cache the configurator would have built).
        scores.rankInto(l, rankOf);
        stats.observe(l, rankOf, routing.activated, predictedFor[l]!);
      }
      scores.observe(l, routing.tokensPerExpert, iterationTokens(view));
      // Prefetching for this layer stops: cancel what is still loading and not needed; drop stale entries.
      const cancel: ExpertKey[] = [];
      const evict: ExpertKey[] = [];
      for (const ent of view.buffer.entries()) {
        if (ent.pinned || view.layerOf(ent.key) > l) continue;
        (ent.state === 'resident' ? evict : cancel).push(ent.key);
      }
      return { cancel, evict, prefetch: prefetchLayer(view, l + 1) };
    },
    onLayerDone(view, layer) {
      // Layer i's experts have computed and left the buffer: the slots they held take the
      // prefetches for layer i+1 that did not fit while layer i's loads were in use (§3.2:
      // prefetching for i+1 follows the loading of layer i's missing segments).
      if (p.prefetch === 'none' || layer + 1 >= L) return;
      const ranked = p.prefetch === 'random' ? predictionFor(view, layer + 1) : predictedFor[layer + 1]!;
      const out: PrefetchRequest[] = [];
      let rank = 0;
      for (const e of ranked) {
        if (rank >= slots) break;
        const key = view.keyOf(layer + 1, e);
        if (wholeTops[layer + 1] === 1 && view.segments!.topFraction(key) >= 1) continue;
        rank++;
        if (!view.buffer.has(key)) out.push({ key, priority: rank });
      }
      return { prefetch: out };
    },
    afterUse(view, key): boolean | KeepTop {
      const ent = view.buffer.entry(key);
      if (!ent || ent.part === 'bottom') return false;
      const l = view.layerOf(key);
      const c = cacheSize[l]!;
      const th = topFraction(l);
      if (c === 0 || th <= 0) return false;
      syncTops(view);
      const own = tops[l]!;
      const seg = view.segments!;
      const need = seg.topBytes(th);
      let free = seg.capacityBytes - seg.usedBytes;
      let dropTops: ExpertKey[] = NO_KEYS;
      if (own.size >= c || free < need) {
        // Replace the lowest-priority top of the layer (or a random one without LCP) among those
        // not in use.
        let victim = -1;
        if (p.cache === 'lcp') {
          // The first by LCP's eviction order (`scores.evictFirst`), each priority computed once.
          let pv = 0;
          const last = scores.last;
          // A top in use is skipped once it would be the victim (the order does not depend on pins).
          const keys = own.keys;
          for (let i = 0; i < keys.length; i++) {
            const k = keys[i]!;
            const pk = scores.priority(k);
            if (
              victim >= 0 &&
              !(
                pk - pv < 0 ||
                (pk === pv && (last[k]! - last[victim]! < 0 || (last[k] === last[victim] && k < victim)))
              )
            )
              continue;
            if (seg.topPinned(k) || view.buffer.entry(k)?.pinned) continue;
            victim = k;
            pv = pk;
          }
          if (victim < 0) return false;
        } else {
          const pool: ExpertKey[] = [];
          for (const k of own) if (!seg.topPinned(k) && !view.buffer.entry(k)?.pinned) pool.push(k);
          if (pool.length === 0) return false;
          victim = pool[rng.int(pool.length)]!;
        }
        free += seg.topBytes(seg.topFraction(victim));
        if (free < need) return false;
        dropTops = [victim];
        own.delete(victim);
      }
      own.add(key);
      noteFraction(l, th);
      return { keepTop: th, dropTops };
    },
    onRequestFinished() {
      requestEnded = true;
    },
    onIterationEnd(view) {
      tokensSeen += iterationTokens(view);
      const ended = requestEnded;
      requestEnded = false;
      if (!p.configurator || tokensSeen < nextConfigAt || !ended) return;
      while (nextConfigAt <= tokensSeen) nextConfigAt += p.tau;
      return reconfigure(view);
    },
    report() {
      const r3 = (x: number) => Math.round(x * 1000) / 1000;
      return {
        budgetExperts: p.budgetExperts,
        reconfigurations,
        configuratorIterations,
        reshapeBytes,
        v: Array.from(v, r3),
        theta: Array.from(theta, r3),
        cache: Array.from(cacheSize),
      };
    },
  };
}

/** Whether every request of the batch is decoding (no prefill in the iteration). */
function allDecode(view: ServingView): boolean {
  const batch = view.batch;
  for (let i = 0; i < batch.length; i++) if (batch[i]!.phase !== 'decode') return false;
  return true;
}

export const moepic = definePolicy({
  name: 'moepic',
  family: 'serving',
  summary: 'MoEpic: split experts (tops cached, bottoms prefetched), LCP, speculative prefetch, cache configurator',
  params: MoepicParams,
  bufferSlots: (p, model) => p.bufferExperts ?? 2 * model.topK,
  create: (p, ctx) => createMoepic('moepic', p, ctx.model, ctx.rng),
});
