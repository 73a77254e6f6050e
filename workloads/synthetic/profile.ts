/**
 * Synthetic routing profiles: the knobs of the synthetic router for one model, fitted to a
 * recorded trace (`fittedTo`) or assumed (`assumedFrom`). Stored as JSON in
 * `workloads/profiles/<name>.json`; `trace calibrate` writes them.
 *
 * Knobs (each controls one property of DESIGN §6; `router.ts` says exactly how):
 * - `popularity.zipfExponent` (per layer or one value): long-tail global popularity; expert
 *   of rank r (0-based) at a layer has weight ∝ (r+1)^−α. `expertOrder` names the experts
 *   from hottest to coldest per layer (random, from `structureSeed`, if absent).
 * - `requestConcentration` β_R: each request draws its own expert distribution per layer from
 *   Dirichlet(β_R · task distribution); small β_R = strong request-level skewed reuse, null =
 *   none. Over many requests the mean is the global popularity, so counts even out.
 * - `temporalReuse` τ: probability that token t continues token t−1 (temporal locality);
 *   `temporalDepth` ρ: the probability that each slot of a continuing token copies the same
 *   slot of token t−1 at the same layer (ρ = 1: the whole routing is repeated). Reuse thus
 *   comes in bursts, as in real traces (overlaps of 3–5 of 6 experts are common).
 *   `temporalMemory` μ: a continuing token copies the j-th previous token instead, with
 *   P(j) = (1 − μ) μ^(j−1) over the last 64 tokens (μ = 0: always the previous one) — local,
 *   drifting affinity: clumps of reuse that do not make a long request one-sided.
 * - `prefillTemporalReuse` τ_P: τ for prompt (prefill) tokens; absent or null = τ (prefill and
 *   decode routed alike, as in the real decoder-only traces). For encoder–decoder models, whose
 *   prompt runs through the encoder's MoE layers and whose output through the decoder's, the
 *   two phases differ (MoE-Infinity: one NLLB prompt activates 26 % of a layer's experts on
 *   average, while 20 decode iterations of one sequence activate fewer than 5 %).
 * - `crossLayer` γ: probability that a slot at layer l+1 (not copied from t−1) takes the fixed
 *   successor of the same slot's expert at layer l (group paths across layers).
 * - `sharedTokens` ψ: probability that a token is a common token type of a shared vocabulary
 *   (`sharedVocabulary` types, default 16, with Zipf(1) frequencies) and routes along that type's
 *   fixed path at every layer — routing that depends on token identity (beginning-of-sequence,
 *   punctuation, the most frequent words), shared by all requests. It makes a request skewed
 *   *and* like the others, as real traces are (in the DeepSeek trace the first token takes only
 *   4 distinct routings over 1,099 requests). The other tokens draw from g compensated for the
 *   shared paths' load, so the overall popularity stays g.
 * - `taskConcentration` β_T: each task label has its own distribution per layer drawn from
 *   Dirichlet(β_T · global popularity); small = distinct task clusters, null = none.
 * - `startTokens`: the first n tokens of every request (beginning-of-sequence, a chat
 *   template) route along n fixed paths shared by all requests (in the DeepSeek trace token 0
 *   takes one of 4 routings in 1,099 requests, token 1 already 889 different ones).
 * - `clusterConcentration` β_C with `latentClusters` C: requests also belong to one of C latent
 *   clusters (unlabelled topics), drawn uniformly per request; a cluster's distribution is
 *   Dirichlet(β_C · task distribution) and the request's affinity is drawn around it. Moving
 *   concentration from the request level to the cluster level keeps a request's skew but makes
 *   requests more alike (the real traces have both strong request skew and high similarity
 *   between requests). null = no latent clusters.
 * - `structureSeed`: fixes the structure of the modelled model (hot experts, successor paths,
 *   task patterns), so it does not change with the run seed.
 */
import { readFile } from 'node:fs/promises';
import { isAbsolute, resolve, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { UserError } from '../../sim/kernel/errors.ts';
import { LengthSchema } from '../lengths.ts';
import { formatPath } from '../trace/reader.ts';

const probability = z.number().min(0).max(1);

export const KnobsSchema = z
  .object({
    popularity: z
      .object({
        zipfExponent: z.union([z.number().nonnegative(), z.array(z.number().nonnegative()).min(1)]),
        expertOrder: z.array(z.array(z.number().int().nonnegative())).optional(),
      })
      .strict(),
    requestConcentration: z.number().positive().nullable(),
    temporalReuse: probability,
    temporalDepth: probability.default(1),
    temporalMemory: z.number().min(0).max(0.99).default(0),
    prefillTemporalReuse: probability.nullable().optional(),
    crossLayer: probability,
    sharedTokens: probability.default(0),
    sharedVocabulary: z.number().int().positive().default(16),
    startTokens: z.number().int().nonnegative().default(0),
    taskConcentration: z.number().positive().nullable(),
    latentClusters: z.number().int().positive().default(16),
    clusterConcentration: z.number().positive().nullable().default(null),
    structureSeed: z.number().int().nonnegative().default(1),
  })
  .strict();
export type Knobs = z.infer<typeof KnobsSchema>;

/** The model a routing profile (or its calibration targets) is for: its routing shape. */
export const RoutingModelSchema = z
  .object({
    id: z.string().min(1),
    moeLayers: z.number().int().positive(),
    experts: z.number().int().positive().max(65535),
    topK: z.number().int().positive(),
  })
  .strict()
  .refine((m) => m.topK <= m.experts, { message: 'topK must not exceed experts', path: ['topK'] });

export const ProfileSchema = z
  .object({
    name: z.string().min(1),
    description: z.string().optional(),
    model: RoutingModelSchema,
    /** What the knobs were fitted to (trace file, statistics, date-free). */
    fittedTo: z.string().optional(),
    /** What the knobs are assumed from, when not fitted. */
    assumedFrom: z.string().optional(),
    knobs: KnobsSchema,
    /** Task mix (label → weight) observed or assumed; used by `trace generate`. */
    tasks: z.record(z.string(), z.number().positive()).optional(),
    /** Length distributions for `trace generate` and as a workload default. */
    lengths: z.object({ prompt: LengthSchema, output: LengthSchema }).strict().optional(),
    /** Calibration record: target and achieved statistics, evaluations, tolerances (free form). */
    fit: z.record(z.string(), z.unknown()).optional(),
  })
  .strict()
  .refine((p) => p.fittedTo !== undefined || p.assumedFrom !== undefined, {
    message: 'a profile must say what it is fitted to (fittedTo) or assumed from (assumedFrom)',
    path: ['fittedTo'],
  })
  .superRefine((p, ctx) => {
    const a = p.knobs.popularity.zipfExponent;
    if (Array.isArray(a) && a.length !== p.model.moeLayers) {
      ctx.addIssue({
        code: 'custom',
        message: `needs one exponent per MoE layer (${p.model.moeLayers})`,
        path: ['knobs', 'popularity', 'zipfExponent'],
      });
    }
    const order = p.knobs.popularity.expertOrder;
    if (order) {
      if (order.length !== p.model.moeLayers) {
        ctx.addIssue({
          code: 'custom',
          message: `needs one order per MoE layer (${p.model.moeLayers})`,
          path: ['knobs', 'popularity', 'expertOrder'],
        });
      }
      order.forEach((o, l) => {
        const seen = new Set(o);
        if (o.length !== p.model.experts || seen.size !== o.length || o.some((e) => e >= p.model.experts)) {
          ctx.addIssue({
            code: 'custom',
            message: `must be a permutation of 0…${p.model.experts - 1}`,
            path: ['knobs', 'popularity', 'expertOrder', l],
          });
        }
      });
    }
  });
export type Profile = z.infer<typeof ProfileSchema>;

/** The folder of the shipped profiles. */
export const PROFILES_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', 'profiles');

/** Where a profile reference points: a name (`mixtral-8x7b`) or a path (anything with `/` or `.json`). */
export function profilePath(ref: string, baseDir: string = process.cwd()): string {
  if (ref.includes('/') || ref.includes('\\') || ref.endsWith('.json'))
    return isAbsolute(ref) ? ref : resolve(baseDir, ref);
  return join(PROFILES_DIR, `${ref}.json`);
}

/**
 * Loads and validates a profile by name or path (`field`: the config field that names it, for
 * the error when there is no such profile).
 * @throws UserError naming the file and the field on a missing file, bad JSON or a schema violation
 */
export async function loadProfile(
  ref: string,
  baseDir?: string,
  field?: string,
): Promise<{ profile: Profile; path: string }> {
  const path = profilePath(ref, baseDir);
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch {
    const isName = !(ref.includes('/') || ref.endsWith('.json'));
    // Named by a config's `field`: the mistake is that field's (the caller adds the config's file).
    if (field !== undefined) {
      const what = isName ? `no synthetic profile named "${ref}"` : 'no such profile file';
      throw new UserError(`${what} (looked for ${path}); see workloads/profiles/`, undefined, field, ref);
    }
    throw new UserError(
      isName
        ? `no synthetic profile named "${ref}" (looked for ${path}); see workloads/profiles/`
        : 'no such profile file',
      path,
    );
  }
  return { profile: parseProfile(text, path), path };
}

export function parseProfile(text: string, path: string): Profile {
  let obj: unknown;
  try {
    obj = JSON.parse(text);
  } catch (err) {
    throw new UserError(`malformed JSON (${(err as Error).message})`, path);
  }
  const r = ProfileSchema.safeParse(obj);
  if (!r.success) {
    const issue = r.error.issues[0]!;
    throw new UserError(issue.message, path, formatPath(issue.path) || undefined);
  }
  return r.data;
}

/** Per-layer Zipf exponents of a profile's knobs. */
export function zipfPerLayer(knobs: Knobs, layers: number): number[] {
  const a = knobs.popularity.zipfExponent;
  return Array.isArray(a) ? [...a] : Array.from({ length: layers }, () => a);
}
