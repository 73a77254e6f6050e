/**
 * The `workload` section of an experiment config, and the builder that turns it into a
 * `Workload` (requests + routing) for a model.
 */
import { z } from 'zod';
import type { RngStreams } from '../sim/kernel/rng.ts';
import { secondsToNs, type Ns } from '../sim/kernel/time.ts';
import type { RequestSpec, Workload } from '../sim/workload.ts';
import { UniformRouting } from './uniform-router.ts';

const positiveInt = z.number().int().positive();

export const LengthSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('fixed'), tokens: positiveInt }).strict(),
  z.object({ kind: z.literal('uniform'), min: positiveInt, max: positiveInt }).strict(),
]);
export type LengthConfig = z.infer<typeof LengthSchema>;

export const ArrivalSchema = z.discriminatedUnion('kind', [
  /** All requests at time 0 (offline batch). */
  z.object({ kind: z.literal('offline') }).strict(),
  /** Poisson process with the given mean rate. */
  z.object({ kind: z.literal('poisson'), ratePerS: z.number().positive() }).strict(),
]);
export type ArrivalConfig = z.infer<typeof ArrivalSchema>;

export const RoutingSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('uniform') }).strict(),
]);

export const WorkloadSchema = z
  .object({
    requests: positiveInt,
    arrival: ArrivalSchema.default({ kind: 'offline' }),
    promptTokens: LengthSchema,
    outputTokens: LengthSchema,
    routing: RoutingSchema.default({ kind: 'uniform' }),
  })
  .strict();
export type WorkloadConfig = z.infer<typeof WorkloadSchema>;

/** Model facts the workload builder needs. */
export interface RoutingShape {
  readonly moeLayers: number;
  readonly experts: number;
  readonly topK: number;
}

function sampleLength(l: LengthConfig, rng: { int(n: number): number }): number {
  return l.kind === 'fixed' ? l.tokens : l.min + rng.int(l.max - l.min + 1);
}

export function buildWorkload(cfg: WorkloadConfig, shape: RoutingShape, streams: RngStreams): Workload {
  const arrivals = streams.stream('arrivals');
  const lengths = streams.stream('lengths');
  const requests: RequestSpec[] = [];
  let tS = 0;
  for (let id = 0; id < cfg.requests; id++) {
    if (cfg.arrival.kind === 'poisson') tS += arrivals.exponential(1 / cfg.arrival.ratePerS);
    const arrivalNs: Ns = secondsToNs(tS);
    requests.push({
      id,
      arrivalNs,
      promptTokens: sampleLength(cfg.promptTokens, lengths),
      outputTokens: sampleLength(cfg.outputTokens, lengths),
    });
  }
  const routing = new UniformRouting(shape.moeLayers, shape.experts, shape.topK, streams.stream('routing'));
  return { requests, routing, describe: `${cfg.requests} requests, ${cfg.arrival.kind} arrivals, uniform routing` };
}
