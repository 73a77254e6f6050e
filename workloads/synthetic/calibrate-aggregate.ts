/**
 * Fits what an aggregate routing file can tell — per-layer popularity and how much corpora
 * (tasks) differ — and takes the request-level knobs (skew, temporal, cross-layer, shared
 * tokens) from a base profile, since an aggregate has no request boundaries or token order.
 *
 * The twin of an aggregate: one task per corpus, requests of `chunkTokens` prefill tokens (the
 * OLMoE counts come from teacher-forced 2048-token chunks), counted at the same layers.
 *
 * Fit: the Zipf exponent of each listed layer by a fixed point on the pooled entropy (other
 * layers interpolated linearly); the task concentration β_T by secant steps on log β_T so that
 * the mean entropy deficit of a corpus below the pooled entropy matches; and the share of
 * shared-vocabulary tokens ψ (deterministic paths) by secant steps on logit ψ so that the mean
 * rank-aligned successor rate between the listed layers matches.
 */
import { UserError } from '../../sim/kernel/errors.ts';
import {
  aggregateStats,
  aggregateStatsOfRequests,
  readAggregateFile,
  type AggregateStats,
} from '../trace/aggregate-file.ts';
import { SyntheticModel } from './model.ts';
import { SyntheticRouting } from './router.ts';
import { generateRequests, type RequestShape } from './generate.ts';
import { zipfEntropy, zipfExponentForEntropy } from './calibrate.ts';
import type { Knobs, Profile } from './profile.ts';

export interface AggregateCalibrationOptions {
  /** Key of the model in the file (e.g. `OLMoE-1B-7B-0924`). */
  readonly aggregateModel: string;
  readonly modelId: string;
  /** MoE layers of the model (the file lists model layer indices; MoE layer = model layer here). */
  readonly moeLayers: number;
  readonly base: Profile;
  readonly name: string;
  readonly chunkTokens?: number;
  readonly requestsPerCorpus?: number;
  readonly maxEvaluations?: number;
  readonly log?: (m: string) => void;
}

export async function calibrateFromAggregate(
  path: string,
  o: AggregateCalibrationOptions,
): Promise<{ profile: Profile; real: AggregateStats; twin: AggregateStats }> {
  const file = await readAggregateFile(path);
  const m = file.models[o.aggregateModel];
  if (!m)
    throw new UserError(
      `no model "${o.aggregateModel}" in the file (has ${Object.keys(file.models).join(', ')})`,
      path,
      'models',
    );
  if (m.layers.some((l) => l >= o.moeLayers))
    throw new UserError(
      `lists layers ${m.layers.join(', ')} but the model has ${o.moeLayers}`,
      path,
      `models.${o.aggregateModel}.layers`,
    );
  const E = m.experts;
  const k = m.topk;
  const L = o.moeLayers;
  const real = aggregateStats(m);
  const corpora = Object.keys(m.expert_counts);
  const log = o.log ?? (() => {});

  // Expert order at the listed layers from the pooled counts; random elsewhere.
  const pooled = m.layers.map((_, i) => {
    const c = new Float64Array(E);
    for (const corpus of corpora) m.expert_counts[corpus]![i]!.forEach((v, e) => (c[e]! += v));
    return c;
  });
  const shape = { moeLayers: L, experts: E, topK: k };
  const chunk = o.chunkTokens ?? 1024;
  const perCorpus = o.requestsPerCorpus ?? 8;
  const shapes: RequestShape[] = [];
  for (const corpus of corpora) {
    for (let i = 0; i < perCorpus; i++)
      shapes.push({
        id: `${corpus}-${i}`,
        promptTokens: chunk,
        prefillRecorded: true,
        tokens: chunk,
        outputTokens: 1,
        task: corpus,
      });
  }
  const deficit = (s: AggregateStats): number => {
    let d = 0;
    let n = 0;
    for (const c of Object.values(s.corpora)) {
      c.entropy.forEach((h, i) => {
        d += s.pooled.entropy[i]! - h;
        n++;
      });
    }
    return d / n;
  };
  const targetDeficit = deficit(real);

  // Long-range structure: the mean rank-aligned successor rate over the listed layer pairs,
  // fitted with the share of shared-vocabulary tokens (deterministic paths) when the file has pair counts.
  const ranked = (s: AggregateStats): number | null => {
    const v = Object.values(s.pooled.rankAligned);
    return v.length ? v.reduce((a, b) => a + b, 0) / v.length : null;
  };
  const targetRanked = ranked(real);

  let listedAlpha = real.pooled.entropy.map((h) => zipfExponentForEntropy(h, E));
  let logBetaT = Math.log(methodOfMomentsBeta(m.expert_counts, corpora, m.layers.length, E));
  let logitPsi = logit(Math.min(0.9, Math.max(0.0025, o.base.knobs.sharedTokens || 0.05)));
  const knobsFor = (alphas: number[], lbt: number, lpsi: number): Knobs => ({
    ...o.base.knobs,
    popularity: {
      zipfExponent: interpolate(m.layers, alphas, L).map((a) => Math.round(a * 1e4) / 1e4),
      expertOrder: expertOrder(m.layers, pooled, L, E),
    },
    taskConcentration: Math.round(Math.exp(lbt) * 1e4) / 1e4,
    sharedTokens:
      targetRanked === null ? o.base.knobs.sharedTokens : Math.round((1 / (1 + Math.exp(-lpsi))) * 1e4) / 1e4,
    startTokens: 0,
  });
  const evaluate = (knobs: Knobs): AggregateStats =>
    aggregateStatsOfRequests(
      generateRequests(new SyntheticRouting(new SyntheticModel(shape, knobs), 'moesim-calibrate:aggregate'), shapes),
      L,
      E,
      k,
      m.layers,
    );

  let prev: { lbt: number; d: number; lpsi: number; r: number } | undefined;
  let best: { knobs: Knobs; twin: AggregateStats; err: number } | undefined;
  for (let it = 0; it < (o.maxEvaluations ?? 12); it++) {
    const knobs = knobsFor(listedAlpha, logBetaT, logitPsi);
    const twin = evaluate(knobs);
    const d = deficit(twin);
    const r = ranked(twin) ?? 0;
    const err = Math.max(
      Math.abs(d - targetDeficit),
      targetRanked === null ? 0 : Math.abs(r - targetRanked),
      ...twin.pooled.entropy.map((h, i) => Math.abs(h - real.pooled.entropy[i]!)),
    );
    log(
      `evaluation ${it + 1}: β_T ${Math.exp(logBetaT).toFixed(2)} ψ ${knobs.sharedTokens} deficit ${d.toFixed(4)}/${targetDeficit.toFixed(4)} ` +
        (targetRanked === null ? '' : `rank-aligned ${r.toFixed(3)}/${targetRanked.toFixed(3)} `) +
        `pooled entropy ${twin.pooled.entropy.map((h) => h.toFixed(3)).join(' ')}/${real.pooled.entropy.map((h) => h.toFixed(3)).join(' ')}`,
    );
    if (!best || err < best.err) best = { knobs, twin, err };
    if (err < 0.003) break;
    // Secants: log β_T for the deficit (larger β_T, less distinct corpora), logit ψ for the
    // rank-aligned rate (more shared paths, more long-range structure).
    let slope = -0.05;
    if (prev && Math.abs(logBetaT - prev.lbt) > 1e-9) slope = (d - prev.d) / (logBetaT - prev.lbt);
    if (!(slope < -1e-4)) slope = -0.05;
    let slopePsi = 0.1;
    if (prev && Math.abs(logitPsi - prev.lpsi) > 1e-9) slopePsi = (r - prev.r) / (logitPsi - prev.lpsi);
    if (!(slopePsi > 1e-4)) slopePsi = 0.1;
    prev = { lbt: logBetaT, d, lpsi: logitPsi, r };
    logBetaT = Math.min(
      Math.log(1e5),
      Math.max(Math.log(0.05), logBetaT + Math.max(-2, Math.min(2, (targetDeficit - d) / slope))),
    );
    if (targetRanked !== null)
      logitPsi = Math.min(
        logit(0.9),
        Math.max(logit(0.0025), logitPsi + Math.max(-2, Math.min(2, (targetRanked - r) / slopePsi))),
      );
    listedAlpha = listedAlpha.map((a, i) =>
      zipfExponentForEntropy(
        Math.min(1, Math.max(0.05, zipfEntropy(a, E) + real.pooled.entropy[i]! - twin.pooled.entropy[i]!)),
        E,
      ),
    );
  }
  const profile: Profile = {
    name: o.name,
    model: { id: o.modelId, moeLayers: L, experts: E, topK: k },
    fittedTo:
      `popularity (Zipf exponents at model layers ${m.layers.join('/')}, interpolated between), task concentration (${corpora.length} corpora as tasks) ` +
      `and the share of shared-vocabulary tokens (rank-aligned successor rates ${Object.keys(real.pooled.rankAligned).join(', ')}) ` +
      `fitted to the ${o.aggregateModel} routing aggregates of ${path.replace(/^.*[\\/]/, '')} (${file.source ?? 'allenai/OLMoE'}, ${file.license ?? 'see traces/README.md'})`,
    assumedFrom:
      `request-level knobs (requestConcentration, temporalReuse/Depth/Memory, crossLayer) from profile "${o.base.name}" ` +
      `(${o.base.fittedTo ?? o.base.assumedFrom}); an aggregate has no request boundaries or token order to fit them`,
    knobs: best!.knobs,
    tasks: Object.fromEntries(corpora.map((c) => [c, 1])),
    ...(o.base.lengths ? { lengths: o.base.lengths } : {}),
    fit: {
      method:
        'per-layer Zipf fixed point on pooled entropy; secant on log taskConcentration for the mean per-corpus entropy deficit',
      twin: `${corpora.length} corpora × ${perCorpus} requests × ${chunk} tokens`,
      targetPooledEntropy: real.pooled.entropy.map(r4),
      achievedPooledEntropy: best!.twin.pooled.entropy.map(r4),
      targetCorpusDeficit: r4(targetDeficit),
      achievedCorpusDeficit: r4(deficit(best!.twin)),
      targetRankAligned: targetRanked === null ? null : r4(targetRanked),
      achievedRankAligned: ranked(best!.twin) === null ? null : r4(ranked(best!.twin)!),
    },
  };
  return { profile, real, twin: best!.twin };
}

const r4 = (x: number): number => Math.round(x * 1e4) / 1e4;
const logit = (p: number): number => Math.log(p / (1 - p));

/** Dirichlet concentration from the spread of corpus distributions around their mean: Var(p_e) = g_e(1 − g_e)/(β + 1). */
function methodOfMomentsBeta(counts: Record<string, number[][]>, corpora: string[], layers: number, E: number): number {
  let inv = 0;
  for (let i = 0; i < layers; i++) {
    const ps = corpora.map((c) => {
      const v = counts[c]![i]!;
      const s = v.reduce((a, b) => a + b, 0);
      return v.map((x) => x / s);
    });
    const g = Array.from({ length: E }, (_, e) => ps.reduce((a, p) => a + p[e]!, 0) / ps.length);
    let v = 0;
    for (const p of ps) for (let e = 0; e < E; e++) v += (p[e]! - g[e]!) ** 2;
    v /= Math.max(1, ps.length - 1);
    inv += v / Math.max(1e-12, 1 - g.reduce((a, x) => a + x * x, 0));
  }
  inv /= layers;
  return Math.max(0.05, 1 / Math.max(1e-6, inv) - 1);
}

/** Per-layer values from values at listed layers: linear in between, constant outside. */
function interpolate(listed: readonly number[], values: readonly number[], L: number): number[] {
  return Array.from({ length: L }, (_, l) => {
    if (l <= listed[0]!) return values[0]!;
    for (let i = 1; i < listed.length; i++) {
      if (l <= listed[i]!) {
        const f = (l - listed[i - 1]!) / (listed[i]! - listed[i - 1]!);
        return values[i - 1]! + f * (values[i]! - values[i - 1]!);
      }
    }
    return values[values.length - 1]!;
  });
}

/** Hottest-first order at listed layers from counts; a fixed pseudo-random permutation elsewhere. */
function expertOrder(listed: readonly number[], counts: Float64Array[], L: number, E: number): number[][] {
  return Array.from({ length: L }, (_, l) => {
    const i = listed.indexOf(l);
    const ids = Array.from({ length: E }, (_, e) => e);
    if (i >= 0) return ids.sort((a, b) => counts[i]![b]! - counts[i]![a]! || a - b);
    // (7919·e + 13·l) mod E is a permutation when gcd(7919, E) = 1 (7919 is prime).
    return ids.map((e) => (7919 * e + 13 * l) % E);
  });
}
