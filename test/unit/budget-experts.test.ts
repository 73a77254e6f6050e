/**
 * MoEpic's unified VRAM budget V_e (`budgetExperts`, paper §4.1): one sweep parameter sizes
 * every system of its Fig 7/8. Each policy's mapping to its own capacity, by hand.
 */
import { describe, expect, it } from 'vitest';
import { loadModel } from '../../hardware-profiles/load.ts';
import { validateConfig } from '../../experiments/config/load.ts';
import { expandRuns } from '../../experiments/config/expand.ts';
import { builtinPolicy } from '../../policies/registry.ts';
import { createAdapMoe, AdapMoeParams } from '../../policies/prefetch/adapmoe.ts';
import { MixtralOffloadingParams, mixtralOffloadingPerLayer } from '../../policies/prefetch/mixtral-offloading.ts';
import { UserError } from '../../sim/kernel/errors.ts';

const qwen = loadModel('qwen1.5-moe-a2.7b'); // 24 MoE layers × 60 experts, top-4
const mixtral = loadModel('mixtral-8x7b-hqq'); // 32 × 8, top-2

const slots = (name: string, params: Record<string, unknown>, model = qwen): number | undefined => {
  const def = builtinPolicy(name)!;
  return def.bufferSlots!(def.params.parse(params), model);
};

describe('budgetExperts → each policy capacity', () => {
  it('mixtral-offloading: ⌊V_e / L⌋ per layer (remainder unused) + K staging slots', () => {
    expect(qwen.moeLayers).toBe(24);
    expect(mixtralOffloadingPerLayer(MixtralOffloadingParams.parse({ budgetExperts: 240 }), qwen)).toBe(10);
    expect(mixtralOffloadingPerLayer(MixtralOffloadingParams.parse({ budgetExperts: 250 }), qwen)).toBe(10); // 10 left over
    expect(slots('mixtral-offloading', { budgetExperts: 240 })).toBe(240 + 4);
    expect(slots('mixtral-offloading', { budgetExperts: 96 }, mixtral)).toBe(96 + 2);
    // Capped at every expert of a layer; below one per layer, or with perLayerSlots too: user errors.
    expect(mixtralOffloadingPerLayer(MixtralOffloadingParams.parse({ budgetExperts: 1000 }), mixtral)).toBe(8);
    expect(() => mixtralOffloadingPerLayer(MixtralOffloadingParams.parse({ budgetExperts: 20 }), qwen)).toThrow(
      UserError,
    );
    expect(() =>
      mixtralOffloadingPerLayer(MixtralOffloadingParams.parse({ budgetExperts: 240, perLayerSlots: 4 }), qwen),
    ).toThrow(/either/);
    // Without it, unchanged: ⌊E/2⌋ per layer.
    expect(slots('mixtral-offloading', {}, mixtral)).toBe(4 * 32 + 2);
  });

  it('adapmoe: Σ s_l = V_e (DP total), K spare slots', () => {
    expect(slots('adapmoe', { budgetExperts: 240 })).toBe(240 + 4);
    expect(slots('adapmoe', { budgetExperts: 96 }, mixtral)).toBe(96 + 2);
    expect(slots('adapmoe', { budgetExperts: 96, spareSlots: 1 }, mixtral)).toBe(97);
    expect(slots('adapmoe', {}, mixtral)).toBe(64 + 1); // unchanged default: top-k × L + 1
    const a = createAdapMoe('a', AdapMoeParams.parse({ budgetExperts: 100 }), 32, 8, 2);
    expect(a.sizes().reduce((x, y) => x + y, 0)).toBe(100);
    expect(() => slots('adapmoe', { budgetExperts: 20 })).toThrow(UserError);
    expect(() => slots('adapmoe', { budgetExperts: 96, totalSlots: 96 }, mixtral)).toThrow(/either/);
  });

  it('adapmoe: a total below one slot per layer names the field it came from and its value', () => {
    const err = (params: Record<string, unknown>): UserError => {
      try {
        slots('adapmoe', params);
      } catch (e) {
        return e as UserError;
      }
      throw new Error('no error');
    };
    expect(err({ budgetExperts: 20 })).toMatchObject({ field: 'budgetExperts', value: 20 });
    expect(err({ totalSlots: 23 })).toMatchObject({ field: 'totalSlots', value: 23 });
    expect(err({ totalSlots: 23 }).message).toBe('adapmoe needs at least one cache slot per MoE layer (24)');
  });

  it('moe-infinity: V_e + K slots; pre-gated: flat (2K double buffer); moepic: V_e segment cache + 2K', () => {
    expect(slots('moe-infinity', { budgetExperts: 240 })).toBe(244);
    expect(slots('moe-infinity', {})).toBeUndefined();
    expect(slots('pre-gated', { budgetExperts: 240 })).toBe(8);
    expect(slots('pre-gated', { budgetExperts: 480 })).toBe(8);
    expect(slots('pre-gated', { budgetExperts: 480, capacitySlots: 5 })).toBe(5);
    expect(slots('pre-gated', {})).toBeUndefined();
    expect(slots('moepic', { budgetExperts: 240 })).toBe(8);
  });

  it('one sweep of policy.budgetExperts sizes all five systems at every point', async () => {
    const config = validateConfig(
      {
        model: 'mixtral-8x7b-hqq',
        hardware: 'a6000-xeon8358p-512gb',
        workload: {
          requests: 1,
          arrival: { kind: 'offline' },
          promptTokens: { kind: 'fixed', tokens: 8 },
          outputTokens: { kind: 'fixed', tokens: 2 },
        },
        policies: [
          { name: 'moepic' },
          { name: 'pre-gated' },
          { name: 'mixtral-offloading' },
          { name: 'adapmoe' },
          { name: 'moe-infinity' },
        ],
        sweep: { 'policy.budgetExperts': [64, 128] },
      },
      'mem.yaml',
    );
    const runs = await expandRuns(config, '.', 'mem.yaml');
    expect(runs.length).toBe(10);
    const sized = runs.map((r) => [
      r.policy.label,
      r.params['policy.budgetExperts'],
      r.policy.definition.bufferSlots?.(r.policy.params, mixtral),
    ]);
    expect(sized).toEqual([
      ['moepic', 64, 4],
      ['pre-gated', 64, 4],
      ['mixtral-offloading', 64, 66],
      ['adapmoe', 64, 66],
      ['moe-infinity', 64, 66],
      ['moepic', 128, 4],
      ['pre-gated', 128, 4],
      ['mixtral-offloading', 128, 130],
      ['adapmoe', 128, 130],
      ['moe-infinity', 128, 130],
    ]);
  });
});
