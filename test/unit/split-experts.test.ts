/**
 * Split experts (partial residency, MoEpic) in the serving executor, on a hand-made world with
 * every time worked out by hand.
 *
 * World: 2 MoE layers, 4 experts, top-1, 1 MB experts, H2D 1 GB/s with zero latency (1 MB =
 * 1 ms). Stub costs: attention 10 µs, router 1 µs, LM head 5 µs, an expert segment of fraction f
 * 100 µs × f (GEMM time proportional to the columns it holds; no per-call overhead in the stub).
 * Routing: expert 1 at layer 0, expert 2 at layer 1. One request, 1 prompt token.
 */
import { describe, expect, it } from 'vitest';
import type { ModelProfile } from '../../hardware-profiles/types.ts';
import type { CostModel } from '../../sim/cost/types.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import { fanout, type TraceSink, type TransferRecord } from '../../sim/observe/trace-sink.ts';
import type { ServingPolicy } from '../../sim/serving/policy.ts';
import { ServingExecutor, type ServingConfig } from '../../sim/serving/serving-executor.ts';
import type { RoutingSource, Workload } from '../../sim/workload.ts';
import { MB, fixedRouting, stubKernelCost, tinyHardware, tinyModel } from '../helpers/tiny-world.ts';
import { SegmentChecker } from '../helpers/segment-checker.ts';

const E = 4;
const model: ModelProfile = { ...tinyModel(2, E, 1), id: 'tiny' };
const SPAN = 2 * E;

const stubCost: CostModel = stubKernelCost();
const routing: RoutingSource = fixedRouting(2, E, (layer) => [layer === 0 ? 1 : 2]);
const workload = (outputTokens: number): Workload => ({
  requests: [{ id: 0, arrivalNs: 0 as Ns, promptTokens: 1, outputTokens }],
  routing,
  describe: 'hand-made',
});
const config: ServingConfig = {
  batching: 'continuous',
  maxBatchSize: 1,
  maxWaitNs: 0 as Ns,
  maxBatchTokens: 8192,
  bufferSlots: 2,
  packetBytes: 16 * 1024 * 1024,
  preloadAllExperts: false,
};

class Transfers implements TraceSink {
  readonly list: TransferRecord[] = [];
  onTransfer(r: TransferRecord): void {
    this.list.push(r);
  }
}

function run(policy: ServingPolicy, outputTokens = 1) {
  const checker = new SegmentChecker(E, SPAN, MB);
  const transfers = new Transfers();
  const x = new ServingExecutor({
    model,
    hardware: tinyHardware(100 * MB),
    cost: stubCost,
    workload: workload(outputTokens),
    policy,
    config,
    sink: fanout([checker, transfers]),
    maxEvents: 100_000,
  });
  const outcome = x.run();
  return { outcome, transfers: transfers.list, checker, violations: checker.finish(outcome) };
}

describe('split experts', () => {
  it('a split expert computes its cached top while its bottom is still on the link', () => {
    // Top of M0E1 (θ = 0.5) cached from the start. Layer 0: attention 0 → 10 000, router →
    // 11 000; the top computes 11 000 → 61 000 while the 0.5 MB bottom loads 11 000 → 511 000
    // (blocked 61 000 → 511 000); the bottom computes 511 000 → 561 000. Layer 1: attention →
    // 571 000, router → 572 000, whole M1E2 fetched → 1 572 000 (blocked 1 ms), computed →
    // 1 672 000; LM head → 1 677 000.
    const policy: ServingPolicy = {
      name: 'split-test',
      segmentCacheBytes: MB / 2,
      initialTops: () => [{ key: 1, fraction: 0.5 }],
      afterUse: () => false,
    };
    const { outcome, transfers, checker, violations } = run(policy);
    expect(violations).toEqual([]);
    expect(outcome.requests[0]!.firstTokenNs).toBe(1_677_000);
    expect(outcome.counters.blockedNs).toBe(450_000 + 1_000_000);
    expect(outcome.counters).toMatchObject({ needs: 2, cacheHits: 0, partialHits: 1, demandFetches: 2 });
    expect(transfers.map((t) => [t.label, t.bytes, t.startNs, t.endNs])).toEqual([
      ['expert M0E1 bottom', MB / 2, 11_000, 511_000],
      ['expert M1E2', MB, 572_000, 1_572_000],
    ]);
    expect(outcome.resources.h2d.bytesMoved).toBe(MB / 2 + MB);
    expect(checker.topComputes).toBe(1);
    expect(checker.bottomComputes).toBe(1);
  });

  it('keepTop cuts a whole expert down to its top without moving bytes; the next token fetches only the bottom', () => {
    // Token 1: both whole experts fetched on demand (1 677 000 − 5 000 + … as on-demand: 2 227 000).
    // afterUse keeps a 0.25 top of each (0.5 MB cache holds two). Token 2: each layer computes
    // its 25 µs top while its 0.75 MB bottom loads 750 µs, then the 75 µs bottom:
    // per layer 10 000 + 1 000 + 750 000 + 75 000 = 836 000; ×2 + 5 000 = 1 677 000.
    const policy: ServingPolicy = {
      name: 'keep-top',
      segmentCacheBytes: MB / 2,
      afterUse: (view, key) => (view.segments!.topFraction(key) > 0 ? false : { keepTop: 0.25 }),
    };
    const { outcome, transfers, violations } = run(policy, 2);
    expect(violations).toEqual([]);
    const r = outcome.requests[0]!;
    expect(r.firstTokenNs).toBe(2_227_000);
    expect(r.finishNs - r.firstTokenNs).toBe(1_677_000);
    expect(transfers.map((t) => [t.label, t.bytes])).toEqual([
      ['expert M0E1', MB],
      ['expert M1E2', MB],
      ['expert M0E1 bottom', 0.75 * MB],
      ['expert M1E2 bottom', 0.75 * MB],
    ]);
    expect(outcome.counters.partialHits).toBe(2);
  });

  it('a prefetched bottom completes the cached top: a full (α) hit, bytes = the bottom only', () => {
    // Top of M1E2 (θ = 0.5) cached; at iteration start the policy prefetches M1E2, which moves
    // only its 0.5 MB bottom (0 → 500 000) while layer 0 runs (M0E1 on demand 11 000 …).
    const policy: ServingPolicy = {
      name: 'prefetch-bottom',
      segmentCacheBytes: MB / 2,
      initialTops: () => [{ key: 6, fraction: 0.5 }],
      onIterationStart: (view) => ({ prefetch: [{ key: view.keyOf(1, 2), priority: 1 }] }),
      afterUse: () => false,
    };
    const { outcome, transfers, violations } = run(policy);
    expect(violations).toEqual([]);
    expect(transfers[0]).toMatchObject({ label: 'expert M1E2 bottom', bytes: MB / 2, startNs: 0, endNs: 500_000 });
    expect(outcome.counters).toMatchObject({ needs: 2, prefetchHits: 1, partialHits: 0, prefetchesUsed: 1 });
  });

  it('loadTops moves the top bytes (reshape); dropTops frees them; the segment cache never overflows', () => {
    const policy: ServingPolicy = {
      name: 'reshape',
      segmentCacheBytes: MB,
      onIterationStart: (view) =>
        view.iteration === 0
          ? {
              loadTops: [
                { key: 1, fraction: 0.5 },
                { key: 2, fraction: 0.5 },
                { key: 3, fraction: 0.5 },
              ],
            }
          : { dropTops: [2] },
      afterUse: () => false,
    };
    const { outcome, transfers, violations } = run(policy, 2);
    expect(violations).toEqual([]);
    // The third top does not fit a 1 MB cache beside two 0.5 MB tops.
    expect(outcome.counters.topLoads).toBe(2);
    expect(transfers.filter((t) => t.label.endsWith(' top')).map((t) => t.bytes)).toEqual([MB / 2, MB / 2]);
  });
});
