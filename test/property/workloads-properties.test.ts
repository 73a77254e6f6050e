/**
 * Properties of the workload module (fast-check): trace writer → reader round trip; synthetic
 * routers always emit valid, distinct expert ids, deterministically, whatever the call order;
 * aggregate counts are non-negative integers summing to tokens·k.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Rng } from '../../sim/kernel/rng.ts';
import { TraceWriter } from '../../workloads/trace/writer.ts';
import { readTraceFile } from '../../workloads/trace/reader.ts';
import { MISSING, type TraceRequest } from '../../workloads/trace/format.ts';
import { SyntheticModel } from '../../workloads/synthetic/model.ts';
import { SyntheticRouting } from '../../workloads/synthetic/router.ts';
import { InclusionAggregateRouter } from '../../workloads/aggregate-router.ts';
import { drawDistinctUniform } from '../../workloads/uniform-router.ts';
import type { Knobs } from '../../workloads/synthetic/profile.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'moesim-wl-prop-'));

/** k distinct ids out of E. */
const kSubset = (E: number, k: number): fc.Arbitrary<number[]> => fc.shuffledSubarray([...Array(E).keys()], { minLength: k, maxLength: k });

interface RawRequest {
  tokens: (number[] | null)[][];
  prompt: number;
  prefillRecorded: boolean;
  extraOutput: number;
  task: string | undefined;
  arrivalS: number | undefined;
  withScores: boolean;
  withPredictions: boolean;
  seed: number;
}

function buildRequest(r: RawRequest, i: number, L: number, E: number, k: number): TraceRequest {
  const T = r.tokens.length;
  const promptTokens = r.prefillRecorded ? (T === 0 ? 0 : Math.min(Math.max(1, r.prompt), T)) : r.prompt;
  const experts = Int32Array.from(r.tokens.flatMap((t) => t.flatMap((l) => l ?? new Array<number>(k).fill(MISSING))));
  const rng = new Rng(String(r.seed));
  const scores = r.withScores ? Float32Array.from(experts, (e) => (e === MISSING ? NaN : Math.fround(rng.next()))) : undefined;
  let predictions: TraceRequest['predictions'];
  if (r.withPredictions) {
    const offsets = new Int32Array(T * L + 1);
    const ids: number[] = [];
    for (let x = 0; x < T * L; x++) {
      offsets[x] = ids.length;
      ids.push(...rng.shuffle([...Array(E).keys()]).slice(0, rng.int(E + 1)));
    }
    offsets[T * L] = ids.length;
    predictions = { offsets, ids: Int32Array.from(ids) };
  }
  const decode = T - (r.prefillRecorded ? promptTokens : 0);
  return {
    id: `req-${i}`,
    line: 0,
    promptTokens,
    prefillRecorded: r.prefillRecorded,
    tokens: T,
    outputTokens: decode + 1 + r.extraOutput,
    ...(r.task !== undefined ? { task: r.task } : {}),
    ...(r.arrivalS !== undefined ? { arrivalS: r.arrivalS } : {}),
    experts,
    ...(scores ? { scores } : {}),
    ...(predictions ? { predictions } : {}),
  };
}

const traceArb = fc
  .record({ L: fc.integer({ min: 1, max: 4 }), E: fc.integer({ min: 1, max: 12 }) })
  .chain(({ L, E }) => fc.record({ L: fc.constant(L), E: fc.constant(E), k: fc.integer({ min: 1, max: Math.min(E, 4) }) }))
  .chain(({ L, E, k }) =>
    fc
      .array(
        fc.record({
          tokens: fc.array(fc.array(fc.option(kSubset(E, k), { freq: 5, nil: null }), { minLength: L, maxLength: L }), { maxLength: 6 }),
          prompt: fc.nat(6),
          prefillRecorded: fc.boolean(),
          extraOutput: fc.nat(3),
          task: fc.option(fc.constantFrom('gsm8k', 'code', 'a b', 'ü'), { nil: undefined }),
          arrivalS: fc.option(fc.double({ min: 0, max: 1e6, noNaN: true }), { nil: undefined }),
          withScores: fc.boolean(),
          withPredictions: fc.boolean(),
          seed: fc.nat(),
        }),
        { maxLength: 5 },
      )
      .map((raw) => ({ L, E, k, requests: raw.map((r, i) => buildRequest(r, i, L, E, k)) })),
  );

describe('trace writer → reader', () => {
  it('round-trips any valid trace exactly', async () => {
    let n = 0;
    await fc.assert(
      fc.asyncProperty(traceArb, async ({ L, E, k, requests }) => {
        const f = path.join(dir, `rt-${n++}.jsonl.gz`);
        const w = await TraceWriter.create(f, { model: { id: 'm', moeLayers: L, experts: E, topK: k } }, { gzipLevel: 1 });
        for (const r of requests) await w.write(r);
        await w.close();
        const back = await readTraceFile(f);
        expect(back.info.header.model).toEqual({ id: 'm', moeLayers: L, experts: E, topK: k });
        expect(back.requests.map((r) => ({ ...r, line: 0 }))).toEqual(requests);
      }),
      { numRuns: 60 },
    );
  });
});

const knobsArb: fc.Arbitrary<{ shape: { moeLayers: number; experts: number; topK: number }; knobs: Knobs }> = fc
  .record({ L: fc.integer({ min: 1, max: 6 }), E: fc.integer({ min: 1, max: 40 }) })
  .chain(({ L, E }) =>
    fc.record({
      shape: fc.record({ moeLayers: fc.constant(L), experts: fc.constant(E), topK: fc.integer({ min: 1, max: Math.min(E, 8) }) }),
      knobs: fc.record({
        popularity: fc.record({ zipfExponent: fc.double({ min: 0, max: 3, noNaN: true }) }),
        requestConcentration: fc.option(fc.double({ min: 0.01, max: 1000, noNaN: true }), { nil: null }),
        temporalReuse: fc.double({ min: 0, max: 1, noNaN: true }),
        temporalDepth: fc.double({ min: 0, max: 1, noNaN: true }),
        temporalMemory: fc.double({ min: 0, max: 0.99, noNaN: true }),
        crossLayer: fc.double({ min: 0, max: 1, noNaN: true }),
        sharedTokens: fc.double({ min: 0, max: 1, noNaN: true }),
        sharedVocabulary: fc.integer({ min: 1, max: 40 }),
        startTokens: fc.nat(3),
        taskConcentration: fc.option(fc.double({ min: 0.01, max: 1000, noNaN: true }), { nil: null }),
        latentClusters: fc.integer({ min: 1, max: 5 }),
        clusterConcentration: fc.option(fc.double({ min: 0.01, max: 1000, noNaN: true }), { nil: null }),
        structureSeed: fc.nat(1000),
      }),
    }),
  );

describe('synthetic router', () => {
  it('emits k distinct ids in 0…E−1, the same for route, peek, rewinds and a fresh router, in any chunking', () => {
    fc.assert(
      fc.property(knobsArb, fc.array(fc.integer({ min: 1, max: 7 }), { minLength: 1, maxLength: 6 }), fc.option(fc.constantFrom('x', 'y')), (g, chunks, task) => {
        const { moeLayers: L, experts: E, topK: k } = g.shape;
        const model = new SyntheticModel(g.shape, g.knobs);
        const routing = new SyntheticRouting(model, 'seed');
        const spec = { id: 7, arrivalNs: 0 as never, promptTokens: 1, outputTokens: 1, ...(task ? { task } : {}) };
        const a = routing.forRequest(spec);
        const T = chunks.reduce((x, y) => x + y, 0);
        const viaRoute: Int32Array[] = Array.from({ length: L }, () => new Int32Array(T * k));
        let from = 0;
        for (const c of chunks) {
          const buf = new Int32Array(c * k);
          // a predictor may look ahead at the next layer before it is routed
          if (L > 1) a.peek(1, from, from + c, buf);
          for (let l = 0; l < L; l++) {
            a.route(l, from, from + c, buf);
            viaRoute[l]!.set(buf, from * k);
          }
          from += c;
        }
        for (let l = 0; l < L; l++) {
          const o = viaRoute[l]!;
          for (let t = 0; t < T; t++) {
            const set = new Set<number>();
            for (let j = 0; j < k; j++) {
              const e = o[t * k + j]!;
              expect(Number.isInteger(e) && e >= 0 && e < E).toBe(true);
              set.add(e);
            }
            expect(set.size).toBe(k);
          }
        }
        // Rewind: peek the first token again after the window moved on.
        const first = new Int32Array(k);
        a.peek(L - 1, 0, 1, first);
        expect(first).toEqual(viaRoute[L - 1]!.subarray(0, k));
        // A fresh router for the same request (as a predictor would build) agrees.
        const b = routing.create(7, task ?? undefined);
        const all = new Int32Array(T * L * k);
        b.generateAll(T, all);
        for (let l = 0; l < L; l++) for (let t = 0; t < T; t++) for (let j = 0; j < k; j++) expect(all[(t * L + l) * k + j]).toBe(viaRoute[l]![t * k + j]);
      }),
      { numRuns: 150 },
    );
  });
});

describe('aggregate routing', () => {
  it('counts are integers in [0, tokens] summing to tokens·k, in both regimes', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 50 }).chain((E) => fc.record({ E: fc.constant(E), k: fc.integer({ min: 1, max: Math.min(E, 8) }) })),
        fc.integer({ min: 0, max: 20_000 }),
        fc.double({ min: 0, max: 2, noNaN: true }),
        fc.nat(),
        ({ E, k }, tokens, skew, seed) => {
          const w = Array.from({ length: E }, (_, e) => Math.pow(e + 1, -skew));
          // inclusion probabilities: k·w/Σw, capped at 1 and renormalised to sum k
          const q = new Float64Array(E);
          let rest = k;
          const order = [...Array(E).keys()];
          let wsum = w.reduce((a, b) => a + b, 0);
          for (const e of order) {
            const v = Math.min(1, (rest * w[e]!) / wsum);
            q[e] = v;
            rest -= v;
            wsum -= w[e]!;
          }
          const agg = new InclusionAggregateRouter(1, E, k, q, (_l, r, out) => void drawDistinctUniform(r, E, k, out, 0), new Rng(String(seed)));
          const out = new Float64Array(E);
          agg.counts(0, tokens, out);
          let sum = 0;
          for (const c of out) {
            expect(Number.isInteger(c)).toBe(true);
            expect(c).toBeGreaterThanOrEqual(0);
            expect(c).toBeLessThanOrEqual(tokens);
            sum += c;
          }
          expect(sum).toBe(tokens * k);
        },
      ),
      { numRuns: 300 },
    );
  });
});
