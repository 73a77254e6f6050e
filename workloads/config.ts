/**
 * The `workload` section of an experiment config, and the builder that turns it into a
 * `Workload` (requests + routing + aggregate routing + predictor) for a model.
 *
 * ```yaml
 * workload:
 *   requests: 1000
 *   arrival: { kind: gamma, ratePerS: 4, cv: 3 }          # offline | poisson | gamma | replay
 *   promptTokens: { kind: dataset, name: gsm8k }          # fixed | uniform | dataset | lognormal | empirical
 *   outputTokens: { kind: dataset, name: gsm8k, max: 256 }
 *   tasks: { gsm8k: 1, mmlu: 1 }                          # optional task mix
 *   shift: { atRequest: 500, tasks: { longbench: 1 } }    # optional workload shift
 *   routing: { kind: synthetic, profile: mixtral-8x7b, temporalReuse: 0.3 }   # uniform | synthetic | trace
 *   prediction: { kind: profile, accuracy: { first: 0.6, steady: 0.9, rampLayers: 4 } }
 * ```
 *
 * Precedence for a request's prompt/output length: the config's `promptTokens`/`outputTokens`;
 * else the replayed routing trace's request; else the replayed request log's row; else the
 * synthetic profile's length distribution; else a UserError. For its task label: the config's
 * `tasks` (or `shift.tasks` from `shift.atRequest` on); else the trace's or log's label; else
 * the synthetic profile's task mix; else none.
 *
 * Randomness: streams `arrivals`, `lengths`, `tasks`, `routing`, `prediction`, `aggregate`.
 * Relative paths are resolved against `baseDir` (the config file's folder; default: cwd).
 */
import { resolve } from 'node:path';
import { z } from 'zod';
import type { RngStreams } from '../sim/kernel/rng.ts';
import { UserError } from '../sim/kernel/errors.ts';
import { secondsToNs } from '../sim/kernel/time.ts';
import {
  RequestTable,
  type AggregateRouter,
  type ExpertPredictor,
  type RequestSpec,
  type RoutingSource,
  type Workload,
} from '../sim/workload.ts';
import { ArrivalSchema, arrivalTimesS } from './arrivals.ts';
import { LengthSchema, lengthSampler, type LengthConfig, type LengthSampler } from './lengths.ts';
import { readRequestLog, type RequestLogEntry } from './request-log.ts';
import { UniformRouting } from './uniform-router.ts';
import { SyntheticModel } from './synthetic/model.ts';
import { SyntheticRouting } from './synthetic/router.ts';
import { loadProfile, type Knobs, type Profile } from './synthetic/profile.ts';
import { syntheticAggregate } from './synthetic/aggregate.ts';
import { TraceRouting, TraceStore } from './trace-routing.ts';
import { exactKey } from './prediction-memo.ts';
import { DEFAULT_ACCURACY, PredictionSchema, ProfilePredictor, TracePredictor, accuracyByLayer } from './prediction.ts';
import { seedFrom } from './random/hash-rng.ts';

export { LengthSchema, type LengthConfig } from './lengths.ts';
export { ArrivalSchema, type ArrivalConfig } from './arrivals.ts';

const positiveInt = z.number().int().positive();
const probability = z.number().min(0).max(1);

export const RoutingSchema = z.discriminatedUnion('kind', [
  /** k distinct experts uniformly at random per token and layer. */
  z.object({ kind: z.literal('uniform') }).strict(),
  /** The synthetic router with a profile's knobs; each knob may be overridden here. */
  z
    .object({
      kind: z.literal('synthetic'),
      /** A profile name (`workloads/profiles/<name>.json`) or a path to a profile file. */
      profile: z.string().min(1),
      /** Zipf exponent of global popularity (one value for all layers, or one per layer). */
      popularitySkew: z.union([z.number().nonnegative(), z.array(z.number().nonnegative()).min(1)]).optional(),
      requestConcentration: z.number().positive().nullable().optional(),
      temporalReuse: probability.optional(),
      temporalDepth: probability.optional(),
      temporalMemory: z.number().min(0).max(0.99).optional(),
      crossLayer: probability.optional(),
      sharedTokens: probability.optional(),
      sharedVocabulary: z.number().int().positive().optional(),
      startTokens: z.number().int().nonnegative().optional(),
      taskConcentration: z.number().positive().nullable().optional(),
      latentClusters: z.number().int().positive().optional(),
      clusterConcentration: z.number().positive().nullable().optional(),
      structureSeed: z.number().int().nonnegative().optional(),
    })
    .strict(),
  /** Replay of a recorded trace (moesim format, or the converted real traces). */
  z.object({ kind: z.literal('trace'), path: z.string().min(1) }).strict(),
]);
export type RoutingConfig = z.infer<typeof RoutingSchema>;

/** Task label → relative weight. */
export const TaskMixSchema = z
  .record(z.string().min(1), z.number().positive())
  .refine((m) => Object.keys(m).length > 0, {
    message: 'name at least one task',
  });

export const WorkloadSchema = z
  .object({
    requests: positiveInt,
    arrival: ArrivalSchema.default({ kind: 'offline' }),
    promptTokens: LengthSchema.optional(),
    outputTokens: LengthSchema.optional(),
    routing: RoutingSchema.default({ kind: 'uniform' }),
    tasks: TaskMixSchema.optional(),
    /** From request `atRequest` (0-based, in arrival order) on, tasks are drawn from this mix. */
    shift: z.object({ atRequest: z.number().int().nonnegative(), tasks: TaskMixSchema }).strict().optional(),
    prediction: PredictionSchema.default({ kind: 'profile', accuracy: DEFAULT_ACCURACY }),
  })
  .strict();
export type WorkloadConfig = z.infer<typeof WorkloadSchema>;

/** Model facts the workload builder needs. */
export interface RoutingShape {
  readonly modelId?: string;
  readonly moeLayers: number;
  readonly experts: number;
  readonly topK: number;
}

/**
 * Builds the workload: reads traces / logs / profiles (streaming), draws arrivals, lengths and
 * tasks, and sets up routing, aggregate routing and the predictor.
 * @throws UserError for bad or inconsistent input (missing file, trace or profile of another
 *   model shape, lengths that cannot be determined, ...), naming the file and field
 */
export async function buildWorkload(
  cfg: WorkloadConfig,
  shape: RoutingShape,
  streams: RngStreams,
  baseDir: string = process.cwd(),
): Promise<Workload> {
  const n = cfg.requests;
  const notes: string[] = [];
  const expect = {
    ...(shape.modelId ? { modelId: shape.modelId } : {}),
    moeLayers: shape.moeLayers,
    experts: shape.experts,
    topK: shape.topK,
  };

  // Inputs.
  let store: TraceStore | undefined;
  let profile: Profile | undefined;
  let profileFile = '';
  if (cfg.routing.kind === 'trace') {
    store = await TraceStore.load(resolve(baseDir, cfg.routing.path), {
      expect,
      maxRequests: n,
      predictions: cfg.prediction.kind === 'trace',
    });
  } else if (cfg.routing.kind === 'synthetic') {
    const loaded = await loadProfile(cfg.routing.profile, baseDir, 'workload.routing.profile');
    profile = loaded.profile;
    profileFile = loaded.path;
    checkProfileShape(profile, profileFile, shape);
  }
  let log: RequestLogEntry[] | undefined;
  if (cfg.arrival.kind === 'replay') log = await readRequestLog(resolve(baseDir, cfg.arrival.path));

  // Lengths and tasks: where they come from (checked on every build).
  const promptFrom = lengthSource('prompt', cfg.promptTokens, store !== undefined, log, profile);
  const outputFrom = lengthSource('output', cfg.outputTokens, store !== undefined, log, profile);

  // The request table: drawn from the `arrivals`, `tasks` and `lengths` streams (read by
  // nothing else), so without a trace or a request log it is a pure function of `tableKey`.
  const key = store || log ? undefined : tableKey(cfg, streams.masterSeed, baseDir, profileFile);
  let table = key === undefined ? undefined : tableMemo.get(key);
  let unknownPrompts = 0;
  if (!table) {
    const built = drawTable(cfg, streams, store, log, profile, promptFrom.sampler, outputFrom.sampler);
    table = built.table;
    unknownPrompts = built.unknownPrompts;
    if (built.cycles > 1) notes.push(`request log of ${log!.length} rows cycled ${built.cycles}×`);
    if (key !== undefined) rememberTable(key, table);
  }
  if (unknownPrompts > 0)
    notes.push(
      `${unknownPrompts} decode-only trace requests without a recorded prompt get a 1-token prompt (set promptTokens to override)`,
    );

  // Routing.
  let routing: RoutingSource;
  let aggregate: AggregateRouter;
  let routingText: string;
  // What the routing is a pure function of, with the request table (synthetic routing only): the
  // predictor then shares single-token predictions with the thread's other runs on it.
  let routingKey: string | undefined;
  const routingRng = streams.stream('routing');
  const aggregateRng = streams.stream('aggregate');
  switch (cfg.routing.kind) {
    case 'uniform': {
      const u = new UniformRouting(shape.moeLayers, shape.experts, shape.topK, routingRng);
      routing = u;
      aggregate = u.aggregate(aggregateRng);
      routingText = 'uniform routing';
      break;
    }
    case 'synthetic': {
      const knobs = withOverrides(profile!.knobs, cfg.routing);
      const model = new SyntheticModel(shape, knobs);
      const modelKey = exactKey([shape.moeLayers, shape.experts, shape.topK, knobs]);
      const s = new SyntheticRouting(model, `synthetic:${seedFrom(routingRng)}`, modelKey);
      routing = s;
      routingKey = `${modelKey}|${s.seedBase}`;
      aggregate = lazyAggregate(() => syntheticAggregate(model, aggregateRng));
      const overridden = Object.keys(cfg.routing).filter((k) => k !== 'kind' && k !== 'profile');
      routingText =
        `synthetic routing "${profile!.name}"` +
        (profile!.model.id !== shape.modelId && shape.modelId ? ` (profile of ${profile!.model.id})` : '') +
        (overridden.length
          ? ` with ${overridden.map((k) => `${k}=${JSON.stringify((cfg.routing as Record<string, unknown>)[k])}`).join(', ')}`
          : '');
      break;
    }
    case 'trace': {
      const t = new TraceRouting(store!, routingRng);
      routing = t;
      aggregate = lazyAggregate(() => t.aggregate(aggregateRng));
      const N = store!.requests.length;
      routingText = `routing replayed from ${cfg.routing.path} (${N} requests${n > N ? `, cycled ${Math.ceil(n / N)}× to make ${n}` : ''})`;
      break;
    }
  }

  // Prediction.
  let predictor: ExpertPredictor | undefined;
  const predRng = streams.stream('prediction');
  const p = cfg.prediction;
  if (p.kind === 'profile' || p.kind === 'oracle') {
    const acc =
      p.kind === 'oracle' ? accuracyByLayer(1, shape.moeLayers) : accuracyByLayer(p.accuracy, shape.moeLayers);
    predictor = new ProfilePredictor(
      routing,
      table,
      acc,
      predRng,
      p.kind === 'oracle' ? 'oracle prediction' : undefined,
      key !== undefined && routingKey !== undefined ? `${key}|${routingKey}` : undefined,
    );
  } else if (p.kind === 'trace') {
    if (!(routing instanceof TraceRouting)) {
      throw new UserError(
        'prediction kind "trace" needs routing kind "trace" (predictions come from the trace)',
        undefined,
        'workload.prediction.kind',
      );
    }
    if (!store!.requests.some((r) => r.predictions)) {
      throw new UserError('the trace carries no predictions (no "predictions" field)', store!.path, 'predictions');
    }
    const fallback = new ProfilePredictor(routing, table, accuracyByLayer(p.fallback, shape.moeLayers), predRng);
    predictor = new TracePredictor(routing, table, fallback);
  }

  const parts = [
    `${n} requests`,
    arrivalText(cfg),
    ...(cfg.tasks || cfg.shift ? [taskText(cfg)] : []),
    `prompt ${promptFrom.text}, output ${outputFrom.text}`,
    routingText,
    predictor?.describe ?? 'no prediction',
    ...notes,
  ];
  // The requests live in the table; `requests` is built only if somebody asks (the serving
  // executor streams `source`, so a million-request run never holds a million specs).
  let requests: RequestSpec[] | undefined;
  return {
    get requests(): readonly RequestSpec[] {
      return (requests ??= table.toArray());
    },
    source: table,
    routing,
    aggregate,
    ...(predictor ? { predictor } : {}),
    describe: parts.join('; '),
  };
}

/** Request tables by `tableKey`, oldest first; at most `TABLE_MEMO_REQUESTS` requests kept (18 B each). */
const tableMemo = new Map<string, RequestTable>();
let tableMemoRequests = 0;
/** Bound on the memo (about 36 MB of columns: a sweep's workloads are a few, of up to a million requests). */
const TABLE_MEMO_REQUESTS = 2_000_000;

/** What a table drawn without a trace or request log depends on (a profile file is read-only while a process runs). */
function tableKey(cfg: WorkloadConfig, seed: number, baseDir: string, profileFile: string): string {
  const { requests, arrival, tasks, shift, promptTokens, outputTokens } = cfg;
  return JSON.stringify([seed, baseDir, profileFile, requests, arrival, tasks, shift, promptTokens, outputTokens]);
}

/** Forgets every memoised request table (tests: the next build draws anew). */
export function clearRequestTableMemo(): void {
  tableMemo.clear();
  tableMemoRequests = 0;
}

function rememberTable(key: string, table: RequestTable): void {
  if (table.count > TABLE_MEMO_REQUESTS) return;
  while (tableMemoRequests + table.count > TABLE_MEMO_REQUESTS) {
    const [oldest, t] = tableMemo.entries().next().value!;
    tableMemo.delete(oldest);
    tableMemoRequests -= t.count;
  }
  tableMemo.set(key, table);
  tableMemoRequests += table.count;
}

/** Draws the requests: arrivals, then per request its task and lengths (see the precedence in the header). */
function drawTable(
  cfg: WorkloadConfig,
  streams: RngStreams,
  store: TraceStore | undefined,
  log: RequestLogEntry[] | undefined,
  profile: Profile | undefined,
  promptSampler: LengthSampler | undefined,
  outputSampler: LengthSampler | undefined,
): { table: RequestTable; unknownPrompts: number; cycles: number } {
  const n = cfg.requests;
  const { timesS, cycles } = arrivalTimesS(cfg.arrival, n, streams.stream('arrivals'), log);

  // Tasks.
  const taskRng = streams.stream('tasks');
  const drawFrom = (mix: Readonly<Record<string, number>>): string => {
    const names = Object.keys(mix);
    return names[taskRng.weighted(names.map((t) => mix[t]!))]!;
  };
  const taskOf = (i: number): string | undefined => {
    if (cfg.shift && i >= cfg.shift.atRequest) return drawFrom(cfg.shift.tasks);
    if (cfg.tasks) return drawFrom(cfg.tasks);
    if (store) return store.requests[i % store.requests.length]!.task;
    if (log) return log[i % log.length]!.task;
    if (profile?.tasks) return drawFrom(profile.tasks);
    return undefined;
  };

  // Lengths.
  const lengthRng = streams.stream('lengths');
  let unknownPrompts = 0;
  const table = new RequestTable(n);
  for (let id = 0; id < n; id++) {
    const task = taskOf(id);
    const stored = store?.requests[id % store.requests.length];
    let promptTokens: number;
    if (promptSampler) promptTokens = promptSampler(lengthRng, task);
    else if (stored) {
      promptTokens = stored.promptTokens;
      if (promptTokens === 0) unknownPrompts++;
    } else promptTokens = log![id % log!.length]!.promptTokens!;
    let outputTokens: number;
    if (outputSampler) outputTokens = outputSampler(lengthRng, task);
    else if (stored) outputTokens = stored.outputTokens;
    else outputTokens = log![id % log!.length]!.outputTokens!;
    table.push(secondsToNs(timesS[id]!), Math.max(1, promptTokens), Math.max(1, outputTokens), task);
  }
  return { table, unknownPrompts, cycles };
}

/**
 * A routing profile must be for the run's model. The mistake is the config's (a `model` or a
 * `workload.routing.profile` changed without the other), so the error names that field and
 * leaves the file to the caller (the runner adds the config's); the message names the profile's file.
 */
function checkProfileShape(p: Profile, file: string, shape: RoutingShape): void {
  const check = (got: number, want: number, what: string): void => {
    if (got !== want) {
      throw new UserError(
        `profile "${p.name}" (${file}) is for ${got} ${what} but model ${shape.modelId ?? ''} has ${want}`.replace(
          '  ',
          ' ',
        ),
        undefined,
        'workload.routing.profile',
      );
    }
  };
  check(p.model.moeLayers, shape.moeLayers, 'MoE layers');
  check(p.model.experts, shape.experts, 'experts per layer');
  check(p.model.topK, shape.topK, 'top-k');
}

function withOverrides(k: Knobs, r: Extract<RoutingConfig, { kind: 'synthetic' }>): Knobs {
  return {
    ...k,
    popularity: r.popularitySkew !== undefined ? { ...k.popularity, zipfExponent: r.popularitySkew } : k.popularity,
    ...(r.requestConcentration !== undefined ? { requestConcentration: r.requestConcentration } : {}),
    ...(r.temporalReuse !== undefined ? { temporalReuse: r.temporalReuse } : {}),
    ...(r.temporalDepth !== undefined ? { temporalDepth: r.temporalDepth } : {}),
    ...(r.temporalMemory !== undefined ? { temporalMemory: r.temporalMemory } : {}),
    ...(r.startTokens !== undefined ? { startTokens: r.startTokens } : {}),
    ...(r.crossLayer !== undefined ? { crossLayer: r.crossLayer } : {}),
    ...(r.sharedTokens !== undefined ? { sharedTokens: r.sharedTokens } : {}),
    ...(r.sharedVocabulary !== undefined ? { sharedVocabulary: r.sharedVocabulary } : {}),
    ...(r.taskConcentration !== undefined ? { taskConcentration: r.taskConcentration } : {}),
    ...(r.latentClusters !== undefined ? { latentClusters: r.latentClusters } : {}),
    ...(r.clusterConcentration !== undefined ? { clusterConcentration: r.clusterConcentration } : {}),
    ...(r.structureSeed !== undefined ? { structureSeed: r.structureSeed } : {}),
  };
}

function lengthSource(
  which: 'prompt' | 'output',
  cfg: LengthConfig | undefined,
  fromTrace: boolean,
  log: readonly RequestLogEntry[] | undefined,
  profile: Profile | undefined,
): { sampler?: LengthSampler; text: string } {
  if (cfg) return { sampler: lengthSampler(cfg, which), text: lengthText(cfg) };
  if (fromTrace) return { text: 'from the trace' };
  const key = which === 'prompt' ? 'promptTokens' : 'outputTokens';
  if (log && log.every((r) => r[key] !== undefined)) return { text: 'from the request log' };
  if (profile?.lengths)
    return { sampler: lengthSampler(profile.lengths[which], which), text: `from profile "${profile.name}"` };
  throw new UserError(
    `set workload.${key}: it is not given, and no trace, request log with ${which} lengths, or profile with lengths provides it`,
    undefined,
    `workload.${key}`,
  );
}

function lengthText(c: LengthConfig): string {
  switch (c.kind) {
    case 'fixed':
      return `${c.tokens}`;
    case 'uniform':
      return `uniform ${c.min}–${c.max}`;
    case 'dataset':
      return `dataset ${c.name}` + (c.max !== undefined ? ` ≤${c.max}` : '');
    case 'lognormal':
      return `lognormal mean ${c.meanTokens} cv ${c.cv}`;
    case 'empirical':
      return `empirical (median ${c.quantiles[Math.floor(c.quantiles.length / 2)]})`;
  }
}

function arrivalText(cfg: WorkloadConfig): string {
  const a = cfg.arrival;
  switch (a.kind) {
    case 'offline':
      return 'offline (all at t=0)';
    case 'poisson':
      return `Poisson arrivals ${a.ratePerS}/s`;
    case 'gamma':
      return `Gamma arrivals ${a.ratePerS}/s cv ${a.cv}`;
    case 'replay':
      return `arrivals replayed from ${a.path}` + (a.timeScale !== 1 ? ` ×${a.timeScale}` : '');
  }
}

function taskText(cfg: WorkloadConfig): string {
  const mix = (m: Readonly<Record<string, number>>): string => {
    const total = Object.values(m).reduce((a, b) => a + b, 0);
    return Object.entries(m)
      .map(([t, w]) => `${t} ${Math.round((100 * w) / total)}%`)
      .join(', ');
  };
  let s = cfg.tasks ? `tasks ${mix(cfg.tasks)}` : 'no task labels';
  if (cfg.shift) s += `, shifting at request ${cfg.shift.atRequest} to ${mix(cfg.shift.tasks)}`;
  return s;
}

/** An AggregateRouter built on first use (its setup may cost a Monte Carlo estimate). */
function lazyAggregate(make: () => AggregateRouter): AggregateRouter {
  let impl: AggregateRouter | undefined;
  return {
    counts(layer, tokens, out) {
      (impl ??= make()).counts(layer, tokens, out);
    },
  };
}
