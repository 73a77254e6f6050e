/**
 * The operations behind `moesim trace …`, as plain async functions (the CLI module only parses
 * arguments and prints): statistics of a trace, a synthetic trace from a profile, the
 * statistics of a trace next to those of its synthetic twin, and import of foreign traces.
 * Every output file is written atomically.
 */
import { RngStreams } from '../sim/kernel/rng.ts';
import { UserError } from '../sim/kernel/errors.ts';
import type { RequestRouter, RoutingSource } from '../sim/workload.ts';
import { TraceReader, type ExpectedShape } from './trace/reader.ts';
import { TraceWriter } from './trace/writer.ts';
import type { TraceInfo, TraceRequest } from './trace/format.ts';
import { TraceStatsAccumulator, type ExtendedTraceStats } from './stats/trace-stats.ts';
import { SyntheticModel } from './synthetic/model.ts';
import { SyntheticRouting } from './synthetic/router.ts';
import { generateRequests, sampleShapes, shapeOf, type RequestShape } from './synthetic/generate.ts';
import { loadProfile, type Profile } from './synthetic/profile.ts';
import { arrivalTimesS } from './arrivals.ts';
import { accuracyByLayer, ProfilePredictor } from './prediction.ts';
import { seedFrom } from './random/hash-rng.ts';
import type { LengthConfig } from './lengths.ts';
import {
  aggregateStats,
  aggregateStatsOfRequests,
  readAggregateFile,
  type AggregateStats,
} from './trace/aggregate-file.ts';

/** Streams a trace and returns its statistics. */
export async function traceStats(
  path: string,
  opts: { cValues?: readonly number[]; expect?: ExpectedShape } = {},
): Promise<{ info: TraceInfo; stats: ExtendedTraceStats; warnings: string[] }> {
  const reader = await TraceReader.open(path, {
    scores: false,
    predictions: false,
    ...(opts.expect ? { expect: opts.expect } : {}),
  });
  const acc = new TraceStatsAccumulator(reader.header.model, opts.cValues ? { cValues: opts.cValues } : {});
  for await (const r of reader) acc.add(r);
  return { info: reader.info, stats: acc.result(), warnings: reader.warnings };
}

/** Reads the request shapes (lengths, phases, tasks, arrivals) of a trace, not its routing. */
export async function traceShapes(path: string, expect?: ExpectedShape): Promise<RequestShape[]> {
  const reader = await TraceReader.open(path, { scores: false, predictions: false, ...(expect ? { expect } : {}) });
  const shapes: RequestShape[] = [];
  for await (const r of reader) shapes.push(shapeOf(r));
  return shapes;
}

export interface GenerateOptions {
  readonly profile: string;
  readonly out: string;
  /** Number of fresh requests (lengths and tasks from the profile unless overridden). */
  readonly requests?: number;
  /** Copy the request shapes of this trace instead (a synthetic twin). */
  readonly like?: string;
  readonly seed?: number;
  readonly promptTokens?: number;
  readonly outputTokens?: number;
  readonly tasks?: Readonly<Record<string, number>>;
  /** Gamma arrivals (cv 1 = Poisson) written as `arrivalS`. */
  readonly ratePerS?: number;
  readonly cv?: number;
  /** Write ranked predictions (2·top-k long) with this accuracy at every layer, or a first→steady ramp. */
  readonly predictionAccuracy?: number | { first: number; steady: number; rampLayers: number };
  readonly gzipLevel?: number;
  readonly baseDir?: string;
}

/** Writes a synthetic trace; returns what it wrote. Nothing is left behind on failure. */
export async function generateTrace(
  o: GenerateOptions,
): Promise<{ requests: number; tokens: number; profile: Profile }> {
  const { profile, path: profileFile } = await loadProfile(o.profile, o.baseDir);
  const shape = profile.model;
  const seed = o.seed ?? 1;
  const streams = new RngStreams(seed);
  let shapes: Iterable<RequestShape>;
  let count: number;
  if (o.like) {
    const like = await traceShapes(o.like, { moeLayers: shape.moeLayers, experts: shape.experts, topK: shape.topK });
    shapes = like;
    count = like.length;
  } else {
    if (!o.requests) throw new UserError('give --requests N or --like <trace>', undefined, 'arguments');
    const lengths = resolveLengths(profile, o, profileFile);
    count = o.requests;
    shapes = sampleShapes(o.requests, lengths, o.tasks ?? profile.tasks, {
      lengths: streams.stream('lengths'),
      tasks: streams.stream('tasks'),
    });
  }
  let times: number[] | undefined;
  if (o.ratePerS !== undefined) {
    times = arrivalTimesS(
      { kind: 'gamma', ratePerS: o.ratePerS, cv: o.cv ?? 1 },
      count,
      streams.stream('arrivals'),
    ).timesS;
  }
  const model = new SyntheticModel(shape, profile.knobs);
  const routing = new SyntheticRouting(model, `synthetic:${seedFrom(streams.stream('routing'))}`);
  const writer = await TraceWriter.create(
    o.out,
    {
      model: { id: shape.id, moeLayers: shape.moeLayers, experts: shape.experts, topK: shape.topK },
      source: `moesim trace generate --profile ${profile.name} --seed ${seed}${o.like ? ` --like ${o.like.replace(/^.*[\\/]/, '')}` : ''}`,
      license: 'synthetic, generated by moesim (Apache-2.0)',
      description: `synthetic routing, profile "${profile.name}" (${profile.fittedTo ? `fitted to ${profile.fittedTo}` : `assumed from ${profile.assumedFrom}`})`,
      requests: count,
    },
    o.gzipLevel !== undefined ? { gzipLevel: o.gzipLevel } : {},
  );
  const predictor =
    o.predictionAccuracy !== undefined
      ? predictionWriter(routing, accuracyByLayer(o.predictionAccuracy, shape.moeLayers), streams)
      : undefined;
  let tokens = 0;
  let i = 0;
  try {
    for (const r of generateRequests(routing, shapes)) {
      const arrivalS = times ? Math.round(times[i]! * 1e6) / 1e6 : r.arrivalS;
      const out: TraceRequest = {
        ...r,
        ...(arrivalS !== undefined ? { arrivalS } : {}),
        ...(predictor ? { predictions: predictor(r, i) } : {}),
      };
      await writer.write(out);
      tokens += r.tokens;
      i++;
    }
    await writer.close();
  } catch (err) {
    await writer.abort();
    throw err;
  }
  return { requests: i, tokens, profile };
}

function resolveLengths(
  profile: Profile,
  o: GenerateOptions,
  file: string,
): { prompt: LengthConfig; output: LengthConfig } {
  const prompt: LengthConfig | undefined = o.promptTokens
    ? { kind: 'fixed', tokens: o.promptTokens }
    : profile.lengths?.prompt;
  const output: LengthConfig | undefined = o.outputTokens
    ? { kind: 'fixed', tokens: o.outputTokens }
    : profile.lengths?.output;
  if (!prompt || !output) {
    throw new UserError(
      'the profile has no length distributions: give --prompt-tokens and --output-tokens',
      file,
      'lengths',
    );
  }
  return { prompt, output };
}

/** Ranked predictions (2k long) for every (token, layer) of a generated request. */
function predictionWriter(
  routing: SyntheticRouting,
  acc: number[],
  streams: RngStreams,
): (r: TraceRequest, index: number) => { offsets: Int32Array; ids: Int32Array } {
  const { moeLayers: L, topK: k } = routing;
  let current: TraceRequest | undefined;
  const view: RequestRouter = {
    route: () => {
      throw new Error('not used');
    },
    peek: (layer, from, to, out) => {
      let o = 0;
      for (let t = from; t < to; t++) for (let j = 0; j < k; j++) out[o++] = current!.experts[(t * L + layer) * k + j]!;
    },
  };
  const source: RoutingSource = {
    moeLayers: L,
    experts: routing.experts,
    topK: k,
    forRequest: () => view,
    routerOf: () => view,
    popularity: (l) => routing.popularity(l),
  };
  const predictor = new ProfilePredictor(source, [], acc, streams.stream('prediction'));
  const len = Math.min(routing.experts, 2 * k);
  return (r, index) => {
    current = r;
    const offsets = new Int32Array(r.tokens * L + 1);
    const ids = new Int32Array(r.tokens * L * len);
    let o = 0;
    for (let t = 0; t < r.tokens; t++) {
      for (let l = 0; l < L; l++) {
        offsets[t * L + l] = o;
        const ranked = predictor.predict(index, l, t, t + 1);
        for (let j = 0; j < len; j++) ids[o++] = ranked[j]!;
      }
    }
    offsets[r.tokens * L] = o;
    return { offsets, ids };
  };
}

/**
 * Statistics of a trace and of its synthetic twin: the same request shapes routed by the
 * profile (its model must match the trace's). The twin is generated and measured lazily.
 */
export async function twinStats(
  path: string,
  profileRef: string,
  opts: { seed?: number; cValues?: readonly number[]; baseDir?: string } = {},
): Promise<{ real: ExtendedTraceStats; twin: ExtendedTraceStats; profile: Profile }> {
  const { profile } = await loadProfile(profileRef, opts.baseDir);
  const shape = profile.model;
  const expect = { modelId: shape.id, moeLayers: shape.moeLayers, experts: shape.experts, topK: shape.topK };
  const reader = await TraceReader.open(path, { scores: false, predictions: false, expect });
  const c = opts.cValues ? { cValues: opts.cValues } : {};
  const real = new TraceStatsAccumulator(shape, c);
  const shapes: RequestShape[] = [];
  for await (const r of reader) {
    real.add(r);
    shapes.push(shapeOf(r));
  }
  const twin = new TraceStatsAccumulator(shape, c);
  const streams = new RngStreams(opts.seed ?? 1);
  const routing = new SyntheticRouting(
    new SyntheticModel(shape, profile.knobs),
    `synthetic:${seedFrom(streams.stream('routing'))}`,
  );
  for (const r of generateRequests(routing, shapes)) twin.add(r);
  return { real: real.result(), twin: twin.result(), profile };
}

/** Converts any readable trace (e.g. the shared real traces) into the moesim format. */
export async function importTrace(
  input: string,
  out: string,
  opts: { modelId?: string; gzipLevel?: number } = {},
): Promise<{ requests: number; tokens: number }> {
  const reader = await TraceReader.open(input);
  const h = reader.header;
  const modelId = opts.modelId ?? h.model.id;
  const writer = await TraceWriter.create(
    out,
    {
      model: { ...h.model, ...(modelId ? { id: modelId } : {}) },
      source: `${h.source ?? input} (imported by moesim trace import from ${input.replace(/^.*[\\/]/, '')})`,
      ...(h.license ? { license: h.license } : {}),
    },
    opts.gzipLevel !== undefined ? { gzipLevel: opts.gzipLevel } : {},
  );
  let requests = 0;
  let tokens = 0;
  try {
    for await (const r of reader) {
      await writer.write(r);
      requests++;
      tokens += r.tokens;
    }
    await writer.close();
  } catch (err) {
    await writer.abort();
    throw err;
  }
  return { requests, tokens };
}

/**
 * Statistics of an aggregate routing file for one of its models, and, with a profile, of the
 * profile's twin: one task per corpus, `requestsPerCorpus` requests of `chunkTokens` tokens.
 */
export async function aggregateTwin(
  path: string,
  aggregateModel: string | undefined,
  profileRef: string | undefined,
  opts: { seed?: number; chunkTokens?: number; requestsPerCorpus?: number; baseDir?: string } = {},
): Promise<{ model: string; real: AggregateStats; twin?: AggregateStats; profile?: Profile }> {
  const file = await readAggregateFile(path);
  const names = Object.keys(file.models);
  const model = aggregateModel ?? names[0]!;
  const m = file.models[model];
  if (!m) throw new UserError(`no model "${model}" in the file (has ${names.join(', ')})`, path, 'models');
  const real = aggregateStats(m);
  if (!profileRef) return { model, real };
  const { profile } = await loadProfile(profileRef, opts.baseDir);
  if (
    profile.model.experts !== m.experts ||
    profile.model.topK !== m.topk ||
    profile.model.moeLayers !== m.num_layers
  ) {
    throw new UserError(
      `profile "${profile.name}" (${profile.model.moeLayers} layers, ${profile.model.experts} experts, top-${profile.model.topK}) does not match ${model} (${m.num_layers}, ${m.experts}, top-${m.topk})`,
      path,
      `models.${model}`,
    );
  }
  const chunk = opts.chunkTokens ?? 1024;
  const per = opts.requestsPerCorpus ?? 16;
  const shapes: RequestShape[] = [];
  for (const corpus of Object.keys(m.expert_counts)) {
    for (let i = 0; i < per; i++)
      shapes.push({
        id: `${corpus}-${i}`,
        promptTokens: chunk,
        prefillRecorded: true,
        tokens: chunk,
        outputTokens: 1,
        task: corpus,
      });
  }
  const streams = new RngStreams(opts.seed ?? 1);
  const routing = new SyntheticRouting(
    new SyntheticModel(profile.model, { ...profile.knobs, startTokens: 0 }),
    `synthetic:${seedFrom(streams.stream('routing'))}`,
  );
  const twin = aggregateStatsOfRequests(generateRequests(routing, shapes), m.num_layers, m.experts, m.topk, m.layers);
  return { model, real, twin, profile };
}
