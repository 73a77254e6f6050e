/**
 * Property: random small worlds (real model profile, optionally shrunk × real testbed × small
 * workload × executor config × policy) run through the serving executor keep every invariant
 * of DESIGN §10, checked from the outside by `InvariantChecker`:
 * - no memory pool overflows at any record; no expert computes before its bytes are resident;
 * - every request finishes with exactly its tokens, in order arrive ≤ admit ≤ first ≤ finish;
 * - h2d bytes = Σ completed transfers + Σ bytes sent by cancelled ones = `h2d.bytesMoved`;
 * - bufferHitRate = cacheHitRate + prefetchHitRate;
 * - the same world and seed give identical metrics JSON and event counts.
 * A world whose buffer cannot fit the GPU must be refused with a `UserError` (valid
 * behaviour), never a crash. MoEpic worlds (split experts) are checked by `SegmentChecker`,
 * which keeps the same books per piece of expert.
 *
 * Coverage: each behaviour these invariants guard (prefetch, cancellation, cancellation after
 * some bytes were sent, eviction under memory pressure, split experts, encoder-decoder) must
 * occur in at least a quarter of the worlds that ran, observed from the trace
 * (`helpers/coverage.ts`); the shares are printed.
 *
 * Replay a failure: fast-check prints `{ seed, path }`; pass them to `fc.assert` as
 * `{ seed, path, endOnFailure: true }`.
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { UserError } from '../../sim/kernel/errors.ts';
import { servingMetrics } from '../../sim/metrics/serving-metrics.ts';
import { fanout } from '../../sim/observe/trace-sink.ts';
import { CoverageTally, SERVING_BEHAVIOURS, ServingCoverage, type ServingBehaviour } from '../helpers/coverage.ts';
import { InvariantChecker } from '../helpers/invariant-checker.ts';
import { SegmentChecker } from '../helpers/segment-checker.ts';
import { buildWorld, normaliseWorld, worldArb, worldModel, type WorldSpec } from '../helpers/serving-world.ts';

interface RunResult {
  readonly metricsJson: string;
  readonly events: number;
  readonly violations: string[];
  readonly occurred: Record<ServingBehaviour, boolean>;
}

async function runChecked(w: WorldSpec): Promise<RunResult | 'refused'> {
  const model = worldModel(w);
  // Split experts (MoEpic) move and compute pieces of experts: the segment checker extends the same books to pieces.
  const split = w.policy.kind === 'moepic';
  const checker = split
    ? new SegmentChecker(model.experts, model.moeLayers * model.experts, model.derived.bytesPerExpert)
    : new InvariantChecker({ experts: model.experts, bytesPerExpert: model.derived.bytesPerExpert });
  const coverage = new ServingCoverage();
  let executor;
  try {
    ({ executor } = await buildWorld(w, fanout([checker, coverage])));
  } catch (err) {
    // Refusing a world that does not fit is correct; anything else is a bug.
    expect(err, `world refused with a non-user error: ${String(err)}`).toBeInstanceOf(UserError);
    return 'refused';
  }
  const outcome = executor.run();
  const violations = checker.finish(outcome);
  if (checker instanceof InvariantChecker) expect(checker.seen.memoryRecords).toBeGreaterThan(0);

  for (const r of outcome.requests) expect(r.emittedTokens).toBe(r.outputTokens);
  const h2d = outcome.resources.h2d;
  expect(h2d.bytesMoved).toBe(h2d.completedBytes + h2d.cancelledSentBytes);

  const metrics = servingMetrics(outcome);
  expect(Math.abs(metrics.bufferHitRate - (metrics.cacheHitRate + metrics.prefetchHitRate))).toBeLessThan(1e-9);
  expect(metrics.outputTokens).toBe(outcome.requests.reduce((a, r) => a + r.outputTokens, 0));
  const occurred = coverage.finish(outcome.slots, model.derived.bytesPerExpert);
  return { metricsJson: JSON.stringify(metrics), events: outcome.events, violations, occurred };
}

describe('serving executor invariants on random small worlds', () => {
  it('holds every invariant, and the same seed gives the same results', async () => {
    let ran = 0;
    let refused = 0;
    const tally = new CoverageTally('serving-invariants', SERVING_BEHAVIOURS);
    await fc.assert(
      fc.asyncProperty(worldArb().map(normaliseWorld), async (w) => {
        const a = await runChecked(w);
        if (a === 'refused') {
          refused++;
          return;
        }
        ran++;
        tally.record(a.occurred);
        expect(a.violations).toEqual([]);
        const b = await runChecked(w);
        expect(b).not.toBe('refused');
        if (b === 'refused') return;
        expect(b.events).toBe(a.events);
        expect(b.metricsJson).toBe(a.metricsJson);
      }),
      { numRuns: 60, endOnFailure: true },
    );
    // The generator must mostly produce worlds that run (otherwise the property says little).
    expect(ran).toBeGreaterThan(refused);
    tally.check();
  });
});
