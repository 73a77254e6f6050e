/**
 * The workload config section and `buildWorkload`: each routing kind, lengths and tasks
 * precedence, shifts, replay, shape checks, path resolution, and the predictor contract.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { RngStreams } from '../../sim/kernel/rng.ts';
import { UserError } from '../../sim/kernel/errors.ts';
import { processedTokens, type Workload } from '../../sim/workload.ts';
import { WorkloadSchema, buildWorkload } from '../../workloads/config.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'moesim-wl-config-'));
const MIXTRAL = { modelId: 'mixtral-8x7b', moeLayers: 32, experts: 8, topK: 2 };
const TOY = { modelId: 'toy', moeLayers: 2, experts: 4, topK: 2 };

async function build(raw: unknown, shape = MIXTRAL, seed = 1, baseDir?: string): Promise<Workload> {
  return buildWorkload(WorkloadSchema.parse(raw), shape, new RngStreams(seed), baseDir);
}

async function userError(p: Promise<unknown>): Promise<UserError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof UserError) return e;
    throw e;
  }
  throw new Error('expected a UserError');
}

function routeAll(w: Workload, id: number): Int32Array[] {
  const spec = w.requests[id]!;
  const router = w.routing.forRequest(spec);
  const T = processedTokens(spec);
  const out: Int32Array[] = [];
  for (let l = 0; l < w.routing.moeLayers; l++) {
    const o = new Int32Array(T * w.routing.topK);
    router.route(l, 0, T, o);
    out.push(o);
  }
  return out;
}

/** A toy trace (L=2, E=4, k=2) in the moesim format. */
function toyTrace(name: string, withPredictions = false): string {
  const f = path.join(dir, name);
  const lines = [
    { format: 'moesim-trace', version: 1, model: { id: 'toy', moeLayers: 2, experts: 4, topK: 2 } },
    {
      id: 'a',
      promptTokens: 2,
      task: 'chat',
      tokens: [
        [
          [0, 1],
          [2, 3],
        ],
        [
          [1, 2],
          [3, 0],
        ],
        [[0, 3], null],
      ],
      ...(withPredictions
        ? {
            predictions: [
              [
                [3, 2, 1, 0],
                [0, 1],
              ],
              [null, null],
              [[2], null],
            ],
          }
        : {}),
    },
    {
      id: 'b',
      promptTokens: 0,
      prefillRecorded: false,
      task: 'code',
      tokens: [
        [
          [2, 3],
          [0, 1],
        ],
      ],
    },
  ];
  writeFileSync(f, gzipSync(lines.map((l) => JSON.stringify(l)).join('\n')));
  return f;
}

describe('workload config', () => {
  it('keeps the original fields working (uniform routing by default)', async () => {
    const w = await build({
      requests: 20,
      arrival: { kind: 'poisson', ratePerS: 2 },
      promptTokens: { kind: 'uniform', min: 4, max: 8 },
      outputTokens: { kind: 'fixed', tokens: 3 },
    });
    expect(w.requests.map((r) => r.id)).toEqual([...Array(20).keys()]);
    for (let i = 1; i < 20; i++) expect(w.requests[i]!.arrivalNs).toBeGreaterThanOrEqual(w.requests[i - 1]!.arrivalNs);
    for (const r of w.requests) {
      expect(r.promptTokens).toBeGreaterThanOrEqual(4);
      expect(r.promptTokens).toBeLessThanOrEqual(8);
      expect(r.outputTokens).toBe(3);
    }
    expect(w.describe).toMatch(/20 requests; Poisson arrivals 2\/s; prompt uniform 4–8, output 3; uniform routing/);
    const routes = routeAll(w, 0);
    for (const o of routes) for (let t = 0; t < o.length; t += 2) expect(o[t]).not.toBe(o[t + 1]);
  });

  it('uniform routing is a function of (seed, request, token, layer): call order does not matter', async () => {
    const cfg = { requests: 3, promptTokens: { kind: 'fixed', tokens: 5 }, outputTokens: { kind: 'fixed', tokens: 2 } };
    const a = await build(cfg);
    const b = await build(cfg);
    const rb2 = routeAll(b, 2);
    const ra0 = routeAll(a, 0);
    expect(routeAll(a, 2)).toEqual(rb2);
    expect(routeAll(b, 0)).toEqual(ra0);
  });

  it('lengths are required when nothing else provides them', async () => {
    const e = await userError(build({ requests: 2, outputTokens: { kind: 'fixed', tokens: 1 } }));
    expect(e.field).toBe('workload.promptTokens');
  });

  it('Gamma arrivals and dataset lengths', async () => {
    const w = await build({
      requests: 200,
      arrival: { kind: 'gamma', ratePerS: 10, cv: 3 },
      promptTokens: { kind: 'dataset', name: 'rag' },
      outputTokens: { kind: 'dataset', name: 'mmlu' },
    });
    expect(w.requests.every((r) => r.outputTokens === 1 && r.promptTokens >= 200 && r.promptTokens <= 1843)).toBe(true);
    expect(w.describe).toMatch(/Gamma arrivals 10\/s cv 3/);
  });

  it('tasks and a workload shift', async () => {
    const w = await build({
      requests: 100,
      promptTokens: { kind: 'fixed', tokens: 4 },
      outputTokens: { kind: 'dataset', name: 'task' },
      tasks: { gsm8k: 1, mmlu: 1 },
      shift: { atRequest: 60, tasks: { longbench: 1 } },
    });
    const before = new Set(w.requests.slice(0, 60).map((r) => r.task));
    expect(before).toEqual(new Set(['gsm8k', 'mmlu']));
    expect(new Set(w.requests.slice(60).map((r) => r.task))).toEqual(new Set(['longbench']));
    expect(w.requests.filter((r) => r.task === 'mmlu').every((r) => r.outputTokens === 1)).toBe(true);
    expect(w.describe).toMatch(/tasks gsm8k 50%, mmlu 50%, shifting at request 60 to longbench 100%/);
  });

  it('synthetic routing from a named profile, with a knob override', async () => {
    const w = await build({
      requests: 4,
      promptTokens: { kind: 'fixed', tokens: 16 },
      outputTokens: { kind: 'fixed', tokens: 8 },
      routing: { kind: 'synthetic', profile: 'mixtral-8x7b', temporalReuse: 0.9 },
    });
    expect(w.describe).toMatch(/synthetic routing "mixtral-8x7b" with temporalReuse=0.9/);
    for (const o of routeAll(w, 1)) {
      for (let t = 0; t < o.length; t += 2) {
        expect(o[t]).toBeGreaterThanOrEqual(0);
        expect(o[t]).toBeLessThan(8);
        expect(o[t]).not.toBe(o[t + 1]);
      }
    }
    const counts = new Float64Array(8);
    w.aggregate!.counts(3, 5000, counts);
    expect(counts.reduce((a, b) => a + b, 0)).toBe(10_000);
  });

  it("a profile of another model shape → UserError naming the config's field and the profile's file", async () => {
    const e = await userError(
      build(
        {
          requests: 1,
          promptTokens: { kind: 'fixed', tokens: 1 },
          outputTokens: { kind: 'fixed', tokens: 1 },
          routing: { kind: 'synthetic', profile: 'mixtral-8x7b' },
        },
        TOY,
      ),
    );
    // The mistake is the config's (the runner adds its file); the message says which profile file.
    expect(e.file).toBeUndefined();
    expect(e.field).toBe('workload.routing.profile');
    expect(e.message).toMatch(
      /^profile "mixtral-8x7b" \(.*workloads\/profiles\/mixtral-8x7b\.json\) is for 32 MoE layers but model toy has 2$/,
    );
  });

  it('an unknown profile → UserError', async () => {
    const e = await userError(
      build({
        requests: 1,
        promptTokens: { kind: 'fixed', tokens: 1 },
        outputTokens: { kind: 'fixed', tokens: 1 },
        routing: { kind: 'synthetic', profile: 'gpt-9' },
      }),
    );
    expect(e.message).toMatch(/no synthetic profile named "gpt-9"/);
    // The config's field (the runner adds its file), not the file looked for.
    expect([e.file, e.field, e.value]).toEqual([undefined, 'workload.routing.profile', 'gpt-9']);
  });

  describe('trace replay', () => {
    const trace = toyTrace('toy.jsonl.gz');

    it('takes lengths and tasks from the trace, resolves the path against baseDir, cycles and says so', async () => {
      const w = await build({ requests: 5, routing: { kind: 'trace', path: 'toy.jsonl.gz' } }, TOY, 1, dir);
      expect(w.requests.map((r) => [r.promptTokens, r.outputTokens, r.task])).toEqual([
        [2, 2, 'chat'],
        [1, 2, 'code'],
        [2, 2, 'chat'],
        [1, 2, 'code'],
        [2, 2, 'chat'],
      ]);
      expect(w.describe).toMatch(/routing replayed from toy\.jsonl\.gz \(2 requests, cycled 3× to make 5\)/);
      expect(w.describe).toMatch(/2 decode-only trace requests without a recorded prompt get a 1-token prompt/);
      const r0 = routeAll(w, 0);
      expect(Array.from(r0[0]!)).toEqual([0, 1, 1, 2, 0, 3]);
      expect(Array.from(r0[1]!.subarray(0, 4))).toEqual([2, 3, 3, 0]); // the null entry is filled
      const r1 = routeAll(w, 1); // decode-only: token 1 (the first decode input) is record 0
      expect(Array.from(r1[0]!.subarray(2, 4))).toEqual([2, 3]);
    });

    it('config lengths override the trace; tokens beyond the recording are filled with valid experts', async () => {
      const w = await build(
        { requests: 2, routing: { kind: 'trace', path: trace }, outputTokens: { kind: 'fixed', tokens: 6 } },
        TOY,
      );
      for (const o of routeAll(w, 0)) for (let t = 0; t < o.length; t += 2) expect(o[t]).not.toBe(o[t + 1]);
    });

    it('a trace of another model shape → UserError naming the trace file', async () => {
      const e = await userError(build({ requests: 1, routing: { kind: 'trace', path: trace } }, MIXTRAL));
      expect(e.file).toBe(trace);
      expect(e.field).toBe('line 1: model.moeLayers');
    });

    it('predictions carried in the trace, with the profile for gaps', async () => {
      const f = toyTrace('pred.jsonl.gz', true);
      const w = await build({ requests: 1, routing: { kind: 'trace', path: f }, prediction: { kind: 'trace' } }, TOY);
      expect(w.predictor!.predict(0, 0, 0, 1)).toEqual([3, 2, 1, 0]);
      expect(w.predictor!.predict(0, 1, 0, 1).slice(0, 2)).toEqual([0, 1]);
      const gap = w.predictor!.predict(0, 0, 1, 2);
      expect([...gap].sort()).toEqual([0, 1, 2, 3]);
      const e = await userError(
        build({ requests: 1, routing: { kind: 'trace', path: trace }, prediction: { kind: 'trace' } }, TOY),
      );
      expect(e.message).toMatch(/carries no predictions/);
    });
  });

  it('arrival replay from a request log supplies arrival times, lengths and tasks', async () => {
    const f = path.join(dir, 'log.csv');
    writeFileSync(f, 'timestamp,promptTokens,outputTokens,task\n10,5,2,x\n12.5,7,3,y\n');
    const w = await build({ requests: 2, arrival: { kind: 'replay', path: 'log.csv' } }, MIXTRAL, 1, dir);
    expect(w.requests.map((r) => [r.arrivalNs, r.promptTokens, r.outputTokens, r.task])).toEqual([
      [0, 5, 2, 'x'],
      [2_500_000_000, 7, 3, 'y'],
    ]);
  });
});

describe('expert predictor', () => {
  const cfg = (accuracy: unknown) => ({
    requests: 40,
    promptTokens: { kind: 'fixed', tokens: 8 },
    outputTokens: { kind: 'fixed', tokens: 8 },
    routing: { kind: 'synthetic', profile: 'mixtral-8x7b' },
    prediction: { kind: 'profile', accuracy },
  });

  it('hits the configured per-layer accuracy (true expert in the predicted top-k), worse in the first layers', async () => {
    const w = await build(cfg({ first: 0.3, steady: 0.9, rampLayers: 4 }));
    expect(w.predictor!.accuracyByLayer![0]).toBeCloseTo(0.3, 12);
    expect(w.predictor!.accuracyByLayer![2]).toBeCloseTo(0.6, 12);
    const hits = [0, 0];
    const total = [0, 0];
    for (const spec of w.requests) {
      const router = w.routing.forRequest(spec);
      const truth = new Int32Array(2);
      for (let t = 0; t < processedTokens(spec); t++) {
        for (const [slot, layer] of [
          [0, 0],
          [1, 20],
        ] as const) {
          const ranked = w.predictor!.predict(spec.id, layer, t, t + 1); // before routing
          router.route(layer, t, t + 1, truth);
          for (const e of truth) {
            total[slot]!++;
            if (ranked.slice(0, 2).includes(e)) hits[slot]!++;
          }
        }
      }
    }
    // 600 true experts per layer: binomial standard error ≤ 0.02.
    expect(Math.abs(hits[0]! / total[0]! - 0.3)).toBeLessThan(0.07);
    expect(Math.abs(hits[1]! / total[1]! - 0.9)).toBeLessThan(0.05);
  });

  it('ranks every expert once, deterministically, and never changes routing', async () => {
    const a = await build(cfg(0.7));
    const b = await build(cfg(0.7));
    const p1 = a.predictor!.predict(3, 5, 0, 8);
    expect([...p1].sort((x, y) => x - y)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    a.predictor!.predict(3, 6, 2, 9);
    expect(a.predictor!.predict(3, 5, 0, 8)).toEqual(p1);
    expect(routeAll(a, 3)).toEqual(routeAll(b, 3));
  });

  it('oracle: the predicted top-k is the true set', async () => {
    const w = await build({ ...cfg(1), prediction: { kind: 'oracle' } });
    const spec = w.requests[0]!;
    const truth = new Int32Array(2);
    w.routing.forRequest(spec).route(7, 0, 1, truth);
    expect([...w.predictor!.predict(0, 7, 0, 1).slice(0, 2)].sort()).toEqual([...truth].sort());
  });

  it('kind none → no predictor', async () => {
    const w = await build({ ...cfg(1), prediction: { kind: 'none' } });
    expect(w.predictor).toBeUndefined();
  });
});
