/**
 * `moesim trace …`: statistics, calibration, generation, comparison and import of routing
 * traces. Results go to stdout, progress and warnings to stderr; bad input throws UserError
 * (one line, exit 2). Output files are written atomically (`<out>.tmp-<pid>`, then renamed).
 *
 *   moesim trace stats <file> [--json] [--extended] [--c 6,12,16]
 *   moesim trace calibrate <file> --out <profile.json> [--model <id>] [--name <name>]
 *   moesim trace generate --profile <name|path> (--requests N | --like <trace>) --out <file.jsonl.gz> [--seed S]
 *   moesim trace compare <file> (--profile <name|path> | <other-file>) [--json]
 *   moesim trace import <file> --out <file.jsonl.gz> [--model <id>]
 */
import type { Argv, CommandModule } from 'yargs';
import { UserError } from '../../../sim/kernel/errors.ts';
import { calibrateTrace } from '../../../workloads/synthetic/calibrate.ts';
import { coreStats, type ExtendedTraceStats } from '../../../workloads/stats/trace-stats.ts';
import { formatAggregateTable, formatJson, formatStatsTable } from '../../../workloads/stats/format.ts';
import { writeFileAtomic } from '../../../workloads/io/atomic.ts';
import { aggregateTwin, generateTrace, importTrace, traceStats, twinStats } from '../../../workloads/trace-tools.ts';
import { looksLikeAggregateFile, readAggregateFile } from '../../../workloads/trace/aggregate-file.ts';
import { calibrateFromAggregate } from '../../../workloads/synthetic/calibrate-aggregate.ts';
import { loadProfile } from '../../../workloads/synthetic/profile.ts';

const out = (s: string): void => void process.stdout.write(s.endsWith('\n') ? s : `${s}\n`);
const err = (s: string): void => void process.stderr.write(s.endsWith('\n') ? s : `${s}\n`);

function parseCs(v: unknown): number[] | undefined {
  if (v === undefined) return undefined;
  const parts = String(v).split(',').map((s) => s.trim()).filter(Boolean);
  const cs = parts.map(Number);
  if (!cs.length || cs.some((c) => !Number.isInteger(c) || c < 1)) throw new UserError('--c must list positive integers, e.g. 6,12,16', undefined, '--c', v);
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

interface StatsArgs {
  file: string;
  json?: boolean;
  extended?: boolean;
  c?: string;
}

const statsCommand: CommandModule<object, StatsArgs> = {
  command: 'stats <file>',
  describe: 'statistics of a routing trace (popularity, request skew, cross-layer, temporal, activation ratio, task clusters)',
  builder: (y: Argv<object>) =>
    y
      .positional('file', { type: 'string', demandOption: true, describe: 'trace (.jsonl.gz; moesim format or the converted real traces)' })
      .option('json', { type: 'boolean', describe: 'print one JSON object instead of a table' })
      .option('extended', { type: 'boolean', describe: 'with --json: add Gini, top-10 % share, baselines, phases, tasks' })
      .option('c', { type: 'string', describe: 'C values for request skew, e.g. 6,12,16 (default k,2k,4k)' }) as unknown as Argv<StatsArgs>,
  handler: async (a) => {
    if (await looksLikeAggregateFile(a.file)) {
      // An aggregate file (per-corpus counts at a few layers): its own statistics, every model.
      const file = await readAggregateFile(a.file);
      const all = await Promise.all(Object.keys(file.models).map((m) => aggregateTwin(a.file, m, undefined)));
      if (a.json) out(JSON.stringify(Object.fromEntries(all.map((x) => [x.model, x.real]))));
      else out(all.map((x) => `${x.model}\n${formatAggregateTable([{ title: 'aggregate', stats: x.real }])}`).join('\n'));
      return;
    }
    const cValues = parseCs(a.c);
    const { stats, warnings } = await traceStats(a.file, cValues ? { cValues } : {});
    warnings.forEach(err);
    if (a.json) out(JSON.stringify(jsonOf(stats, a.extended ?? false)));
    else out(formatStatsTable([{ title: a.file.replace(/^.*[\\/]/, ''), stats }]));
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
  describe: 'fit a synthetic routing profile to a trace',
  builder: (y: Argv<object>) =>
    y
      .positional('file', { type: 'string', demandOption: true })
      .option('out', { type: 'string', demandOption: true, describe: 'profile to write (e.g. workloads/profiles/<name>.json)' })
      .option('model', { type: 'string', describe: 'model id for the profile (default: the trace header\'s)' })
      .option('name', { type: 'string', describe: 'profile name (default: the output file name)' })
      .option('max-fit-tokens', { type: 'number', describe: 'fit on at most this many tokens (default 40000)' })
      .option('evaluations', { type: 'number', describe: 'evaluation budget (default 30)' })
      .option('aggregate-model', { type: 'string', describe: 'aggregate files: which model of the file (e.g. OLMoE-1B-7B-0924)' })
      .option('base', { type: 'string', describe: 'aggregate files: profile to take request-level knobs from (default deepseek-v2-lite)' }) as unknown as Argv<CalibrateArgs>,
  handler: async (a) => {
    const name = a.name ?? a.out.replace(/^.*[\\/]/, '').replace(/\.json$/, '');
    if (await looksLikeAggregateFile(a.file)) {
      const file = await readAggregateFile(a.file);
      const key = a.aggregateModel ?? Object.keys(file.models)[0]!;
      const m = file.models[key];
      if (!m) throw new UserError(`no model "${key}" in the file (has ${Object.keys(file.models).join(', ')})`, a.file, '--aggregate-model');
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
      out(formatAggregateTable([
        { title: 'aggregate', stats: r.real },
        { title: `twin (${name})`, stats: r.twin },
      ]));
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

const generateCommand: CommandModule<object, GenerateArgs> = {
  command: 'generate',
  describe: 'write a synthetic trace from a profile',
  builder: (y: Argv<object>) =>
    y
      .option('profile', { type: 'string', demandOption: true, describe: 'profile name (workloads/profiles/) or path' })
      .option('out', { type: 'string', demandOption: true, describe: 'trace to write (.jsonl.gz)' })
      .option('requests', { type: 'number', describe: 'number of requests (lengths and tasks from the profile)' })
      .option('like', { type: 'string', describe: 'copy request lengths/phases/tasks of this trace (a synthetic twin)' })
      .option('seed', { type: 'number', default: 1 })
      .option('prompt-tokens', { type: 'number', describe: 'fixed prompt length' })
      .option('output-tokens', { type: 'number', describe: 'fixed output length' })
      .option('tasks', { type: 'string', describe: 'task mix, e.g. gsm8k=2,mmlu=1 (default: the profile\'s)' })
      .option('rate', { type: 'number', describe: 'write arrival times: requests per second' })
      .option('cv', { type: 'number', describe: 'with --rate: Gamma gaps with this coefficient of variation (default 1 = Poisson)' })
      .option('predictions', { type: 'number', describe: 'write ranked predictions with this top-k accuracy' })
      .option('gzip-level', { type: 'number', describe: 'gzip level 1–9 (default 6)' }) as unknown as Argv<GenerateArgs>,
  handler: async (a) => {
    if (a.requests !== undefined && (!Number.isInteger(a.requests) || a.requests < 1)) {
      throw new UserError('--requests must be a positive integer', undefined, '--requests', a.requests);
    }
    if (a.predictions !== undefined && !(a.predictions >= 0 && a.predictions <= 1)) {
      throw new UserError('--predictions must be an accuracy in 0…1', undefined, '--predictions', a.predictions);
    }
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

interface CompareArgs {
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
    y
      .positional('file', { type: 'string', demandOption: true })
      .positional('other', { type: 'string', describe: 'a second trace' })
      .option('profile', { type: 'string', describe: 'route the same requests with this profile (the twin)' })
      .option('seed', { type: 'number', default: 1 })
      .option('json', { type: 'boolean' })
      .option('extended', { type: 'boolean' })
      .option('c', { type: 'string' })
      .option('aggregate-model', { type: 'string', describe: 'aggregate files: which model of the file' }) as unknown as Argv<CompareArgs>,
  handler: async (a) => {
    if (await looksLikeAggregateFile(a.file)) {
      if (!a.profile) throw new UserError('an aggregate file is compared with a profile: give --profile <name>', undefined, 'arguments');
      const r = await aggregateTwin(a.file, a.aggregateModel, a.profile, { seed: a.seed ?? 1 });
      if (a.json) out(JSON.stringify({ model: r.model, aggregate: r.real, twin: r.twin }));
      else out(`${r.model}\n${formatAggregateTable([
        { title: 'aggregate', stats: r.real },
        { title: `twin (${r.profile!.name})`, stats: r.twin! },
      ])}`);
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
      const [x, y] = await Promise.all([traceStats(a.file, c), traceStats(a.other, c)]);
      cols = [
        { title: name(a.file), stats: x.stats },
        { title: name(a.other), stats: y.stats },
      ];
    } else {
      throw new UserError('give either --profile <name> or a second trace file', undefined, 'arguments');
    }
    if (a.json) out(JSON.stringify(Object.fromEntries(cols.map((col) => [col.title, jsonOf(col.stats, a.extended ?? false)]))));
    else out(formatStatsTable(cols));
  },
};

interface ImportArgs {
  file: string;
  out: string;
  model?: string;
}

const importCommand: CommandModule<object, ImportArgs> = {
  command: 'import <file>',
  describe: 'convert a trace (e.g. a converted real trace) to the moesim format',
  builder: (y: Argv<object>) =>
    y
      .positional('file', { type: 'string', demandOption: true })
      .option('out', { type: 'string', demandOption: true })
      .option('model', { type: 'string', describe: 'model id to record in the header' }) as unknown as Argv<ImportArgs>,
  handler: async (a) => {
    const r = await importTrace(a.file, a.out, a.model ? { modelId: a.model } : {});
    out(`wrote ${a.out}: ${r.requests} requests, ${r.tokens} tokens`);
  },
};

export const traceCommand: CommandModule = {
  command: 'trace <command>',
  describe: 'routing traces: stats, calibrate, generate, compare, import',
  builder: (y: Argv) =>
    y
      .command(statsCommand)
      .command(calibrateCommand)
      .command(generateCommand)
      .command(compareCommand)
      .command(importCommand)
      .demandCommand(1, 'name a trace command: stats, calibrate, generate, compare, import'),
  handler: () => {},
};
