/**
 * MoEpic: LCP priorities and victims worked by hand, the configurator on a two-layer world, a
 * property that it never exceeds the budget, MoEpic over random small worlds (segment-level
 * invariants, determinism), and the hf-eager-moepic calibration: its stated fit and every figure
 * quoted from it recomputed (not a tolerance around the paper's 57 ms).
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadHardware, loadRuntime } from '../../hardware-profiles/load.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import { RngStreams } from '../../sim/kernel/rng.ts';
import { msToNs } from '../../sim/kernel/time.ts';
import { servingMetrics } from '../../sim/metrics/serving-metrics.ts';
import { ServingExecutor } from '../../sim/serving/serving-executor.ts';
import { LcpScores } from '../../policies/cache/lcp.ts';
import {
  expertSplit,
  layerModels,
  SplitStats,
  vramAllocation,
  type ModuleTimes,
} from '../../policies/moepic/configurator.ts';
import { createMoepic, MoepicParams } from '../../policies/moepic/policy.ts';
import { buildWorkload, WorkloadSchema } from '../../workloads/config.ts';
import { shrinkModel } from '../helpers/serving-world.ts';
import { SegmentChecker } from '../helpers/segment-checker.ts';

describe('LCP: P = μ · ρ^(ν/ω)', () => {
  it('priorities and the victim, by hand (ω = 2, ρ = 0.5)', () => {
    const s = new LcpScores(1, 3, 2, 0.5);
    // Token 1: expert 0. Token 2: expert 0. Token 3: expert 1. Token 4: expert 2.
    s.observe(0, [1, 0, 0], 1);
    s.observe(0, [1, 0, 0], 1);
    s.observe(0, [0, 1, 0], 1);
    s.observe(0, [0, 0, 1], 1);
    // μ = (2, 1, 1); ν = (2, 1, 0): P0 = 2·0.5^1 = 1, P1 = 1·0.5^0.5 = 0.7071, P2 = 1.
    expect(s.priority(0)).toBeCloseTo(1, 12);
    expect(s.priority(1)).toBeCloseTo(Math.SQRT1_2, 12);
    expect(s.priority(2)).toBeCloseTo(1, 12);
    // Victim: lowest P (expert 1); between the tied 0 and 2, the less recently activated (0).
    expect([0, 1, 2].sort(s.evictFirst)).toEqual([1, 0, 2]);
    expect(s.ranked(0)).toEqual([2, 0, 1]);
    // LFU-like as ρ → 1, LRU-like as ρ → 0.
    const lfu = new LcpScores(1, 2, 128, 0.999999);
    const lru = new LcpScores(1, 2, 1, 1e-6);
    for (const x of [lfu, lru]) {
      for (let i = 0; i < 5; i++) x.observe(0, [1, 0], 1);
      x.observe(0, [0, 1], 1);
    }
    expect(lfu.ranked(0)[0]).toBe(0);
    expect(lru.ranked(0)[0]).toBe(1);
  });
});

const times: ModuleTimes = { attNs: 300_000, moeNs: 1_000_000, headNs: 500_000, loadNs: 2_000_000 };

describe('cache configurator (Algorithm 1)', () => {
  it('moves budget toward the starved layer of a two-layer world', () => {
    // 4 experts, top-1. Layer 0: unpredictable (the predictor never names the true expert) and a
    // flat hit curve; layer 1: perfectly predicted, one hot expert. Uniform start: 1 expert each.
    const s = new SplitStats(2, 4);
    const rank = Int32Array.from([0, 1, 2, 3]);
    for (let t = 0; t < 400; t++) {
      const e0 = t % 4;
      s.observe(0, rank, [e0], [(e0 + 1) % 4, (e0 + 2) % 4, (e0 + 3) % 4, e0].slice(0, 3));
      s.observe(1, rank, [0], [0, 1, 2, 3]);
    }
    const models = layerModels(s, 1);
    const before = expertSplit([1, 1], models, 4, 1, times);
    const r = vramAllocation([1, 1], 0.02, models, 4, 1, times);
    expect(r.v[0]!).toBeGreaterThan(1);
    expect(r.v[1]!).toBeLessThan(1);
    expect(r.v[0]! + r.v[1]!).toBeCloseTo(2, 9);
    const sumExp = (x: Float64Array) => x[0]! + x[1]!;
    expect(sumExp(r.split.exposed)).toBeLessThan(sumExp(before.exposed));
  });

  it('never exceeds the total budget nor a layer N experts (random statistics)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 2, max: 8 }),
        fc.integer({ min: 1, max: 3 }),
        fc.double({ min: 0.05, max: 1, noNaN: true }),
        fc.integer({ min: 0, max: 1000 }),
        (L, E, k0, fill, seed) => {
          const K = Math.min(k0, E);
          const s = new SplitStats(L, E);
          let x = seed + 1;
          const rnd = () => ((x = (x * 1103515245 + 12345) % 2147483648), x / 2147483648);
          for (let t = 0; t < 50; t++)
            for (let l = 0; l < L; l++) {
              const rank = Int32Array.from({ length: E }, (_, i) => i).sort(() => rnd() - 0.5);
              const act = [...new Set(Array.from({ length: K }, () => Math.floor(rnd() * E)))];
              const pred = Array.from({ length: E }, (_, i) => i).sort(() => rnd() - 0.5);
              s.observe(l, rank, act, pred);
            }
          const total = fill * L * E;
          const v0 = Array.from({ length: L }, () => total / L);
          const r = vramAllocation(v0, 0.05 * total, layerModels(s, K), E, K, { ...times, loadNs: 1e5 + rnd() * 4e6 });
          let sum = 0;
          for (let l = 0; l < L; l++) {
            expect(r.v[l]!).toBeGreaterThanOrEqual(0);
            expect(r.v[l]!).toBeLessThanOrEqual(E + 1e-9);
            // θ·C ≈ V (the cache holds V_i expert units) and C ≤ N.
            expect(r.split.cache[l]!).toBeLessThanOrEqual(E);
            if (r.split.cache[l]! > 0)
              expect(r.split.theta[l]! * r.split.cache[l]!).toBeLessThanOrEqual(r.v[l]! + 1e-9);
            sum += r.v[l]!;
          }
          expect(sum).toBeLessThanOrEqual(total + 1e-6);
        },
      ),
      { numRuns: 60 },
    );
  });
});

async function runMoepic(o: {
  layers: number;
  experts: number;
  topK: number;
  budget: number;
  raw: Record<string, unknown>;
  seed: number;
  requests: number;
}) {
  const model = shrinkModel('mixtral-8x7b', { layers: o.layers, denseLeading: 0, experts: o.experts, topK: o.topK });
  const hardware = loadHardware('a6000-xeon8358p-512gb');
  const runtime = loadRuntime('hf-eager-moepic');
  const cost = createCostModel(model, hardware, { runtime });
  const streams = new RngStreams(o.seed);
  const workload = await buildWorkload(
    WorkloadSchema.parse({
      requests: o.requests,
      arrival: { kind: 'offline' },
      promptTokens: { kind: 'uniform', min: 1, max: 40 },
      outputTokens: { kind: 'uniform', min: 1, max: 30 },
      routing: { kind: 'uniform' },
      prediction: { kind: 'profile', accuracy: 0.7 },
    }),
    { modelId: model.id, moeLayers: model.moeLayers, experts: model.experts, topK: model.topK },
    streams,
  );
  const params = MoepicParams.parse({ budgetExperts: o.budget, tau: 50, ...o.raw });
  const policy = createMoepic('moepic', params, model, streams.stream('policy:moepic'));
  const checker = new SegmentChecker(model.experts, model.moeLayers * model.experts, model.derived.bytesPerExpert);
  const x = new ServingExecutor({
    model,
    hardware,
    cost,
    workload,
    policy,
    runtime,
    config: {
      batching: 'static',
      maxBatchSize: 1,
      maxWaitNs: msToNs(0),
      maxBatchTokens: 8192,
      bufferSlots: params.bufferExperts ?? model.topK,
      packetBytes: 16 * 1024 * 1024,
      preloadAllExperts: false,
    },
    sink: checker,
    maxEvents: 2_000_000,
  });
  const outcome = x.run();
  return { outcome, violations: checker.finish(outcome), policy, budgetBytes: o.budget * model.derived.bytesPerExpert };
}

describe('moepic over random small worlds', () => {
  it('segment invariants hold, the segment cache stays within V_e, the same seed gives the same run', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          layers: fc.integer({ min: 1, max: 4 }),
          experts: fc.integer({ min: 2, max: 8 }),
          topK: fc.integer({ min: 1, max: 2 }),
          budgetFrac: fc.double({ min: 0, max: 0.9, noNaN: true }),
          theta: fc.constantFrom(0, 0.1, 0.25, 0.5, 0.75, 1),
          prefetch: fc.constantFrom('speculative', 'random', 'none'),
          cache: fc.constantFrom('lcp', 'rnd'),
          configurator: fc.boolean(),
          seed: fc.integer({ min: 0, max: 1000 }),
        }),
        async (w) => {
          const topK = Math.min(w.topK, w.experts);
          const budget = Math.floor(w.budgetFrac * w.layers * w.experts * 100) / 100;
          const o = {
            layers: w.layers,
            experts: w.experts,
            topK,
            budget,
            seed: w.seed,
            requests: 4,
            raw: { theta: w.theta, prefetch: w.prefetch, cache: w.cache, configurator: w.configurator },
          };
          const a = await runMoepic(o);
          expect(a.violations).toEqual([]);
          // The configurator's budgets never exceed V_e (the segment cache's byte cap itself is enforced by the executor, which throws).
          const c = a.policy.config();
          expect(c.v.reduce((x, y) => x + y, 0)).toBeLessThanOrEqual(budget + 1e-6);
          c.cache.forEach((n, l) => expect(n * c.theta[l]!).toBeLessThanOrEqual(c.v[l]! + 1e-9));
          const b = await runMoepic(o);
          expect(JSON.stringify(servingMetrics(b.outcome))).toBe(JSON.stringify(servingMetrics(a.outcome)));
        },
      ),
      { numRuns: 25 },
    );
  }, 120_000);
});

describe('hf-eager-moepic calibration: the stated fit and the figures quoted from it', () => {
  // The one calibration figure is the paper's GPU-Rich Qwen TPOT, 57 ms (settings card §2). The
  // profile's sources state a grid of host speeds and the TPOT each gave, the fitted 6.9 µs and
  // its TPOT, and hf-eager's TPOT on the same run; FIDELITY.md quotes the fitted TPOT and the
  // uncalibrated Mixtral-HQQ one. Each must be what experiments/moepic/gpu-rich.yaml gives now.
  it('grid, fit and hf-eager’s 44 µs are what gpu-rich.yaml gives; the line meets 57 ms at 6.9 µs', async () => {
    const { runExperiment } = await import('../../experiments/runner.ts');
    const { validateConfig } = await import('../../experiments/config/load.ts');
    const YAML = (await import('yaml')).default;
    const { mkdtempSync, readFileSync, writeFileSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const path = await import('node:path');
    const { REPO_ROOT } = await import('../helpers/cli.ts');
    const at = (f: string) => path.join(REPO_ROOT, f);
    type Profile = Record<string, unknown> & { sources: string[] };
    const profile = JSON.parse(readFileSync(at('hardware-profiles/runtimes/hf-eager-moepic.json'), 'utf8')) as Profile;
    const text = profile.sources.join(' ');
    const grid = text.match(
      /dispatch = sync = ([\d., ]+) µs gave ([\d., ]+) ms \(linear, ([\d.]+) ms per µs\); ([\d.]+) µs → ([\d.]+) ms/,
    );
    expect(grid, 'sources quote the fit grid').not.toBeNull();
    const list = (x: string) => x.split(',').map((v) => v.trim());
    const us = list(grid![1]!);
    const quoted = list(grid![2]!);
    const dir = mkdtempSync(path.join(tmpdir(), 'moesim-moepic-fit-'));
    const variant = (u: string): string => {
      const file = path.join(dir, `hf-eager-moepic-${u}.json`);
      const id = `hf-eager-moepic-${u.replace('.', 'p')}`;
      writeFileSync(file, JSON.stringify({ ...profile, id, dispatchUs: Number(u), syncUs: Number(u) }));
      return file;
    };
    const raw = YAML.parse(readFileSync(at('experiments/moepic/gpu-rich.yaml'), 'utf8')) as Record<string, unknown>;
    const runtimes = [...us.map(variant), 'hf-eager-moepic', 'hf-eager', 'hf-eager-moepic-hqq'];
    const config = validateConfig({ ...raw, sweep: { runtime: runtimes } });
    const r = await runExperiment({ config, file: at('experiments/moepic/gpu-rich.yaml'), baseDir: REPO_ROOT });
    const tpot = (runtime: string, model = 'qwen1.5-moe-a2.7b') => {
      const run = r.runs.find((x) => x.params['runtime'] === runtime && x.params['model'] === model)!;
      return (run.metrics as { tpotMs: { mean: number } }).tpotMs.mean;
    };
    us.forEach((u, i) => expect(tpot(variant(u)).toFixed(1), `${u} µs`).toBe(quoted[i]));
    const first = tpot(variant(us[0]!));
    const last = tpot(variant(us[us.length - 1]!));
    const slope = (last - first) / (Number(us[us.length - 1]) - Number(us[0]));
    expect(slope.toFixed(2)).toBe(grid![3]);
    // The fitted point: the profile's value, where the line reaches 57 ms (to 0.1 µs), and its TPOT.
    expect(profile['dispatchUs']).toBe(Number(grid![4]));
    expect(profile['syncUs']).toBe(Number(grid![4]));
    expect((Number(us[0]) + (57 - first) / slope).toFixed(1)).toBe(grid![4]);
    const fitted = tpot('hf-eager-moepic');
    expect(fitted.toFixed(1)).toBe(grid![5]);
    // hf-eager's 44 µs on the same run, and its ratio to the measurement.
    const eager = text.match(/gives ([\d.]+) ms for this measurement \(([\d.]+)×\)/);
    expect(eager?.[1]).toBe(tpot('hf-eager').toFixed(0));
    expect(eager?.[2]).toBe((tpot('hf-eager') / 57).toFixed(1));
    // FIDELITY.md: the fitted TPOT, and the uncalibrated GPU-Rich Mixtral-HQQ.
    const fidelity = readFileSync(at('experiments/moepic/FIDELITY.md'), 'utf8');
    expect(fidelity).toContain(`(ours ${fitted.toFixed(1)} ms;`);
    expect(fidelity).toContain(`GPU-Rich Mixtral-HQQ ${tpot('hf-eager-moepic-hqq', 'mixtral-8x7b-hqq').toFixed(1)} ms`);
  }, 180_000);
});
