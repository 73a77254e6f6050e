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
 * behaviour), never a crash.
 *
 * Replay a failure: fast-check prints `{ seed, path }`; pass them to `fc.assert` as
 * `{ seed, path, endOnFailure: true }`.
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { UserError } from '../../sim/kernel/errors.ts';
import { servingMetrics } from '../../sim/metrics/serving-metrics.ts';
import { InvariantChecker } from '../helpers/invariant-checker.ts';
import { buildWorld, normaliseWorld, worldArb, worldModel, type WorldSpec } from '../helpers/serving-world.ts';

interface RunResult {
  readonly metricsJson: string;
  readonly events: number;
  readonly violations: string[];
}

async function runChecked(w: WorldSpec): Promise<RunResult | 'refused'> {
  const model = worldModel(w);
  const checker = new InvariantChecker({ experts: model.experts, bytesPerExpert: model.derived.bytesPerExpert });
  let executor;
  try {
    ({ executor } = await buildWorld(w, checker));
  } catch (err) {
    // Refusing a world that does not fit is correct; anything else is a bug.
    expect(err, `world refused with a non-user error: ${String(err)}`).toBeInstanceOf(UserError);
    return 'refused';
  }
  const outcome = executor.run();
  const violations = checker.finish(outcome);
  expect(checker.seen.memoryRecords).toBeGreaterThan(0);

  for (const r of outcome.requests) expect(r.emittedTokens).toBe(r.outputTokens);
  const h2d = outcome.resources.h2d;
  expect(h2d.bytesMoved).toBe(h2d.completedBytes + h2d.cancelledSentBytes);

  const metrics = servingMetrics(outcome);
  expect(Math.abs(metrics.bufferHitRate - (metrics.cacheHitRate + metrics.prefetchHitRate))).toBeLessThan(1e-9);
  expect(metrics.outputTokens).toBe(outcome.requests.reduce((a, r) => a + r.outputTokens, 0));
  return { metricsJson: JSON.stringify(metrics), events: outcome.events, violations };
}

describe('serving executor invariants on random small worlds', () => {
  it('holds every invariant, and the same seed gives the same results', async () => {
    let ran = 0;
    let refused = 0;
    await fc.assert(
      fc.asyncProperty(worldArb().map(normaliseWorld), async (w) => {
        const a = await runChecked(w);
        if (a === 'refused') {
          refused++;
          return;
        }
        ran++;
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
  });
});
