/**
 * The summary statistics every metric is built on (`sim/metrics/summary.ts`: percentile, distribution,
 * round6, safeDiv) and the edge cases of the MoE-CAP totals (`sim/metrics/cap-totals.ts`: the union of
 * request intervals, decode-only totals, the phase-time mix of ω and CPU layers), each against a value
 * worked out by hand in the comment beside it. Formula checks only: no judged figure is asserted.
 */
import { describe, expect, it } from 'vitest';
import type { ModelProfile } from '../../hardware-profiles/types.ts';
import { servingCapTotals, throughputCapTotals } from '../../sim/metrics/cap-totals.ts';
import { distribution, percentileSorted, round6, safeDiv } from '../../sim/metrics/summary.ts';
import type { ServingOutcome } from '../../sim/serving/serving-executor.ts';
import type { ThroughputOutcome } from '../../sim/throughput/throughput-executor.ts';

describe('percentileSorted (linear interpolation, numpy default)', () => {
  const five = [10, 20, 30, 40, 50];
  it('exact ranks: pos = (n − 1) · q lands on an element', () => {
    expect(percentileSorted(five, 0)).toBe(10);
    expect(percentileSorted(five, 0.25)).toBe(20); // pos 1
    expect(percentileSorted(five, 0.5)).toBe(30); // pos 2
    expect(percentileSorted(five, 1)).toBe(50); // pos 4
  });
  it('between ranks: a + (b − a) · (pos − lo)', () => {
    expect(percentileSorted(five, 0.9)).toBeCloseTo(46, 9); // pos 3.6: 40 + 10 · 0.6
    expect(percentileSorted([1, 2, 4, 8], 0.5)).toBe(3); // pos 1.5: 2 + 2 · 0.5
    expect(percentileSorted([1, 2, 4, 8], 0.75)).toBeCloseTo(5, 9); // pos 2.25: 4 + 4 · 0.25
  });
  it('empty → 0; one element → that element for every q', () => {
    expect(percentileSorted([], 0.5)).toBe(0);
    expect(percentileSorted([], 0)).toBe(0);
    for (const q of [0, 0.5, 0.99, 1]) expect(percentileSorted([7], q)).toBe(7);
  });
});

describe('distribution', () => {
  it('empty: all four fields 0', () => {
    expect(distribution([])).toEqual({ mean: 0, p50: 0, p90: 0, p99: 0 });
  });
  it('one element: every field is that element', () => {
    expect(distribution([4])).toEqual({ mean: 4, p50: 4, p90: 4, p99: 4 });
  });
  it('unsorted input is sorted numerically (not as strings), and not modified', () => {
    const v = [3, 10, 2];
    const d = distribution(v);
    expect(v).toEqual([3, 10, 2]);
    expect(d.mean).toBe(5); // 15 / 3
    expect(d.p50).toBe(3); // sorted [2, 3, 10], pos 1 (as strings: [10, 2, 3] → 2)
    expect(d.p90).toBeCloseTo(8.6, 9); // pos 1.8: 3 + 7 · 0.8
    expect(d.p99).toBeCloseTo(9.86, 9); // pos 1.98: 3 + 7 · 0.98
  });
  it('a longer reversed input', () => {
    const d = distribution([50, 40, 30, 20, 10]);
    expect(d.mean).toBe(30);
    expect(d.p50).toBe(30);
    expect(d.p90).toBeCloseTo(46, 9);
    expect(d.p99).toBeCloseTo(49.6, 9); // pos 3.96: 40 + 10 · 0.96
  });
});

describe('round6 and safeDiv', () => {
  it('six significant digits; halves of exact binary values round away from zero', () => {
    expect(round6(123456.5)).toBe(123457);
    expect(round6(-123456.5)).toBe(-123457);
    expect(round6(1234567)).toBe(1234570);
    expect(round6(0.1234564)).toBe(0.123456);
    expect(round6(-0.00123456789)).toBe(-0.00123457);
    expect(round6(2.5)).toBe(2.5);
  });
  it('zero keeps its sign; non-finite values pass through', () => {
    expect(round6(0)).toBe(0);
    expect(round6(-0)).toBe(-0); // Object.is: −0 stays −0 ((−0).toPrecision gives "0.00000")
    expect(round6(Number.POSITIVE_INFINITY)).toBe(Number.POSITIVE_INFINITY);
    expect(round6(Number.NEGATIVE_INFINITY)).toBe(Number.NEGATIVE_INFINITY);
    expect(round6(Number.NaN)).toBeNaN();
  });
  it('safeDiv: a / b for b > 0, else 0', () => {
    expect(safeDiv(6, 3)).toBe(2);
    expect(safeDiv(1, 0)).toBe(0);
    expect(safeDiv(0, 0)).toBe(0);
    expect(safeDiv(1, -2)).toBe(0);
  });
});

const model = {
  layers: 2,
  moeLayers: 2,
  experts: 4,
  topK: 1,
  derived: { kvBytesPerToken: 8 },
} as unknown as ModelProfile;

describe('servingCapTotals: forward time is the union of [admit, finish]', () => {
  const req = (admitNs: number, finishNs: number) => ({ admitNs, finishNs, promptTokens: 1, emittedTokens: 1 });
  it('overlapping, nested, touching and disjoint intervals given out of order', () => {
    // [0,5] ∪ [3,8] = [0,8] (8); [10,20] ∪ [12,15] ∪ [20,25] = [10,25] (15); [30,30] and [40,35] add 0.
    const o = {
      requests: [req(10, 20), req(12, 15), req(0, 5), req(40, 35), req(20, 25), req(30, 30), req(3, 8)],
      counters: { iterations: 7, activationRatioSum: 0 },
    } as unknown as ServingOutcome;
    const t = servingCapTotals(o, model);
    expect(t.forwardNs).toBe(23);
    expect(t.tokens).toBe(7); // one prompt token each, no decode step
  });
  it('a first group not starting at 0: an interval inside it, then one that extends it', () => {
    // [2,10] ∪ [3,4] ∪ [6,12] = [2,12]; then [20,21] apart: 10 + 1.
    const o = {
      requests: [req(20, 21), req(6, 12), req(3, 4), req(2, 10)],
      counters: { iterations: 4, activationRatioSum: 0 },
    } as unknown as ServingOutcome;
    expect(servingCapTotals(o, model).forwardNs).toBe(11);
  });
});

describe('throughputCapTotals', () => {
  const zero = {
    passes: 0,
    ns: 0,
    processedTokens: 0,
    generatedTokens: 0,
    activatedPairs: 0,
    passActivatedPairs: 0,
    expertLayerPairs: 0,
  };
  const plan = {
    prefill: { config: { omega: 1, gpuLayers: 0 } },
    decode: { config: { omega: 0, gpuLayers: 1 } },
  };
  const both = {
    requests: 2,
    promptTokens: 4, // P
    outputTokensMax: 4, // O
    plan,
    // Per GEMM (micro-batches each count theirs) 9 and 11; per pass, each pair once: 5 and 7 (what MoE-CAP counts).
    prefill: {
      ...zero,
      passes: 1,
      ns: 1e9,
      processedTokens: 8,
      activatedPairs: 9,
      passActivatedPairs: 5,
      expertLayerPairs: 3,
    },
    decode: {
      ...zero,
      passes: 3,
      ns: 3e9,
      generatedTokens: 6,
      activatedPairs: 11,
      passActivatedPairs: 7,
      expertLayerPairs: 3,
    },
  } as unknown as ThroughputOutcome;

  it('both phases: contexts, KV, recorded activations and the phase-time mix', () => {
    const t = throughputCapTotals(both, model);
    expect(t.passes).toBe(4);
    expect(t.tokens).toBe(14);
    // Prefill: 8 / 4 = 2 prompts × P(P+1)/2 = 10 → 20; decode: 6 tokens × (P + O/2 = 6) → 36.
    expect(t.contextTokenSum).toBe(56);
    expect(t.kvReadBytes).toBe((8 + 36) * 8);
    expect(t.activatedPairs).toBe(12);
    expect(t.activations).toBeUndefined();
    expect(t.forwardNs).toBe(4e9);
    // ω: (1 · 1 s + 0 · 3 s) / 4 s; CPU layers: prefill (2 − 0)/2 = 1, decode (2 − 1)/2 = 0.5 → (1 + 1.5) / 4.
    expect(t.cpuAttentionFrac).toBe(0.25);
    expect(t.cpuLayerFrac).toBe(0.625);
  });

  it('phases that split the work differently: each phase by its own fractions (the prefill is not charged by the mix)', () => {
    const t = throughputCapTotals(both, model);
    const [pre, dec] = t.phases!;
    // Prefill: 1 pass, 8 tokens, context 20, 5 pairs, KV 8 tokens, 1 s, ω 1, all layers on the CPU.
    expect(pre).toEqual({
      passes: 1,
      tokens: 8,
      contextTokenSum: 20,
      activatedPairs: 5,
      kvReadBytes: 8 * 8,
      forwardNs: 1e9,
      cpuAttentionFrac: 1,
      cpuLayerFrac: 1,
    });
    // Decode: 3 passes, 6 tokens, context 36, 7 pairs, KV 36 tokens, 3 s, ω 0, one of two layers on the CPU.
    expect(dec).toEqual({
      passes: 3,
      tokens: 6,
      contextTokenSum: 36,
      activatedPairs: 7,
      kvReadBytes: 36 * 8,
      forwardNs: 3e9,
      cpuAttentionFrac: 0,
      cpuLayerFrac: 0.5,
    });
    // The same fractions in both phases (or one phase only): no split.
    const same = { ...both, plan: { prefill: plan.decode, decode: plan.decode } } as unknown as ThroughputOutcome;
    expect(throughputCapTotals(same, model).phases).toBeUndefined();
    expect(throughputCapTotals(both, model, 'decode').phases).toBeUndefined();
  });

  it('a continuous run: prefill time booked as decode, prefill attention where the execution says it ran', () => {
    // MoE-Lens-like: one config (ω = 1) for both phases in the plan, mixed iterations booked as
    // decode passes (the prefill phase has tokens, no passes, no time), prefill attention on the GPU.
    const lensPlan = {
      prefill: { config: { omega: 1, gpuLayers: 2 } },
      decode: { config: { omega: 1, gpuLayers: 2 } },
    };
    const lens = {
      ...both,
      plan: lensPlan,
      attentionOnCpu: { prefill: 0, decode: 1 },
      prefill: { ...zero, processedTokens: 8 },
      decode: { ...zero, passes: 3, ns: 3e9, generatedTokens: 6 },
    } as unknown as ThroughputOutcome;
    const [pre, dec] = throughputCapTotals(lens, model).phases!;
    // Prefill: 8 / 4 = 2 prompts × P(P+1)/2 = 10 → context 20, KV 8 tokens, on the GPU; decode: 6 × 6 = 36 on the CPU.
    expect([pre!.tokens, pre!.contextTokenSum, pre!.kvReadBytes, pre!.forwardNs, pre!.cpuAttentionFrac]).toEqual([
      8,
      20,
      8 * 8,
      0,
      0,
    ]);
    expect([dec!.tokens, dec!.contextTokenSum, dec!.cpuAttentionFrac]).toEqual([6, 36, 1]);
    // Without the execution's word, the plan's ω charges the prefill's attention to the CPU as well (no split).
    const { attentionOnCpu: _, ...planOnly } = lens as unknown as Record<string, unknown>;
    const t = throughputCapTotals(planOnly as unknown as ThroughputOutcome, model);
    expect(t.phases).toBeUndefined();
    expect(t.cpuAttentionFrac).toBe(1);
  });

  it("only 'decode': the prefill phase is left out of every total", () => {
    const t = throughputCapTotals(both, model, 'decode');
    expect(t.passes).toBe(3);
    expect(t.tokens).toBe(6);
    expect(t.contextTokenSum).toBe(36);
    expect(t.activatedPairs).toBe(7);
    expect(t.forwardNs).toBe(3e9);
    expect(t.cpuAttentionFrac).toBe(0);
    expect(t.cpuLayerFrac).toBe(0.5);
  });

  it('uniform estimate scales with MoE layers; no passes → traced zeros, no label, no NaN', () => {
    const est = {
      ...both,
      plan: undefined,
      prefill: zero,
      decode: { ...zero, passes: 2, ns: 1e9, generatedTokens: 4 },
    } as unknown as ThroughputOutcome;
    // 2 passes × 2 MoE layers × 4 experts × (1 − 0.75²) = 7.
    const t = throughputCapTotals(est, model);
    expect(t.activatedPairs).toBeCloseTo(7, 9);
    expect(t.activations).toBe('uniform-estimate');
    const none = { ...both, prefill: zero, decode: zero } as unknown as ThroughputOutcome;
    const n = throughputCapTotals(none, model);
    expect(n.activatedPairs).toBe(0);
    expect(n.activations).toBeUndefined();
    expect(n.cpuAttentionFrac).toBe(0);
    expect(n.cpuLayerFrac).toBe(0);
  });

  it('more GPU layers than the model has → 0 CPU layers; a model of 0 layers → 0, not NaN', () => {
    const over = { ...both, plan: { ...plan, prefill: { config: { omega: 0, gpuLayers: 5 } } } };
    expect(throughputCapTotals(over as unknown as ThroughputOutcome, model).cpuLayerFrac).toBe(0.375);
    const flat = { ...model, layers: 0 } as unknown as ModelProfile;
    expect(throughputCapTotals(both, flat).cpuLayerFrac).toBe(0);
  });
});
