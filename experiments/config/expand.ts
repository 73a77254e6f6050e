/**
 * Expands a validated experiment config into runs: sweep points (cartesian, in the order the
 * keys are written, last key fastest) × policies (config order) × seeds. Each run's sections
 * are re-validated after the sweep values are applied, and policies are resolved (built-in by
 * name or plugin by path) with their parameters parsed. Everything that can be wrong with the
 * input is reported here, before any output exists.
 */
import { statSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { UserError } from '../../sim/kernel/errors.ts';
import { WorkloadSchema, type WorkloadConfig } from '../../workloads/config.ts';
import { builtinPolicy, builtinPolicyNames } from '../../policies/registry.ts';
import type { PolicyDefinition } from '../../policies/types.ts';
import { DEFAULT_RUNTIME } from '../../hardware-profiles/load.ts';
import { UNSAFE_KEYS, zodToUserError } from './load.ts';
import { loadPlugin } from './plugin-loader.ts';
import { checkThresholds } from '../outputs/thresholds.ts';
import {
  ExecutorSchema,
  ServingExecutorSchema,
  type ExperimentConfig,
  type PolicyEntry,
  type ServingExecutorConfig,
  type ThroughputExecutorConfig,
} from './schema.ts';

export interface ResolvedPolicy {
  /** The name the run reports: the entry's label, else the policy's name. */
  readonly label: string;
  readonly definition: PolicyDefinition<unknown>;
  readonly params: unknown;
}

export interface RunSpec {
  readonly index: number;
  readonly policy: ResolvedPolicy;
  readonly model: string;
  readonly hardware: string;
  /** Runtime profile id or path (`fused` when the config names none). */
  readonly runtime?: string;
  readonly seed: number;
  readonly workload: WorkloadConfig;
  /** The serving executor's options (its defaults when the run uses the throughput executor). */
  readonly executor: ServingExecutorConfig;
  /** Set when the config selects `executor.kind: throughput` (the policy is then of that family). */
  readonly throughput?: ThroughputExecutorConfig;
  /** The swept values keyed by config path, plus `model` and `hardware`. */
  readonly params: Readonly<Record<string, unknown>>;
}

type Json = Record<string, unknown>;

/** A case's `case` key names the case (kept in the run's params, e.g. for plots); it sets no config path. */
const CASE_LABEL = 'case';

const clone = <T>(v: T): T => structuredClone(v) as T;

/**
 * Sets a swept value at a dotted path. Only own properties are followed, and an object the path
 * needs is created without a prototype, so no key can reach `Object.prototype` (the keys
 * `__proto__`, `constructor` and `prototype` are also rejected when the config is validated).
 */
function setPath(obj: Json, dotted: string, value: unknown, file: string | undefined): void {
  const parts = dotted.split('.');
  const bad = parts.find((k) => UNSAFE_KEYS.has(k));
  if (bad !== undefined) throw new UserError(`'${bad}' may not be a segment of a sweep path`, file, `sweep.${dotted}`);
  let cur: Json = obj;
  for (let i = 0; i < parts.length - 1; i++) {
    const k = parts[i]!;
    const next = Object.hasOwn(cur, k) ? cur[k] : undefined;
    if (next === undefined || next === null || typeof next !== 'object') {
      if (i === 0) throw new UserError('sweep path does not exist in the config', file, `sweep.${dotted}`);
      Object.defineProperty(cur, k, {
        value: Object.create(null),
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    cur = cur[k] as Json;
  }
  Object.defineProperty(cur, parts[parts.length - 1]!, {
    value: clone(value),
    enumerable: true,
    writable: true,
    configurable: true,
  });
}

/**
 * Bounds on sizes a config can ask for, so a typo (`requests: 1e12`, a sweep of 10^12 points)
 * is one line, not an out-of-memory crash or a hang. Chosen well above any experiment in
 * this repository (the largest: 10^4 requests, a few hundred points).
 */
export const MAX_REQUESTS = 10_000_000;
export const MAX_SWEEP_POINTS = 100_000;

function checkSizes(config: ExperimentConfig, file: string | undefined): void {
  let points = Math.max(1, (config.cases ?? []).length);
  for (const [key, values] of Object.entries(config.sweep)) {
    points *= values.length;
    if (points > MAX_SWEEP_POINTS) {
      throw new UserError(
        `too many sweep points (cases × the sweep's product reaches ${points}; at most ${MAX_SWEEP_POINTS})`,
        file,
        `sweep.${key}`,
        values.length,
      );
    }
  }
}

/**
 * Arrival times are integer ns below 2^53 (~104 days): n requests at `rate`/s span about
 * n / rate s; a margin of 20× covers the tail of Gamma gaps (cv up to a few).
 */
const ARRIVAL_MARGIN = 20;

/** Values the schema accepts but the simulation cannot: a near-zero rate, a trace path that is a folder. */
function checkWorkloadValues(w: WorkloadConfig, baseDir: string, file: string | undefined, where: string): void {
  const a = w.arrival as { kind: string; ratePerS?: number };
  const minRate = (w.requests * 1e9 * ARRIVAL_MARGIN) / Number.MAX_SAFE_INTEGER;
  if (a.ratePerS !== undefined && !(a.ratePerS >= minRate)) {
    const atLeast = Number(minRate.toPrecision(2));
    throw new UserError(
      `too small: ${w.requests} arrivals must fit in 2^53 ns (at least ${atLeast}/s)${where}`,
      file,
      'workload.arrival.ratePerS',
      a.ratePerS,
    );
  }
  const r = w.routing as { kind: string; path?: string };
  if (r.kind === 'trace' && r.path !== undefined) {
    const abs = path.resolve(baseDir, r.path);
    let isDir = false;
    try {
      isDir = statSync(abs).isDirectory();
    } catch {
      // A missing file is reported where the trace is read.
    }
    if (isDir) throw new UserError(`is a folder, not a trace file${where}`, file, 'workload.routing.path', r.path);
  }
}

function cartesian(sweep: Readonly<Record<string, readonly unknown[]>>): Record<string, unknown>[] {
  let combos: Record<string, unknown>[] = [{}];
  for (const [key, values] of Object.entries(sweep)) {
    const next: Record<string, unknown>[] = [];
    for (const c of combos) for (const v of values) next.push({ ...c, [key]: v });
    combos = next;
  }
  return combos;
}

interface PolicyTemplate {
  readonly label: string;
  /** The entry's own runtime, overriding the experiment's. */
  readonly runtime?: string;
  readonly definition: PolicyDefinition<unknown>;
  readonly rawParams: Json;
  readonly index: number;
  /** Loaded by path (a plugin), not built in. */
  readonly plugin: boolean;
}

async function resolveTemplates(
  entries: readonly PolicyEntry[],
  baseDir: string,
  file: string | undefined,
  executorKind: 'serving' | 'throughput' = 'serving',
): Promise<PolicyTemplate[]> {
  const out: PolicyTemplate[] = [];
  const labels = new Set<string>();
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i]!;
    let definition: PolicyDefinition<unknown>;
    let rawParams: Json;
    if ('name' in e) {
      const d = builtinPolicy(e.name);
      if (!d)
        throw new UserError(
          `unknown policy (known: ${builtinPolicyNames().join(', ')})`,
          file,
          `policies[${i}].name`,
          e.name,
        );
      definition = d;
      const { name: _n, label: _l, runtime: _r, ...rest } = e;
      rawParams = rest;
    } else {
      definition = await loadPlugin(e.path, baseDir, file, `policies[${i}].path`);
      rawParams = { ...e.params };
    }
    if (definition.family !== executorKind) {
      const why =
        executorKind === 'serving'
          ? `policy family '${definition.family}' needs the throughput executor, which this config does not select (executor.kind: throughput)`
          : `policy family '${definition.family}' does not run on the throughput executor this config selects`;
      throw new UserError(why, file, `policies[${i}]`, definition.name);
    }
    if (definition.family === 'throughput' && typeof definition.createThroughput !== 'function') {
      throw new UserError(
        'a throughput-family policy must define createThroughput',
        file,
        `policies[${i}]`,
        definition.name,
      );
    }
    const label = e.label ?? definition.name;
    if (labels.has(label))
      throw new UserError('two policies report the same name; give one a `label`', file, `policies[${i}].label`, label);
    labels.add(label);
    const runtime = 'name' in e ? e['runtime'] : e.runtime;
    if (runtime !== undefined && typeof runtime !== 'string')
      throw new UserError('runtime must be a runtime id or a .json path', file, `policies[${i}].runtime`, runtime);
    out.push({
      label,
      definition,
      rawParams,
      index: i,
      plugin: !('name' in e),
      ...(runtime !== undefined ? { runtime } : {}),
    });
  }
  return out;
}

function acceptsParam(def: PolicyDefinition<unknown>, key: string): boolean {
  const schema = def.params as unknown;
  if (schema instanceof z.ZodObject) return key in schema.shape;
  return true;
}

export async function expandRuns(config: ExperimentConfig, baseDir: string, file?: string): Promise<RunSpec[]> {
  const executorKind = config.executor.kind;
  const templates = await resolveTemplates(config.policies, baseDir, file, executorKind);
  const known = new Set(['model', 'hardware', 'runtime', 'workload', 'executor', 'policy', 'seeds']);
  const cases = config.cases ?? [];
  const checkKey = (key: string, field: string) => {
    const head = key.split('.')[0]!;
    if (!known.has(head) || key === 'seeds' || key === 'executor.kind') {
      throw new UserError(
        `cannot sweep '${key}' (sweepable: model, hardware, runtime, workload.*, executor.*, policy.<param>; use seeds for seeds)`,
        file,
        field,
      );
    }
    if (head === 'policy' && !templates.some((t) => acceptsParam(t.definition, key.slice('policy.'.length)))) {
      throw new UserError('no policy of this experiment has this parameter', file, field);
    }
  };
  for (const key of Object.keys(config.sweep)) checkKey(key, `sweep.${key}`);
  cases.forEach((c, i) => {
    for (const key of Object.keys(c)) {
      if (key === CASE_LABEL) {
        if (typeof c[key] !== 'string')
          throw new UserError('a case label must be a string', file, `cases[${i}].${key}`, c[key]);
        continue;
      }
      checkKey(key, `cases[${i}].${key}`);
      if (key in config.sweep) throw new UserError('a case may not set a swept path', file, `cases[${i}].${key}`);
    }
  });
  const rel = config.output.relative;
  if (rel && !templates.some((t) => t.label === rel.baseline)) {
    throw new UserError(
      `baseline is not one of this experiment's policies (${templates.map((t) => t.label).join(', ')})`,
      file,
      'output.relative.baseline',
      rel.baseline,
    );
  }
  const plotFields = new Set([
    'policy',
    'seed',
    'model',
    'hardware',
    ...Object.keys(config.sweep),
    ...cases.flatMap((c) => Object.keys(c)),
  ]);
  config.output.plots.forEach((p, i) => {
    for (const axis of ['x', 'y', 'series', 'facet'] as const) {
      const f = p[axis];
      if (f === undefined || plotFields.has(f) || f.startsWith('metrics.')) continue;
      if (f.startsWith('rel:') && rel?.metrics.includes(f.slice(4))) continue;
      throw new UserError(
        'plot field must be policy, seed, model, hardware, a swept path, metrics.<path> or rel:<relative metric>',
        file,
        `output.plots[${i}].${axis}`,
        f,
      );
    }
  });
  if (config.output.thresholds)
    checkThresholds(
      config.output.thresholds,
      plotFields,
      cases.map((c) => String(c[CASE_LABEL] ?? '')),
      file,
    );
  checkSizes(config, file);
  const runs: RunSpec[] = [];
  // Across all sweep points: a policy the swept parameters do not apply to runs once per distinct
  // remaining combination, not once per point.
  const done = new Set<string>();
  const points = (cases.length > 0 ? cases : [{}]).flatMap((c) =>
    cartesian(config.sweep as Record<string, readonly unknown[]>).map((s) => ({ ...c, ...s })),
  );
  for (const combo of points) {
    const base: Json = clone({
      model: config.model,
      hardware: config.hardware,
      runtime: config.runtime,
      workload: config.workload,
      executor: config.executor,
    }) as Json;
    const policyOverrides: Json = {};
    for (const [key, value] of Object.entries(combo)) {
      if (key.startsWith('policy.')) policyOverrides[key.slice(7)] = value;
      else if (key !== CASE_LABEL) setPath(base, key, value, file);
    }
    const comboLabel = Object.entries(combo)
      .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
      .join(', ');
    const where = comboLabel ? ` (sweep point ${comboLabel})` : '';
    const w = WorkloadSchema.safeParse(base.workload);
    if (!w.success) throw withWhere(zodToUserError(w.error, base.workload, file, ['workload']), where);
    if (w.data.requests > MAX_REQUESTS) {
      throw new UserError(`at most ${MAX_REQUESTS} requests${where}`, file, 'workload.requests', w.data.requests);
    }
    checkWorkloadValues(w.data, baseDir, file, where);
    const x = ExecutorSchema.safeParse(base.executor);
    if (!x.success) throw withWhere(zodToUserError(x.error, base.executor, file, ['executor']), where);
    const servingX: ServingExecutorConfig = x.data.kind === 'serving' ? x.data : ServingExecutorSchema.parse({});
    const throughputX: ThroughputExecutorConfig | undefined = x.data.kind === 'throughput' ? x.data : undefined;
    if (typeof base.model !== 'string') throw new UserError('model must be a string', file, 'sweep.model', base.model);
    if (typeof base.hardware !== 'string')
      throw new UserError('hardware must be a string', file, 'sweep.hardware', base.hardware);
    if (base.runtime !== undefined && typeof base.runtime !== 'string')
      throw new UserError('runtime must be a string', file, 'sweep.runtime', base.runtime);

    for (const t of templates) {
      const raw: Json = { ...t.rawParams };
      const applied: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(policyOverrides)) {
        if (acceptsParam(t.definition, k)) {
          raw[k] = v;
          applied[`policy.${k}`] = v;
        }
      }
      // A policy without a swept parameter runs once per remaining combination, not once per value.
      const params: Record<string, unknown> = { model: base.model, hardware: base.hardware };
      const runtime = t.runtime ?? (base.runtime as string | undefined);
      // Named only when chosen, so results of configs that name no runtime are unchanged.
      if (runtime !== undefined) params['runtime'] = runtime;
      for (const [k, v] of Object.entries(combo))
        if (!k.startsWith('policy.') && k !== 'model' && k !== 'hardware' && k !== 'runtime') params[k] = v;
      Object.assign(params, applied);
      const dedupe = `${t.label}|${JSON.stringify(params)}`;
      if (done.has(dedupe)) continue;
      done.add(dedupe);
      const p = t.definition.params.safeParse(raw);
      if (!p.success) {
        const e = zodToUserError(p.error, raw, file, [`policies[${t.index}]`]);
        // A plugin's schema rejecting its params: name the plugin, so its author knows whose schema spoke.
        const named = t.plugin
          ? new UserError(`plugin '${t.definition.name}' params: ${e.message}`, e.file, e.field, e.value)
          : e;
        throw withWhere(named, where);
      }
      for (const seed of config.seeds) {
        runs.push({
          index: runs.length,
          policy: { label: t.label, definition: t.definition, params: p.data },
          model: base.model,
          hardware: base.hardware,
          runtime: runtime ?? DEFAULT_RUNTIME,
          seed,
          workload: w.data,
          executor: servingX,
          ...(throughputX ? { throughput: throughputX } : {}),
          params,
        });
      }
    }
  }
  return runs;
}

function withWhere(e: UserError, where: string): UserError {
  return where ? new UserError(e.message + where, e.file, e.field, e.value) : e;
}
