/**
 * MoE-Lens whole runs on random worlds: random prompt and output lengths, KV capacity, page size,
 * n_real and contention on Mixtral-8x7B / the A40 testbed. Every sequence generates exactly its
 * tokens (even after preemption), the KV pages (a MemoryPool) are never over capacity and end
 * empty, the invariant checker (memory, request milestones) finds nothing, time is integer ns and
 * only grows, and the analytic model is present. Coverage (each in ≥ 25 % of the worlds, printed): preemption, CPU
 * attention (CPU busy), host-DRAM contention binding a stage.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadHardware, loadModel, loadRuntime } from '../../hardware-profiles/load.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import { runLens } from '../../policies/moe-lens/execution.ts';
import { InvariantChecker } from '../helpers/invariant-checker.ts';
import { CoverageTally } from '../helpers/coverage.ts';

const model = loadModel('mixtral-8x7b');
const hw = loadHardware('a40-xeon8380-750gb');
const cost = createCostModel(model, hw, { runtime: loadRuntime('moe-lightning') });

describe('MoE-Lens runs on random worlds', () => {
  it('exact tokens, pages within capacity, monotone time', () => {
    const tally = new CoverageTally('moe-lens', ['preemption', 'cpuAttention', 'dramContention']);
    fc.assert(
      fc.property(
        fc.array(
          fc.record({ promptTokens: fc.integer({ min: 1, max: 300 }), outputTokens: fc.integer({ min: 1, max: 60 }) }),
          { minLength: 8, maxLength: 60 },
        ),
        fc.integer({ min: 0, max: 3 }),
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 1, max: 2000 }),
        fc.boolean(),
        (rs, bExp, kvScale, nReal, contention) => {
          const b = 2 ** (bExp + 2);
          const longest = Math.max(...rs.map((r) => r.promptTokens + r.outputTokens));
          const kvBytes = Math.ceil(longest / b) * b * model.derived.kvBytesPerToken * kvScale;
          const requests = rs.map((r, id) => ({ id, ...r }));
          const sink = new InvariantChecker({ experts: model.experts });
          for (const r of requests) sink.onRequest(r.id, 'arrive', 0);
          const out = runLens({
            model,
            hardware: hw,
            cost,
            requests,
            sink,
            settings: { kvCapacityBytes: kvBytes, pageTokens: b, nReal, contention, timelineEvery: 1 },
          });
          expect(sink.violations()).toEqual([]);
          expect(sink.seen.memoryRecords).toBeGreaterThan(0);
          expect(Number.isSafeInteger(out.endNs)).toBe(true);
          expect(out.generatedTokens).toBe(rs.reduce((a, r) => a + r.outputTokens, 0));
          expect(out.decodeTokens + rs.length + out.preemptions).toBe(out.generatedTokens);
          expect(out.peakPages).toBeLessThanOrEqual(out.pages);
          const tl = out.timeline;
          for (let i = 1; i < tl.length; i++) expect(tl[i]![0]).toBeGreaterThanOrEqual(tl[i - 1]![0]);
          expect(tl[tl.length - 1]![1]).toBe(0);
          expect(out.analytic.t).toBeGreaterThan(0);
          tally.record({
            preemption: out.preemptions > 0,
            cpuAttention: out.cpuBusyNs > 0,
            dramContention: out.dramBoundStages > 0,
          });
        },
      ),
      { numRuns: 40 },
    );
    tally.check();
  });
});
