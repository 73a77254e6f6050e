/**
 * Arrival processes: the `arrival` section of a workload config.
 *
 * - `offline`: every request at t = 0 (an offline batch).
 * - `poisson` `{ ratePerS }`: exponential gaps with mean 1/rate.
 * - `gamma` `{ ratePerS, cv }`: Gamma-distributed gaps with mean 1/rate and coefficient of
 *   variation `cv` (shape 1/cv², scale cv²/rate). cv = 1 is Poisson; cv > 1 is bursty — the
 *   shape used to mimic the bursty arrivals of the Azure LLM inference traces (Patel et al.,
 *   "Splitwise", ISCA 2024); fit rate and cv to any log with `fitGammaArrivals`. cv = 0 gives
 *   evenly spaced arrivals.
 * - `replay` `{ path, timeScale }`: the arrival times of a request log (`request-log.ts`),
 *   multiplied by `timeScale` (0.5 = twice as fast); cycled, shifted by the log's span plus one
 *   mean gap, when more requests are asked for than it has.
 *
 * As before the first Poisson/Gamma request arrives after one gap, not at 0.
 */
import { z } from 'zod';
import type { Rng } from '../sim/kernel/rng.ts';
import type { RequestLogEntry } from './request-log.ts';

export const ArrivalSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('offline') }).strict(),
  z.object({ kind: z.literal('poisson'), ratePerS: z.number().positive() }).strict(),
  z.object({ kind: z.literal('gamma'), ratePerS: z.number().positive(), cv: z.number().nonnegative() }).strict(),
  z
    .object({
      kind: z.literal('replay'),
      /** Request log (CSV or JSONL, optionally gzipped); relative to the config file's folder. */
      path: z.string().min(1),
      timeScale: z.number().positive().default(1),
    })
    .strict(),
]);
export type ArrivalConfig = z.infer<typeof ArrivalSchema>;

/**
 * Arrival times in seconds (non-decreasing) of `n` requests. `log` is required for `replay`.
 * Uses only the `rng` it is given (the run's `arrivals` stream).
 */
export function arrivalTimesS(
  cfg: ArrivalConfig,
  n: number,
  rng: Rng,
  log?: readonly RequestLogEntry[],
): { timesS: number[]; cycles: number } {
  const timesS: number[] = [];
  switch (cfg.kind) {
    case 'offline':
      for (let i = 0; i < n; i++) timesS.push(0);
      return { timesS, cycles: 1 };
    case 'poisson': {
      let t = 0;
      for (let i = 0; i < n; i++) {
        t += rng.exponential(1 / cfg.ratePerS);
        timesS.push(t);
      }
      return { timesS, cycles: 1 };
    }
    case 'gamma': {
      let t = 0;
      const mean = 1 / cfg.ratePerS;
      for (let i = 0; i < n; i++) {
        t += cfg.cv === 0 ? mean : rng.gamma(1 / (cfg.cv * cfg.cv), mean * cfg.cv * cfg.cv);
        timesS.push(t);
      }
      return { timesS, cycles: 1 };
    }
    case 'replay': {
      if (!log || log.length === 0) throw new Error('replay arrivals need a request log');
      const span = log[log.length - 1]!.arrivalS;
      const period = span + (log.length > 1 ? span / (log.length - 1) : 1);
      for (let i = 0; i < n; i++) {
        const c = Math.floor(i / log.length);
        timesS.push((log[i % log.length]!.arrivalS + c * period) * cfg.timeScale);
      }
      return { timesS, cycles: Math.ceil(n / log.length) };
    }
  }
}

/** Method-of-moments fit of a Gamma renewal process to arrival times (seconds, sorted). */
export function fitGammaArrivals(timesS: readonly number[]): { ratePerS: number; cv: number } {
  if (timesS.length < 3) throw new RangeError('need at least 3 arrivals to fit');
  const gaps: number[] = [];
  for (let i = 1; i < timesS.length; i++) gaps.push(timesS[i]! - timesS[i - 1]!);
  const mean = gaps.reduce((a, b) => a + b, 0) / gaps.length;
  const v = gaps.reduce((a, g) => a + (g - mean) ** 2, 0) / (gaps.length - 1);
  return { ratePerS: 1 / mean, cv: Math.sqrt(v) / mean };
}
