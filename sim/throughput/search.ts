/**
 * Search helpers for throughput policies: a deterministic coordinate search over candidate
 * grids, the largest value of a monotone predicate, and pricing a configuration with the
 * critical-path estimator.
 *
 * `coordinateSearch` starts from a configuration and, axis by axis in the order given, moves
 * to the candidate of that axis with the best objective (others fixed), for `rounds` rounds or
 * until a round changes nothing. Infeasible candidates score −∞, so a feasible start is
 * needed (give the smallest values first). Evaluations are memoised by candidate, so revisits
 * are free; ties keep the current value, then the earliest candidate. Coordinate search finds a
 * local optimum of a non-convex objective; with the few, mostly unimodal axes of a pass
 * configuration this is what MoE-Gen's own search does in practice (see `policies/moe-gen`).
 */
import type { CostModel } from '../cost/types.ts';
import { estimatePassNs, type EstimateOptions } from './estimator.ts';
import { expectedCounts } from './pass-dag.ts';
import type { PlanContext } from './policy.ts';
import type { PassConfig, PassShape } from './types.ts';

export interface SearchAxis<C> {
  readonly key: keyof C & string;
  readonly values: readonly number[];
}

export interface SearchResult<C> {
  readonly best: C;
  readonly objective: number;
  readonly evaluated: number;
}

export function coordinateSearch<C extends object>(o: {
  readonly start: C;
  readonly axes: readonly SearchAxis<C>[];
  /** Higher is better; undefined (or a non-finite number) when infeasible. */
  readonly evaluate: (c: C) => number | undefined;
  readonly rounds?: number;
  /** Shared evaluation cache (several searches over one space); default a fresh one. */
  readonly memo?: Map<string, number>;
}): SearchResult<C> | undefined {
  const memo = o.memo ?? new Map<string, number>();
  const score = (c: C): number => {
    const key = JSON.stringify(c);
    let v = memo.get(key);
    if (v === undefined) {
      const r = o.evaluate(c);
      v = r !== undefined && Number.isFinite(r) ? r : Number.NEGATIVE_INFINITY;
      memo.set(key, v);
    }
    return v;
  };
  let best = o.start;
  let bestScore = score(best);
  for (let round = 0; round < (o.rounds ?? 3); round++) {
    let changed = false;
    for (const axis of o.axes) {
      for (const v of axis.values) {
        if ((best as Record<string, unknown>)[axis.key] === v) continue;
        const cand = { ...best, [axis.key]: v } as C;
        const s = score(cand);
        if (s > bestScore * (1 + 1e-9) || (bestScore === Number.NEGATIVE_INFINITY && s > bestScore)) {
          best = cand;
          bestScore = s;
          changed = true;
        }
      }
    }
    if (!changed) break;
  }
  return bestScore === Number.NEGATIVE_INFINITY ? undefined : { best, objective: bestScore, evaluated: memo.size };
}

/** Largest integer x in [lo, hi] with ok(x), for ok monotone (true then false); lo − 1 if none. */
export function largestSatisfying(lo: number, hi: number, ok: (x: number) => boolean): number {
  if (hi < lo || !ok(lo)) return lo - 1;
  let a = lo;
  let b = hi;
  while (a < b) {
    const mid = a + Math.ceil((b - a) / 2);
    if (ok(mid)) a = mid;
    else b = mid - 1;
  }
  return a;
}

/** Powers of two from `from` up to `max` (inclusive), plus `max` itself when it is not one. */
export function powersOfTwoUpTo(max: number, from = 1): number[] {
  const out: number[] = [];
  for (let v = from; v <= max; v *= 2) out.push(v);
  if (max >= from && out[out.length - 1] !== max) out.push(max);
  return out;
}

/** Predicted pass time (ns) of a configuration: critical path under expected (uniform) routing. */
export function predictPassNs(
  ctx: Pick<PlanContext, 'model' | 'hardware' | 'cost'>,
  shape: PassShape,
  config: PassConfig,
  o: EstimateOptions = {},
): number {
  const cost: CostModel = ctx.cost;
  return estimatePassNs(
    { model: ctx.model, hardware: ctx.hardware, cost, shape, config, counts: expectedCounts(ctx.model.topK) },
    o,
  );
}

/** The decode shape a prediction refers to: B sequences at the middle of the output. */
export function refDecodeShape(w: PlanContext['workload'], B: number, hostSeqs: number): PassShape {
  const reserve = w.promptTokens + w.outputTokens;
  return {
    phase: 'decode',
    seqs: B,
    newTokens: 1,
    pastTokens: w.promptTokens + Math.floor(w.outputTokens / 2),
    hostSeqs,
    reserveTokens: reserve,
  };
}

/** The largest decode shape of a run (every sequence at its last step): what VRAM must hold. */
export function worstDecodeShape(w: PlanContext['workload'], B: number, hostSeqs: number): PassShape {
  const reserve = w.promptTokens + w.outputTokens;
  return { phase: 'decode', seqs: B, newTokens: 1, pastTokens: reserve - 1, hostSeqs, reserveTokens: reserve };
}

export function prefillShape(w: PlanContext['workload'], B: number, hostSeqs: number): PassShape {
  const reserve = w.promptTokens + w.outputTokens;
  return { phase: 'prefill', seqs: B, newTokens: w.promptTokens, pastTokens: 0, hostSeqs, reserveTokens: reserve };
}
