/**
 * Summary targets: what a paper publishes about a model's routing instead of a trace — decode
 * activation ratio vs batch size (MoE-Infinity Table 1), prefill activation vs prompt length
 * (Fig. 2), reuse skew within a request (Fig. 4) — in a small YAML or JSON file, with the
 * provenance of every number. `moesim trace calibrate <targets file>` fits a profile to it
 * (`calibrate-targets.ts`); the statistics are defined in `../stats/routing-summary.ts`.
 *
 * A target is a number (fit to it) or `{ max: x }` / `{ min: x }` (a bound, penalised only when
 * violated). All values are percentages. Files live in `workloads/profiles/targets/`.
 */
import { readFile } from 'node:fs/promises';
import YAML from 'yaml';
import { z } from 'zod';
import { UserError } from '../../sim/kernel/errors.ts';
import { LengthSchema } from '../lengths.ts';
import { formatPath } from '../trace/reader.ts';
import { KnobsSchema, RoutingModelSchema } from './profile.ts';

export const TARGETS_FORMAT = 'moesim-routing-targets';

const percent = z.number().min(0).max(100);
export const TargetSchema = z.union([
  percent,
  z.object({ max: percent }).strict(),
  z.object({ min: percent }).strict(),
]);
export type Target = z.infer<typeof TargetSchema>;

const positiveIntKey = z.string().regex(/^[1-9][0-9]*$/, { message: 'must be a positive integer' });

/** Knobs the calibrator can fit (scalar knobs of `profile.ts`). */
export const FITTABLE_KNOBS = [
  'zipfExponent',
  'requestConcentration',
  'temporalReuse',
  'prefillTemporalReuse',
  'temporalDepth',
  'sharedTokens',
  'crossLayer',
  'taskConcentration',
  'clusterConcentration',
] as const;
export type FittableKnob = (typeof FITTABLE_KNOBS)[number];

export const RoutingTargetsSchema = z
  .object({
    format: z.literal(TARGETS_FORMAT),
    version: z.literal(1),
    /** Name of the profile to write. */
    name: z.string().min(1),
    description: z.string().optional(),
    model: RoutingModelSchema,
    /** Where the numbers come from (paper, table, figure). */
    source: z.string().min(1),
    /** Targets to compare a profile with (`trace activation --targets`), never to fit: calibrate refuses the file. */
    checkOnly: z.boolean().default(false),
    /** Task mix of the measured requests; also written into the profile. */
    tasks: z.record(z.string(), z.number().positive()).optional(),
    /** Length distributions written into the profile (not used by the fit). */
    lengths: z.object({ prompt: LengthSchema, output: LengthSchema }).strict().optional(),
    /** Knobs not fitted, and the start of the fitted ones. Missing knobs take the schema defaults. */
    knobs: KnobsSchema.partial().strict().default({}),
    /** Where the fixed knobs come from. */
    knobsFrom: z.string().min(1).optional(),
    /** Knobs the calibrator fits. */
    fit: z.array(z.enum(FITTABLE_KNOBS)).default([]),
    decode: z
      .object({
        /** Activation ratio (%) by batch size. */
        activationPercent: z
          .record(positiveIntKey, TargetSchema)
          .refine((r) => Object.keys(r).length > 0, { message: 'needs at least one batch size' }),
        /** Decode tokens each request contributes to one measured "iteration": a number, or { fit: [lo, hi] }. */
        tokensPerRequest: z
          .union([
            z.number().int().positive().max(64),
            z
              .object({ fit: z.tuple([z.number().int().positive(), z.number().int().positive().max(64)]) })
              .strict()
              .refine((f) => f.fit[0] <= f.fit[1], { message: 'fit must be [lo, hi] with lo ≤ hi', path: ['fit'] }),
          ])
          .default(1),
        /** How measured batches are composed (routing-summary.ts): mixed requests, or one topic per batch. */
        batchComposition: z.enum(['mixed', 'same-topic']).default('mixed'),
        source: z.string().min(1),
        note: z.string().optional(),
      })
      .strict()
      .optional(),
    prefill: z
      .object({
        /** Prompt-length distribution of the averaged prefill target. */
        prompts: LengthSchema,
        promptsSource: z.string().min(1),
        meanActivationPercent: TargetSchema.optional(),
        /** Activation (%) of one prompt of exactly this many tokens. */
        atLengthPercent: z.record(positiveIntKey, TargetSchema).optional(),
        source: z.string().min(1),
        note: z.string().optional(),
      })
      .strict()
      .optional(),
    reuse: z
      .object({
        iterations: z.number().int().positive().max(4096).default(20),
        layer: z.union([z.literal('last'), z.literal('mean'), z.number().int().nonnegative()]).default('last'),
        distinctPercent: TargetSchema.optional(),
        topSharePercent: TargetSchema.optional(),
        source: z.string().min(1),
        note: z.string().optional(),
      })
      .strict()
      .optional(),
    /** Tolerance of each target, in percentage points: max(points, relative × target). */
    tolerance: z
      .object({ points: z.number().positive().default(0.15), relative: z.number().positive().max(1).default(0.1) })
      .strict()
      .default({ points: 0.15, relative: 0.1 }),
    /** The deterministic search: evaluation budget (per window m tried) and the seed of the measurement. */
    search: z
      .object({ evaluations: z.number().int().positive().default(300), seed: z.string().min(1).default('moesim-fit') })
      .strict()
      .default({ evaluations: 300, seed: 'moesim-fit' }),
  })
  .strict()
  .superRefine((t, ctx) => {
    if (!t.decode && !t.prefill && !t.reuse)
      ctx.addIssue({ code: 'custom', message: 'give at least one of decode, prefill, reuse', path: ['decode'] });
    if (t.prefill && t.prefill.meanActivationPercent === undefined && !t.prefill.atLengthPercent) {
      ctx.addIssue({ code: 'custom', message: 'give meanActivationPercent or atLengthPercent', path: ['prefill'] });
    }
    if (t.reuse && t.reuse.distinctPercent === undefined && t.reuse.topSharePercent === undefined) {
      ctx.addIssue({ code: 'custom', message: 'give distinctPercent or topSharePercent', path: ['reuse'] });
    }
    if (typeof t.reuse?.layer === 'number' && t.reuse.layer >= t.model.moeLayers) {
      ctx.addIssue({
        code: 'custom',
        message: `must be a MoE layer 0…${t.model.moeLayers - 1}`,
        path: ['reuse', 'layer'],
      });
    }
    const z0 = t.knobs.popularity?.zipfExponent;
    if (Array.isArray(z0) && z0.length !== t.model.moeLayers) {
      ctx.addIssue({
        code: 'custom',
        message: `needs one exponent per MoE layer (${t.model.moeLayers})`,
        path: ['knobs', 'popularity', 'zipfExponent'],
      });
    }
    if (t.fit.includes('zipfExponent') && Array.isArray(z0)) {
      ctx.addIssue({
        code: 'custom',
        message: 'a fitted zipfExponent starts from one number, not a list',
        path: ['knobs', 'popularity', 'zipfExponent'],
      });
    }
    if (new Set(t.fit).size !== t.fit.length)
      ctx.addIssue({ code: 'custom', message: 'lists a knob twice', path: ['fit'] });
    if (!t.checkOnly && t.fit.length === 0)
      ctx.addIssue({
        code: 'custom',
        message: 'name at least one knob to fit (or set checkOnly: true)',
        path: ['fit'],
      });
    if (!t.checkOnly && t.knobsFrom === undefined)
      ctx.addIssue({ code: 'custom', message: 'say where the knobs not fitted come from', path: ['knobsFrom'] });
  });
export type RoutingTargets = z.infer<typeof RoutingTargetsSchema>;

/** Parses a targets file's text (YAML or JSON). @throws UserError naming the file and the field */
export function parseTargets(text: string, file: string): RoutingTargets {
  let raw: unknown;
  try {
    raw = file.endsWith('.json') ? JSON.parse(text) : YAML.parse(text, { prettyErrors: true });
  } catch (err) {
    const msg = (err instanceof Error ? err.message : String(err)).split('\n')[0]!.replace(/:$/, '');
    throw new UserError(`not valid ${file.endsWith('.json') ? 'JSON' : 'YAML'}: ${msg}`, file);
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
    throw new UserError('a targets file must be a mapping', file);
  const r = RoutingTargetsSchema.safeParse(raw);
  if (!r.success) {
    const issue = r.error.issues[0]!;
    const field = formatPath(issue.path);
    const value = issue.path.reduce<unknown>(
      (o, k) => (o !== null && typeof o === 'object' ? (o as Record<PropertyKey, unknown>)[k] : undefined),
      raw,
    );
    throw new UserError(
      issue.message,
      file,
      field || undefined,
      value !== null && typeof value === 'object' ? undefined : value,
    );
  }
  return r.data;
}

export async function loadTargets(file: string): Promise<RoutingTargets> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch {
    throw new UserError('no such targets file', file);
  }
  return parseTargets(text, file);
}

/**
 * True if the file is a summary-targets file: a .yaml/.yml file, or a .json file whose text
 * names the targets format (a trace is gzip or JSON Lines, an aggregate file gzip JSON).
 */
export async function looksLikeTargetsFile(file: string): Promise<boolean> {
  if (/\.ya?ml$/i.test(file)) return true;
  if (!/\.json$/i.test(file)) return false;
  try {
    const head = (await readFile(file, 'utf8')).slice(0, 4096);
    return head.includes(`"${TARGETS_FORMAT}"`);
  } catch {
    return false;
  }
}

/** A target's value and tolerance (percentage points), and its residual for an achieved value. */
export function targetTolerance(t: Target, tol: { points: number; relative: number }): number {
  const v = typeof t === 'number' ? t : 'max' in t ? t.max : t.min;
  return Math.max(tol.points, tol.relative * v);
}

/** Signed excess over the target in percentage points (0 inside a bound). */
export function targetResidual(t: Target, achieved: number): number {
  if (typeof t === 'number') return achieved - t;
  if ('max' in t) return Math.max(0, achieved - t.max);
  return Math.min(0, achieved - t.min);
}

export const describeTarget = (t: Target): string =>
  typeof t === 'number' ? String(t) : 'max' in t ? `≤ ${t.max}` : `≥ ${t.min}`;
