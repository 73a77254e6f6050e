/**
 * Arrival processes (mean rates, burstiness, replay of request logs) and length distributions
 * (dataset means, truncation, sources).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { Rng } from '../../sim/kernel/rng.ts';
import { UserError } from '../../sim/kernel/errors.ts';
import { arrivalTimesS, fitGammaArrivals } from '../../workloads/arrivals.ts';
import { readRequestLog, parseTime } from '../../workloads/request-log.ts';
import { DATASETS, DATASET_NAMES, resolveDatasetName } from '../../workloads/datasets.ts';
import {
  LengthSchema,
  TruncatedLogNormal,
  lengthSampler,
  empiricalQuantiles,
  normalCdf,
  normalQuantile,
} from '../../workloads/lengths.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'moesim-arrivals-'));

function gaps(times: number[]): number[] {
  return times.map((t, i) => t - (i ? times[i - 1]! : 0));
}
const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
const cv = (xs: number[]): number => {
  const m = mean(xs);
  return Math.sqrt(xs.reduce((a, x) => a + (x - m) ** 2, 0) / (xs.length - 1)) / m;
};

describe('arrival processes', () => {
  it('offline: everything at t = 0', () => {
    expect(arrivalTimesS({ kind: 'offline' }, 5, new Rng('a')).timesS).toEqual([0, 0, 0, 0, 0]);
  });

  it('Poisson: mean rate within 2 % over 50 000 arrivals, gaps with cv ≈ 1', () => {
    const { timesS } = arrivalTimesS({ kind: 'poisson', ratePerS: 5 }, 50_000, new Rng('p'));
    expect(50_000 / timesS[timesS.length - 1]!).toBeCloseTo(5, 0);
    expect(Math.abs(50_000 / timesS[timesS.length - 1]! - 5) / 5).toBeLessThan(0.02);
    expect(Math.abs(cv(gaps(timesS)) - 1)).toBeLessThan(0.03);
  });

  it.each([0.5, 1, 3])('Gamma cv=%s: mean rate within 2 %, cv within 5 %', (c) => {
    const { timesS } = arrivalTimesS({ kind: 'gamma', ratePerS: 2, cv: c }, 200_000, new Rng(`g${c}`));
    const g = gaps(timesS);
    expect(Math.abs(1 / mean(g) - 2) / 2).toBeLessThan(0.02);
    expect(Math.abs(cv(g) - c) / c).toBeLessThan(0.05);
    const fit = fitGammaArrivals(timesS);
    expect(Math.abs(fit.cv - c) / c).toBeLessThan(0.05);
  });

  it('Gamma cv=0: evenly spaced', () => {
    expect(arrivalTimesS({ kind: 'gamma', ratePerS: 4, cv: 0 }, 3, new Rng('x')).timesS).toEqual([0.25, 0.5, 0.75]);
  });

  it('times are non-decreasing', () => {
    const { timesS } = arrivalTimesS({ kind: 'gamma', ratePerS: 1, cv: 4 }, 1000, new Rng('m'));
    for (let i = 1; i < timesS.length; i++) expect(timesS[i]!).toBeGreaterThanOrEqual(timesS[i - 1]!);
  });
});

describe('request-log replay', () => {
  it('reads an Azure-style CSV (TIMESTAMP,ContextTokens,GeneratedTokens), relative and sorted', async () => {
    const f = path.join(dir, 'azure.csv');
    writeFileSync(
      f,
      'TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:15:46.1805900,879,21\n',
    );
    const log = await readRequestLog(f);
    expect(log.map((r) => r.promptTokens)).toEqual([879, 374, 396]);
    expect(log[0]!.arrivalS).toBe(0);
    expect(log[1]!.arrivalS).toBeCloseTo(0.5, 9);
    expect(log[2]!.arrivalS).toBeCloseTo(4.814578, 5); // epoch seconds in a double: ~0.2 µs resolution
    expect(log[2]!.outputTokens).toBe(109);
  });

  it('reads gzipped JSONL, and cycles when more requests are asked for, shifted by span + mean gap', async () => {
    const f = path.join(dir, 'log.jsonl.gz');
    writeFileSync(f, gzipSync('{"arrivalS": 0, "task": "a"}\n{"arrivalS": 2, "promptTokens": 5}\n'));
    const log = await readRequestLog(f);
    expect(log).toEqual([
      { arrivalS: 0, task: 'a' },
      { arrivalS: 2, promptTokens: 5 },
    ]);
    const r = arrivalTimesS({ kind: 'replay', path: f, timeScale: 0.5 }, 5, new Rng('r'), log);
    expect(r.timesS).toEqual([0, 1, 2, 3, 4]);
    expect(r.cycles).toBe(3);
  });

  it('bad rows → UserError naming file, line and column', async () => {
    const f = path.join(dir, 'bad.csv');
    writeFileSync(f, 'TIMESTAMP,ContextTokens\n2023-01-01 00:00:00,10\nyesterday,5\n');
    await expect(readRequestLog(f)).rejects.toThrow(UserError);
    await readRequestLog(f).catch((e: UserError) => expect(e.field).toBe('line 3: timestamp'));
    const g = path.join(dir, 'nohead.csv');
    writeFileSync(g, 'a,b\n1,2\n');
    await readRequestLog(g).catch((e: UserError) => expect(e.message).toMatch(/no time column/));
  });

  it('parses times', () => {
    expect(parseTime('12.5')).toBe(12.5);
    expect(parseTime('1970-01-01T00:01:00Z')).toBe(60);
    expect(parseTime('1970-01-01 01:00:00+01:00')).toBe(0);
    expect(parseTime('soon')).toBeUndefined();
  });
});

describe('length distributions', () => {
  it('every dataset of DESIGN §6 is there, with a source', () => {
    for (const name of [
      'mmlu',
      'gsm8k',
      'chatbot-arena',
      'mt-bench',
      'rag',
      'aime',
      'longbench',
      'flan',
      'big-bench',
    ]) {
      expect(DATASET_NAMES).toContain(name);
      expect(DATASETS[name as keyof typeof DATASETS].source.length).toBeGreaterThan(20);
    }
    expect(resolveDatasetName('BigBench')).toBe('big-bench');
    expect(resolveDatasetName('MT_Bench')).toBe('mt-bench');
  });

  it('MMLU has exactly one output token', () => {
    const s = lengthSampler({ kind: 'dataset', name: 'mmlu' }, 'output');
    expect(s(new Rng('x'))).toBe(1);
  });

  it.each(DATASET_NAMES)('%s: sampled prompt/output means within 3 % of the stated means, within bounds', (name) => {
    const rng = new Rng(`len:${name}`);
    for (const which of ['prompt', 'output'] as const) {
      const spec = DATASETS[name][which];
      const sample = lengthSampler({ kind: 'dataset', name }, which);
      const xs = Array.from({ length: 40_000 }, () => sample(rng));
      if ('fixed' in spec) {
        expect(new Set(xs)).toEqual(new Set([spec.fixed]));
        continue;
      }
      expect(Math.abs(mean(xs) - spec.meanTokens) / spec.meanTokens).toBeLessThan(0.03);
      expect(Math.min(...xs)).toBeGreaterThanOrEqual(spec.min);
      expect(Math.max(...xs)).toBeLessThanOrEqual(spec.max);
    }
  });

  it('the truncated log-normal is solved so that its truncated mean is the stated mean', () => {
    const d = new TruncatedLogNormal({ meanTokens: 926, cv: 0.4, min: 200, max: 1843 });
    expect(d.mean()).toBeCloseTo(926, 6);
  });

  it('dataset lengths can be clamped, and picked per task', () => {
    const clamp = lengthSampler({ kind: 'dataset', name: 'aime', max: 256 }, 'output');
    const rng = new Rng('c');
    for (let i = 0; i < 100; i++) expect(clamp(rng)).toBeLessThanOrEqual(256);
    const byTask = lengthSampler({ kind: 'dataset', name: 'task' }, 'output');
    expect(byTask(rng, 'mmlu')).toBe(1);
    expect(() => byTask(rng, 'poetry')).toThrow(UserError);
  });

  it('schema: unknown datasets and inverted ranges are rejected', () => {
    expect(LengthSchema.safeParse({ kind: 'dataset', name: 'nope' }).success).toBe(false);
    expect(LengthSchema.safeParse({ kind: 'uniform', min: 5, max: 2 }).success).toBe(false);
    expect(LengthSchema.safeParse({ kind: 'fixed', tokens: 3 }).success).toBe(true);
  });

  it('empirical quantiles round-trip a distribution', () => {
    const q = empiricalQuantiles([1, 2, 3, 4, 100], 5);
    expect(q).toEqual([1, 2, 3, 4, 100]);
    const s = lengthSampler({ kind: 'empirical', quantiles: q }, 'prompt');
    const rng = new Rng('e');
    for (let i = 0; i < 100; i++) {
      const x = s(rng);
      expect(x).toBeGreaterThanOrEqual(1);
      expect(x).toBeLessThanOrEqual(100);
    }
  });

  it('normal CDF and quantile are inverse', () => {
    for (const p of [1e-6, 0.01, 0.3, 0.5, 0.9, 0.999]) expect(normalCdf(normalQuantile(p))).toBeCloseTo(p, 6);
  });
});
