/**
 * A validation case: one published measurement of a real engine on a named machine, as a YAML
 * file in `validation/cases/`. It keeps apart what may calibrate (runs with nothing offloaded,
 * bandwidth and kernel microbenchmarks, all-CPU and copy-everything runs, one stated point of a
 * hit-rate curve) and what is judged (everything else), names the routing it uses and the
 * mechanisms it exercises, and carries an experiment config that runs it. Each figure names the
 * policy label of the config whose run simulates it and the metric read from that run.
 */
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { z } from 'zod';
import { UserError } from '../sim/kernel/errors.ts';
import { MECHANISM_IDS } from './mechanisms.ts';

export const CASES_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), 'cases');

const Figure = z.strictObject({
  figure: z.string().min(1),
  /** `tok/s`: decode tokens per second (1000 / TPOT p50); `hit`: buffer hit rate; `info`: printed, not simulated. */
  metric: z.enum(['tok/s', 'hit', 'info']),
  measured: z.number(),
  /** The config's policy label whose run simulates it (absent for `info`). */
  policy: z.string().optional(),
  source: z.string().min(1).optional(),
});
export type Figure = z.infer<typeof Figure>;

export const CaseSchema = z.strictObject({
  id: z.string().regex(/^[a-z0-9][a-z0-9._-]*$/),
  title: z.string().min(1),
  source: z.strictObject({
    repo: z.string().min(1),
    ref: z.string().min(1),
    author: z.string().min(1),
    date: z.string().regex(/^\d{4}-\d{2}-\d{2}$/),
    url: z.string().optional(),
  }),
  setup: z.strictObject({
    model: z.string().min(1),
    family: z.string().min(1),
    format: z.string().min(1),
    gpu: z.string().min(1),
    link: z.string().min(1),
    host: z.string().min(1),
    engine: z.string().min(1),
    flags: z.string().min(1),
    promptTokens: z.number().int().nonnegative().nullable(),
    genTokens: z.number().int().positive().nullable(),
    cache: z.enum(['cold', 'warm', 'n/a']),
  }),
  routing: z.strictObject({ kind: z.enum(['trace', 'synthetic', 'n/a']), note: z.string().min(1) }),
  mechanisms: z
    .array(z.string().refine((m) => MECHANISM_IDS.has(m), { message: 'unknown mechanism (validation/mechanisms.ts)' }))
    .min(1),
  calibrate: z.array(Figure),
  judged: z.array(Figure).min(1),
  /** Readings of the source that give different configs, and which one is the default and why. */
  readings: z.string().optional(),
  config: z.record(z.string(), z.unknown()),
  notes: z.string().optional(),
});
export type Case = z.infer<typeof CaseSchema> & { readonly file: string };

/** Loads one case file. @throws UserError naming the file and field */
export function loadCase(file: string): Case {
  let raw: unknown;
  try {
    raw = parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new UserError(`cannot read case: ${(e as Error).message}`, file);
  }
  const r = CaseSchema.safeParse(raw);
  if (!r.success) {
    const first = r.error.issues[0];
    throw new UserError(first?.message ?? 'invalid case', file, first?.path.join('.'));
  }
  return { ...r.data, file };
}

/** Every case of `validation/cases/`, in file-name order. */
export function loadCases(dir: string = CASES_DIR): Case[] {
  return readdirSync(dir)
    .filter((f) => /\.ya?ml$/.test(f))
    .sort()
    .map((f) => loadCase(path.join(dir, f)));
}
