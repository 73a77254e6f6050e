/**
 * The MoE-Lens setups of moe-lightning-like (fixed-batch scheduler + CGOPipe) and vllm-like (vLLM
 * scheduler + serial offload), whole runs through the family's loop on random worlds: random prompt
 * and output lengths, page sizes, capacities, batch sizes and vLLM limits on Mixtral-8x7B / the A40
 * testbed. Every sequence generates exactly its tokens (after swaps and recomputation too), the
 * page pools (MemoryPools) are never over capacity and end empty, simulated time only grows, and
 * the invariant checker (memory and request milestones) finds nothing. Coverage (each in ≥ 25 % of
 * the worlds, printed): MoE-Lightning-like runs several batches, CPU attention and host-DRAM
 * contention binding a stage; vLLM-like preempts, swaps out and recomputes.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadHardware, loadModel, loadRuntime } from '../../hardware-profiles/load.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import type { ModelProfile } from '../../hardware-profiles/types.ts';
import { LightningScheduler } from '../../policies/throughput/fixed-batch-scheduler.ts';
import { continuousBooks, type ContinuousRunResult } from '../../policies/throughput/continuous-run.ts';
import { VllmScheduler, type VllmLimits } from '../../policies/throughput/vllm-scheduler.ts';
import { runIterations, type IterationLoop } from '../../sim/throughput/iteration.ts';
import { KvPages } from '../../sim/throughput/kv-pages.ts';
import { CgoPipe } from '../../sim/throughput/pipelines/cgopipe.ts';
import { layerCosts } from '../../sim/throughput/pipelines/layer-costs.ts';
import { SerialOffloadPipe } from '../../sim/throughput/pipelines/serial-offload.ts';
import { InvariantChecker } from '../helpers/invariant-checker.ts';
import { CoverageTally } from '../helpers/coverage.ts';

const model = loadModel('mixtral-8x7b');
const hw = loadHardware('a40-xeon8380-750gb');
const cost = createCostModel(model, hw, { runtime: loadRuntime('moe-lightning') });

type BaselineRunResult = ContinuousRunResult;
type Req = { readonly id: number; readonly promptTokens: number; readonly outputTokens: number };

/** Runs `loop` through the family's loop with the invariant checker as the sink (every request arrives at 0). */
function checked(
  requests: readonly Req[],
  make: (sink: InvariantChecker) => IterationLoop & { result: ReturnType<typeof continuousBooks>['result'] },
): BaselineRunResult {
  const sink = new InvariantChecker({ experts: model.experts });
  for (const r of requests) sink.onRequest(r.id, 'arrive', 0);
  const loop = make(sink);
  const out = loop.result(runIterations(loop, sink));
  expect(sink.violations()).toEqual([]);
  return out;
}

function runLightning(x: {
  requests: readonly Req[];
  pageTokens: number;
  kvCapacityBytes: number;
  batchSeqs: number;
  microBatches: number;
  contention: boolean;
  reserveOutput: number;
  reservePrompt?: number;
}): BaselineRunResult {
  return checked(x.requests, (sink) => {
    const m: ModelProfile = model;
    const pages = Math.floor(x.kvCapacityBytes / (m.derived.kvBytesPerToken * x.pageTokens));
    const pool = new KvPages(Math.max(1, pages), x.pageTokens, m.derived.kvBytesPerToken, 'hostKv', sink);
    const scheduler = new LightningScheduler(x.requests, pool, x.batchSeqs, x.reserveOutput, x.reservePrompt);
    const pipeline = new CgoPipe(layerCosts(m, hw, cost, hw.cpu.cores), {
      microBatches: x.microBatches,
      residentDense: true,
      ...(x.contention ? { dramBytesPerNs: hw.cpu.dramBytesPerSec / 1e9 } : {}),
    });
    const books = continuousBooks(pool, 1, scheduler, pipeline.totals);
    return { scheduler, pipeline, afterIteration: books.afterIteration, result: books.result };
  });
}

function runVllm(x: {
  requests: readonly Req[];
  pageTokens: number;
  gpuKvBytes: number;
  swapSpaceBytes: number;
  offloadedFraction: number;
  limits: VllmLimits;
}): BaselineRunResult {
  return checked(x.requests, (sink) => {
    const kv = model.derived.kvBytesPerToken;
    const pageBytes = kv * x.pageTokens;
    const gpu = new KvPages(Math.floor(x.gpuKvBytes / pageBytes), x.pageTokens, kv, 'gpuKv', sink);
    const swap = new KvPages(Math.max(1, Math.floor(x.swapSpaceBytes / pageBytes)), x.pageTokens, kv, 'swapKv', sink);
    const scheduler = new VllmScheduler(x.requests, gpu, swap, x.limits);
    const pipeline = new SerialOffloadPipe(layerCosts(model, hw, cost, hw.cpu.cores), x.offloadedFraction);
    const books = continuousBooks(gpu, 1, scheduler, pipeline.totals);
    return { scheduler, pipeline, afterIteration: books.afterIteration, result: books.result };
  });
}

const reqsArb = fc.array(
  fc.record({ promptTokens: fc.integer({ min: 1, max: 300 }), outputTokens: fc.integer({ min: 1, max: 40 }) }),
  { minLength: 1, maxLength: 50 },
);

const reqsManyArb = fc.array(
  fc.record({ promptTokens: fc.integer({ min: 1, max: 300 }), outputTokens: fc.integer({ min: 1, max: 40 }) }),
  { minLength: 8, maxLength: 50 },
);

function checkRun(out: BaselineRunResult, rs: readonly { promptTokens: number; outputTokens: number }[]): void {
  expect(out.generatedPerSeq).toEqual(rs.map((r) => r.outputTokens));
  expect(out.generatedTokens).toBe(rs.reduce((a, r) => a + r.outputTokens, 0));
  expect(out.peakPages).toBeLessThanOrEqual(out.pages);
  const tl = out.timeline;
  for (let i = 1; i < tl.length; i++) expect(tl[i]![0]).toBeGreaterThanOrEqual(tl[i - 1]![0]);
  expect(tl[tl.length - 1]![1]).toBe(0);
  expect(out.endNs).toBeGreaterThan(0);
}

describe('MoE-Lens setups of the baselines on random worlds', () => {
  it('MoE-Lightning-like: exact tokens, reservations within capacity, pool empty at the end', () => {
    const tally = new CoverageTally('moe-lightning-like', ['batches', 'cpuAttention', 'dramContention']);
    fc.assert(
      fc.property(
        reqsArb,
        fc.integer({ min: 0, max: 3 }),
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 1, max: 64 }),
        fc.integer({ min: 1, max: 8 }),
        fc.boolean(),
        fc.boolean(),
        (rs, bExp, kvScale, N, mu, contention, pad) => {
          const b = 2 ** (bExp + 2);
          const maxOut = Math.max(...rs.map((r) => r.outputTokens));
          const maxPrompt = Math.max(...rs.map((r) => r.promptTokens));
          const reserve = maxPrompt + maxOut;
          const kvBytes = Math.ceil(reserve / b) * b * model.derived.kvBytesPerToken * kvScale;
          const requests = rs.map((r, id) => ({ id, ...r }));
          const out = runLightning({
            requests,
            pageTokens: b,
            kvCapacityBytes: kvBytes,
            batchSeqs: N,
            microBatches: mu,
            contention,
            reserveOutput: maxOut,
            ...(pad ? { reservePrompt: maxPrompt } : {}),
          });
          checkRun(out, rs);
          expect(out.preemptions).toBe(0);
          expect(out.batches).toBeGreaterThanOrEqual(Math.ceil(rs.length / N));
          tally.record({
            batches: out.batches > 1,
            cpuAttention: out.cpuBusyNs > 0,
            dramContention: out.dramBoundStages > 0,
          });
        },
      ),
      { numRuns: 40 },
    );
    tally.check();
  });

  it('vLLM-like: exact tokens after swaps and recomputation, GPU pages within capacity', () => {
    const tally = new CoverageTally('vllm-like', ['preemption', 'swap', 'recompute']);
    fc.assert(
      fc.property(
        // Enough sequences, a GPU KV of the longest sequence and swap space of a few of its
        // pages: so that preemption, swaps and recomputation all occur often.
        reqsManyArb,
        fc.integer({ min: 0, max: 3 }),
        fc.constant(1),
        fc.integer({ min: 4, max: 40 }),
        fc.integer({ min: 4, max: 32 }),
        fc.integer({ min: 1, max: 2000 }),
        // Swap twice as often: with a small swap space it recomputes too.
        fc.constantFrom<'swap' | 'recompute'>('swap', 'swap', 'recompute'),
        (rs, bExp, kvScale, swapPages, maxNumSeqs, maxTok, preemption) => {
          const b = 2 ** (bExp + 2);
          const longest = Math.max(...rs.map((r) => r.promptTokens + r.outputTokens));
          const pageBytes = b * model.derived.kvBytesPerToken;
          const gpuKvBytes = Math.ceil(longest / b) * pageBytes * kvScale;
          const requests = rs.map((r, id) => ({ id, ...r }));
          const out = runVllm({
            requests,
            pageTokens: b,
            gpuKvBytes,
            swapSpaceBytes: swapPages * pageBytes,
            offloadedFraction: 1,
            limits: { maxNumSeqs, maxNumBatchedTokens: maxTok, watermark: 0.01, preemption },
          });
          checkRun(out, rs);
          if (preemption === 'recompute') expect(out.swapOuts).toBe(0);
          expect(out.swapOuts).toBeLessThanOrEqual(out.preemptions);
          tally.record({
            preemption: out.preemptions > 0,
            swap: out.swapOuts > 0,
            recompute: out.recomputedTokens > 0,
          });
        },
      ),
      { numRuns: 80 },
    );
    // Not vacuous: the random worlds do preempt, swap and recompute.
    tally.check();
  });
});
