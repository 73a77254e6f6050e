/**
 * Fitting a routing profile to published cache curves: "LRU (and Belady) hit rate at N experts
 * per layer on real text", the number engines' users can measure without a trace. A targets
 * file (`format: moesim-cache-targets`, YAML or JSON) states each point with its source and
 * how it was measured (cache reset per request or not, one expert access at a time or a
 * token's k at once, request count and lengths); the fit generates that many synthetic
 * requests with the candidate knobs, measures the same curves (`stats/cache-curves.ts`) and
 * runs a compass search on Σ((achieved − target)/tolerance)², a range target costing nothing
 * inside its range. The measurement seed is fixed, so the fit is deterministic.
 */
import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { UserError } from '../../sim/kernel/errors.ts';
import { RngStreams } from '../../sim/kernel/rng.ts';
import { seedFrom } from '../random/hash-rng.ts';
import { hitCurves, type CacheTrace } from '../stats/cache-curves.ts';
import { generateRequests, type RequestShape } from './generate.ts';
import { SyntheticModel } from './model.ts';
import { KnobsSchema, RoutingModelSchema, type Knobs, type Profile } from './profile.ts';
import { SyntheticRouting } from './router.ts';

export const CACHE_TARGETS_FORMAT = 'moesim-cache-targets';

const pct = z.number().min(0).max(100);
/** A percentage, or a [low, high] range (e.g. two corpora). */
const Point = z.union([pct, z.tuple([pct, pct])]);
type Point = z.infer<typeof Point>;
const sizeKey = z.string().regex(/^[1-9][0-9]*$/, { message: 'must be a positive integer (experts per layer)' });

const CACHE_KNOBS = [
  'zipfExponent',
  'requestConcentration',
  'temporalReuse',
  'temporalDepth',
  'crossLayer',
  'clusterConcentration',
  'sharedTokens',
] as const;
type CacheKnob = (typeof CACHE_KNOBS)[number];

export const CacheTargetsSchema = z
  .object({
    format: z.literal(CACHE_TARGETS_FORMAT),
    version: z.literal(1),
    name: z.string().min(1),
    description: z.string().optional(),
    model: RoutingModelSchema,
    source: z.string().min(1),
    measurement: z
      .object({
        reset: z.enum(['request', 'never']),
        granularity: z.enum(['token', 'access']),
        requests: z.number().int().positive().max(4096),
        promptTokens: z.number().int().nonnegative(),
        decodeTokens: z.number().int().nonnegative(),
        /** Which tokens the curves count: the decode tokens only, or all. */
        count: z.enum(['decode', 'all']).default('all'),
        note: z.string().optional(),
      })
      .strict(),
    lruPercent: z.record(sizeKey, Point),
    beladyPercent: z.record(sizeKey, Point).optional(),
    /** Mean |S_t ∩ S_{t−1}| / k in percent, if the source gives it. */
    nextTokenReusePercent: Point.optional(),
    knobs: KnobsSchema.partial().default({}),
    knobsFrom: z.string().min(1),
    fit: z.array(z.enum(CACHE_KNOBS)).min(1),
    tolerance: z.object({ points: z.number().positive() }).strict().default({ points: 1 }),
    search: z
      .object({ evaluations: z.number().int().positive().default(80), seed: z.number().int().default(1) })
      .strict()
      .default({ evaluations: 80, seed: 1 }),
  })
  .strict();
export type CacheTargets = z.infer<typeof CacheTargetsSchema>;

export async function looksLikeCacheTargets(file: string): Promise<boolean> {
  if (!/\.(ya?ml|json)$/i.test(file)) return false;
  try {
    return (await readFile(file, 'utf8')).includes(CACHE_TARGETS_FORMAT);
  } catch {
    return false;
  }
}

export async function loadCacheTargets(file: string): Promise<CacheTargets> {
  let raw: unknown;
  try {
    raw = parseYaml(await readFile(file, 'utf8'));
  } catch (e) {
    throw new UserError(`cannot read: ${(e as Error).message}`, file);
  }
  const r = CacheTargetsSchema.safeParse(raw);
  if (!r.success) {
    const i = r.error.issues[0]!;
    throw new UserError(i.message, file, i.path.join('.') || undefined);
  }
  for (const s of Object.keys(r.data.lruPercent))
    if (Number(s) > r.data.model.experts)
      throw new UserError(`more than the ${r.data.model.experts} experts`, file, `lruPercent.${s}`);
  return r.data;
}

export interface CacheRow {
  readonly stat: string;
  readonly target: Point;
  readonly achieved: number;
  readonly residual: number;
}

const residual = (t: Point, v: number): number =>
  typeof t === 'number' ? v - t : v < t[0] ? v - t[0] : v > t[1] ? v - t[1] : 0;

/** The synthetic requests of a measurement, routed with `knobs`. */
export function measurementTrace(t: CacheTargets, knobs: Knobs, seed = t.search.seed): CacheTrace {
  const m = t.measurement;
  const shapes: RequestShape[] = Array.from({ length: m.requests }, (_, i) => ({
    id: `r${i}`,
    promptTokens: m.count === 'decode' ? 0 : m.promptTokens,
    prefillRecorded: m.count !== 'decode' && m.promptTokens > 0,
    tokens: (m.count === 'decode' ? 0 : m.promptTokens) + m.decodeTokens,
    outputTokens: m.decodeTokens + 1,
  }));
  const routing = new SyntheticRouting(
    new SyntheticModel(t.model, knobs),
    `synthetic:${seedFrom(new RngStreams(seed).stream('routing'))}`,
  );
  const requests = [...generateRequests(routing, shapes)].map((r) => ({ tokens: r.tokens, experts: r.experts }));
  return { L: t.model.moeLayers, E: t.model.experts, k: t.model.topK, requests };
}

/** What `knobs` achieve against every target of the file. */
export function compareCache(t: CacheTargets, knobs: Knobs): CacheRow[] {
  const trace = measurementTrace(t, knobs);
  const sizes = [...new Set([...Object.keys(t.lruPercent), ...Object.keys(t.beladyPercent ?? {})].map(Number))].sort(
    (a, b) => a - b,
  );
  const c = hitCurves(trace, sizes, t.measurement.reset, t.beladyPercent !== undefined, t.measurement.granularity);
  const rows: CacheRow[] = [];
  const add = (stat: string, target: Point, v: number): void =>
    void rows.push({
      stat,
      target,
      achieved: Math.round(v * 100) / 100,
      residual: Math.round(residual(target, v) * 100) / 100,
    });
  for (const [s, target] of Object.entries(t.lruPercent))
    add(`LRU @${s}`, target, 100 * c.lru[sizes.indexOf(Number(s))]!);
  for (const [s, target] of Object.entries(t.beladyPercent ?? {}))
    add(`Belady @${s}`, target, 100 * c.belady[sizes.indexOf(Number(s))]!);
  if (t.nextTokenReusePercent !== undefined) add('next-token reuse', t.nextTokenReusePercent, 100 * nextReuse(trace));
  return rows;
}

function nextReuse(tr: CacheTrace): number {
  const { L, k } = tr;
  let same = 0;
  let n = 0;
  for (const r of tr.requests) {
    for (let t = 1; t < r.tokens; t++) {
      for (let l = 0; l < L; l++) {
        const a = ((t - 1) * L + l) * k;
        const b = (t * L + l) * k;
        for (let j = 0; j < k; j++) for (let q = 0; q < k; q++) if (r.experts[b + j] === r.experts[a + q]) same++;
        n++;
      }
    }
  }
  return n ? same / (n * k) : 0;
}

interface Coord {
  readonly kind: 'linear' | 'log' | 'logit';
  readonly lo: number;
  readonly hi: number;
  readonly step: number;
}
const COORDS: Record<CacheKnob, Coord> = {
  zipfExponent: { kind: 'linear', lo: 0, hi: 3, step: 0.3 },
  requestConcentration: { kind: 'log', lo: 0.05, hi: 1e4, step: 1.2 },
  temporalReuse: { kind: 'logit', lo: 0.0025, hi: 0.9975, step: 1.2 },
  temporalDepth: { kind: 'logit', lo: 0.01, hi: 0.995, step: 1.2 },
  crossLayer: { kind: 'logit', lo: 0.0025, hi: 0.9975, step: 1.2 },
  clusterConcentration: { kind: 'log', lo: 0.05, hi: 1e4, step: 1.2 },
  sharedTokens: { kind: 'logit', lo: 0.0025, hi: 0.9, step: 1.2 },
};
const toU = (c: Coord, v: number): number =>
  c.kind === 'linear' ? v : c.kind === 'log' ? Math.log(v) : Math.log(v / (1 - v));
const fromU = (c: Coord, u: number): number => {
  const v = c.kind === 'linear' ? u : c.kind === 'log' ? Math.exp(u) : 1 / (1 + Math.exp(-u));
  return Math.min(c.hi, Math.max(c.lo, v));
};

const DEFAULT_START: Record<CacheKnob, number> = {
  zipfExponent: 0.3,
  requestConcentration: 50,
  temporalReuse: 0.3,
  temporalDepth: 1,
  crossLayer: 0.1,
  clusterConcentration: 50,
  sharedTokens: 0.05,
};

function knobsWith(t: CacheTargets, v: Partial<Record<CacheKnob, number>>): Knobs {
  const base = { ...t.knobs } as Record<string, unknown>;
  const r4 = (x: number): number => Math.round(x * 1e4) / 1e4;
  for (const [k, x] of Object.entries(v)) {
    if (k === 'zipfExponent') base['popularity'] = { ...((base['popularity'] as object) ?? {}), zipfExponent: r4(x) };
    else base[k] = r4(x);
  }
  base['popularity'] ??= { zipfExponent: 0 };
  base['requestConcentration'] ??= null;
  base['temporalReuse'] ??= 0;
  base['crossLayer'] ??= 0;
  base['taskConcentration'] ??= null;
  return KnobsSchema.parse(base);
}

function startOf(t: CacheTargets, k: CacheKnob): number {
  const kn = t.knobs as Record<string, unknown>;
  if (k === 'zipfExponent') {
    const z0 = (kn['popularity'] as { zipfExponent?: unknown } | undefined)?.zipfExponent;
    return typeof z0 === 'number' ? z0 : DEFAULT_START[k];
  }
  return typeof kn[k] === 'number' ? (kn[k] as number) : DEFAULT_START[k];
}

/** Compass search on the named knobs; returns the profile and its rows. */
export function fitCacheTargets(
  t: CacheTargets,
  o: { file?: string; maxEvaluations?: number; log?: (s: string) => void } = {},
): { profile: Profile; rows: CacheRow[]; loss: number; evaluations: number } {
  const coords = t.fit.map((k) => COORDS[k]);
  const tol = t.tolerance.points;
  const lossOf = (rows: CacheRow[]): number => rows.reduce((a, r) => a + (r.residual / tol) ** 2, 0);
  const budget = o.maxEvaluations ?? t.search.evaluations;
  let evaluations = 0;
  const cache = new Map<string, { loss: number; rows: CacheRow[] }>();
  const evaluate = (u: number[]): { loss: number; rows: CacheRow[]; u: number[] } => {
    const knobs = knobsWith(t, Object.fromEntries(t.fit.map((k, i) => [k, fromU(coords[i]!, u[i]!)])));
    const key = JSON.stringify(knobs);
    let r = cache.get(key);
    if (!r) {
      evaluations++;
      const rows = compareCache(t, knobs);
      r = { loss: lossOf(rows), rows };
      cache.set(key, r);
      o.log?.(
        `eval ${evaluations}: loss ${r.loss.toFixed(3)} ${t.fit.map((k, i) => `${k}=${fromU(coords[i]!, u[i]!).toPrecision(4)}`).join(' ')}`,
      );
    }
    return { ...r, u };
  };
  let cur = evaluate(
    t.fit.map((k, i) => toU(coords[i]!, Math.min(coords[i]!.hi, Math.max(coords[i]!.lo, startOf(t, k))))),
  );
  const steps = coords.map((c) => c.step);
  while (evaluations < budget && steps.some((s) => s > 0.01)) {
    let improved = false;
    for (let i = 0; i < coords.length && evaluations < budget; i++) {
      for (const dir of [1, -1]) {
        if (evaluations >= budget) break;
        const x = [...cur.u];
        x[i] = x[i]! + dir * steps[i]!;
        const f = evaluate(x);
        if (f.loss < cur.loss - 1e-9) {
          cur = f;
          improved = true;
          break;
        }
      }
    }
    if (!improved) for (let i = 0; i < steps.length; i++) steps[i] = steps[i]! / 2;
  }
  const knobs = knobsWith(t, Object.fromEntries(t.fit.map((k, i) => [k, fromU(coords[i]!, cur.u[i]!)])));
  const profile: Profile = {
    name: t.name,
    ...(t.description ? { description: t.description } : {}),
    model: t.model,
    fittedTo: `cache curves: ${t.source}`,
    knobs,
    fit: {
      method: 'compass search on cache-curve targets (calibrate-cache.ts)',
      ...(o.file ? { cacheTargetsFile: o.file } : {}),
      measurement: t.measurement,
      fitted: t.fit,
      knobsFrom: t.knobsFrom,
      rows: cur.rows,
      loss: Math.round(cur.loss * 1000) / 1000,
      evaluations,
    },
  };
  return { profile, rows: cur.rows, loss: cur.loss, evaluations };
}

export function formatCacheRows(rows: readonly CacheRow[]): string {
  const fmt = (t: Point): string => (typeof t === 'number' ? t.toFixed(1) : `${t[0]}–${t[1]}`);
  const lines = rows.map(
    (r) =>
      `${r.stat.padEnd(18)} target ${fmt(r.target).padStart(11)}  achieved ${r.achieved.toFixed(1).padStart(5)}  off ${r.residual >= 0 ? '+' : ''}${r.residual.toFixed(1)} points`,
  );
  return lines.join('\n');
}
