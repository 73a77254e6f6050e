/**
 * Quantised expert formats: bits per weight of the block formats, llama.cpp's Q4_K_M mix rule
 * and its fallback for rows that do not divide into 256-weight blocks, against hand-computed
 * bytes per expert.
 */
import { describe, expect, it } from 'vitest';
import {
  bitsPerWeight,
  expertBytes,
  expertBytesByLayer,
  formatMix,
  meanExpertBytesPerParam,
  useMoreBits,
} from '../../sim/cost/formats.ts';

const QWEN3_30B = { hiddenSize: 2048, expertIntermediateSize: 768, ffnMatrices: 3 } as const;

describe('block formats', () => {
  it('bits per weight match the block layouts', () => {
    expect(bitsPerWeight('q4_k')).toBe(4.5);
    expect(bitsPerWeight('q6_k')).toBe(6.5625);
    expect(bitsPerWeight('q8_0')).toBe(8.5);
    expect(bitsPerWeight('iq4_xs')).toBe(4.25);
    expect(bitsPerWeight('iq3_s')).toBe(3.4375);
    expect(bitsPerWeight('iq2_s')).toBe(2.5625);
    expect(bitsPerWeight('mxfp4')).toBe(4.25);
    expect(bitsPerWeight('nvfp4')).toBe(4.5);
    expect(bitsPerWeight('mlx-4bit-g64')).toBe(4.5);
    expect(bitsPerWeight('hqq-4bit-g64')).toBe(4.5);
    expect(bitsPerWeight('bf16')).toBe(16);
  });

  it('unknown formats name themselves', () => {
    expect(() => formatMix('q4_k_x')).toThrow(/q4_k_x/);
  });
});

describe('Q4_K_M mix rule', () => {
  it('use_more_bits picks 24 of 48 layers: first/last 6 and every third in between', () => {
    const more = Array.from({ length: 48 }, (_, i) => i).filter((i) => useMoreBits(i, 48));
    expect(more).toEqual([0, 1, 2, 3, 4, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35, 38, 41, 42, 43, 44, 45, 46, 47]);
  });

  it('Qwen3-30B-A3B: 2 654 208 B per expert in a Q4_K down layer, 3 059 712 B in a Q6_K one', () => {
    // gate = up = 768 rows × 2048/256 blocks × 144 B = 884 736; down Q4_K = 2048 × 3 × 144 = 884 736;
    // down Q6_K = 2048 × 3 × 210 = 1 290 240.
    const l6 = expertBytes(QWEN3_30B, 'q4_k_m', 6, 48);
    expect(l6).toMatchObject({ gate: 884_736, up: 884_736, down: 884_736, total: 2_654_208 });
    expect(l6.formats.down).toBe('q4_k');
    const l0 = expertBytes(QWEN3_30B, 'q4_k_m', 0, 48);
    expect(l0).toMatchObject({ down: 1_290_240, total: 3_059_712 });
    const all = expertBytesByLayer(QWEN3_30B, 'q4_k_m', 48);
    expect(all.reduce((a, b) => a + b, 0)).toBe(24 * 2_654_208 + 24 * 3_059_712);
    // mean 2 856 960 B over 4 718 592 params
    expect(meanExpertBytesPerParam(QWEN3_30B, 'q4_k_m', 48)).toBe(2_856_960 / 4_718_592);
  });

  it('a row of 704 weights falls back from IQ3_S to IQ4_NL (Gemma-4 down)', () => {
    const shape = { hiddenSize: 2816, expertIntermediateSize: 704, ffnMatrices: 3 } as const;
    const e = expertBytes(shape, 'iq3_s', 0, 30);
    expect(e.formats).toEqual({ gate: 'iq3_s', up: 'iq3_s', down: 'iq4_nl' });
    // gate: 704 × 11 × 110 = 851 840; down: 2816 × 22 × 18 = 1 115 136
    expect(e.gate).toBe(851_840);
    expect(e.down).toBe(1_115_136);
  });

  it('MXFP4 GPT-OSS-20B expert: 3 × 2880 × 2880 × 17/32 B', () => {
    const e = expertBytes({ hiddenSize: 2880, expertIntermediateSize: 2880, ffnMatrices: 3 }, 'mxfp4', 0, 24);
    expect(e.total).toBe(3 * 2880 * 90 * 17);
  });
});

describe('CPU expert cost per format', () => {
  it('IQ2_S on AVX2 is compute-bound: 3 145 728 weights / (8.39e9 × 6) = 62 488 ns', async () => {
    const { loadQuantKernels } = await import('../../hardware-profiles/quant-kernels.ts');
    const { cpuExpertCost } = await import('../../sim/cost/cpu-expert.ts');
    const k = loadQuantKernels('llamacpp-cpu-avx2');
    const weights = 3 * 2048 * 512;
    const bytes = (weights * 2.5625) / 8;
    const c = cpuExpertCost(k, 'iq2_s', weights, bytes, 1, 6, 38e9);
    expect(c.kernelNs).toBe(Math.ceil((weights / (8.39e9 * 6)) * 1e9));
    expect(c.memoryNs).toBe(Math.ceil((bytes / 38e9) * 1e9));
    expect(c.bound).toBe('cpuFlops');
    const q4 = cpuExpertCost(k, 'q4_k', weights, (weights * 4.5) / 8, 1, 6, 38e9);
    expect(q4.bound).toBe('hostMem');
    expect(q4.warning).toMatch(/q4_k/);
  });
});
