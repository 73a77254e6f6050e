/**
 * Properties of the workload module (fast-check): trace writer → reader round trip; synthetic
 * routers always emit valid, distinct expert ids, deterministically, whatever the call order;
 * a synthetic router's tokens are the generative model's (a reference written from its
 * description, every uniform drawn with `Rng.next()`: the router runs Alea's step inlined);
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
import { dirichletInto, SyntheticModel } from '../../workloads/synthetic/model.ts';
import { SyntheticRequestRouter, SyntheticRouting } from '../../workloads/synthetic/router.ts';
import { AliasTables, aliasScratch } from '../../workloads/random/alias.ts';
import { InclusionAggregateRouter } from '../../workloads/aggregate-router.ts';
import { drawDistinctUniform } from '../../workloads/uniform-router.ts';
import type { Knobs } from '../../workloads/synthetic/profile.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'moesim-wl-prop-'));

/** k distinct ids out of E. */
const kSubset = (E: number, k: number): fc.Arbitrary<number[]> =>
  fc.shuffledSubarray([...Array(E).keys()], { minLength: k, maxLength: k });

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
  const scores = r.withScores
    ? Float32Array.from(experts, (e) => (e === MISSING ? NaN : Math.fround(rng.next())))
    : undefined;
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
  .chain(({ L, E }) =>
    fc.record({ L: fc.constant(L), E: fc.constant(E), k: fc.integer({ min: 1, max: Math.min(E, 4) }) }),
  )
  .chain(({ L, E, k }) =>
    fc
      .array(
        fc.record({
          tokens: fc.array(fc.array(fc.option(kSubset(E, k), { freq: 5, nil: null }), { minLength: L, maxLength: L }), {
            maxLength: 6,
          }),
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
        const w = await TraceWriter.create(
          f,
          { model: { id: 'm', moeLayers: L, experts: E, topK: k } },
          { gzipLevel: 1 },
        );
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
      shape: fc.record({
        moeLayers: fc.constant(L),
        experts: fc.constant(E),
        topK: fc.integer({ min: 1, max: Math.min(E, 8) }),
      }),
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
      fc.property(
        knobsArb,
        fc.array(fc.integer({ min: 1, max: 7 }), { minLength: 1, maxLength: 6 }),
        fc.option(fc.constantFrom('x', 'y')),
        (g, chunks, task) => {
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
          for (let l = 0; l < L; l++)
            for (let t = 0; t < T; t++)
              for (let j = 0; j < k; j++) expect(all[(t * L + l) * k + j]).toBe(viaRoute[l]![t * k + j]);
        },
      ),
      { numRuns: 150 },
    );
  });
});

/**
 * The synthetic router's generative model (workloads/synthetic/router.ts, header), written
 * plainly: tokens [0, T) of request `seed`, token-major (L·k per token), every uniform drawn
 * with `Rng.next()`, the previous tokens read from the output.
 */
function referenceTokens(
  model: SyntheticModel,
  seed: string,
  task: string | undefined,
  prompt: number,
  T: number,
): Int32Array {
  const { L, E, k } = model;
  const stride = L * k;
  const aff = new Rng(`${seed}/affinity`);
  const base = model.distributionFor(task, model.clusters > 1 ? aff.int(model.clusters) : 0);
  let table = base.alias;
  if (Number.isFinite(model.betaR)) {
    table = new AliasTables(L, E);
    const w = new Float64Array(E);
    const scratch = aliasScratch(E);
    for (let l = 0; l < L; l++) {
      dirichletInto(aff, model.betaR, base.weights, l * E, E, w, 0);
      table.build(l, w, 0, scratch);
    }
  }
  const rng = new Rng(`${seed}/tokens`);
  const out = new Int32Array(T * stride);
  for (let t = 0; t < T; t++) {
    const pos = t * stride;
    if (t < model.startTokens) {
      out.set(model.startPaths.subarray(t * stride, (t + 1) * stride), pos);
      continue;
    }
    const tau = t < prompt ? model.tauPrefill : model.tau;
    const cont = t > 0 && tau > 0 && rng.next() < tau;
    if (!cont && model.psi > 0 && rng.next() < model.psi) {
      const v = model.sharedAlias.sample(0, rng.next());
      out.set(model.sharedPaths.subarray(v * stride, (v + 1) * stride), pos);
      continue;
    }
    // The token continued: the previous one, or with memory μ the lag-th previous (lag ≤ 64).
    let src = t - 1;
    if (cont && model.mu > 0) src = t - Math.min(t, 64, 1 + Math.floor(Math.log(1 - rng.next()) / Math.log(model.mu)));
    for (let l = 0; l < L; l++) {
      const b = pos + l * k;
      const taken = (e: number, j: number): boolean => out.subarray(b, b + j).includes(e);
      for (let j = 0; j < k; j++) {
        let e = -1;
        if (cont && (model.rho >= 1 || rng.next() < model.rho)) e = out[src * stride + l * k + j]!;
        else if (l > 0 && model.gamma > 0 && rng.next() < model.gamma)
          e = model.successor[(l - 1) * E + out[b - k + j]!]!;
        if (e >= 0 && taken(e, j)) e = -1;
        for (let tries = 0; tries < 16 && e < 0; tries++) {
          e = table.sample(l, rng.next());
          if (taken(e, j)) e = -1;
        }
        if (e < 0) e = table.sampleExcluding(l, rng.next(), out, b, b + j);
        out[b + j] = e;
      }
    }
  }
  return out;
}

describe('synthetic router against its model', () => {
  it('generates the reference tokens, every uniform as Rng.next() draws it', () => {
    fc.assert(
      fc.property(
        knobsArb,
        fc.option(fc.constantFrom('x', 'y'), { nil: undefined }),
        fc.nat(40),
        fc.integer({ min: 1, max: 80 }),
        fc.nat(1000),
        (g, task, prompt, T, id) => {
          const model = new SyntheticModel(g.shape, g.knobs);
          const seed = `s:${id}`;
          const router = new SyntheticRequestRouter(model, seed, task, prompt, T);
          const got = new Int32Array(T * model.L * model.k);
          router.generateAll(T, got);
          expect(got).toEqual(referenceTokens(model, seed, task, prompt, T));
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('aggregate routing', () => {
  it('counts are integers in [0, tokens] summing to tokens·k, in both regimes', () => {
    fc.assert(
      fc.property(
        fc
          .integer({ min: 1, max: 50 })
          .chain((E) => fc.record({ E: fc.constant(E), k: fc.integer({ min: 1, max: Math.min(E, 8) }) })),
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
          const agg = new InclusionAggregateRouter(
            1,
            E,
            k,
            q,
            (_l, r, out) => void drawDistinctUniform(r, E, k, out, 0),
            new Rng(String(seed)),
          );
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
