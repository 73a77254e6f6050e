/**
 * `moesim trace …`: statistics, calibration, generation, comparison and import of routing
 * traces. Results go to stdout, progress and warnings to stderr; bad input throws UserError
 * (one line, exit 2). Output files are written atomically (`<out>.tmp-<pid>`, then renamed).
 *
 *   moesim trace stats <file> [--json] [--extended] [--c 6,12,16] [--cache] [--sizes 8,16] [--reset request|never] [--groups 3] [--svg f.svg]
 *   moesim trace calibrate <file> --out <profile.json> [--model <id>] [--name <name>]
 *     (<file>: a trace, an aggregate file, or summary targets: workloads/profiles/targets/*.yaml)
 *   moesim trace activation --profile <name|path> [--targets <file>] [--batch 1,2,4,8,16,32] [--tokens-per-request m] [--json]
 *   moesim trace generate --profile <name|path> (--requests N | --like <trace>) --out <file.jsonl.gz> [--seed S]
 *   moesim trace compare <file> (--profile <name|path> | <other-file>) [--json]
 *   moesim trace import <file> --out <file.jsonl.gz> [--model <id>] [--format vllm|sglang|megatron|llamacpp|imp|parquet …]
 */
import type { Argv, CommandModule } from 'yargs';
import { statSync } from 'node:fs';
import { UserError } from '../../../sim/kernel/errors.ts';
import { MAX_REQUESTS } from '../../config/expand.ts';
import { checkOutDir } from '../../outputs/out-dir.ts';
import { calibrateTrace } from '../../../workloads/synthetic/calibrate.ts';
import { coreStats, type ExtendedTraceStats } from '../../../workloads/stats/trace-stats.ts';
import { formatAggregateTable, formatJson, formatStatsTable } from '../../../workloads/stats/format.ts';
import { writeFileAtomic } from '../../../workloads/io/atomic.ts';
import { aggregateTwin, generateTrace, importTrace, traceStats, twinStats } from '../../../workloads/trace-tools.ts';
import { looksLikeAggregateFile, readAggregateFile } from '../../../workloads/trace/aggregate-file.ts';
import { calibrateFromAggregate } from '../../../workloads/synthetic/calibrate-aggregate.ts';
import { loadProfile } from '../../../workloads/synthetic/profile.ts';
import { loadTargets, looksLikeTargetsFile, type RoutingTargets } from '../../../workloads/synthetic/targets.ts';
import {
  calibrateTargets,
  compareWithTargets,
  formatTargetRows,
  summaryOptionsOf,
} from '../../../workloads/synthetic/calibrate-targets.ts';
import { routingSummary, TABLE1_BATCH_SIZES } from '../../../workloads/stats/routing-summary.ts';
import { dirname, relative, resolve } from 'node:path';
import {
  fitCacheTargets,
  formatCacheRows,
  loadCacheTargets,
  looksLikeCacheTargets,
} from '../../../workloads/synthetic/calibrate-cache.ts';
import { existsSync } from 'node:fs';
import { importFormat, IMPORT_FORMATS } from '../../../workloads/import/index.ts';
import { positiveInt } from '../../../workloads/import/common.ts';
import type { CacheReport, CacheReset, CurveOptions } from '../../../workloads/stats/cache-curves.ts';
import {
  cacheReport,
  formatCacheReports,
  loadCacheTrace,
  plotCacheReports,
  twinTrace,
} from '../../../workloads/stats/cache-tools.ts';
import { parseColumns } from '../../../workloads/import/parquet.ts';
import { TRACE_COMMAND } from './trace-name.ts';

const out = (s: string): void => void process.stdout.write(s.endsWith('\n') ? s : `${s}\n`);
const err = (s: string): void => void process.stderr.write(s.endsWith('\n') ? s : `${s}\n`);

function parseCs(v: unknown, option = '--c'): number[] | undefined {
  if (v === undefined) return undefined;
  const parts = String(v)
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const cs = parts.map(Number);
  if (!cs.length || cs.some((c) => !Number.isInteger(c) || c < 1)) {
    throw new UserError(
      `${option} must list positive integers, e.g. ${option === '--c' ? '6,12,16' : '1,2,4,8,16,32'}`,
      undefined,
      option,
      v,
    );
  }
  return cs;
}

function parseTasks(v: unknown): Record<string, number> | undefined {
  if (v === undefined) return undefined;
  const mix: Record<string, number> = {};
  for (const part of String(v).split(',')) {
    const [name, w] = part.split('=');
    const weight = w === undefined ? 1 : Number(w);
    if (!name || !(weight > 0)) throw new UserError('--tasks must look like gsm8k=2,mmlu=1', undefined, '--tasks', v);
    mix[name.trim()] = weight;
  }
  return mix;
}

const jsonOf = (s: ExtendedTraceStats, extended: boolean): unknown => (extended ? s : coreStats(s));

interface StatsArgs extends CacheArgs {
  file: string;
  json?: boolean;
  extended?: boolean;
  c?: string;
}

interface CacheArgs {
  cache?: boolean;
  sizes?: string;
  reset?: string;
  groups?: number;
  granularity?: string;
  svg?: string;
  shuffleSeed?: number;
}

const cacheOptions = <T>(y: Argv<T>): Argv<T> =>
  y
    .option('cache', {
      type: 'boolean',
      describe:
        'LRU/Belady cache curves, shuffled control, reuse distance, popularity (default: on for tables, off for --json)',
    })
    .option('sizes', {
      type: 'string',
      describe: 'cache sizes in experts per layer, e.g. 8,16,32,64 (default k, 2k, 4k … and E/2)',
    })
    .option('reset', { type: 'string', describe: 'caches emptied at every request (request) or kept (never, default)' })
    .option('groups', { type: 'number', describe: 'layer groups to report (default 3)' })
    .option('granularity', {
      type: 'string',
      describe: "cache step: token (a token's k experts at once, default) or access (one expert at a time)",
    })
    .option('svg', { type: 'string', describe: 'plot the cache curves to this SVG file' })
    .option('shuffle-seed', { type: 'number', describe: 'seed of the shuffled control (default 1)' }) as Argv<T>;

function curveOptions(a: CacheArgs): CurveOptions {
  if (a.reset !== undefined && a.reset !== 'request' && a.reset !== 'never')
    throw new UserError('must be request or never', undefined, '--reset', a.reset);
  const groups = positiveInt(a.groups, '--groups');
  if (a.granularity !== undefined && a.granularity !== 'token' && a.granularity !== 'access')
    throw new UserError('must be token or access', undefined, '--granularity', a.granularity);
  const sizes = parseCs(a.sizes, '--sizes');
  return {
    ...(sizes ? { sizes } : {}),
    ...(a.reset ? { reset: a.reset as CacheReset } : {}),
    ...(groups ? { groups } : {}),
    ...(a.granularity ? { granularity: a.granularity as 'token' | 'access' } : {}),
    ...(a.shuffleSeed !== undefined ? { seed: a.shuffleSeed } : {}),
  };
}

async function writeSvg(
  file: string | undefined,
  cols: { title: string; report: CacheReport }[],
  title: string,
): Promise<void> {
  if (!file) return;
  await writeFileAtomic(file, await plotCacheReports(cols, title));
  err(`wrote ${file}`);
}

/** A trace path that must be a readable file (a folder is the user's slip, not a crash). */
function traceFile(file: string): string {
  const st = statSync(file, { throwIfNoEntry: false });
  if (st?.isDirectory()) throw new UserError('is a folder, not a trace file', file);
  return file;
}

const statsCommand: CommandModule<object, StatsArgs> = {
  command: 'stats <file>',
  describe:
    'statistics of a routing trace (popularity, request skew, cross-layer, temporal, activation ratio, task clusters)',
  builder: (y: Argv<object>) =>
    cacheOptions(y)
      .positional('file', {
        type: 'string',
        demandOption: true,
        describe: 'trace (.jsonl.gz; moesim format or the converted real traces)',
      })
      .option('json', { type: 'boolean', describe: 'print one JSON object instead of a table' })
      .option('extended', {
        type: 'boolean',
        describe: 'with --json: add Gini, top-10 % share, baselines, phases, tasks',
      })
      .option('c', {
        type: 'string',
        describe: 'C values for request skew, e.g. 6,12,16 (default k,2k,4k)',
      }) as unknown as Argv<StatsArgs>,
  handler: async (a) => {
    if (await looksLikeAggregateFile(a.file)) {
      // An aggregate file (per-corpus counts at a few layers): its own statistics, every model.
      const file = await readAggregateFile(a.file);
      const all = await Promise.all(Object.keys(file.models).map((m) => aggregateTwin(a.file, m, undefined)));
      if (a.json) out(JSON.stringify(Object.fromEntries(all.map((x) => [x.model, x.real]))));
      else
        out(all.map((x) => `${x.model}\n${formatAggregateTable([{ title: 'aggregate', stats: x.real }])}`).join('\n'));
      return;
    }
    const cValues = parseCs(a.c);
    const co = curveOptions(a);
    const { stats, warnings } = await traceStats(traceFile(a.file), cValues ? { cValues } : {});
    warnings.forEach(err);
    const title = a.file.replace(/^.*[\\/]/, '');
    const cache = (a.json ? a.cache === true : a.cache !== false)
      ? cacheReport(await loadCacheTrace(a.file), co)
      : undefined;
    if (a.json)
      out(
        JSON.stringify(
          cache ? { ...(jsonOf(stats, a.extended ?? false) as object), cache } : jsonOf(stats, a.extended ?? false),
        ),
      );
    else
      out(
        formatStatsTable([{ title, stats }]) + (cache ? `\n\n${formatCacheReports([{ title, report: cache }])}` : ''),
      );
    if (cache) await writeSvg(a.svg, [{ title, report: cache }], `${title}: cache hit rate (%)`);
  },
};

interface CalibrateArgs {
  file: string;
  out: string;
  model?: string;
  name?: string;
  maxFitTokens?: number;
  evaluations?: number;
  aggregateModel?: string;
  base?: string;
}

const calibrateCommand: CommandModule<object, CalibrateArgs> = {
  command: 'calibrate <file>',
  describe: 'fit a synthetic routing profile to a trace, an aggregate file or summary targets (.yaml)',
  builder: (y: Argv<object>) =>
    y
      .positional('file', { type: 'string', demandOption: true })
      .option('out', {
        type: 'string',
        demandOption: true,
        describe: 'profile to write (e.g. workloads/profiles/<name>.json)',
      })
      .option('model', { type: 'string', describe: "model id for the profile (default: the trace header's)" })
      .option('name', { type: 'string', describe: 'profile name (default: the output file name)' })
      .option('max-fit-tokens', { type: 'number', describe: 'fit on at most this many tokens (default 40000)' })
      .option('evaluations', {
        type: 'number',
        describe: "evaluation budget (traces: default 30; summary targets: per decode window m, default the file's)",
      })
      .option('aggregate-model', {
        type: 'string',
        describe: 'aggregate files: which model of the file (e.g. OLMoE-1B-7B-0924)',
      })
      .option('base', {
        type: 'string',
        describe: 'aggregate files: profile to take request-level knobs from (default deepseek-v2-lite)',
      }) as unknown as Argv<CalibrateArgs>,
  handler: async (a) => {
    const name = a.name ?? a.out.replace(/^.*[\\/]/, '').replace(/\.json$/, '');
    if (await looksLikeCacheTargets(a.file)) {
      const t = await loadCacheTargets(a.file);
      const r = fitCacheTargets(a.name ? { ...t, name: a.name } : t, {
        file: relative(dirname(resolve(a.out)), resolve(a.file)),
        ...(a.evaluations ? { maxEvaluations: a.evaluations } : {}),
        log: err,
      });
      await writeFileAtomic(a.out, `${formatJson(r.profile)}\n`);
      out(`wrote ${a.out} after ${r.evaluations} evaluations (loss ${r.loss.toFixed(3)})`);
      out(formatCacheRows(r.rows));
      return;
    }
    if (await looksLikeTargetsFile(a.file)) {
      if (a.evaluations !== undefined && !(Number.isInteger(a.evaluations) && a.evaluations > 0)) {
        throw new UserError('must be a positive integer', undefined, '--evaluations', a.evaluations);
      }
      const r = await calibrateTargets(a.file, {
        out: a.out,
        ...(a.name ? { name: a.name } : {}),
        ...(a.evaluations ? { maxEvaluations: a.evaluations } : {}),
        log: err,
      });
      await writeFileAtomic(a.out, `${formatJson(r.profile)}\n`);
      out(
        `wrote ${a.out} after ${r.evaluations} evaluations (decode tokens per request m = ${r.tokensPerRequest}, loss ${r.loss.toFixed(3)})`,
      );
      out(formatTargetRows(r.rows));
      return;
    }
    if (await looksLikeAggregateFile(a.file)) {
      const file = await readAggregateFile(a.file);
      const key = a.aggregateModel ?? Object.keys(file.models)[0]!;
      const m = file.models[key];
      if (!m)
        throw new UserError(
          `no model "${key}" in the file (has ${Object.keys(file.models).join(', ')})`,
          a.file,
          '--aggregate-model',
        );
      if (!a.model) throw new UserError('give --model <id> for the profile', undefined, '--model');
      const { profile: base } = await loadProfile(a.base ?? 'deepseek-v2-lite');
      const r = await calibrateFromAggregate(a.file, {
        aggregateModel: key,
        modelId: a.model,
        moeLayers: m.num_layers,
        base,
        name,
        ...(a.evaluations ? { maxEvaluations: a.evaluations } : {}),
        log: err,
      });
      await writeFileAtomic(a.out, `${formatJson(r.profile)}\n`);
      out(`wrote ${a.out}`);
      out(
        formatAggregateTable([
          { title: 'aggregate', stats: r.real },
          { title: `twin (${name})`, stats: r.twin },
        ]),
      );
      return;
    }
    const r = await calibrateTrace(a.file, {
      name,
      ...(a.model ? { modelId: a.model } : {}),
      ...(a.maxFitTokens ? { maxFitTokens: a.maxFitTokens } : {}),
      ...(a.evaluations ? { maxEvaluations: a.evaluations } : {}),
      log: err,
    });
    await writeFileAtomic(a.out, `${formatJson(r.profile)}\n`);
    out(`wrote ${a.out} after ${r.evaluations} evaluations`);
    out(formatJson({ target: r.profile.fit?.['target'], achieved: r.profile.fit?.['achieved'] }));
  },
};

interface GenerateArgs {
  profile: string;
  out: string;
  requests?: number;
  like?: string;
  seed?: number;
  promptTokens?: number;
  outputTokens?: number;
  tasks?: string;
  rate?: number;
  cv?: number;
  predictions?: number;
  gzipLevel?: number;
}

/** The numeric flags and the output file of `trace generate`, checked before anything is written. */
function checkGenerateArgs(a: GenerateArgs): void {
  const bad = (flag: string, v: unknown, must: string): never => {
    throw new UserError(`must be ${must}`, undefined, flag, v);
  };
  if (a.requests !== undefined && a.requests > MAX_REQUESTS) bad('--requests', a.requests, `at most ${MAX_REQUESTS}`);
  if (a.gzipLevel !== undefined && !(Number.isInteger(a.gzipLevel) && a.gzipLevel >= 1 && a.gzipLevel <= 9))
    bad('--gzip-level', a.gzipLevel, 'an integer 1–9');
  if (a.rate !== undefined && !(Number.isFinite(a.rate) && a.rate >= 1e-6 && a.rate <= 1e9))
    bad('--rate', a.rate, 'requests per second in 1e-6…1e9');
  if (a.cv !== undefined && !(Number.isFinite(a.cv) && a.cv > 0 && a.cv <= 1000))
    bad('--cv', a.cv, 'a positive number ≤ 1000');
  if (a.seed !== undefined && !(Number.isSafeInteger(a.seed) && a.seed >= 0))
    bad('--seed', a.seed, 'a non-negative integer');
  for (const [flag, v] of [
    ['--prompt-tokens', a.promptTokens],
    ['--output-tokens', a.outputTokens],
  ] as const) {
    if (v !== undefined && !(Number.isInteger(v) && v >= 1 && v <= 10_000_000)) bad(flag, v, 'a positive integer');
  }
  if (a.out.trim() === '') bad('--out', a.out, 'a file path (it is empty)');
  let isDir = false;
  try {
    isDir = statSync(a.out).isDirectory();
  } catch {
    // Does not exist yet: its folder is checked below.
  }
  if (isDir) bad('--out', a.out, 'a file, not a folder');
  try {
    if (!statSync(dirname(resolve(a.out))).isDirectory()) bad('--out', a.out, 'a path in an existing folder');
  } catch (err) {
    if (err instanceof UserError) throw err;
    bad('--out', a.out, 'a path in an existing folder');
  }
  // A folder where no file can be made (read-only, /proc): a one-line error now, nothing left.
  checkOutDir(dirname(resolve(a.out)));
}

const generateCommand: CommandModule<object, GenerateArgs> = {
  command: 'generate',
  describe: 'write a synthetic trace from a profile',
  builder: (y: Argv<object>) =>
    y
      .option('profile', { type: 'string', demandOption: true, describe: 'profile name (workloads/profiles/) or path' })
      .option('out', { type: 'string', demandOption: true, describe: 'trace to write (.jsonl.gz)' })
      .option('requests', { type: 'number', describe: 'number of requests (lengths and tasks from the profile)' })
      .option('like', {
        type: 'string',
        describe: 'copy request lengths/phases/tasks of this trace (a synthetic twin)',
      })
      .option('seed', { type: 'number', default: 1 })
      .option('prompt-tokens', { type: 'number', describe: 'fixed prompt length' })
      .option('output-tokens', { type: 'number', describe: 'fixed output length' })
      .option('tasks', { type: 'string', describe: "task mix, e.g. gsm8k=2,mmlu=1 (default: the profile's)" })
      .option('rate', { type: 'number', describe: 'write arrival times: requests per second' })
      .option('cv', {
        type: 'number',
        describe: 'with --rate: Gamma gaps with this coefficient of variation (default 1 = Poisson)',
      })
      .option('predictions', { type: 'number', describe: 'write ranked predictions with this top-k accuracy' })
      .option('gzip-level', {
        type: 'number',
        describe: 'gzip level 1–9 (default 6)',
      }) as unknown as Argv<GenerateArgs>,
  handler: async (a) => {
    if (a.requests !== undefined && (!Number.isInteger(a.requests) || a.requests < 1)) {
      throw new UserError('--requests must be a positive integer', undefined, '--requests', a.requests);
    }
    if (a.predictions !== undefined && !(a.predictions >= 0 && a.predictions <= 1)) {
      throw new UserError('--predictions must be an accuracy in 0…1', undefined, '--predictions', a.predictions);
    }
    checkGenerateArgs(a);
    const tasks = parseTasks(a.tasks);
    const r = await generateTrace({
      profile: a.profile,
      out: a.out,
      ...(a.requests !== undefined ? { requests: a.requests } : {}),
      ...(a.like !== undefined ? { like: a.like } : {}),
      seed: a.seed ?? 1,
      ...(a.promptTokens !== undefined ? { promptTokens: a.promptTokens } : {}),
      ...(a.outputTokens !== undefined ? { outputTokens: a.outputTokens } : {}),
      ...(tasks ? { tasks } : {}),
      ...(a.rate !== undefined ? { ratePerS: a.rate } : {}),
      ...(a.cv !== undefined ? { cv: a.cv } : {}),
      ...(a.predictions !== undefined ? { predictionAccuracy: a.predictions } : {}),
      ...(a.gzipLevel !== undefined ? { gzipLevel: a.gzipLevel } : {}),
    });
    out(`wrote ${a.out}: ${r.requests} requests, ${r.tokens} tokens, profile ${r.profile.name}`);
  },
};

interface CompareArgs extends CacheArgs {
  file: string;
  other?: string;
  profile?: string;
  seed?: number;
  json?: boolean;
  extended?: boolean;
  c?: string;
  aggregateModel?: string;
}

const compareCommand: CommandModule<object, CompareArgs> = {
  command: 'compare <file> [other]',
  describe: 'statistics side by side: a trace and its synthetic twin (--profile), or two traces',
  builder: (y: Argv<object>) =>
    cacheOptions(y)
      .positional('file', { type: 'string', demandOption: true })
      .positional('other', { type: 'string', describe: 'a second trace' })
      .option('profile', { type: 'string', describe: 'route the same requests with this profile (the twin)' })
      .option('seed', { type: 'number', default: 1 })
      .option('json', { type: 'boolean' })
      .option('extended', { type: 'boolean' })
      .option('c', { type: 'string' })
      .option('aggregate-model', {
        type: 'string',
        describe: 'aggregate files: which model of the file',
      }) as unknown as Argv<CompareArgs>,
  handler: async (a) => {
    if (await looksLikeAggregateFile(a.file)) {
      if (!a.profile)
        throw new UserError(
          'an aggregate file is compared with a profile: give --profile <name>',
          undefined,
          'arguments',
        );
      const r = await aggregateTwin(a.file, a.aggregateModel, a.profile, { seed: a.seed ?? 1 });
      if (a.json) out(JSON.stringify({ model: r.model, aggregate: r.real, twin: r.twin }));
      else
        out(
          `${r.model}\n${formatAggregateTable([
            { title: 'aggregate', stats: r.real },
            { title: `twin (${r.profile!.name})`, stats: r.twin! },
          ])}`,
        );
      return;
    }
    const cValues = parseCs(a.c);
    const c = cValues ? { cValues } : {};
    const name = (p: string): string => p.replace(/^.*[\\/]/, '');
    let cols: { title: string; stats: ExtendedTraceStats }[];
    if (a.profile && !a.other) {
      const r = await twinStats(a.file, a.profile, { seed: a.seed ?? 1, ...c });
      cols = [
        { title: name(a.file), stats: r.real },
        { title: `twin (${r.profile.name})`, stats: r.twin },
      ];
    } else if (a.other && !a.profile) {
      const [x, y] = await Promise.all([traceStats(traceFile(a.file), c), traceStats(traceFile(a.other), c)]);
      cols = [
        { title: name(a.file), stats: x.stats },
        { title: name(a.other), stats: y.stats },
      ];
    } else {
      throw new UserError('give either --profile <name> or a second trace file', undefined, 'arguments');
    }
    const wantCache = a.json ? a.cache === true : a.cache !== false;
    let caches: { title: string; report: CacheReport }[] = [];
    if (wantCache) {
      const co = curveOptions(a);
      const real = await loadCacheTrace(a.file);
      const second = a.profile
        ? twinTrace((await loadProfile(a.profile)).profile, real.shapes, a.seed ?? 1)
        : await loadCacheTrace(a.other!);
      caches = [
        { title: cols[0]!.title, report: cacheReport(real, co) },
        { title: cols[1]!.title, report: cacheReport(second, co) },
      ];
    }
    if (a.json) {
      out(
        JSON.stringify(
          Object.fromEntries(
            cols.map((col, i) => [
              col.title,
              caches[i]
                ? { ...(jsonOf(col.stats, a.extended ?? false) as object), cache: caches[i]!.report }
                : jsonOf(col.stats, a.extended ?? false),
            ]),
          ),
        ),
      );
    } else out(formatStatsTable(cols) + (caches.length ? `\n\n${formatCacheReports(caches)}` : ''));
    if (caches.length) await writeSvg(a.svg, caches, `${cols[0]!.title} vs ${cols[1]!.title}: cache hit rate (%)`);
  },
};

interface ImportArgs {
  file: string;
  out: string;
  model?: string;
  format?: string;
  experts?: number;
  layers?: number;
  topK?: number;
  segment?: number;
  columns?: string;
}

const importCommand: CommandModule<object, ImportArgs> = {
  command: 'import <file>',
  describe: "convert a trace to the moesim format: a converted real trace, or an engine's (--format)",
  builder: (y: Argv<object>) =>
    y
      .positional('file', { type: 'string', demandOption: true })
      .option('out', { type: 'string', demandOption: true })
      .option('model', { type: 'string', describe: 'model id to record in the header' })
      .option('format', {
        type: 'string',
        describe: `engine format: ${IMPORT_FORMATS.join(', ')} (default: a moesim or converted real trace)`,
      })
      .option('experts', { type: 'number', describe: 'routed experts per layer (default: the largest id + 1)' })
      .option('layers', { type: 'number', describe: 'vllm/sglang base64 routing: layers per token' })
      .option('top-k', {
        type: 'number',
        describe: 'experts per token (llamacpp: required; vllm/sglang base64; imp flat lists)',
      })
      .option('segment', { type: 'number', describe: 'imp: split the one stream into requests of this many tokens' })
      .option('columns', {
        type: 'string',
        describe: 'parquet: request=…,token=…,layer=…,experts=…[,phase=…]',
      }) as unknown as Argv<ImportArgs>,
  handler: async (a) => {
    if (a.format === undefined) {
      const r = await importTrace(a.file, a.out, a.model ? { modelId: a.model } : {});
      out(`wrote ${a.out}: ${r.requests} requests, ${r.tokens} tokens`);
      return;
    }
    const experts = positiveInt(a.experts, '--experts');
    const layers = positiveInt(a.layers, '--layers');
    const topK = positiveInt(a.topK, '--top-k');
    const segment = positiveInt(a.segment, '--segment');
    const r = await importFormat(a.format, a.file, a.out, {
      ...(experts ? { experts } : {}),
      ...(layers ? { layers } : {}),
      ...(topK ? { topK } : {}),
      ...(segment ? { segment } : {}),
      ...(a.model ? { modelId: a.model } : {}),
      ...(a.columns ? { columns: parseColumns(a.columns) } : {}),
    });
    out(
      `wrote ${a.out}: ${r.requests} requests, ${r.tokens} tokens, ${r.shape.moeLayers} layers × ${r.shape.experts} experts, top-${r.shape.topK}`,
    );
    out(`header notes: ${r.assumes}`);
  },
};

interface ActivationArgs {
  profile: string;
  targets?: string;
  batch?: string;
  tokensPerRequest?: number;
  seed?: string;
  json?: boolean;
}

const activationCommand: CommandModule<object, ActivationArgs> = {
  command: 'activation',
  describe:
    "a profile's expert activation ratio vs batch size (as in MoE-Infinity Table 1), prefill activation and reuse, next to its targets",
  builder: (y: Argv<object>) =>
    y
      .option('profile', { type: 'string', demandOption: true, describe: 'profile name (workloads/profiles/) or path' })
      .option('targets', {
        type: 'string',
        describe: 'summary targets to compare with (default: the file the profile was fitted to, if any)',
      })
      .option('batch', { type: 'string', describe: 'batch sizes, e.g. 1,2,4,8,16,32 (default)' })
      .option('tokens-per-request', {
        type: 'number',
        describe: "decode tokens per request in the targets' definition (default: the profile's fitted value, else 1)",
      })
      .option('seed', { type: 'string', default: 'moesim-check', describe: 'measurement seed' })
      .option('json', { type: 'boolean', describe: 'print one JSON object' }) as unknown as Argv<ActivationArgs>,
  handler: async (a) => {
    const { profile, path } = await loadProfile(a.profile);
    let targets: RoutingTargets | undefined;
    const stored = profile.fit?.['targetsFile'];
    if (a.targets) targets = await loadTargets(a.targets);
    else if (typeof stored === 'string' && existsSync(resolve(dirname(path), stored)))
      targets = await loadTargets(resolve(dirname(path), stored));
    if (
      targets &&
      (targets.model.moeLayers !== profile.model.moeLayers ||
        targets.model.experts !== profile.model.experts ||
        targets.model.topK !== profile.model.topK)
    ) {
      throw new UserError(
        `targets are for ${targets.model.moeLayers} × ${targets.model.experts}, top-${targets.model.topK}; the profile is ${profile.model.moeLayers} × ${profile.model.experts}, top-${profile.model.topK}`,
        a.targets,
        'model',
      );
    }
    const batch =
      parseCs(a.batch, '--batch') ??
      (targets?.decode ? Object.keys(targets.decode.activationPercent).map(Number) : [...TABLE1_BATCH_SIZES]);
    if (batch.some((b) => b > 256)) throw new UserError('batch sizes up to 256', undefined, '--batch', a.batch);
    const fitted = profile.fit?.['tokensPerRequest'];
    const tfix =
      targets?.decode && typeof targets.decode.tokensPerRequest === 'number'
        ? targets.decode.tokensPerRequest
        : undefined;
    const m = a.tokensPerRequest ?? (typeof fitted === 'number' ? fitted : undefined) ?? tfix ?? 1;
    if (!(Number.isInteger(m) && m >= 1 && m <= 64))
      throw new UserError('must be an integer in 1…64', undefined, '--tokens-per-request', m);
    const windows = m === 1 ? [1] : [1, m];
    const opts = targets
      ? summaryOptionsOf(targets, a.seed, windows)
      : { tokensPerRequest: windows, ...(profile.tasks ? { tasks: profile.tasks } : {}), seed: a.seed };
    const measured = [
      ...new Set([...batch, ...Object.keys(targets?.decode?.activationPercent ?? {}).map(Number)]),
    ].sort((x, y) => x - y);
    const tasks = targets?.tasks ?? profile.tasks;
    const s = routingSummary(profile.model, profile.knobs, {
      ...opts,
      batchSizes: measured,
      ...(tasks ? { tasks } : {}),
    });
    const rows = targets
      ? compareWithTargets(
          { ...targets, decode: targets.decode ? { ...targets.decode, tokensPerRequest: m } : undefined },
          s,
          m,
        )
      : [];
    if (a.json) {
      out(
        JSON.stringify({
          profile: profile.name,
          tokensPerRequest: m,
          decodePercent: pct(s.decode),
          prefill: s.prefill,
          reuse: s.reuse,
          targets: rows,
        }),
      );
      return;
    }
    const paper = (b: number): string => {
      const t = targets?.decode?.activationPercent[String(b)];
      return t === undefined ? '—' : typeof t === 'number' ? t.toFixed(1) : JSON.stringify(t);
    };
    const head = [
      'batch size',
      'one decode iteration (1 token/request)',
      ...(m > 1 ? [`${m} decode tokens/request`] : []),
      ...(targets?.decode ? ['target'] : []),
    ];
    const body = batch.map((b) => [
      String(b),
      (100 * s.decode['1']![String(b)]!).toFixed(2),
      ...(m > 1 ? [(100 * s.decode[String(m)]![String(b)]!).toFixed(2)] : []),
      ...(targets?.decode ? [paper(b)] : []),
    ]);
    const widths = head.map((_, i) => Math.max(...[head, ...body].map((r) => r[i]!.length)));
    const line = (r: string[]): string => r.map((c, i) => c.padStart(widths[i]!)).join('  ');
    out(
      `${profile.name}: expert activation ratio (%) of a MoE layer vs batch size, mean over layers (${profile.model.moeLayers} × ${profile.model.experts}, top-${profile.model.topK})`,
    );
    out([line(head), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(line)].join('\n'));
    if (targets?.decode) out(`target: ${targets.decode.source}`);
    if (s.prefill)
      out(
        `prefill: ${(100 * s.prefill.mean).toFixed(2)} % of a layer's experts per prompt (mean ${s.prefill.meanPromptTokens.toFixed(0)} tokens)${Object.entries(
          s.prefill.atLength,
        )
          .map(([p, v]) => `, ${(100 * v).toFixed(2)} % at ${p} tokens`)
          .join('')}`,
      );
    out(
      `reuse over ${s.reuse.iterations} decode iterations (layer ${s.reuse.layer}): one request ${(100 * s.reuse.distinct).toFixed(2)} % of experts, top expert ${(100 * s.reuse.topShare).toFixed(1)} % of its activations; ` +
        `${s.reuse.pooledRequests} requests merged ${(100 * s.reuse.pooledDistinct).toFixed(1)} %, top expert ${(100 * s.reuse.pooledTopShare).toFixed(1)} %`,
    );
    if (rows.length) out(`\n${formatTargetRows(rows)}`);
  },
};

const pct = (d: Record<string, Record<string, number>>): Record<string, Record<string, number>> =>
  Object.fromEntries(
    Object.entries(d).map(([m, r]) => [
      m,
      Object.fromEntries(Object.entries(r).map(([b, v]) => [b, Math.round(v * 1e5) / 1e3])),
    ]),
  );

export const traceCommand: CommandModule = {
  ...TRACE_COMMAND,
  builder: (y: Argv) =>
    y
      .command(statsCommand)
      .command(calibrateCommand)
      .command(generateCommand)
      .command(compareCommand)
      .command(importCommand)
      .command(activationCommand)
      .demandCommand(1, 'name a trace command: stats, calibrate, generate, compare, import, activation'),
  handler: () => {},
};
