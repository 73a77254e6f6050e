/**
 * Fits a synthetic profile to summary targets (`targets.ts`): a paper's activation-ratio table,
 * prefill activation and reuse skew, instead of a recorded trace.
 *
 * Method (simulated method of moments, deterministic):
 * - Each evaluation builds the synthetic model from the candidate knobs and measures the
 *   targeted statistics by running its router (`../stats/routing-summary.ts`) with a fixed
 *   measurement seed (common random numbers: the objective is a deterministic function of the
 *   knobs).
 * - Objective: Σ over targets of (residual / tolerance)², residual = achieved − target in
 *   percentage points (0 inside a bound), tolerance = max(points, relative × target).
 * - Search: compass (pattern) search in transformed coordinates — zipfExponent as is,
 *   requestConcentration in log, probabilities in logit: try ± step along each fitted knob in
 *   turn, keep the first improvement, halve the steps when none helps, until every step is below
 *   its floor; then restart from the best point with the initial steps, until a round improves
 *   the objective by less than 1 % (at most 4 rounds) or the evaluation budget (per m) is spent.
 * - Decode tokens per request m (the measurement's window, see routing-summary.ts): either fixed
 *   by the targets file or `{ fit: [lo, hi] }`, in which case the knobs are fitted for each m in
 *   turn (m = lo, lo+1, …, each search starting where the previous one ended) and the smallest m
 *   whose fit meets every target within half its tolerance is kept (else the least loss). The
 *   loss of every m tried is recorded (`lossByTokensPerRequest`).
 * - Decode targets outside what the measurement can produce for every admissible m — below the
 *   one-token floor k/E, or above m·bs·k/E — are moved to the nearest feasible value before the
 *   fit and recorded as `adjusted` (e.g. Arctic's 1.5 % at bs = 1 < 2/128 = 1.5625 %).
 */
import { dirname, relative, resolve, sep } from 'node:path';
import { UserError } from '../../sim/kernel/errors.ts';
import { routingSummary, type RoutingSummary, type SummaryOptions } from '../stats/routing-summary.ts';
import { KnobsSchema, type Knobs, type Profile } from './profile.ts';
import {
  describeTarget,
  loadTargets,
  targetResidual,
  targetTolerance,
  type FittableKnob,
  type RoutingTargets,
  type Target,
} from './targets.ts';

export interface TargetCalibrationOptions {
  /** Overrides the file's evaluation budget. */
  readonly maxEvaluations?: number;
  /** Profile name (default: the file's `name`). */
  readonly name?: string;
  readonly log?: (message: string) => void;
}

/** One target with what the fitted profile achieves. */
export interface TargetRow {
  /** Statistic name, e.g. `decode bs=8`, `prefill mean`, `prefill P=756`, `reuse distinct`. */
  readonly stat: string;
  readonly source: string;
  /** As given in the file. */
  readonly target: Target;
  /** The value fitted to when the given one is infeasible. */
  readonly adjusted?: { readonly value: number; readonly why: string };
  readonly achieved: number;
  /** achieved − target (0 inside a bound), percentage points. */
  readonly residual: number;
  readonly tolerance: number;
}

export interface TargetFit {
  readonly profile: Profile;
  readonly rows: readonly TargetRow[];
  readonly tokensPerRequest: number;
  readonly evaluations: number;
  readonly loss: number;
  readonly summary: RoutingSummary;
}

interface Coord {
  readonly knob: FittableKnob;
  readonly kind: 'linear' | 'log' | 'logit';
  readonly lo: number;
  readonly hi: number;
  readonly step: number;
  readonly minStep: number;
}

const COORDS: Record<FittableKnob, Coord> = {
  zipfExponent: { knob: 'zipfExponent', kind: 'linear', lo: 0, hi: 4, step: 0.4, minStep: 0.005 },
  requestConcentration: { knob: 'requestConcentration', kind: 'log', lo: 0.05, hi: 1e4, step: 1.2, minStep: 0.02 },
  temporalReuse: { knob: 'temporalReuse', kind: 'logit', lo: 0.0025, hi: 0.9975, step: 1.2, minStep: 0.02 },
  prefillTemporalReuse: {
    knob: 'prefillTemporalReuse',
    kind: 'logit',
    lo: 0.0025,
    hi: 0.9975,
    step: 1.2,
    minStep: 0.02,
  },
  temporalDepth: { knob: 'temporalDepth', kind: 'logit', lo: 0.01, hi: 0.995, step: 1.2, minStep: 0.02 },
  sharedTokens: { knob: 'sharedTokens', kind: 'logit', lo: 0.0025, hi: 0.9, step: 1.2, minStep: 0.02 },
  crossLayer: { knob: 'crossLayer', kind: 'logit', lo: 0.0025, hi: 0.9975, step: 1.2, minStep: 0.02 },
  taskConcentration: { knob: 'taskConcentration', kind: 'log', lo: 0.05, hi: 1e5, step: 1.2, minStep: 0.02 },
  clusterConcentration: { knob: 'clusterConcentration', kind: 'log', lo: 0.05, hi: 1e5, step: 1.2, minStep: 0.02 },
};

const logit = (p: number): number => Math.log(p / (1 - p));
const sigmoid = (x: number): number => 1 / (1 + Math.exp(-x));
const toU = (c: Coord, v: number): number => (c.kind === 'linear' ? v : c.kind === 'log' ? Math.log(v) : logit(v));
const fromU = (c: Coord, u: number): number => (c.kind === 'linear' ? u : c.kind === 'log' ? Math.exp(u) : sigmoid(u));
const r4 = (x: number): number => Math.round(x * 1e4) / 1e4;
const r3 = (x: number): number => Math.round(x * 1e3) / 1e3;

/** The knobs of a targets file with the fitted ones set from `values` (rounded to 4 decimals). */
export function knobsOf(t: RoutingTargets, values: Partial<Record<FittableKnob, number>> = {}): Knobs {
  const base = t.knobs;
  const pick = (k: FittableKnob, v: number | null | undefined): number | null | undefined =>
    values[k] !== undefined ? r4(values[k]!) : v;
  const zipf = values.zipfExponent !== undefined ? r4(values.zipfExponent) : (base.popularity?.zipfExponent ?? 0);
  return KnobsSchema.parse({
    ...base,
    popularity: { ...(base.popularity ?? {}), zipfExponent: zipf },
    requestConcentration: pick('requestConcentration', base.requestConcentration ?? null),
    temporalReuse: pick('temporalReuse', base.temporalReuse ?? 0),
    ...(values.prefillTemporalReuse !== undefined || base.prefillTemporalReuse !== undefined
      ? { prefillTemporalReuse: pick('prefillTemporalReuse', base.prefillTemporalReuse) }
      : {}),
    temporalDepth: pick('temporalDepth', base.temporalDepth),
    sharedTokens: pick('sharedTokens', base.sharedTokens),
    crossLayer: pick('crossLayer', base.crossLayer ?? 0),
    taskConcentration: pick('taskConcentration', base.taskConcentration ?? null),
    ...(values.clusterConcentration !== undefined
      ? { clusterConcentration: pick('clusterConcentration', base.clusterConcentration) }
      : {}),
  });
}

/** The window lengths m admissible for a targets file. */
export function tokensPerRequestRange(t: RoutingTargets): [number, number] {
  const m = t.decode?.tokensPerRequest ?? 1;
  return typeof m === 'number' ? [m, m] : m.fit;
}

/** The measurement options a targets file asks for (`seed` overrides the file's). */
export function summaryOptionsOf(t: RoutingTargets, seed?: string, windows?: readonly number[]): SummaryOptions {
  const [lo, hi] = tokensPerRequestRange(t);
  return {
    batchSizes: t.decode
      ? Object.keys(t.decode.activationPercent)
          .map(Number)
          .sort((a, b) => a - b)
      : [1],
    tokensPerRequest: windows ?? Array.from({ length: hi - lo + 1 }, (_, i) => lo + i),
    ...(t.tasks ? { tasks: t.tasks } : {}),
    ...(t.decode && t.decode.batchComposition !== 'mixed' ? { batchComposition: t.decode.batchComposition } : {}),
    ...(t.reuse ? { reuseIterations: t.reuse.iterations, reuseLayer: t.reuse.layer } : {}),
    ...(t.prefill?.meanActivationPercent !== undefined ? { prompts: t.prefill.prompts } : {}),
    ...(t.prefill?.atLengthPercent ? { atLengths: Object.keys(t.prefill.atLengthPercent).map(Number) } : {}),
    seed: seed ?? t.search.seed,
  };
}

interface Spec {
  readonly stat: string;
  readonly source: string;
  readonly target: Target;
  readonly fitTo: Target;
  readonly adjusted?: { value: number; why: string };
  readonly tolerance: number;
  /** Achieved value (percent) from a summary for window m. */
  readonly get: (s: RoutingSummary, m: number) => number;
}

/** The targets of a file, with infeasible decode values moved to the nearest feasible one. */
export function targetSpecs(t: RoutingTargets): Spec[] {
  const specs: Spec[] = [];
  const tol = t.tolerance;
  const { experts: E, topK: k } = t.model;
  const [mLo, mHi] = tokensPerRequestRange(t);
  const add = (stat: string, source: string, target: Target, get: Spec['get'], feasible?: [number, number]): void => {
    let fitTo = target;
    let adjusted: Spec['adjusted'];
    if (feasible && typeof target === 'number') {
      const [lo, hi] = feasible;
      if (target < lo || target > hi) {
        const v = r4(Math.min(hi, Math.max(lo, target)));
        adjusted = {
          value: v,
          why:
            target < lo
              ? `below the least possible value ${r4(lo)} % (k/E = ${k}/${E}: every token selects ${k} distinct experts)`
              : `above the largest possible value ${r4(hi)} % (${mHi} token(s) per request × bs × k distinct experts)`,
        };
        fitTo = v;
      }
    }
    specs.push({
      stat,
      source,
      target,
      fitTo,
      ...(adjusted ? { adjusted } : {}),
      tolerance: targetTolerance(fitTo, tol),
      get,
    });
  };
  if (t.decode) {
    for (const [bs, target] of Object.entries(t.decode.activationPercent).sort((a, b) => Number(a[0]) - Number(b[0]))) {
      const b = Number(bs);
      const lo = (100 * k) / E;
      const hi = Math.min(100, (100 * mHi * b * k) / E);
      void mLo;
      add(`decode bs=${bs}`, t.decode.source, target, (s, m) => 100 * s.decode[String(m)]![bs]!, [lo, hi]);
    }
  }
  if (t.prefill) {
    const p = t.prefill;
    if (p.meanActivationPercent !== undefined)
      add('prefill mean', p.source, p.meanActivationPercent, (s) => 100 * s.prefill!.mean);
    for (const [len, target] of Object.entries(p.atLengthPercent ?? {}))
      add(`prefill P=${len}`, p.source, target, (s) => 100 * s.prefill!.atLength[len]!);
  }
  if (t.reuse) {
    const r = t.reuse;
    if (r.distinctPercent !== undefined)
      add(`reuse distinct (${r.iterations} it.)`, r.source, r.distinctPercent, (s) => 100 * s.reuse.distinct);
    if (r.topSharePercent !== undefined)
      add(`reuse top share (${r.iterations} it.)`, r.source, r.topSharePercent, (s) => 100 * s.reuse.topShare);
  }
  return specs;
}

/** Objective of a summary at window m: Σ (residual / tolerance)². */
function lossAt(specs: readonly Spec[], s: RoutingSummary, m: number): { loss: number; worst: number } {
  let loss = 0;
  let worst = 0;
  for (const sp of specs) {
    const r = targetResidual(sp.fitTo, sp.get(s, m)) / sp.tolerance;
    loss += r * r;
    worst = Math.max(worst, Math.abs(r));
  }
  return { loss, worst };
}

/**
 * The targets of a file next to what a measured summary achieves with window m (which must be
 * among the summary's windows). Used by the fit, `trace activation` and the tests.
 */
export function compareWithTargets(t: RoutingTargets, s: RoutingSummary, m: number): TargetRow[] {
  return targetSpecs(t).map((sp) => {
    const achieved = sp.get(s, m);
    return {
      stat: sp.stat,
      source: sp.source,
      target: sp.target,
      ...(sp.adjusted ? { adjusted: sp.adjusted } : {}),
      achieved: r3(achieved),
      residual: r3(targetResidual(sp.fitTo, achieved)),
      tolerance: r3(sp.tolerance),
    };
  });
}

/** Fits the knobs a targets file names; pure (no I/O). */
export function fitTargets(
  t: RoutingTargets,
  o: TargetCalibrationOptions & { file?: string; fileForProfile?: string } = {},
): TargetFit {
  const log = o.log ?? (() => {});
  if (t.checkOnly)
    throw new UserError(
      'this targets file is for comparison only (checkOnly: true); the calibrator does not fit it',
      o.file,
      'checkOnly',
    );
  const specs = targetSpecs(t);
  for (const sp of specs)
    if (sp.adjusted)
      log(`${sp.stat}: target ${describeTarget(sp.target)} % is ${sp.adjusted.why}; fitting to ${sp.adjusted.value} %`);
  const range = tokensPerRequestRange(t);
  const coords = t.fit.map((k) => COORDS[k]);
  const start = knobsOf(t);
  const knobValue = (knobs: Knobs, k: FittableKnob): number => {
    if (k === 'zipfExponent') {
      const a = knobs.popularity.zipfExponent;
      return Array.isArray(a) ? a.reduce((x, y) => x + y, 0) / a.length : a;
    }
    if (k === 'requestConcentration') return knobs.requestConcentration ?? 125;
    if (k === 'taskConcentration') return knobs.taskConcentration ?? 1000;
    if (k === 'clusterConcentration') return knobs.clusterConcentration ?? 1000;
    if (k === 'prefillTemporalReuse') return knobs.prefillTemporalReuse ?? knobs.temporalReuse;
    return knobs[k];
  };
  const clampU = (i: number, u: number): number =>
    Math.min(toU(coords[i]!, coords[i]!.hi), Math.max(toU(coords[i]!, coords[i]!.lo), u));
  const u = coords.map((c, i) => clampU(i, toU(c, Math.min(c.hi, Math.max(c.lo, knobValue(start, c.knob))))));
  const knobsAt = (x: readonly number[]): Knobs =>
    knobsOf(t, Object.fromEntries(coords.map((c, i) => [c.knob, fromU(c, x[i]!)])));
  const budget = o.maxEvaluations ?? t.search.evaluations;
  let evaluations = 0;
  interface Point {
    readonly u: number[];
    readonly loss: number;
    /** Largest |residual| / tolerance. */
    readonly worst: number;
    readonly knobs: Knobs;
  }

  /** Compass search for a fixed window m from `u0`; at most `budget` evaluations. */
  const search = (m: number, u0: number[]): Point => {
    const opts = summaryOptionsOf(t, undefined, [m]);
    const cache = new Map<string, Point>();
    let used = 0;
    const evaluate = (x: number[]): Point => {
      const knobs = knobsAt(x);
      const key = JSON.stringify(knobs);
      const hit = cache.get(key);
      if (hit) return hit;
      evaluations++;
      used++;
      const p = { u: x, ...lossAt(specs, routingSummary(t.model, knobs, opts), m), knobs };
      cache.set(key, p);
      return p;
    };
    let cur = evaluate(u0);
    // Rounds of compass search, each restarted from the best point with the initial steps,
    // until a round improves the objective by less than 1 % (at most 4 rounds).
    for (let round = 0; round < 4 && used < budget; round++) {
      const before = cur.loss;
      const steps = coords.map((c) => c.step);
      while (used < budget && steps.some((st, i) => st >= coords[i]!.minStep)) {
        let improved = false;
        for (let i = 0; i < coords.length && used < budget; i++) {
          if (steps[i]! < coords[i]!.minStep) continue;
          for (const dir of [1, -1]) {
            const x = [...cur.u];
            x[i] = clampU(i, x[i]! + dir * steps[i]!);
            if (x[i] === cur.u[i]) continue;
            const f = evaluate(x);
            if (f.loss < cur.loss - 1e-9) {
              cur = f;
              improved = true;
              // Accelerate along a direction that keeps helping.
              steps[i] = Math.min(steps[i]! * 1.5, coords[i]!.step * 2);
              break;
            }
          }
        }
        if (!improved) for (let i = 0; i < steps.length; i++) steps[i] = steps[i]! / 2;
      }
      if (!(cur.loss < before * 0.99 - 1e-9)) break;
    }
    log(`m = ${m}: loss ${cur.loss.toFixed(3)} after ${used} evaluations: ${describeKnobs(cur.knobs, t.fit)}`);
    return cur;
  };

  // One search per window m, in increasing order, each starting where the previous one ended.
  // The window kept is the smallest m that meets every target within half its tolerance (the
  // fewest decode tokens per request that explain the targets; larger m often fit about as well,
  // so the least loss would pick m by noise), else the m with the least loss. The scan goes two
  // windows past the one kept (for the record of the loss by m) or stops once m is two past the
  // best and twice as bad.
  const lossByWindow: Record<string, number> = {};
  let best: (Point & { m: number }) | undefined;
  let chosen: (Point & { m: number }) | undefined;
  let u0 = u;
  for (let w = range[0]; w <= range[1]; w++) {
    const p = search(w, u0);
    lossByWindow[String(w)] = r3(p.loss);
    if (!chosen && p.worst <= 0.5) chosen = { ...p, m: w };
    if (!best || p.loss < best.loss - 1e-9) best = { ...p, m: w };
    if (chosen && w >= chosen.m + 2) break;
    if (!chosen && w >= best.m + 2 && p.loss > 2 * best.loss) break;
    u0 = p.u;
  }
  best = chosen ?? best;
  const m = best!.m;
  const cur = {
    loss: best!.loss,
    knobs: best!.knobs,
    summary: routingSummary(t.model, best!.knobs, summaryOptionsOf(t, undefined, m === 1 ? [1] : [1, m])),
  };

  const rows = compareWithTargets(t, cur.summary, m);
  const oneToken = cur.summary.decode['1'];
  const profile: Profile = {
    name: o.name ?? t.name,
    ...(t.description ? { description: t.description } : {}),
    model: t.model,
    fittedTo:
      `summary targets ${o.file ?? '(in memory)'} (${t.source}); fitted by \`moesim trace calibrate\`: ` +
      `${t.fit.join(', ')} by compass search on the router's measured statistics; other knobs: ${t.knobsFrom}`,
    knobs: cur.knobs,
    ...(t.tasks ? { tasks: t.tasks } : {}),
    ...(t.lengths ? { lengths: t.lengths } : {}),
    fit: {
      method:
        'simulated method of moments against summary targets: objective Σ((achieved − target)/tolerance)², compass search in ' +
        `transformed coordinates over ${t.fit.join(', ')}; statistics measured by workloads/stats/routing-summary.ts (seed "${t.search.seed}")`,
      targetsFile: o.fileForProfile ?? o.file ?? null,
      source: t.source,
      ...(t.decode
        ? {
            decodeDefinition:
              `activation ratio at batch size bs = distinct experts selected at a MoE layer by ${m} consecutive decode token(s) of each of ` +
              `bs requests${t.decode.batchComposition === 'same-topic' ? ' of one topic (task label and latent cluster)' : ''}, / E, averaged over layers and sampled batches (tokensPerRequest = ${m}` +
              `${range[0] !== range[1] ? `, fitted in ${range[0]}…${range[1]}: the smallest m meeting every target within half its tolerance` : ''})`,
            tokensPerRequest: m,
            ...(range[0] !== range[1] ? { lossByTokensPerRequest: lossByWindow } : {}),
            ...(oneToken && m !== 1
              ? {
                  oneDecodeIterationPercent: Object.fromEntries(
                    Object.entries(oneToken).map(([b, v]) => [b, r3(100 * v)]),
                  ),
                }
              : {}),
          }
        : {}),
      ...(t.decode?.note ? { decodeNote: t.decode.note } : {}),
      ...(t.prefill?.note ? { prefillNote: t.prefill.note } : {}),
      ...(t.prefill
        ? {
            prefillPrompts: `${t.prefill.promptsSource}; mean ${r3(cur.summary.prefill?.meanPromptTokens ?? NaN)} tokens sampled`,
          }
        : {}),
      ...(t.reuse?.note ? { reuseNote: t.reuse.note } : {}),
      ...(t.reuse
        ? {
            reuse: {
              iterations: t.reuse.iterations,
              layer: t.reuse.layer,
              distinctPercent: r3(100 * cur.summary.reuse.distinct),
              topSharePercent: r3(100 * cur.summary.reuse.topShare),
              pooledDistinctPercent: r3(100 * cur.summary.reuse.pooledDistinct),
              pooledTopSharePercent: r3(100 * cur.summary.reuse.pooledTopShare),
              pooledRequests: cur.summary.reuse.pooledRequests,
            },
          }
        : {}),
      tolerance: `max(${t.tolerance.points} points, ${t.tolerance.relative * 100} % of the target)`,
      evaluations,
      loss: r3(cur.loss),
      targets: rows,
    },
  };
  return { profile, rows, tokensPerRequest: m, evaluations, loss: cur.loss, summary: cur.summary };
}

/**
 * Loads a targets file and fits it. `out` (the profile's path) makes the profile record the
 * targets file relative to the profile's folder, so `trace activation` finds it.
 * @throws UserError on a bad file
 */
export async function calibrateTargets(
  file: string,
  o: TargetCalibrationOptions & { out?: string } = {},
): Promise<TargetFit> {
  const t = await loadTargets(file);
  if (o.maxEvaluations !== undefined && !(Number.isInteger(o.maxEvaluations) && o.maxEvaluations > 0)) {
    throw new UserError('must be a positive integer', undefined, '--evaluations', o.maxEvaluations);
  }
  const fileForProfile = o.out
    ? relative(dirname(resolve(o.out)), resolve(file))
        .split(sep)
        .join('/')
    : file;
  return fitTargets(t, { ...o, file, fileForProfile });
}

function describeKnobs(k: Knobs, fit: readonly FittableKnob[]): string {
  return fit
    .map((name) => {
      const v = name === 'zipfExponent' ? k.popularity.zipfExponent : (k[name] ?? null);
      return `${name} ${Array.isArray(v) ? '[…]' : v === null ? 'null' : Number(v).toFixed(4)}`;
    })
    .join(', ');
}

/** A fit's rows as a text table: statistic, target, achieved, residual, tolerance, source. */
export function formatTargetRows(rows: readonly TargetRow[]): string {
  const table = [
    ['statistic (%)', 'target', 'achieved', 'residual', 'tolerance', 'source'],
    ...rows.map((r) => [
      r.stat,
      r.adjusted ? `${describeTarget(r.target)} → ${r.adjusted.value}` : describeTarget(r.target),
      r.achieved.toFixed(2),
      (r.residual >= 0 ? '+' : '') + r.residual.toFixed(2),
      r.tolerance.toFixed(2),
      r.source,
    ]),
  ];
  const widths = table[0]!.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
  const line = (row: string[]): string =>
    row
      .map((c, i) => (i === 0 || i === 5 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)))
      .join('  ')
      .trimEnd();
  return `${[line(table[0]!), widths.map((w) => '-'.repeat(w)).join('  '), ...table.slice(1).map(line)].join('\n')}\n`;
}
