/**
 * MoE-Lens analytic model (paper §5 Eqs. 2–14), each formula checked by hand on the small case
 * of `../shared/reference/settings-moe-lens.md` §8 ("Hand-checked unit test (derived)"):
 * p = 10, g = 4, b = 4, M = 1000 tokens (N = 250), K = 100, δ = 2 s (model 2 bytes at 1 B/s).
 */
import { describe, expect, it } from 'vitest';
import { lensAnalytic, pagesPerSeqSum, profilerNReal } from '../../policies/moe-lens/analytic.ts';

const base = {
  promptTokens: 10,
  genTokens: 4,
  pageTokens: 4,
  kvCapacityTokens: 1000,
  sequences: 100,
  modelBytes: 2,
  ioBytesPerS: 1,
};

describe('MoE-Lens analytic model by hand', () => {
  it('Stage 1: δ, PME (closed and sum), T_max, overlap enlargement', () => {
    const a = lensAnalytic({ ...base, tGpuTokPerS: 50 });
    expect(a.deltaS).toBe(2);
    // Eq. 3 closed form: 2·14/((20+4)·4) = 28/96
    expect(a.pme).toBeCloseTo(28 / 96, 12);
    // sum form: 14/(10+11+12+13+14) = 14/60
    expect(a.pmeSum).toBeCloseTo(14 / 60, 12);
    // Eq. 4: PME·M/δ = 0.29167·1000/2 = 145.83; T_max = min(145.83, 50) = 50
    expect(a.tMemTokPerS).toBeCloseTo((28 / 96) * 500, 9);
    expect(a.tMaxTokPerS).toBe(50);
    expect(a.tMaxGenTokPerS).toBeCloseTo((50 * 4) / 14, 9);
    // Eq. 7: 14/(10+2)
    expect(a.kvEffFactor).toBeCloseTo(14 / 12, 12);
  });

  it('Stage 2: q, T1, and the GPU-bound branch (T_GPU,it = 100 < q(p+g))', () => {
    // ⌈10/4⌉+⌈11/4⌉+⌈12/4⌉+⌈13/4⌉+⌈14/4⌉ = 3+3+3+4+4 = 17
    expect(pagesPerSeqSum(10, 4, 4)).toBe(17);
    const a = lensAnalytic({ ...base, tGpuTokPerS: 50 }); // T_GPU,it default = 50·2 = 100
    expect(a.pages).toBe(250);
    expect(a.q).toBeCloseTo(250 / 17, 12); // 14.706
    expect(a.qTokensPerIt).toBeCloseTo((250 / 17) * 14, 9); // 205.9
    // Eq. 10: 100·4/((100/q + 4)·2) = 400/((6.8+4)·2) = 18.519
    expect(a.t1).toBeCloseTo(400 / (10.8 * 2), 9);
    expect(a.tGpuItTokens).toBe(100);
    expect(a.stage2Regime).toBe('gpu');
    // Eq. 11: 100·10/14 = 71.43
    expect(a.tPrefillTokensPerIt).toBeCloseTo(1000 / 14, 9);
    // Eq. 12: 8 + (1000 − (71.43+100)/2·4)/71.43 = 17.2
    const tp = 1000 / 14;
    expect(a.iterations).toBeCloseTo(8 + (1000 - ((tp + 100) / 2) * 4) / tp, 9);
    expect(a.iterations).toBeCloseTo(17.2, 9);
    // Eq. 13: 400/(17.2·2) = 11.628; Eq. 14: min(18.519, 11.628)
    expect(a.t2).toBeCloseTo(400 / (17.2 * 2), 9);
    expect(a.t).toBeCloseTo(400 / 34.4, 9);
  });

  it('Stage 2 memory-bound branch (T_GPU,it = 500 ≥ q(p+g)): T = T1', () => {
    const a = lensAnalytic({ ...base, tGpuTokPerS: 50, tGpuItTokens: 500 });
    expect(a.stage2Regime).toBe('memory');
    expect(a.t2).toBeUndefined();
    expect(a.t).toBeCloseTo(400 / 21.6, 9);
  });

  it('Stage 2 outside the formula (It ≤ 2g): T = T1, flagged', () => {
    // K·p small: K = 1 → It = 8 + (10 − 4·85.71)/71.43 < 8
    const a = lensAnalytic({ ...base, sequences: 1, tGpuTokPerS: 50 });
    expect(a.stage2Regime).toBe('gpu-formula-invalid');
    expect(a.t).toBe(a.t1);
  });

  it('Eq. 1/2/5 extras: intensity k/E, tokens to saturate, host bandwidth', () => {
    // Mixtral-like: E = 8, k = 2, C = 150e12, B = 32e9 → 150e12/32e9·4 = 18750 (settings §9c.1)
    const a = lensAnalytic({
      ...base,
      tGpuTokPerS: 50,
      experts: 8,
      topK: 2,
      gpuFlops: 150e12,
      ioBytesPerS: 32e9,
      modelBytes: 64e9,
      kvCapacityBytes: 128e9,
    });
    expect(a.intensityPerToken).toBe(0.25);
    expect(a.saturateTokens).toBeCloseTo(18750, 6);
    // (128+64)/64·32e9 = 96e9
    expect(a.hostBwNeededBytesPerS).toBeCloseTo(96e9, 0);
  });

  it('profiler: line fit and n_real = (t_transfer − a)/s', () => {
    // t = 0.01 + 0.001·n; transfer 0.15 s → n = 140
    const r = profilerNReal(
      [
        [100, 0.11],
        [200, 0.21],
        [400, 0.41],
      ],
      0.15,
    );
    expect(r.slopeS).toBeCloseTo(0.001, 12);
    expect(r.interceptS).toBeCloseTo(0.01, 12);
    expect(r.nReal).toBe(140);
  });
});

describe('MoE-Lens analytic model input checks', () => {
  it('each input out of range is refused on its own, the others valid', () => {
    const ok = { ...base, tGpuTokPerS: 50 };
    expect(() => lensAnalytic(ok)).not.toThrow();
    const bad: Partial<typeof ok>[] = [
      { promptTokens: -1 },
      { genTokens: 0 },
      { pageTokens: 0 },
      { kvCapacityTokens: 0 },
      { sequences: 0 },
      { modelBytes: 0 },
      { ioBytesPerS: 0 },
      { tGpuTokPerS: 0 },
    ];
    for (const b of bad) expect(() => lensAnalytic({ ...ok, ...b })).toThrow(/^lensAnalytic: invalid input \{/);
  });
});
