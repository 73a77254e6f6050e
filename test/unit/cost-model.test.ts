/**
 * The cost model checked by hand on small synthetic profiles with round numbers. Each
 * expected duration is worked out in the comment next to it.
 */
import { describe, expect, it } from 'vitest';
import { loadHardware, loadModel } from '../../hardware-profiles/load.ts';
import type {
  CpuProfile,
  GpuProfile,
  HardwareProfile,
  ModelProfile,
  PcieProfile,
} from '../../hardware-profiles/types.ts';
import { createCostModel, gemmEfficiency, interpolate } from '../../sim/cost/cost-model.ts';

// ---- synthetic profiles ----------------------------------------------------------------

/**
 * hidden 1000 → activations in + out = 2 · 1000 · 2 B = 4000 B per token.
 * Expert: 1e8 params, 2e8 B, 2e8 FLOPs per token. Attention projections 8e6 B, 8e6 FLOPs per
 * token; router 16 000 B (1000 × 8 × 2), 16 000 FLOPs per token; scores 4000 FLOPs and 1000 B
 * of KV per context token.
 */
function syntheticModel(): ModelProfile {
  return {
    id: 'synthetic',
    name: 'synthetic',
    arch: 'decoder-only',
    layers: 2,
    moeLayers: 2,
    moeLayerIndices: [0, 1],
    hiddenSize: 1000,
    expertIntermediateSize: 33_333,
    experts: 8,
    topK: 2,
    sharedExperts: 0,
    sharedIntermediateSize: 0,
    denseIntermediateSize: 0,
    ffnMatrices: 3,
    attention: { type: 'GQA', heads: 8, kvHeads: 2, headDim: 125 },
    vocabSize: 1000,
    tiedEmbeddings: false,
    dtypes: { expertBytesPerParam: 2, attentionBytesPerParam: 2, embeddingBytesPerParam: 2, kvBytesPerElement: 2 },
    sources: ['test'],
    derived: {
      paramsPerExpert: 1e8,
      bytesPerExpert: 2e8,
      sharedExpertBytesPerLayer: 0,
      attentionBytesPerLayer: 8_016_000,
      routerBytesPerLayer: 16_000,
      denseFfnBytesPerLayer: 0,
      embeddingBytes: 2e6,
      lmHeadBytes: 2e6,
      nonExpertBytes: 0,
      allExpertBytes: 0,
      totalBytes: 0,
      kvBytesPerTokenPerLayer: 1000,
      kvBytesPerToken: 2000,
      expertFlopsPerToken: 2e8,
      sharedExpertFlopsPerToken: 0,
      denseFfnFlopsPerToken: 0,
      attentionProjFlopsPerToken: 8e6,
      attentionScoreFlopsPerContextToken: 4000,
      routerFlopsPerToken: 16_000,
      lmHeadFlopsPerToken: 2e6,
    },
  };
}

/** 100 TFLOP/s, 500 GB/s × 0.5 efficiency = 250 GB/s effective, 10 µs launch, eff = 0.5 · t / (t + 100). */
function syntheticGpu(measured?: GpuProfile['measured']): GpuProfile {
  return {
    id: 'gpu',
    name: 'gpu',
    vramBytes: 1e10,
    hbmBytesPerSec: 500e9,
    bf16FlopsPerSec: 100e12,
    kernelLaunchNs: 10_000,
    gemmEfficiency: { maxFraction: 0.5, halfSaturationTokens: 100 },
    hbmEfficiency: 0.5,
    ...(measured && { measured }),
    sources: ['test'],
  };
}

/** 10 cores × 100 GFLOP/s × 0.5 = 50 GFLOP/s per core effective; DRAM 100 GB/s, 20 GB/s per core. */
const cpu: CpuProfile = {
  id: 'cpu',
  name: 'cpu',
  cores: 10,
  vectorFlopsPerSecPerCore: 100e9,
  vectorEfficiency: 0.5,
  memoryChannels: 4,
  dramBytesPerSec: 100e9,
  perCoreDramBytesPerSec: 20e9,
  sources: ['test'],
};

/** H2D 10 GB/s, D2H 20 GB/s, 10 µs per transfer, pageable at half speed. */
const pcie: PcieProfile = {
  id: 'link',
  generation: 4,
  lanes: 16,
  h2dBytesPerSec: 10e9,
  d2hBytesPerSec: 20e9,
  latencyNs: 10_000,
  pageableFactor: 0.5,
  sources: ['test'],
};

function hardware(opts: { measured?: GpuProfile['measured']; pinned?: boolean } = {}): HardwareProfile {
  return {
    id: 'hw',
    name: 'hw',
    gpu: syntheticGpu(opts.measured),
    cpu,
    pcie,
    hostDramBytes: 1e11,
    pinnedHostMemory: opts.pinned ?? true,
    cost: { boardUsd: 0, dramUsdPerGb: 0, ssdUsd: 0, lifetimeYears: 1, electricityUsdPerKwh: 0 },
    sources: ['test'],
  };
}

// ---- GPU roofline ------------------------------------------------------------------------

describe('GPU roofline', () => {
  const cm = createCostModel(syntheticModel(), hardware());

  it('efficiency curve: eff(t) = 0.5 · t / (t + 100)', () => {
    const gpu = syntheticGpu();
    expect(gemmEfficiency(gpu, 100)).toBe(0.25);
    expect(gemmEfficiency(gpu, 0)).toBe(0);
    expect(gemmEfficiency(gpu, 1e12)).toBeCloseTo(0.5, 6);
  });

  it('compute-bound expert: 1000 tokens', () => {
    // FLOPs = 1000 · 2e8 = 2e11; eff = 0.5 · 1000/1100 = 5/11 → 45.45 TFLOP/s → 4.4 ms = 4 400 000 ns.
    // Bytes = 2e8 weights + 1000 · 4000 activations = 2.04e8 → / 250 GB/s = 816 000 ns.
    // ns = 10 000 launch + 4 400 000 = 4 410 000, bound by FLOPs.
    const c = cm.estimate({ kind: 'expert', tokens: 1000 });
    expect(c).toMatchObject({ ns: 4_410_000, bound: 'flops', source: 'roofline', flops: 2e11, bytes: 2.04e8 });
    expect(c.warning).toBeUndefined();
  });

  it('memory-bound expert: 1 token', () => {
    // FLOPs = 2e8; eff = 0.5/101 → 2e8 · 101 / 5e13 s = 404 000 ns.
    // Bytes = 2e8 + 4000 = 200 004 000 → / 2.5e11 = 800 016 ns. ns = 10 000 + 800 016 = 810 016, HBM-bound.
    expect(cm.estimate({ kind: 'expert', tokens: 1 })).toMatchObject({
      ns: 810_016,
      bound: 'hbm',
      flops: 2e8,
      bytes: 200_004_000,
    });
  });

  it('expert segment of fraction 0.5 scales weight bytes and FLOPs', () => {
    // FLOPs 1e11 → 2 200 000 ns; bytes 1e8 + 4e6 = 1.04e8 → 416 000 ns; ns = 10 000 + 2 200 000.
    expect(cm.estimate({ kind: 'expert', tokens: 1000, fraction: 0.5 })).toMatchObject({
      ns: 2_210_000,
      bound: 'flops',
      flops: 1e11,
      bytes: 1.04e8,
    });
  });

  it('launch-bound router: 1 token', () => {
    // Bytes = 16 000 weights + (1000 + 8) · 2 activations = 18 016 → 72.064 ns; FLOPs 16 000 · 101 / 5e13 s = 32.32 ns.
    // Both are below the 10 µs launch: ns = ⌈10 072.064⌉ = 10 073, bound 'launch'.
    expect(cm.estimate({ kind: 'router', tokens: 1 })).toMatchObject({ ns: 10_073, bound: 'launch', bytes: 18_016 });
  });

  it('attention: projections + scores over the context, KV read from HBM', () => {
    // FLOPs = 1 · 8e6 + 1000 · 4000 = 1.2e7 → 1.2e7 · 101 / 5e13 s = 24 240 ns.
    // Bytes = 8e6 projection weights (8 016 000 − 16 000 router) + 4000 activations + (1000 + 1) · 1000 KV
    //       = 9 005 000 → 36 020 ns. ns = 10 000 + 36 020 = 46 020, HBM-bound.
    expect(cm.estimate({ kind: 'attention', tokens: 1, contextTokens: 1000 })).toMatchObject({
      ns: 46_020,
      bound: 'hbm',
      flops: 1.2e7,
      bytes: 9_005_000,
    });
  });

  it('attentionProj excludes the scores and the KV', () => {
    // FLOPs 8e6 · 101 / 5e13 s = 16 160 ns; bytes 8e6 + 4000 → 32 016 ns; ns = 42 016.
    expect(cm.estimate({ kind: 'attentionProj', tokens: 1 })).toMatchObject({
      ns: 42_016,
      bound: 'hbm',
      flops: 8e6,
      bytes: 8_004_000,
    });
  });

  it('zero tokens cost nothing', () => {
    expect(cm.estimate({ kind: 'expert', tokens: 0 })).toMatchObject({ ns: 0, flops: 0, bytes: 0 });
  });

  it('rejects malformed shapes', () => {
    expect(() => cm.estimate({ kind: 'expert', tokens: -1 })).toThrow(RangeError);
    expect(() => cm.estimate({ kind: 'expert', tokens: 1, fraction: 1.5 })).toThrow(RangeError);
    expect(() => cm.estimate({ kind: 'attention', tokens: 1, contextTokens: Number.NaN })).toThrow(RangeError);
  });
});

// ---- CPU attention -----------------------------------------------------------------------

describe('CPU attention', () => {
  const cm = createCostModel(syntheticModel(), hardware());

  it('memory-bound with all 10 cores', () => {
    // FLOPs = 1e6 context · 4000 = 4e9 → / (10 · 50 GFLOP/s) = 8 000 000 ns.
    // Bytes = 1e6 · 1000 = 1e9 → / min(100 GB/s, 10 · 20 GB/s) = 10 000 000 ns → host-memory bound.
    expect(cm.estimate({ kind: 'cpuAttention', tokens: 10, contextTokens: 1e6, cores: 10 })).toMatchObject({
      ns: 10_000_000,
      computeNs: 8_000_000,
      bound: 'hostMem',
      flops: 4e9,
      bytes: 1e9,
    });
  });

  it('FLOP-bound with 2 cores', () => {
    // Compute: 4e9 / (2 · 50 GFLOP/s) = 40 000 000 ns. Memory: 1e9 / min(100, 2 · 20 GB/s) = 25 000 000 ns.
    expect(cm.estimate({ kind: 'cpuAttention', tokens: 10, contextTokens: 1e6, cores: 2 })).toMatchObject({
      ns: 40_000_000,
      computeNs: 40_000_000,
      bound: 'cpuFlops',
    });
  });

  it('rejects more cores than the CPU has', () => {
    expect(() => cm.estimate({ kind: 'cpuAttention', tokens: 1, contextTokens: 1, cores: 11 })).toThrow(/1\.\.10/);
  });
});

// ---- transfers ----------------------------------------------------------------------------

describe('PCIe transfers', () => {
  it('latency + bytes / bandwidth, per direction', () => {
    const cm = createCostModel(syntheticModel(), hardware());
    // H2D: 10 000 + 1e8 B / 10 GB/s = 10 000 + 10 000 000 ns.
    expect(cm.estimate({ kind: 'transfer', bytes: 1e8, direction: 'h2d' })).toMatchObject({
      ns: 10_010_000,
      bound: 'pcie',
      bytes: 1e8,
    });
    // D2H: 10 000 + 1e8 / 20 GB/s = 10 000 + 5 000 000 ns.
    expect(cm.estimate({ kind: 'transfer', bytes: 1e8, direction: 'd2h' })).toMatchObject({ ns: 5_010_000 });
    expect(cm.estimate({ kind: 'transfer', bytes: 0, direction: 'h2d' }).ns).toBe(0);
  });

  it('pageable host memory scales the bandwidth by pageableFactor', () => {
    const cm = createCostModel(syntheticModel(), hardware({ pinned: false }));
    // 10 000 + 1e8 / (10 GB/s · 0.5) = 10 000 + 20 000 000 ns.
    expect(cm.estimate({ kind: 'transfer', bytes: 1e8, direction: 'h2d' }).ns).toBe(20_010_000);
  });
});

// ---- measured tables ----------------------------------------------------------------------

describe('measured tables', () => {
  const table: GpuProfile['measured'] = {
    expert: [
      [1, 100_000],
      [100, 200_000],
      [1000, 1_100_000],
    ],
  };

  it('interpolates linearly between points', () => {
    const cm = createCostModel(syntheticModel(), hardware({ measured: table }));
    // Between (1, 100 000) and (100, 200 000): 100 000 + 100 000 · 9/99 = 109 090.9… → 109 091.
    expect(cm.estimate({ kind: 'expert', tokens: 10 })).toMatchObject({ ns: 109_091, source: 'table' });
    // Between (100, 200 000) and (1000, 1 100 000): 200 000 + 900 000 · 450/900 = 650 000.
    const mid = cm.estimate({ kind: 'expert', tokens: 550 });
    expect(mid).toMatchObject({ ns: 650_000, source: 'table' });
    expect(mid.warning).toBeUndefined();
    // Exactly on a point.
    expect(cm.estimate({ kind: 'expert', tokens: 100 }).ns).toBe(200_000);
    // The roofline still says what binds: 550 tokens of this expert are FLOP-bound.
    expect(mid.bound).toBe('flops');
    // A segment of fraction 0.5 takes half the table time.
    expect(cm.estimate({ kind: 'expert', tokens: 550, fraction: 0.5 }).ns).toBe(325_000);
    // Ops without a table stay on the roofline.
    expect(cm.estimate({ kind: 'router', tokens: 1 }).source).toBe('roofline');
  });

  it('extrapolates from the two nearest points, warns once per distinct text', () => {
    const warnings: string[] = [];
    const cm = createCostModel(syntheticModel(), hardware({ measured: table }), { onWarning: (w) => warnings.push(w) });
    // Beyond 1000: slope (1 100 000 − 200 000)/900 = 1000 ns/token → 1 100 000 + 1000 · 1000 = 2 100 000.
    const c = cm.estimate({ kind: 'expert', tokens: 2000 });
    expect(c).toMatchObject({
      ns: 2_100_000,
      source: 'table',
      warning: 'extrapolated expert table beyond 1000 tokens',
    });
    expect(cm.estimate({ kind: 'expert', tokens: 3000 }).ns).toBe(3_100_000);
    // Below 1 token: 100 000 + (100 000/99) · (0.5 − 1) = 99 494.9… → 99 495.
    expect(cm.estimate({ kind: 'expert', tokens: 0.5 })).toMatchObject({
      ns: 99_495,
      warning: 'extrapolated expert table below 1 tokens',
    });
    expect(warnings).toEqual([
      'extrapolated expert table beyond 1000 tokens',
      'extrapolated expert table below 1 tokens',
    ]);
  });

  it('accepts the onWarning callback as the third argument', () => {
    const warnings: string[] = [];
    const cm = createCostModel(syntheticModel(), hardware({ measured: table }), (w) => warnings.push(w));
    cm.estimate({ kind: 'expert', tokens: 5000 });
    expect(warnings).toHaveLength(1);
  });

  it('clamps extrapolation at 1 ns', () => {
    // From (10, 100) and (20, 1000): at 1 token 100 + 90 · (1 − 10) = −710 → clamped to 1 ns.
    const cm = createCostModel(
      syntheticModel(),
      hardware({
        measured: {
          router: [
            [10, 100],
            [20, 1000],
          ],
        },
      }),
    );
    expect(cm.estimate({ kind: 'router', tokens: 1 })).toMatchObject({ ns: 1, source: 'table' });
    expect(
      interpolate(
        [
          [10, 100],
          [20, 1000],
        ],
        1,
        'router',
      ).ns,
    ).toBe(1);
  });

  it('prefers a table for this model (kind@model) over a plain one', () => {
    const cm = createCostModel(
      syntheticModel(),
      hardware({
        measured: {
          expert: [
            [1, 5],
            [2, 6],
          ],
          'expert@synthetic': [
            [1, 1000],
            [2, 2000],
          ],
          'expert@other': [
            [1, 7],
            [2, 8],
          ],
        },
      }),
    );
    expect(cm.estimate({ kind: 'expert', tokens: 1.5 }).ns).toBe(1500);
  });
});

// ---- memoisation ----------------------------------------------------------------------------

describe('memoisation', () => {
  it('returns the identical Cost for the same shape, equal to a fresh model', () => {
    const cm = createCostModel(syntheticModel(), hardware());
    const ops = [
      { kind: 'expert', tokens: 7 },
      { kind: 'expert', tokens: 7, fraction: 0.25 },
      { kind: 'attention', tokens: 3, contextTokens: 999 },
      { kind: 'cpuAttention', tokens: 3, contextTokens: 999, cores: 4 },
      { kind: 'transfer', bytes: 12345, direction: 'd2h' },
      { kind: 'lmHead', tokens: 2 },
    ] as const;
    for (const op of ops) {
      const first = cm.estimate(op);
      expect(cm.estimate({ ...op })).toBe(first);
      expect(Object.isFrozen(first)).toBe(true);
      expect(createCostModel(syntheticModel(), hardware()).estimate(op)).toEqual(first);
    }
    // Different shapes do not collide.
    expect(cm.estimate({ kind: 'expert', tokens: 7 })).not.toBe(
      cm.estimate({ kind: 'expert', tokens: 7, fraction: 0.25 }),
    );
    expect(cm.estimate({ kind: 'transfer', bytes: 12345, direction: 'h2d' })).not.toEqual(
      cm.estimate({ kind: 'transfer', bytes: 12345, direction: 'd2h' }),
    );
  });
});

// ---- shipped profiles: sanity of the regimes ------------------------------------------------

describe('shipped profiles', () => {
  const hw = loadHardware('a5000-pcie4-1tb');

  it('Mixtral-8x7B on an A5000: decode experts are HBM-bound, big batches FLOP-bound, an expert crosses PCIe in ~14 ms', () => {
    const cm = createCostModel(loadModel('mixtral-8x7b'), hw);
    expect(cm.estimate({ kind: 'expert', tokens: 1 }).bound).toBe('hbm');
    expect(cm.estimate({ kind: 'expert', tokens: 4096 }).bound).toBe('flops');
    // 352 321 536 B / 25 GB/s = 14.09 ms + 10 µs.
    expect(cm.estimate({ kind: 'transfer', bytes: 352_321_536, direction: 'h2d' }).ns).toBe(14_102_862);
    // CPU attention over 128 KiB/token of KV is memory-bound on the EPYC 7453.
    expect(cm.estimate({ kind: 'cpuAttention', tokens: 64, contextTokens: 64 * 1024, cores: 28 }).bound).toBe(
      'hostMem',
    );
  });

  it('DeepSeek-V2 latent (MLA) attention is FLOP-bound on the CPU', () => {
    const cm = createCostModel(loadModel('deepseek-v2'), hw);
    expect(cm.estimate({ kind: 'cpuAttention', tokens: 64, contextTokens: 64 * 1024, cores: 28 }).bound).toBe(
      'cpuFlops',
    );
  });
});
