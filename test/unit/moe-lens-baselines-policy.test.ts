/**
 * The MoE-Lens setups of moe-lightning-like and vllm-like (`setup: moe-lens`; labelled
 * `lens-moe-lightning`, `lens-vllm` in the experiments) as policies through the
 * throughput executor (each plan's execution: scheduler + closed-form pipeline): by name from the registry, the same metrics as
 * `moe-lens` (throughput, `schedule.*`), every token generated, the MoE-Lightning-like batch
 * within its memory caps (host: 0.8 × its setting; GPU: 0.86 × usable VRAM), the best of the two
 * CPU-memory settings, and infeasible runs with a reason.
 */
import { describe, expect, it } from 'vitest';
import { loadHardware, loadModel, loadRuntime } from '../../hardware-profiles/load.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import { Rng } from '../../sim/kernel/rng.ts';
import { ns } from '../../sim/kernel/time.ts';
import { throughputMetrics } from '../../sim/metrics/throughput-metrics.ts';
import { ThroughputExecutor } from '../../sim/throughput/throughput-executor.ts';
import type { RequestSpec, Workload } from '../../sim/workload.ts';
import { builtinPolicy } from '../../policies/registry.ts';

const model = loadModel('mixtral-8x7b');
const hw = loadHardware('a40-xeon8380-750gb');
const cost = createCostModel(model, hw, { runtime: loadRuntime('moe-lightning') });
const requests: RequestSpec[] = Array.from({ length: 400 }, (_, id) => ({
  id,
  arrivalNs: ns(0),
  promptTokens: 20 + (id % 80),
  outputTokens: 16,
}));
const workload: Workload = {
  requests,
  routing: { moeLayers: 0, experts: 0, topK: 0, forRequest: () => ({ route: () => {} }) },
  describe: 'test',
};

/** The MoE-Lens setup of a baseline: `lens-moe-lightning` / `lens-vllm` are moe-lightning-like / vllm-like with setup: moe-lens. */
const LENS_SETUP: Record<string, string> = { 'lens-moe-lightning': 'moe-lightning-like', 'lens-vllm': 'vllm-like' };

function run(name: string, params: Record<string, unknown>, phase: 'both' | 'decode' = 'both') {
  const def = builtinPolicy(LENS_SETUP[name] ?? name)!;
  const all = LENS_SETUP[name] ? { ...params, setup: 'moe-lens' } : params;
  const policy = def.createThroughput!(def.params.parse(all), { rng: new Rng('p'), model, hardware: hw, workload });
  const ex = new ThroughputExecutor({
    model,
    hardware: hw,
    cost,
    workload,
    policy,
    fallbackRng: new Rng('f'),
    config: {
      phase,
      contextBucketTokens: 64,
      kvLayout: 'paged',
      kvPageTokens: 16,
      packetBytes: 64 << 20,
      memoise: true,
    },
  });
  return ex.run();
}

describe('lens-moe-lightning policy', () => {
  it('runs by name, generates every token, keeps its batch within the host cap of the chosen setting', () => {
    // 1 GB of KV: the batch is bounded by it (≈ 75 tokens × 128 KiB per sequence).
    const o = run('lens-moe-lightning', { kvCapacityGB: 1, usableVramGiB: 16 });
    const m = throughputMetrics(o);
    expect(m.feasible).toBe(true);
    expect(m.outputTokens).toBe(400 * 16);
    const s = m.schedule!;
    expect(s.batchSeqs).toBeLessThanOrEqual(s.hostCapSeqs as number);
    expect(s.batchSeqs).toBeLessThanOrEqual(s.gpuCapSeqs as number);
    expect(s.cpuMemoryUse as number).toBeLessThanOrEqual(0.8);
    expect(s.preemptions).toBe(0);
    // Batches of N (fewer when the sequences' own prompts + g_max fill the pages first).
    expect(s.batches as number).toBeGreaterThanOrEqual(Math.ceil(400 / (s.batchSeqs as number)));
    expect(s.peakPages as number).toBeLessThanOrEqual(s.pages as number);
    expect(m.throughputTokPerS).toBeGreaterThan(0);
  });

  it('a fixed batch size is honoured; padding the plan to the longest prompt shrinks the batch', () => {
    const fixed = throughputMetrics(
      run('lens-moe-lightning', { kvCapacityGB: 10, batchSeqs: 50, memorySetting: 'large' }),
    );
    expect(fixed.schedule!.batchSeqs).toBe(50);
    expect(fixed.schedule!.batches).toBe(8);
    const mean = throughputMetrics(run('lens-moe-lightning', { kvCapacityGB: 1, memorySetting: 'normal' }));
    const padded = throughputMetrics(
      run('lens-moe-lightning', { kvCapacityGB: 1, memorySetting: 'normal', planPrompt: 'max' }),
    );
    expect(padded.schedule!.batchSeqs as number).toBeLessThan(mean.schedule!.batchSeqs as number);
  });

  it('is infeasible with a reason outside phase both', () => {
    const d = run('lens-moe-lightning', {}, 'decode');
    expect(d.feasible).toBe(false);
    expect(d.infeasibleReason).toMatch(/phase both/);
  });
});

describe('lens-vllm policy', () => {
  it('runs by name, generates every token, reports its GPU KV', () => {
    const m = throughputMetrics(run('lens-vllm', { usableVramGiB: 16 }));
    expect(m.feasible).toBe(true);
    expect(m.outputTokens).toBe(400 * 16);
    expect(m.schedule!.gpuKvGB as number).toBeGreaterThan(0);
    expect(m.schedule!.peakPages as number).toBeLessThanOrEqual(m.schedule!.pages as number);
  });

  it('is infeasible with a reason when VRAM holds no KV page', () => {
    const o = run('lens-vllm', { usableVramGiB: 3 });
    expect(o.feasible).toBe(false);
    expect(o.infeasibleReason).toMatch(/leaves no KV page/);
  });
});

describe('moe-lens params', () => {
  it('event-level options without pipeline: events are errors naming the field, not silently ignored', () => {
    const def = builtinPolicy('moe-lens')!;
    expect(() => def.params.parse({ qkvD2H: true })).toThrow(/qkvD2H[\s\S]*needs pipeline: events/);
    expect(() => def.params.parse({ packetBytes: 100_000_000 })).toThrow(/packetBytes[\s\S]*needs pipeline: events/);
    expect(() => def.params.parse({ pipeline: 'events', qkvD2H: true, packetBytes: 100_000_000 })).not.toThrow();
  });
});

describe('setup parameter', () => {
  it('MoE-Lens-setup parameters under setup: moe-gen are errors naming the field', () => {
    const l = builtinPolicy('moe-lightning-like')!;
    expect(() => l.params.parse({ kvCapacityGB: 70 })).toThrow(/kvCapacityGB[\s\S]*needs setup: moe-lens/);
    expect(() => l.params.parse({ setup: 'moe-lens', kvCapacityGB: 70, memorySetting: 'normal' })).not.toThrow();
    const v = builtinPolicy('vllm-like')!;
    expect(() => v.params.parse({ swapSpaceGiB: 8 })).toThrow(/swapSpaceGiB[\s\S]*needs setup: moe-lens/);
    expect(() => v.params.parse({ setup: 'moe-lens', swapSpaceGiB: 8, maxNumSeqs: 64 })).not.toThrow();
  });
});
