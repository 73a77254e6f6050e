/**
 * MoE-Lens execution (policies/moe-lens/execution.ts) on Mixtral-8x7B / the A40 testbed: iterations are
 * simulated (not memoised away), every sequence generates exactly its tokens, the analytic model
 * is computed beside the run, more KV capacity means no more preemptions, contention never
 * speeds a run up, and the run is deterministic.
 */
import { describe, expect, it } from 'vitest';
import { loadHardware, loadModel, loadRuntime } from '../../hardware-profiles/load.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import { runLens, type LensSettings } from '../../policies/moe-lens/execution.ts';

const model = loadModel('mixtral-8x7b');
const hw = loadHardware('a40-xeon8380-750gb');
const cost = createCostModel(model, hw, { runtime: loadRuntime('moe-lightning') });
const reqs = Array.from({ length: 600 }, (_, id) => ({
  id,
  promptTokens: 50 + ((id * 37) % 100),
  outputTokens: 32 + ((id * 13) % 33),
}));
const run = (s: Partial<LensSettings> = {}) =>
  runLens({
    model,
    hardware: hw,
    cost,
    requests: reqs,
    settings: { kvCapacityBytes: 2e9, pageTokens: 16, contention: false, ...s },
  });

describe('MoE-Lens executor', () => {
  it('generates exactly every output token, over simulated iterations', () => {
    const r = run();
    const want = reqs.reduce((a, q) => a + q.outputTokens, 0);
    expect(r.generatedTokens).toBe(want);
    // every prefill (first or re-prefill after a preemption) generates one token, every decode step one
    expect(r.decodeTokens + reqs.length + r.preemptions).toBe(want);
    expect(r.iterations).toBeGreaterThanOrEqual(Math.max(...reqs.map((q) => q.outputTokens)));
    expect(r.peakPages).toBeLessThanOrEqual(r.pages);
    expect(r.throughputTokPerS).toBeCloseTo(want / (r.endNs / 1e9), 6);
    expect(r.analytic.t).toBeGreaterThan(0);
    expect(r.analytic.tGpuItTokens).toBe(r.nReal);
    // 2 GB of KV on Mixtral (128 KiB per token) = 15 258 tokens: tight, so the run preempts.
    expect(r.preemptions).toBeGreaterThan(0);
    expect(r.recomputedTokens).toBeGreaterThan(0);
  });

  it('more KV capacity: no more preemptions; contention never faster; deterministic', () => {
    const small = run();
    const big = run({ kvCapacityBytes: 20e9 });
    expect(big.preemptions).toBeLessThanOrEqual(small.preemptions);
    const cont = run({ contention: true });
    expect(cont.endNs).toBeGreaterThanOrEqual(small.endNs);
    expect(run()).toEqual(small);
  });
});

describe('sharedStage (host DRAM shared by CPU attention and weight DMA), by hand', () => {
  it('oversubscribed: the CPU window stretches and the DMA slows', async () => {
    const { sharedStage } = await import('../../sim/throughput/pipelines/vslpipe.ts');
    // CPU α: 10 ns reading 100 B (10 B/ns); DMA 200 B in 20 ns alone (10 B/ns); capacity 10 B/ns.
    // Window: 10·(10+10)/10 = 20 ns, DMA at 5 B/ns → 100 B; phase 1 = max(20, 5) = 20; phase 2 =
    // max(0, 4) = 4 → DMA 40 B more by 24; 60 B left at 10 B/ns → 30 ns.
    expect(sharedStage(10, 100, 5, 0, 0, 4, 200, 20, 10)).toEqual({ stageNs: 30, slowed: true });
    // Ample capacity: max(10 + 4, 20) = 20, not slowed.
    expect(sharedStage(10, 100, 5, 0, 0, 4, 200, 20, 1000)).toEqual({ stageNs: 20, slowed: false });
  });
});

describe('MoE-Lens trace records', () => {
  it('one blocked slice per preemption iteration, admit / firstToken / finish once per request', () => {
    let blocked = 0;
    let preemptedInSlices = 0;
    const phases = new Map<string, number>();
    const r = runLens({
      model,
      hardware: hw,
      cost,
      requests: reqs,
      settings: { kvCapacityBytes: 2e9, pageTokens: 16, contention: false },
      sink: {
        onBlocked: (b) => {
          blocked++;
          preemptedInSlices += Number(/preempted (\d+)/.exec(b.reason)![1]);
          expect(b.endNs).toBeGreaterThan(b.startNs);
        },
        onRequest: (_id, phase) => phases.set(phase, (phases.get(phase) ?? 0) + 1),
      },
    });
    expect(blocked).toBeGreaterThan(0);
    expect(preemptedInSlices).toBe(r.preemptions);
    for (const ph of ['admit', 'firstToken', 'finish']) expect(phases.get(ph)).toBe(reqs.length);
  });
});
