/**
 * The thread's single-token prediction memo (`workloads/prediction-memo.ts`): predictors of
 * workloads built again on the same inputs (the runs of a sweep on one case) answer every call
 * exactly as a predictor without the memo on the same routing, in any call order, multi-token
 * ranges included; hits are counted so the shared path is known to be exercised. Inputs that
 * differ (run seed, accuracy, routing knobs) get lists of their own.
 */
import { describe, expect, it } from 'vitest';
import { Rng, RngStreams } from '../../sim/kernel/rng.ts';
import type { Workload } from '../../sim/workload.ts';
import { buildWorkload, WorkloadSchema } from '../../workloads/config.ts';
import { accuracyByLayer, ProfilePredictor } from '../../workloads/prediction.ts';
import { clearPredictionMemos, exactKey, predictionMemoHits } from '../../workloads/prediction-memo.ts';

const MIXTRAL = { modelId: 'mixtral-8x7b', moeLayers: 32, experts: 8, topK: 2 };

const config = (over: Record<string, unknown> = {}): Record<string, unknown> => ({
  requests: 10,
  arrival: { kind: 'offline' },
  tasks: { mmlu: 1, gsm8k: 1 },
  promptTokens: { kind: 'uniform', min: 4, max: 30 },
  outputTokens: { kind: 'fixed', tokens: 12 },
  routing: { kind: 'synthetic', profile: 'mixtral-8x7b' },
  prediction: { kind: 'profile', accuracy: { first: 0.5, steady: 0.85, rampLayers: 6 } },
  ...over,
});

const build = (raw: unknown, seed: number): Promise<Workload> =>
  buildWorkload(WorkloadSchema.parse(raw), MIXTRAL, new RngStreams(seed));

/** A predictor on `w`'s routing without the memo, its seed drawn as the build drew it. */
function reference(w: Workload, raw: unknown, seed: number): ProfilePredictor {
  const p = WorkloadSchema.parse(raw).prediction;
  if (p.kind !== 'profile') throw new Error('profile prediction expected');
  const acc = accuracyByLayer(p.accuracy, MIXTRAL.moeLayers);
  return new ProfilePredictor(w.routing!, w.requests, acc, new RngStreams(seed).stream('prediction'));
}

/** Calls (request, layer, token range; mostly single tokens), the same set for every run, shuffled by `order`. */
function calls(w: Workload, n: number, order: string): [number, number, number, number][] {
  const rng = new Rng('prediction-memo calls');
  const out: [number, number, number, number][] = [];
  for (let i = 0; i < n; i++) {
    const spec = w.requests[rng.int(w.requests.length)]!;
    const total = spec.promptTokens + spec.outputTokens;
    const from = rng.int(total);
    const to = rng.next() < 0.85 ? from + 1 : Math.min(total, from + 1 + rng.int(8));
    out.push([spec.id, rng.int(MIXTRAL.moeLayers), from, to]);
  }
  return new Rng(order).shuffle(out);
}

describe('prediction memo', () => {
  it('shared answers equal a predictor without the memo on every call, across rebuilds and orders', async () => {
    clearPredictionMemos();
    const variants = [
      { raw: config(), seed: 1 },
      { raw: config(), seed: 2 },
      { raw: config({ prediction: { kind: 'profile', accuracy: 0.7 } }), seed: 1 },
      { raw: config({ routing: { kind: 'synthetic', profile: 'mixtral-8x7b', temporalReuse: 0.2 } }), seed: 1 },
    ];
    let compared = 0;
    for (let round = 0; round < 2; round++) {
      for (const [v, { raw, seed }] of variants.entries()) {
        const w = await build(raw, seed);
        const ref = reference(w, raw, seed);
        for (const [id, l, from, to] of calls(w, 400, `order ${round} ${v}`)) {
          expect(w.predictor!.predict(id, l, from, to)).toEqual(ref.predict(id, l, from, to));
          compared++;
        }
      }
    }
    expect(compared).toBe(3200);
    // Two memos are kept per thread: the variants evict each other between rounds, and
    // the hits come from the repeated calls inside a run and from the last two variants'
    // second round at most; so repeat the last variant once more, all its calls.
    const before = predictionMemoHits();
    const { raw, seed } = variants[3]!;
    const w = await build(raw, seed);
    const ref = reference(w, raw, seed);
    let singles = 0;
    for (const [id, l, from, to] of calls(w, 400, 'order last')) {
      expect(w.predictor!.predict(id, l, from, to)).toEqual(ref.predict(id, l, from, to));
      if (to === from + 1) singles++;
    }
    expect(predictionMemoHits() - before).toBe(singles);
  });

  it('keys tell apart values JSON would merge', () => {
    expect(exactKey([Infinity])).not.toBe(exactKey([null]));
    expect(exactKey([-0])).not.toBe(exactKey([0]));
    expect(exactKey({ a: undefined })).not.toBe(exactKey({}));
    expect(exactKey(['#Infinity'])).not.toBe(exactKey([Infinity]));
  });
});
