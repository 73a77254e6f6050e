/**
 * Prompt / output length distributions: the `promptTokens` and `outputTokens` sections of a
 * workload config, and of synthetic profiles.
 *
 * Kinds:
 * - `fixed` `{ tokens }`; `uniform` `{ min, max }` (integers, inclusive);
 * - `dataset` `{ name, min?, max? }`: the distribution of a named dataset (`datasets.ts`;
 *   `name: task` takes each request's task label as the dataset name), optionally clamped;
 * - `lognormal` `{ meanTokens, cv, min?, max? }`: a log-normal truncated to [min, max] whose
 *   truncated mean is `meanTokens`;
 * - `empirical` `{ quantiles }`: evenly spaced quantiles (q0 = min … q100 = max), sampled by
 *   linear interpolation — what `trace calibrate` stores.
 *
 * A sample is an integer ≥ 1 (≥ 0 only for `empirical` lists containing 0).
 */
import { z } from 'zod';
import type { Rng } from '../sim/kernel/rng.ts';
import { UserError } from '../sim/kernel/errors.ts';
import { DATASETS, DATASET_NAMES, resolveDatasetName, type DatasetLength, type LengthShape } from './datasets.ts';

const positiveInt = z.number().int().positive();

export const LengthSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('fixed'), tokens: positiveInt }).strict(),
  z
    .object({ kind: z.literal('uniform'), min: positiveInt, max: positiveInt })
    .strict()
    .refine((u) => u.max >= u.min, { message: 'max must be ≥ min', path: ['max'] }),
  z
    .object({
      kind: z.literal('dataset'),
      name: z.string().refine((s) => s === 'task' || resolveDatasetName(s) !== undefined, {
        message: `unknown dataset; known: ${DATASET_NAMES.join(', ')} (or "task")`,
      }),
      min: positiveInt.optional(),
      max: positiveInt.optional(),
    })
    .strict(),
  z
    .object({
      kind: z.literal('lognormal'),
      meanTokens: z.number().positive(),
      cv: z.number().nonnegative(),
      min: positiveInt.optional(),
      max: positiveInt.optional(),
    })
    .strict(),
  z
    .object({
      kind: z.literal('empirical'),
      quantiles: z
        .array(z.number().int().nonnegative())
        .min(2)
        .refine((q) => q.every((v, i) => i === 0 || v >= q[i - 1]!), { message: 'quantiles must be non-decreasing' }),
      note: z.string().optional(),
    })
    .strict(),
]);
export type LengthConfig = z.infer<typeof LengthSchema>;

/** Draws one length; `task` is the request's task label (used by `dataset: task`). */
export type LengthSampler = (rng: Rng, task?: string) => number;

/**
 * A sampler for `cfg`; `which` picks the prompt or output distribution of a dataset.
 * @throws UserError (at sampling time) for `dataset: task` with a task that is not a dataset
 */
export function lengthSampler(cfg: LengthConfig, which: 'prompt' | 'output'): LengthSampler {
  switch (cfg.kind) {
    case 'fixed':
      return () => cfg.tokens;
    case 'uniform':
      return (rng) => cfg.min + rng.int(cfg.max - cfg.min + 1);
    case 'lognormal': {
      const d = new TruncatedLogNormal({
        meanTokens: cfg.meanTokens,
        cv: cfg.cv,
        min: cfg.min ?? 1,
        max: cfg.max ?? 1e9,
      });
      return (rng) => d.sample(rng);
    }
    case 'empirical': {
      const q = cfg.quantiles;
      return (rng) => {
        const x = rng.next() * (q.length - 1);
        const i = Math.floor(x);
        const a = q[i]!;
        const b = q[Math.min(i + 1, q.length - 1)]!;
        return Math.round(a + (x - i) * (b - a));
      };
    }
    case 'dataset': {
      const clamp = (n: number): number => Math.min(cfg.max ?? Infinity, Math.max(cfg.min ?? 1, n));
      if (cfg.name !== 'task') {
        const d = datasetSampler(resolveDatasetName(cfg.name)!, which);
        return (rng) => clamp(d(rng));
      }
      const cache = new Map<string, (rng: Rng) => number>();
      return (rng, task) => {
        const name = task === undefined ? undefined : resolveDatasetName(task);
        if (!name) {
          throw new UserError(
            `length kind dataset with name "task" needs every request's task to be a dataset (${DATASET_NAMES.join(', ')})`,
            undefined,
            `${which}Tokens.name`,
            task ?? null,
          );
        }
        let d = cache.get(name);
        if (!d) {
          d = datasetSampler(name, which);
          cache.set(name, d);
        }
        return clamp(d(rng));
      };
    }
  }
}

function datasetSampler(name: keyof typeof DATASETS, which: 'prompt' | 'output'): (rng: Rng) => number {
  const spec: DatasetLength = DATASETS[name][which];
  if ('fixed' in spec) return () => spec.fixed;
  const d = new TruncatedLogNormal(spec);
  return (rng) => d.sample(rng);
}

/** Mean of a length config when it is known in closed form (for `describe` and tests). */
export function meanLength(cfg: LengthConfig, which: 'prompt' | 'output'): number | undefined {
  switch (cfg.kind) {
    case 'fixed':
      return cfg.tokens;
    case 'uniform':
      return (cfg.min + cfg.max) / 2;
    case 'lognormal':
      return cfg.meanTokens;
    case 'empirical':
      return undefined;
    case 'dataset': {
      if (cfg.name === 'task' || cfg.min !== undefined || cfg.max !== undefined) return undefined;
      const spec: DatasetLength = DATASETS[resolveDatasetName(cfg.name)!][which];
      return 'fixed' in spec ? spec.fixed : spec.meanTokens;
    }
  }
}

/**
 * A log-normal truncated to [min, max], rounded to integers. σ comes from the cv
 * (σ² = ln(1 + cv²), the untruncated relation); μ is solved by bisection so that the
 * *truncated* mean equals `meanTokens`. Sampled by inversion, one uniform per draw.
 */
export class TruncatedLogNormal {
  readonly mu: number;
  readonly sigma: number;
  private readonly pLo: number;
  private readonly pHi: number;

  constructor(readonly shape: LengthShape) {
    const { meanTokens, cv, min, max } = shape;
    if (!(min <= meanTokens && meanTokens <= max)) {
      throw new RangeError(`length mean ${meanTokens} must lie in [${min}, ${max}]`);
    }
    this.sigma = Math.sqrt(Math.log(1 + cv * cv));
    if (this.sigma === 0) {
      this.mu = Math.log(meanTokens);
    } else {
      let lo = Math.log(min) - 10 * this.sigma;
      let hi = Math.log(max) + 10 * this.sigma;
      for (let i = 0; i < 200; i++) {
        const mid = (lo + hi) / 2;
        if (truncatedMean(mid, this.sigma, min, max) < meanTokens) lo = mid;
        else hi = mid;
      }
      this.mu = (lo + hi) / 2;
    }
    this.pLo = this.sigma ? normalCdf((Math.log(min) - this.mu) / this.sigma) : 0;
    this.pHi = this.sigma ? normalCdf((Math.log(max) - this.mu) / this.sigma) : 1;
  }

  sample(rng: Rng): number {
    const { min, max } = this.shape;
    if (this.sigma === 0) return Math.min(max, Math.max(min, Math.round(Math.exp(this.mu))));
    const u = this.pLo + rng.next() * (this.pHi - this.pLo);
    const x = Math.exp(this.mu + this.sigma * normalQuantile(Math.min(1 - 1e-16, Math.max(1e-300, u))));
    return Math.min(max, Math.max(min, Math.round(x)));
  }

  /** Mean of the continuous truncated distribution (= meanTokens up to bisection precision). */
  mean(): number {
    return this.sigma === 0 ? Math.exp(this.mu) : truncatedMean(this.mu, this.sigma, this.shape.min, this.shape.max);
  }
}

/** E[X | a ≤ X ≤ b] for X = exp(N(μ, σ²)). */
function truncatedMean(mu: number, sigma: number, a: number, b: number): number {
  const la = Math.log(a);
  const lb = Math.log(b);
  const den = normalCdf((lb - mu) / sigma) - normalCdf((la - mu) / sigma);
  const num = normalCdf((lb - mu - sigma * sigma) / sigma) - normalCdf((la - mu - sigma * sigma) / sigma);
  if (!(den > 1e-300)) return mu < la ? a : b;
  return Math.exp(mu + (sigma * sigma) / 2) * (num / den);
}

/** Standard normal CDF (erfc-based, |error| < 1.2e-7 relative in the tails). */
export function normalCdf(x: number): number {
  return 0.5 * erfc(-x / Math.SQRT2);
}

function erfc(x: number): number {
  // Numerical Recipes erfcc: Chebyshev fit, fractional error < 1.2e-7 everywhere.
  const z = Math.abs(x);
  const t = 1 / (1 + 0.5 * z);
  const r =
    t *
    Math.exp(
      -z * z -
        1.26551223 +
        t *
          (1.00002368 +
            t *
              (0.37409196 +
                t *
                  (0.09678418 +
                    t *
                      (-0.18628806 +
                        t *
                          (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))),
    );
  return x >= 0 ? r : 2 - r;
}

/** Inverse standard normal CDF (Acklam's rational approximation, relative error < 1.2e-9). */
export function normalQuantile(p: number): number {
  if (p <= 0) return -Infinity;
  if (p >= 1) return Infinity;
  const a = [
    -39.69683028665376, 220.9460984245205, -275.9285104469687, 138.357751867269, -30.66479806614716, 2.506628277459239,
  ];
  const b = [-54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972, -13.28068155288572];
  const c = [
    -0.007784894002430293, -0.3223964580411365, -2.400758277161838, -2.549732539343734, 4.374664141464968,
    2.938163982698783,
  ];
  const d = [0.007784695709041462, 0.3224671290700398, 2.445134137142996, 3.754408661907416];
  const pl = 0.02425;
  let q: number;
  if (p < pl) {
    q = Math.sqrt(-2 * Math.log(p));
    return (
      (((((c[0]! * q + c[1]!) * q + c[2]!) * q + c[3]!) * q + c[4]!) * q + c[5]!) /
      ((((d[0]! * q + d[1]!) * q + d[2]!) * q + d[3]!) * q + 1)
    );
  }
  if (p > 1 - pl) {
    q = Math.sqrt(-2 * Math.log(1 - p));
    return (
      -(((((c[0]! * q + c[1]!) * q + c[2]!) * q + c[3]!) * q + c[4]!) * q + c[5]!) /
      ((((d[0]! * q + d[1]!) * q + d[2]!) * q + d[3]!) * q + 1)
    );
  }
  q = p - 0.5;
  const r = q * q;
  return (
    ((((((a[0]! * r + a[1]!) * r + a[2]!) * r + a[3]!) * r + a[4]!) * r + a[5]!) * q) /
    (((((b[0]! * r + b[1]!) * r + b[2]!) * r + b[3]!) * r + b[4]!) * r + 1)
  );
}

/** Empirical quantiles (q0 … q100 at `points` evenly spaced probabilities) of integer lengths. */
export function empiricalQuantiles(values: readonly number[], points = 101): number[] {
  if (values.length === 0) return [1, 1];
  const s = [...values].sort((a, b) => a - b);
  const out: number[] = [];
  for (let i = 0; i < points; i++) {
    const x = (i / (points - 1)) * (s.length - 1);
    const lo = Math.floor(x);
    const hi = Math.min(lo + 1, s.length - 1);
    out.push(Math.round(s[lo]! + (x - lo) * (s[hi]! - s[lo]!)));
  }
  return out;
}
