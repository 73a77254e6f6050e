/**
 * The request-table memo of `buildWorkload`: a workload built again on the same inputs (seed,
 * request count, arrivals, tasks, lengths, profile) shares the first build's table, and every
 * spec, routing draw and description equals a build that drew the table anew; other inputs
 * draw their own; traces and request logs are never memoised.
 */
import { describe, expect, it } from 'vitest';
import { RngStreams } from '../../sim/kernel/rng.ts';
import type { Workload } from '../../sim/workload.ts';
import { buildWorkload, clearRequestTableMemo, WorkloadSchema } from '../../workloads/config.ts';

const MIXTRAL = { modelId: 'mixtral-8x7b', moeLayers: 32, experts: 8, topK: 2 };

const build = (raw: unknown, seed = 1): Promise<Workload> =>
  buildWorkload(WorkloadSchema.parse(raw), MIXTRAL, new RngStreams(seed));

/** Everything a run reads of a workload: specs, its description, and a few aggregate routing draws. */
function observed(w: Workload): unknown {
  const counts = new Float64Array(MIXTRAL.experts);
  const draws: number[][] = [];
  for (let l = 0; l < 3; l++) {
    counts.fill(0);
    w.aggregate?.counts(l, 100, counts);
    draws.push([...counts]);
  }
  return { specs: w.requests, describe: w.describe, draws };
}

const CONFIGS: readonly unknown[] = [
  {
    requests: 300,
    arrival: { kind: 'gamma', ratePerS: 2, cv: 2 },
    tasks: { gsm8k: 1, mmlu: 2 },
    promptTokens: { kind: 'uniform', min: 10, max: 500 },
    outputTokens: { kind: 'uniform', min: 1, max: 64 },
  },
  {
    requests: 200,
    arrival: { kind: 'poisson', ratePerS: 5 },
    promptTokens: { kind: 'fixed', tokens: 64 },
    outputTokens: { kind: 'fixed', tokens: 8 },
    routing: { kind: 'synthetic', profile: 'mixtral-8x7b' },
  },
  {
    requests: 100,
    arrival: { kind: 'offline' },
    shift: { atRequest: 50, tasks: { mmlu: 1 } },
    tasks: { gsm8k: 1 },
    promptTokens: { kind: 'dataset', name: 'task', max: 256 },
    outputTokens: { kind: 'uniform', min: 4, max: 16 },
  },
];

describe('request-table memo', () => {
  it('a rebuild on the same inputs shares the table and reads the same as a fresh draw', async () => {
    let shared = 0;
    for (const raw of CONFIGS) {
      for (const seed of [1, 7]) {
        clearRequestTableMemo();
        const fresh = await build(raw, seed);
        const again = await build(raw, seed);
        if (again.source === fresh.source) shared++;
        clearRequestTableMemo();
        const redrawn = await build(raw, seed);
        expect(redrawn.source).not.toBe(fresh.source);
        // Each observed once: the aggregate router's draws advance its stream.
        const seen = observed(redrawn);
        expect(observed(again)).toEqual(seen);
        expect(observed(fresh)).toEqual(seen);
      }
    }
    // Coverage: every rebuild hit the memo.
    expect(shared).toBe(CONFIGS.length * 2);
  });

  it('another seed or another length config draws its own table', async () => {
    clearRequestTableMemo();
    const raw = CONFIGS[0] as Record<string, unknown>;
    const a = await build(raw, 1);
    const b = await build(raw, 2);
    const c = await build({ ...raw, outputTokens: { kind: 'uniform', min: 1, max: 65 } }, 1);
    expect(b.source).not.toBe(a.source);
    expect(c.source).not.toBe(a.source);
    expect(b.requests).not.toEqual(a.requests);
  });
});
