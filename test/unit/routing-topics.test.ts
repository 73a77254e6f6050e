/**
 * The request-aware router pieces: the adjacent-token shared fraction the trace calibrator fits
 * (hand-computed), the latent-cluster override of topic-grouped batches (same routing as the
 * request's own draw), and same-topic batch composition in the activation measurement.
 */
import { describe, expect, it } from 'vitest';
import { Rng } from '../../sim/kernel/rng.ts';
import { statsOf } from '../../workloads/stats/trace-stats.ts';
import { fitStatsOf } from '../../workloads/synthetic/calibrate.ts';
import { SyntheticModel } from '../../workloads/synthetic/model.ts';
import { SyntheticRequestRouter, SyntheticRouting } from '../../workloads/synthetic/router.ts';
import { KnobsSchema } from '../../workloads/synthetic/profile.ts';
import { routingSummary } from '../../workloads/stats/routing-summary.ts';
import type { TraceRequest } from '../../workloads/trace/format.ts';

/** A one-layer request from per-token expert lists. */
function req(id: string, tokens: number[][]): TraceRequest {
  const experts = Int32Array.from(tokens.flat());
  return {
    id,
    line: 0,
    promptTokens: tokens.length,
    prefillRecorded: true,
    tokens: tokens.length,
    outputTokens: 1,
    experts,
  };
}

describe('adjacent-token shared fraction (L=1, E=4, k=2)', () => {
  // A: {0,1} {1,2} {2,3}: both pairs share 1 of 2 → 1/2 each, any-shared 1 each.
  // B: {0,1} {2,3}: shares 0.  Pairs: 3; shared = (1 + 1 + 0) / (3 · 2) = 1/3; any = 2/3.
  const s = statsOf({ moeLayers: 1, experts: 4, topK: 2 }, [
    req('A', [
      [0, 1],
      [1, 2],
      [2, 3],
    ]),
    req('B', [
      [0, 1],
      [2, 3],
    ]),
  ]);
  it('shared = 1/3 and temporal = 2/3; `shared` only when asked for', () => {
    const f = fitStatsOf(s, true);
    expect(f.values['shared']).toBeCloseTo(1 / 3, 12);
    expect(f.values['temporal']).toBeCloseTo(2 / 3, 12);
    expect(fitStatsOf(s).values['shared']).toBeUndefined();
  });

  it('τ = ρ = 1 (every token repeats the previous one): the router measures shared fraction 1 exactly', () => {
    const knobs = KnobsSchema.parse({
      popularity: { zipfExponent: 0 },
      requestConcentration: null,
      temporalReuse: 1,
      temporalDepth: 1,
      crossLayer: 0,
      taskConcentration: null,
    });
    const m = new SyntheticModel({ moeLayers: 2, experts: 16, topK: 2 }, knobs);
    const routing = new SyntheticRouting(m, 's');
    const reqs = Array.from({ length: 5 }, (_, i) => {
      const out = new Int32Array(10 * 2 * 2);
      routing.create(i, undefined).generateAll(10, out);
      return {
        id: String(i),
        line: 0,
        promptTokens: 0,
        prefillRecorded: false,
        tokens: 10,
        outputTokens: 10,
        experts: out,
      } as TraceRequest;
    });
    const f = fitStatsOf(statsOf({ moeLayers: 2, experts: 16, topK: 2 }, reqs), true);
    expect(f.values['shared']).toBe(1);
    expect(f.values['temporal']).toBe(1);
  });
});

const clustered = KnobsSchema.parse({
  popularity: { zipfExponent: 0 },
  requestConcentration: 50,
  temporalReuse: 0.3,
  temporalDepth: 0.5,
  crossLayer: 0.1,
  taskConcentration: null,
  latentClusters: 64,
  clusterConcentration: 0.5,
});
const shape = { moeLayers: 3, experts: 64, topK: 2 };

describe('latent-cluster override', () => {
  it('a router given its own drawn cluster routes exactly as without the override', () => {
    const m = new SyntheticModel(shape, clustered);
    const drawn = new Rng('x:7/affinity').int(64);
    const a = new Int32Array(40 * 6);
    const b = new Int32Array(40 * 6);
    new SyntheticRequestRouter(m, 'x:7', undefined, 0).generateAll(40, a);
    new SyntheticRequestRouter(m, 'x:7', undefined, 0, 64, drawn).generateAll(40, b);
    expect(b).toEqual(a);
    const c = new Int32Array(40 * 6);
    new SyntheticRequestRouter(m, 'x:7', undefined, 0, 64, (drawn + 1) % 64).generateAll(40, c);
    expect(c).not.toEqual(a);
  });
});

describe('batch composition', () => {
  const o = { batchSizes: [8, 32], tokensPerRequest: [2], poolRequests: 64, batchesPerSize: 24 } as const;
  it('same-topic batches of a clustered profile activate fewer experts than mixed ones', () => {
    const mixed = routingSummary(shape, clustered, o).decode['2']!;
    const topic = routingSummary(shape, clustered, { ...o, batchComposition: 'same-topic' }).decode['2']!;
    expect(topic['32']!).toBeLessThan(mixed['32']!);
    expect(topic['8']!).toBeLessThan(mixed['8']!);
  });
  it('mixed is the default: omitting it or naming it measures the same', () => {
    expect(routingSummary(shape, clustered, { ...o, batchComposition: 'mixed' })).toEqual(
      routingSummary(shape, clustered, o),
    );
  });
});
