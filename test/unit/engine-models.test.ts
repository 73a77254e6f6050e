/**
 * The 2026 engine models: every new profile loads; hybrid (Gated DeltaNet) models count KV only
 * for their full-attention layers and carry a fixed recurrent state; derived totals agree with
 * published parameter counts where a source printed one (linear-attention costs:
 * linear-attention.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { loadModel } from '../../hardware-profiles/load.ts';
import { totalParams } from '../../hardware-profiles/derive.ts';
import { isLinearAttentionLayer } from '../../sim/cost/linear-attention.ts';

const NEW = [
  'qwen3-30b-a3b-q4km',
  'qwen3.5-35b-a3b',
  'qwen3.6-35b-a3b',
  'qwen3.6-35b-a3b-iq2m',
  'qwen3-next-80b-a3b',
  'qwen3.5-397b-a17b',
  'qwen3.8-flash-next',
  'gpt-oss-20b',
  'gpt-oss-120b',
  'glm-4.5-air',
  'gemma-4-26b-a4b',
];

describe('engine model profiles', () => {
  it.each(NEW)('%s loads and derives', (id) => {
    const m = loadModel(id);
    expect(m.derived.bytesPerExpert).toBeGreaterThan(0);
    expect(m.sources.length).toBeGreaterThan(0);
  });

  it('Qwen3-Next-80B-A3B totals the published 79 674 391 296 parameters', () => {
    expect(totalParams(loadModel('qwen3-next-80b-a3b'))).toBe(79_674_391_296);
  });

  it('Qwen3.6-35B-A3B: KV for 10 of 40 layers, 2 146 304 B of state per DeltaNet layer', () => {
    const m = loadModel('qwen3.6-35b-a3b');
    // 10 full layers × 2 KV heads × (256 + 256) × 2 B
    expect(m.derived.kvBytesPerToken).toBe(10 * 2 * 512 * 2);
    expect(m.derived.linearAttentionLayers).toBe(30);
    // 32 × 128 × 128 × 4 B state + (2·16·128 + 32·128) × 3 × 2 B conv window
    expect(m.derived.linearStateBytesPerLayer).toBe(2_097_152 + 49_152);
    expect([0, 1, 2, 3, 39].map((l) => isLinearAttentionLayer(m, l))).toEqual([true, true, true, false, false]);
  });

  it('GPT-OSS experts are MXFP4: 24 891 840 params × 17/32 B', () => {
    const m = loadModel('gpt-oss-20b');
    expect(m.derived.paramsPerExpert).toBe(3 * 2880 * 2880 + 2 * 2880 + 2880);
    expect(m.derived.bytesPerExpert).toBe(Math.ceil((m.derived.paramsPerExpert * 17) / 32));
  });

  it('the shipped Qwen3-30B-A3B profile keeps its published shape', () => {
    const m = loadModel('qwen3-30b-a3b');
    expect(m.derived.bytesPerExpert).toBe(3 * 2048 * 768 * 2);
    expect(m.derived.kvBytesPerToken).toBe(48 * 4 * 256 * 2);
  });
});
