/**
 * The quickstart (`npm run experiment` with no argument) shows why the field exists: at its
 * arrival rate on-demand, an LRU expert cache and MoE-Infinity differ in TTFT, TPOT and
 * throughput, in that order of merit, and its default table fits 120 columns with every key
 * column. (Not a golden: the numbers may move with the models; the ordering must not.)
 */
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfigFile } from '../../experiments/config/load.ts';
import { runExperiment } from '../../experiments/runner.ts';
import { REPO_ROOT } from '../helpers/cli.ts';

describe('the quickstart', () => {
  it('on-demand < LRU < MoE-Infinity in TTFT, TPOT and throughput; the table fits 120 columns', async () => {
    const loaded = loadConfigFile(path.join(REPO_ROOT, 'experiments/quickstart.yaml'));
    const r = await runExperiment(loaded);
    expect(r.runs.map((x) => x.policy)).toEqual(['on-demand', 'lru', 'moe-infinity']);
    const [od, lru, mi] = r.runs.map((x) => x.metrics);
    const strictlyBetter = (f: (m: typeof od) => number, lowerIsBetter: boolean) => {
      const [a, b, c] = [f(od!), f(lru!), f(mi!)];
      if (lowerIsBetter) expect([a > b, b > c], `${a} > ${b} > ${c}`).toEqual([true, true]);
      else expect([a < b, b < c], `${a} < ${b} < ${c}`).toEqual([true, true]);
    };
    strictlyBetter((m) => m!.ttftMs.p50, true);
    strictlyBetter((m) => m!.tpotMs.p50, true);
    strictlyBetter((m) => m!.throughputTokPerS, false);
    // Throughput differs by more than noise: the rate is above what on-demand can serve.
    expect(mi!.throughputTokPerS / od!.throughputTokPerS).toBeGreaterThan(1.05);
    for (const m of [od!, lru!, mi!]) {
      // Means of per-request parts add up (each rounded to 6 significant digits).
      expect(Math.abs(m.ttftQueueMs.mean + m.ttftServiceMs.mean - m.ttftMs.mean) / m.ttftMs.mean).toBeLessThan(1e-5);
      expect(Math.abs(m.pcieGBps - (m.h2dBytes + m.d2hBytes) / m.makespanS / 1e9) / m.pcieGBps).toBeLessThan(1e-5);
    }
    const width = Math.max(...r.table.split('\n').map((l) => [...l].length));
    expect(width).toBeLessThanOrEqual(120);
    expect(r.table).not.toMatch(/left out/);
    for (const h of ['TTFT', 'TPOT', 'tok/s', 'hit', 'blocked', 'GB/s', 'VRAM', 'sim s', 'queue', 'service'])
      expect(r.table).toContain(h);
  });
});
