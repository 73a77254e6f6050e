/**
 * What a simulated pass shares and skips to keep fewer objects per task: the ring buffers'
 * hold requests and release lists are made once per process and shared by every pass that
 * uses the same buffer and size, and tasks get no labels unless the run's sink records them.
 * Neither may change a pass's outcome: the shared lists are never written (checked by freezing
 * them before a second pass) and labels only name things.
 */
import { describe, expect, it } from 'vitest';
import { loadHardware, loadModel } from '../../hardware-profiles/load.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import type { TaskSpec } from '../../sim/taskgraph/index.ts';
import { hold, releasing, Ring } from '../../sim/throughput/dag-emitter.ts';
import { buildPassDag, type DagInput } from '../../sim/throughput/pass-dag.ts';
import { simulatePass } from '../../sim/throughput/pass-sim.ts';
import { defaultPassConfig, type PassConfig } from '../../sim/throughput/types.ts';

const model = loadModel('deepseek-v2-lite');
const hardware = loadHardware('moe-gen-c2');
const cost = createCostModel(model, hardware);
const shape = { phase: 'decode', seqs: 40, newTokens: 1, pastTokens: 300, hostSeqs: 40, reserveTokens: 400 } as const;
const base: PassConfig = {
  ...defaultPassConfig(model.layers),
  attnMicroSeqs: 8,
  cpuCores: 8,
  kvBuffers: 2,
  expertSlots: 5,
};
/** Uneven routing; the last expert gets no token (an unused streamed expert releases its slot by a barrier). */
const counts = (layer: number, tokens: number, out: Float64Array) => {
  const n = Math.round(tokens * model.topK);
  for (let i = 0; i < n; i++) out[(i * 7 + layer) % (out.length - 1)]! += 1 + (i % 3);
};
const input = (config: PassConfig): DagInput => ({ model, hardware, cost, shape, config, counts });
const configs: PassConfig[] = [
  { ...base, omega: 0.4 },
  { ...base, omega: 1, expertBatching: 'perMicroBatch', weightGranularity: 'layer', weightSlots: 2 },
  { ...base, gpuLayers: 10, kvGpuLayers: 3 },
];

/** Freezes every task's alloc list, its requests and its release list (the lists the rings share). */
function freezeLists(tasks: readonly TaskSpec[]): { holders: number; releasers: number } {
  let holders = 0;
  let releasers = 0;
  for (const t of tasks) {
    if (t.alloc) {
      holders++;
      for (const a of t.alloc) Object.freeze(a);
      Object.freeze(t.alloc);
    }
    if (t.release) {
      releasers++;
      Object.freeze(t.release);
    }
  }
  return { holders, releasers };
}

describe('shared ring lists and labels of a simulated pass', () => {
  it('a pass simulates alike with and without labels, and again with its lists frozen', () => {
    for (const config of configs) {
      const sim = { ...input(config), packetBytes: 1 << 20, hostKvBytes: 0 };
      const labelled = simulatePass({ ...sim, labels: true });
      const first = buildPassDag(input(config));
      const { holders, releasers } = freezeLists(first.tasks);
      expect(holders).toBeGreaterThan(0);
      expect(releasers).toBeGreaterThan(0);
      // Built again: the same (frozen) lists, so any write by the builders or the executor throws.
      const again = buildPassDag(input(config));
      const shared = again.tasks.filter((t, i) => t.alloc !== undefined && t.alloc === first.tasks[i]!.alloc).length;
      expect(shared).toBe(holders);
      const plain = simulatePass({ ...sim, labels: false });
      expect(plain).toEqual(labelled);
      expect(simulatePass(sim)).toEqual(labelled);
    }
  });

  it('a ring slot hands out a request of the size asked, whatever it held before', () => {
    const ring = new Ring(2, 'test-slot');
    const { slot } = ring.next();
    const a = hold(100, 'kvCache', slot);
    expect(hold(100, 'kvCache', slot)).toBe(a);
    expect(hold(200, 'kvCache', slot)).toEqual([{ pool: 'vram', bytes: 200, category: 'kvCache', hold: 'test-slot0' }]);
    expect(hold(200, 'expertWeights', slot)[0]!.category).toBe('expertWeights');
    expect(hold(100, 'kvCache', slot)).toEqual(a);
    expect(releasing(slot)).toEqual(['test-slot0']);
    expect(new Ring(2, 'test-slot').next().slot).toBe(slot);
  });
});
