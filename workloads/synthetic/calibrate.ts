/**
 * Fits a synthetic profile's knobs to a recorded trace, so that the synthetic twin of the
 * trace (same request lengths, phases and task labels, synthetic routing) has the trace's
 * statistics.
 *
 * Method (simulated method of moments):
 * 1. Stream the trace once: its statistics, request shapes, per-layer expert ranks and the
 *    routings of the first tokens (a start shared by ≥ 25 % of requests sets `startTokens`).
 *    Above `maxFitTokens`, fit on a random subset of whole requests; the targets are then
 *    recomputed on that subset in a second streaming pass, so target and synthetic statistics
 *    have the same sample size and the same in-sample biases.
 * 2. Targets: popularity entropy per layer ↔ Zipf exponent per layer (a per-layer fixed point
 *    through the Zipf entropy curve); and jointly, request-level top-C share for each C,
 *    temporal locality (P(any shared) and the shared fraction of adjacent tokens, which separate
 *    τ from ρ), cross-layer predictability, and within/across task similarity (or the
 *    similarity of all request pairs without task labels) ↔ requestConcentration,
 *    temporalReuse, temporalDepth, crossLayer, sharedTokens, taskConcentration.
 * 3. Each evaluation routes the fit requests synthetically with fixed seeds (common random
 *    numbers) — replicated until it covers ≥ `minEvalTokens` tokens, statistics averaged, so a
 *    tiny trace is fitted to its expectation rather than one noisy draw — and computes the same
 *    statistics. The joint fit starts from the best of a few random points, takes a
 *    finite-difference Jacobian in transformed coordinates (log β, logit probabilities), then
 *    Levenberg–Marquardt steps with Broyden updates, keeping a step only if it helps.
 * 4. The evaluation with the smallest largest error is kept. Knobs not fitted: temporalMemory
 *    (0), latentClusters / clusterConcentration (off), sharedVocabulary (32, assumed).
 */
import { Rng } from '../../sim/kernel/rng.ts';
import { UserError } from '../../sim/kernel/errors.ts';
import { TraceReader } from '../trace/reader.ts';
import { TraceStatsAccumulator, statsOf, type ExtendedTraceStats, type Shape } from '../stats/trace-stats.ts';
import { empiricalQuantiles } from '../lengths.ts';
import { SyntheticModel } from './model.ts';
import { SyntheticRouting } from './router.ts';
import { generateRequests, shapeOf, type RequestShape } from './generate.ts';
import type { Knobs, Profile } from './profile.ts';
import type { TraceRequest } from '../trace/format.ts';

export interface CalibrationOptions {
  /** Profile name (default: derived from the file name). */
  readonly name?: string;
  /** Model id for the profile (default: the trace header's, else required). */
  readonly modelId?: string;
  /** Fit on at most this many tokens (whole requests, random subset). Default 40 000. */
  readonly maxFitTokens?: number;
  /** Replicate small fit samples until an evaluation covers this many tokens. Default 20 000. */
  readonly minEvalTokens?: number;
  /** Evaluation budget. Default 30. */
  readonly maxEvaluations?: number;
  readonly structureSeed?: number;
  /** Progress messages (stderr in the CLI). */
  readonly log?: (message: string) => void;
  /** Fit only the requests whose 0-based position in the file passes (hold-out validation). Default all. */
  readonly select?: (index: number) => boolean;
  /**
   * Also match the mean shared fraction of adjacent tokens' experts (`shared`, |S_t ∩ S_{t−1}|/k),
   * beside P(any shared) (`temporal`): with both, τ and ρ are identified separately. Default true.
   */
  readonly sharedFraction?: boolean;
}

export interface CalibrationResult {
  readonly profile: Profile;
  /** Statistics of the whole trace. */
  readonly trace: ExtendedTraceStats;
  /** Statistics of the fit subset (= trace if not subsampled) and of its synthetic twin with the fitted knobs. */
  readonly target: FitStats;
  readonly achieved: FitStats;
  readonly evaluations: number;
  readonly shapes: readonly RequestShape[];
}

/** The statistics the calibrator matches: entropy per layer, and named scalar targets. */
export interface FitStats {
  readonly entropy: number[];
  /** `skew:<C>` (request-level top-C share), `temporal`, `shared`, `cross`, `within`, `across` or `similarity`. */
  readonly values: Readonly<Record<string, number>>;
}

type ScalarName =
  | 'requestConcentration'
  | 'temporalReuse'
  | 'temporalDepth'
  | 'temporalMemory'
  | 'crossLayer'
  | 'sharedTokens'
  | 'taskConcentration';

/** A scalar knob, its transform for the solver, its bounds and its default start. */
interface ScalarKnob {
  readonly name: ScalarName;
  readonly kind: 'log' | 'logit';
  readonly lo: number;
  readonly hi: number;
  readonly init: number;
}

/**
 * Counts the routings of the first tokens of requests whose prompt is recorded: the leading
 * positions where one routing is taken by ≥ 25 % of ≥ 10 such requests are a shared start
 * (beginning-of-sequence, template), modelled by `startTokens`.
 */
class StartCounter {
  private readonly maps: Map<string, number>[] = Array.from({ length: 8 }, () => new Map());
  private n = 0;
  constructor(private readonly shape: Shape) {}
  add(r: TraceRequest): void {
    if (!r.prefillRecorded || r.promptTokens === 0) return;
    this.n++;
    const stride = this.shape.moeLayers * this.shape.topK;
    for (let t = 0; t < Math.min(8, r.tokens); t++) {
      const key = Array.prototype.join.call(r.experts.subarray(t * stride, (t + 1) * stride), ',');
      this.maps[t]!.set(key, (this.maps[t]!.get(key) ?? 0) + 1);
    }
  }
  sharedPrefix(): number {
    if (this.n < 10) return 0;
    let t = 0;
    while (t < this.maps.length && Math.max(0, ...this.maps[t]!.values()) >= 0.25 * this.n) t++;
    return t;
  }
}

/** Size of the shared vocabulary of fitted profiles (an assumption, see profile.ts). */
const SHARED_VOCABULARY = 32;

export async function calibrateTrace(path: string, opts: CalibrationOptions = {}): Promise<CalibrationResult> {
  const log = opts.log ?? (() => {});
  const maxFit = opts.maxFitTokens ?? 40_000;
  const reader = await TraceReader.open(path, { scores: false, predictions: false });
  const model = reader.header.model;
  const modelId = opts.modelId ?? model.id;
  if (!modelId) {
    await reader.close();
    throw new UserError('the trace does not name its model; pass --model <id>', path, 'header.model.id');
  }
  const shape: Shape = model;
  const acc = new TraceStatsAccumulator(shape);
  const shapes: RequestShape[] = [];
  const startCounter = new StartCounter(shape);
  const select = opts.select ?? (() => true);
  let pos = 0;
  for await (const r of reader) {
    if (!select(pos++)) continue;
    acc.add(r);
    shapes.push(shapeOf(r));
    startCounter.add(r);
  }
  const startTokens = startCounter.sharedPrefix();
  if (shapes.length === 0) throw new UserError('the trace has no requests', path);
  const trace = acc.result();
  const counts = acc.layerCounts();

  // Fit subset.
  const totalTokens = shapes.reduce((a, s) => a + s.tokens, 0);
  let fitIdx = shapes.map((_, i) => i);
  const withShared = opts.sharedFraction ?? true;
  let target = fitStatsOf(trace, withShared);
  if (totalTokens > maxFit) {
    const rng = new Rng('moesim-calibrate:subset');
    rng.shuffle(fitIdx);
    const chosen: number[] = [];
    let tok = 0;
    for (const i of fitIdx) {
      if (tok >= maxFit) break;
      chosen.push(i);
      tok += shapes[i]!.tokens;
    }
    fitIdx = chosen.sort((a, b) => a - b);
    const keep = new Set(fitIdx);
    const sub = new TraceStatsAccumulator(shape);
    let i = 0;
    let p = 0;
    for await (const r of await TraceReader.open(path, { scores: false, predictions: false })) {
      if (select(p++) && keep.has(i++)) sub.add(r);
    }
    target = fitStatsOf(sub.result(), withShared);
    log(`fitting on ${fitIdx.length} of ${shapes.length} requests (${tok} of ${totalTokens} tokens)`);
  }
  const fitShapes = fitIdx.map((i) => shapes[i]!);
  const fitTokens = fitShapes.reduce((a, s) => a + s.tokens, 0);
  const replicates = Math.min(16, Math.max(1, Math.ceil((opts.minEvalTokens ?? 20_000) / fitTokens)));

  // Expert order per layer: hottest first, ties by id.
  const { moeLayers: L, experts: E } = model;
  const expertOrder: number[][] = [];
  for (let l = 0; l < L; l++) {
    const ids = Array.from({ length: E }, (_, e) => e);
    ids.sort((a, b) => counts[l * E + b]! - counts[l * E + a]! || a - b);
    expertOrder.push(ids);
  }

  const structureSeed = opts.structureSeed ?? 1;
  const keys = Object.keys(target.values);
  const hasSim = keys.includes('within') || keys.includes('similarity');
  const active: ScalarKnob[] = [
    { name: 'requestConcentration', kind: 'log', lo: 0.05, hi: 1e4, init: 50 },
    ...(keys.includes('temporal')
      ? [
          { name: 'temporalReuse', kind: 'logit', lo: 0.0025, hi: 0.9975, init: 0.6 } as const,
          { name: 'temporalDepth', kind: 'logit', lo: 0.01, hi: 0.995, init: 0.4 } as const,
        ]
      : []),
    ...(keys.includes('cross')
      ? [{ name: 'crossLayer', kind: 'logit', lo: 0.0025, hi: 0.9975, init: 0.1 } as const]
      : []),
    ...(hasSim ? [{ name: 'sharedTokens', kind: 'logit', lo: 0.0025, hi: 0.9, init: 0.3 } as const] : []),
    ...(keys.includes('within')
      ? [{ name: 'taskConcentration', kind: 'log', lo: 0.05, hi: 1e5, init: 1000 } as const]
      : []),
  ];
  const toU = (k: ScalarKnob, v: number): number => (k.kind === 'log' ? Math.log(v) : logit(v));
  const fromU = (k: ScalarKnob, u: number): number => (k.kind === 'log' ? Math.exp(u) : sigmoid(u));
  const knobsFrom = (zipf: number[], u: readonly number[]): Knobs => {
    const v: Partial<Record<ScalarName, number>> = {};
    active.forEach((k, i) => (v[k.name] = round4(fromU(k, u[i]!))));
    return {
      popularity: { zipfExponent: zipf.map(round4), expertOrder },
      requestConcentration: v.requestConcentration ?? null,
      temporalReuse: v.temporalReuse ?? 0,
      temporalDepth: v.temporalDepth ?? 1,
      temporalMemory: v.temporalMemory ?? 0,
      crossLayer: v.crossLayer ?? 0,
      sharedTokens: v.sharedTokens ?? 0,
      sharedVocabulary: SHARED_VOCABULARY,
      startTokens,
      taskConcentration: v.taskConcentration ?? null,
      latentClusters: 16,
      clusterConcentration: null,
      structureSeed,
    };
  };
  let evaluations = 0;
  const evaluate = (knobs: Knobs): FitStats => {
    evaluations++;
    const m = new SyntheticModel(shape, knobs);
    const reps: FitStats[] = [];
    for (let r = 0; r < replicates; r++) {
      const routing = new SyntheticRouting(m, `moesim-calibrate:${r}`);
      reps.push(fitStatsOf(statsOf(shape, generateRequests(routing, fitShapes)), withShared));
    }
    return meanFit(reps);
  };

  const n = active.length;
  const residual = (f: FitStats): number[] => keys.map((key) => (f.values[key] ?? 0) - target.values[key]!);
  const entropyErr = (f: FitStats): number =>
    f.entropy.reduce((a, h, l) => a + Math.abs(h - target.entropy[l]!), 0) / f.entropy.length;
  const score = (f: FitStats): number => Math.max(...residual(f).map(Math.abs), entropyErr(f));
  const norm2 = (r: readonly number[]): number => r.reduce((a, x) => a + x * x, 0);
  const clampU = (i: number, x: number): number =>
    clamp(x, toU(active[i]!, active[i]!.lo), toU(active[i]!, active[i]!.hi));
  let zipf = target.entropy.map((h) => zipfExponentForEntropy(h, E));
  const updateZipf = (f: FitStats): number[] =>
    zipf.map((a, l) =>
      zipfExponentForEntropy(clamp(zipfEntropy(a, E) + (target.entropy[l]! - f.entropy[l]!), 0.05, 1), E),
    );
  const maxEval = opts.maxEvaluations ?? 30;

  // 1. Start: the default point and a few random points around it (the statistics are coupled
  //    and not monotone in every knob, so a local method needs a good start).
  const search = new Rng('moesim-calibrate:start');
  let u = active.map((k) => toU(k, k.init));
  let cur = evaluate(knobsFrom(zipf, u));
  let r = residual(cur);
  let best = { knobs: knobsFrom(zipf, u), stats: cur, score: score(cur) };
  log(`evaluation 1: ${describeFit(cur, target)}`);
  const starts = Math.min(6, Math.max(0, maxEval - 2 * n - 4));
  for (let i = 0; i < starts; i++) {
    const u2 = u.map((x, j) => clampU(j, x + (search.next() * 2 - 1) * 1.5));
    const f = evaluate(knobsFrom(zipf, u2));
    const r2 = residual(f);
    log(`evaluation ${evaluations} (start ${i + 1}): ${describeFit(f, target)}`);
    if (score(f) < best.score) best = { knobs: knobsFrom(zipf, u2), stats: f, score: score(f) };
    if (norm2(r2) < norm2(r)) {
      u = u2;
      r = r2;
      cur = f;
    }
  }
  zipf = updateZipf(cur);

  // 2. Finite-difference Jacobian (m residuals × n knobs) in transformed coordinates.
  const m = keys.length;
  const J: number[][] = Array.from({ length: m }, () => new Array<number>(n).fill(0));
  const h = 0.3;
  cur = evaluate(knobsFrom(zipf, u));
  r = residual(cur);
  for (let i = 0; i < n && evaluations < maxEval; i++) {
    const u2 = [...u];
    u2[i] = clampU(i, u2[i]! + h);
    if (u2[i] === u[i]) u2[i] = clampU(i, u2[i]! - h);
    const d = u2[i]! - u[i]!;
    const f = evaluate(knobsFrom(zipf, u2));
    const ri = residual(f);
    for (let j = 0; j < m; j++) J[j]![i] = d !== 0 ? (ri[j]! - r[j]!) / d : 0;
    if (score(f) < best.score) best = { knobs: knobsFrom(zipf, u2), stats: f, score: score(f) };
  }

  // 3. Levenberg–Marquardt steps with Broyden updates of J; a step is kept only if it lowers
  //    the residual (the statistics are noisy and coupled: a plain Newton step can overshoot).
  let lambda = 1e-2;
  while (evaluations < maxEval && best.score > 0.003) {
    const JtJ = Array.from({ length: n }, (_, a) =>
      Array.from({ length: n }, (_, b) => J.reduce((acc, row) => acc + row[a]! * row[b]!, 0)),
    );
    const Jtr = Array.from({ length: n }, (_, a) => J.reduce((acc, row, i) => acc + row[a]! * r[i]!, 0));
    for (let i = 0; i < n; i++) JtJ[i]![i] = JtJ[i]![i]! * (1 + lambda) + 1e-6;
    let step = solveLinear(
      JtJ,
      Jtr.map((x) => -x),
    );
    const maxStep = Math.max(...step.map(Math.abs));
    if (maxStep > 1.5) step = step.map((x) => (x * 1.5) / maxStep);
    const uNext = u.map((x, i) => clampU(i, x + step[i]!));
    const actual = uNext.map((x, i) => x - u[i]!);
    const f = evaluate(knobsFrom(zipf, uNext));
    const rNext = residual(f);
    log(`evaluation ${evaluations}: ${describeFit(f, target)}`);
    if (score(f) < best.score) best = { knobs: knobsFrom(zipf, uNext), stats: f, score: score(f) };
    const dd = actual.reduce((a, x) => a + x * x, 0);
    if (dd > 1e-12) {
      const dr = rNext.map((x, i) => x - r[i]!);
      for (let i = 0; i < m; i++) {
        let jd = 0;
        for (let j = 0; j < n; j++) jd += J[i]![j]! * actual[j]!;
        for (let j = 0; j < n; j++) J[i]![j] = J[i]![j]! + ((dr[i]! - jd) * actual[j]!) / dd;
      }
    }
    if (norm2(rNext) < norm2(r)) {
      u = uNext;
      r = rNext;
      cur = f;
      zipf = updateZipf(cur);
      lambda = Math.max(1e-4, lambda / 3);
    } else {
      lambda = Math.min(1e4, lambda * 4);
    }
  }

  const achieved = best.stats;
  const lengths = lengthsOf(shapes);
  const tasks: Record<string, number> = {};
  for (const s of shapes) if (s.task !== undefined) tasks[s.task] = (tasks[s.task] ?? 0) + 1;
  const name = opts.name ?? path.replace(/^.*[\\/]/, '').replace(/\.jsonl(\.gz)?$/, '');
  const profile: Profile = {
    name,
    model: { id: modelId, moeLayers: L, experts: E, topK: shape.topK },
    fittedTo:
      `${path.replace(/^.*[\\/]/, '')}: ${trace.requests} requests, ${trace.tokens} tokens` +
      (reader.header.source ? ` (source ${reader.header.source})` : '') +
      `; fitted by \`moesim trace calibrate\` on ${fitShapes.length} requests / ${fitTokens} tokens` +
      (replicates > 1 ? ` (×${replicates} synthetic replicates per evaluation)` : ''),
    knobs: best.knobs,
    ...(Object.keys(tasks).length ? { tasks } : {}),
    lengths,
    fit: {
      method: `simulated method of moments: per-layer Zipf fixed point; Levenberg–Marquardt/Broyden on ${active.map((k) => `${k.kind} ${k.name}`).join(', ')} against ${keys.join(', ')}`,
      evaluations,
      fitRequests: fitShapes.length,
      fitTokens,
      replicates,
      target: roundFit(target),
      achieved: roundFit(achieved),
    },
  };
  return { profile, trace, target, achieved, evaluations, shapes };
}

/** Transformed-coordinate bounds: β_R ∈ [0.05, 1e4], τ, γ ∈ [0.0025, 0.9975], β_T ∈ [0.05, 1e5]. */
const BOUNDS: readonly (readonly [number, number])[] = [
  [Math.log(0.05), Math.log(1e4)],
  [logit(0.0025), logit(0.9975)],
  [logit(0.0025), logit(0.9975)],
  [Math.log(0.05), Math.log(1e5)],
];

/** The calibrator's statistics of a trace; `shared` (adjacent tokens' shared fraction) only with `withShared`. */
export function fitStatsOf(s: ExtendedTraceStats, withShared = false): FitStats {
  const values: Record<string, number> = {};
  for (const [c, v] of Object.entries(s.requestSkew)) values[`skew:${c}`] = v.request;
  if (s.temporalLocality !== null) values['temporal'] = s.temporalLocality;
  if (withShared && s.temporalReusedShare !== null) values['shared'] = s.temporalReusedShare;
  if (s.crossLayerPredictability !== null) values['cross'] = s.crossLayerPredictability;
  if (s.taskClusterSimilarity) {
    values['within'] = s.taskClusterSimilarity.within;
    values['across'] = s.taskClusterSimilarity.across;
  } else if (s.requestSimilarity !== null) {
    values['similarity'] = s.requestSimilarity;
  }
  return { entropy: s.popularityEntropy, values };
}

function meanFit(xs: FitStats[]): FitStats {
  const n = xs.length;
  const values: Record<string, number> = {};
  for (const key of Object.keys(xs[0]!.values)) values[key] = xs.reduce((a, f) => a + (f.values[key] ?? 0), 0) / n;
  return { entropy: xs[0]!.entropy.map((_, l) => xs.reduce((a, f) => a + f.entropy[l]!, 0) / n), values };
}

function roundFit(s: FitStats): Record<string, unknown> {
  return {
    popularityEntropyMean: round4(s.entropy.reduce((a, b) => a + b, 0) / s.entropy.length),
    ...Object.fromEntries(Object.entries(s.values).map(([k, v]) => [k, round4(v)])),
  };
}

function describeFit(s: FitStats, t: FitStats): string {
  const f = (x: number): string => x.toFixed(3);
  const h = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
  return [
    `entropy ${f(h(s.entropy))}/${f(h(t.entropy))}`,
    ...Object.keys(t.values).map((k) => `${k} ${f(s.values[k] ?? 0)}/${f(t.values[k]!)}`),
  ].join(' ');
}

/** Length distributions of a trace's requests, as stored in a profile. */
function lengthsOf(shapes: readonly RequestShape[]): NonNullable<Profile['lengths']> {
  const prompts = shapes.filter((s) => s.prefillRecorded && s.promptTokens > 0).map((s) => s.promptTokens);
  const outputs = shapes.map((s) => s.outputTokens);
  const note = 'empirical quantiles q0…q100 of the fitted trace';
  return {
    prompt: { kind: 'empirical', quantiles: empiricalQuantiles(prompts.length ? prompts : [1]), note },
    output: { kind: 'empirical', quantiles: empiricalQuantiles(outputs), note },
  };
}

/** Normalised entropy (0…1) of Zipf weights (r+1)^−α over E experts. */
export function zipfEntropy(alpha: number, E: number): number {
  if (E <= 1) return 1;
  let z = 0;
  for (let r = 0; r < E; r++) z += Math.pow(r + 1, -alpha);
  let h = 0;
  for (let r = 0; r < E; r++) {
    const p = Math.pow(r + 1, -alpha) / z;
    h -= p * Math.log2(p);
  }
  return h / Math.log2(E);
}

/** The Zipf exponent whose normalised entropy is `h` (bisection; 0 for h ≥ 1). */
export function zipfExponentForEntropy(h: number, E: number): number {
  if (h >= 1) return 0;
  let lo = 0;
  let hi = 8;
  for (let i = 0; i < 60; i++) {
    const mid = (lo + hi) / 2;
    if (zipfEntropy(mid, E) > h) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}

/** Solves A x = b (small, dense) by Gaussian elimination with partial pivoting and a tiny ridge. */
function solveLinear(A: number[][], b: number[]): number[] {
  const n = b.length;
  const M = A.map((row, i) => [...row.map((v, j) => v + (i === j ? 1e-9 : 0)), b[i]!]);
  for (let c = 0; c < n; c++) {
    let p = c;
    for (let r = c + 1; r < n; r++) if (Math.abs(M[r]![c]!) > Math.abs(M[p]![c]!)) p = r;
    [M[c], M[p]] = [M[p]!, M[c]!];
    const piv = M[c]![c]!;
    if (Math.abs(piv) < 1e-12) continue;
    for (let r = 0; r < n; r++) {
      if (r === c) continue;
      const f = M[r]![c]! / piv;
      for (let k = c; k <= n; k++) M[r]![k] = M[r]![k]! - f * M[c]![k]!;
    }
  }
  return M.map((row, i) => (Math.abs(row[i]!) < 1e-12 ? 0 : row[n]! / row[i]!));
}

const sigmoid = (x: number): number => 1 / (1 + Math.exp(-x));
function logit(p: number): number {
  return Math.log(p / (1 - p));
}
const clamp = (x: number, lo: number, hi: number): number => Math.min(hi, Math.max(lo, x));
const round4 = (x: number): number => Math.round(x * 1e4) / 1e4;
