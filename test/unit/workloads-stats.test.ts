/**
 * Trace statistics on tiny hand-made traces whose values are computed by hand in the comments.
 */
import { describe, expect, it } from 'vitest';
import { statsOf, coreStats, defaultSkewC } from '../../workloads/stats/trace-stats.ts';
import { MISSING, type TraceRequest } from '../../workloads/trace/format.ts';

/** A request from per-token lists of per-layer expert lists (null = missing). */
function req(id: string, tokens: (number[] | null)[][], task?: string): TraceRequest {
  const L = tokens[0]!.length;
  const k = tokens.flat().find((x) => x !== null)!.length;
  const experts = new Int32Array(tokens.length * L * k);
  let o = 0;
  for (const t of tokens) for (const l of t) for (let j = 0; j < k; j++) experts[o++] = l === null ? MISSING : l[j]!;
  return {
    id,
    line: 0,
    promptTokens: tokens.length,
    prefillRecorded: true,
    tokens: tokens.length,
    outputTokens: 1,
    experts,
    ...(task ? { task } : {}),
  };
}

describe('trace statistics, hand-computed (L=2, E=4, k=1)', () => {
  // A: layer 0 → 0,0,1,0   layer 1 → 2,2,3,2
  // B: layer 0 → 1,1       layer 1 → 3,3
  const A = req('A', [
    [[0], [2]],
    [[0], [2]],
    [[1], [3]],
    [[0], [2]],
  ]);
  const B = req('B', [
    [[1], [3]],
    [[1], [3]],
  ]);
  const shape = { moeLayers: 2, experts: 4, topK: 1 };
  const s = statsOf(shape, [A, B]);

  it('counts', () => {
    expect(s).toMatchObject({
      requests: 2,
      tokens: 6,
      layers: 2,
      experts: 4,
      topk: 1,
      prefillTokens: 6,
      decodeTokens: 0,
      missingEntries: 0,
    });
  });

  it('popularity: counts [3,3,0,0] per layer → entropy 1 bit of 2 = 0.5, Gini 0.5, top-10 % (1 expert) share 0.5', () => {
    expect(s.popularityEntropy).toEqual([0.5, 0.5]);
    expect(s.popularityGini[0]).toBeCloseTo(0.5, 12);
    expect(s.popularityTop10Share).toEqual([0.5, 0.5]);
  });

  it('request skew: C=1 mean(3/4, 3/4, 1, 1) = 0.875, pooled 3/6 = 0.5; C=2 → 1 and 1', () => {
    expect(defaultSkewC(shape)).toEqual([1, 2]);
    expect(s.requestSkew['1']!.request).toBeCloseTo(0.875, 12);
    expect(s.requestSkew['1']!.pooled).toBeCloseTo(0.5, 12);
    expect(s.requestSkew['2']).toEqual({ request: 1, pooled: 1 });
  });

  it('cross-layer: 0 → 2 (3 times), 1 → 3 (3 times): every successor is the most frequent one → 1', () => {
    expect(s.crossLayerPredictability).toBe(1);
  });

  it('temporal: 8 consecutive pairs, 4 with reuse → 0.5', () => {
    expect(s.temporalLocality).toBe(0.5);
    expect(s.temporalReusedShare).toBe(0.5);
    expect(s.baselines.uniformTemporalLocality).toBeCloseTo(0.25, 12); // 1 − C(3,1)/C(4,1)
  });

  it('activation ratio: p̄ = [3/8, 5/8, 0, 0]; b=1 → 1/4; b=2 → (1 − (5/8)² + 1 − (3/8)²)/4', () => {
    expect(s.activationRatioByBatch['1']).toBeCloseTo(0.25, 12);
    expect(s.activationRatioByBatch['2']).toBeCloseTo((1 - (5 / 8) ** 2 + 1 - (3 / 8) ** 2) / 4, 12);
    expect(Object.keys(s.activationRatioByBatch)).toHaveLength(32);
  });

  it('no task labels → null task similarity', () => {
    expect(s.taskClusterSimilarity).toBeNull();
  });

  it('coreStats keeps exactly the documented keys, in order', () => {
    expect(Object.keys(coreStats(s))).toEqual([
      'requests',
      'tokens',
      'layers',
      'experts',
      'topk',
      'popularityEntropy',
      'requestSkew',
      'crossLayerPredictability',
      'temporalLocality',
      'activationRatioByBatch',
      'taskClusterSimilarity',
    ]);
  });
});

describe('task-cluster similarity, hand-computed (L=1, E=2, k=1)', () => {
  // R1 (x): 0,0 → (2,0) → û (1,0);  R2 (x): 0,1 → (1,1) → û (√½,√½);  R3 (y): 1,1 → (0,2) → û (0,1)
  const s = statsOf({ moeLayers: 1, experts: 2, topK: 1 }, [
    req('R1', [[[0]], [[0]]], 'x'),
    req('R2', [[[0]], [[1]]], 'x'),
    req('R3', [[[1]], [[1]]], 'y'),
  ]);
  it('within = cos(R1,R2) = √½; across = mean(cos(R1,R3), cos(R2,R3)) = √½/2', () => {
    expect(s.taskClusterSimilarity!.within).toBeCloseTo(Math.SQRT1_2, 12);
    expect(s.taskClusterSimilarity!.across).toBeCloseTo(Math.SQRT1_2 / 2, 12);
    expect(s.requestSimilarity).toBeCloseTo((2 * Math.SQRT1_2) / 3, 12);
    expect(s.tasks).toEqual({ x: 2, y: 1 });
  });
  it('single layer → no cross-layer statistic', () => {
    expect(s.crossLayerPredictability).toBeNull();
  });
});

describe('missing entries', () => {
  // k=2, E=4, L=2. Token 1 misses layer 0: the temporal pairs (0,1) and (1,2) at layer 0 are
  // skipped, and so is token 1's cross-layer pair.
  const r = req('M', [
    [
      [0, 1],
      [2, 3],
    ],
    [null, [2, 3]],
    [
      [0, 1],
      [2, 3],
    ],
  ]);
  const s = statsOf({ moeLayers: 2, experts: 4, topK: 2 }, [r]);
  it('are counted and skipped', () => {
    expect(s.missingEntries).toBe(1);
    // layer 1: pairs (0,1), (1,2), both full reuse; layer 0: none.
    expect(s.temporalLocality).toBe(1);
    expect(s.temporalReusedShare).toBe(1);
    // tokens 0 and 2: expert 0 (and 1) at layer 0 is followed by {2, 3}; its most frequent
    // successor (2) is in the next set both times → 4 hits of 4 occurrences.
    expect(s.crossLayerPredictability).toBe(1);
  });
});
