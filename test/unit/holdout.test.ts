/**
 * Hold-out validation (`workloads/stats/holdout.ts`): bad command-line options give one line naming
 * the flag (exit 2 in the script), and a tiny hold-out on a generated trace runs end to end and
 * reports one error per size that is twin − real. The real traces it is meant for are not in the
 * repository (no licence), so no figure of theirs is asserted here.
 */
import { rmSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UserError } from '../../sim/kernel/errors.ts';
import { generateTrace } from '../../workloads/trace-tools.ts';
import { holdout, parseHoldoutArgs } from '../../workloads/stats/holdout.ts';
import { tempDir } from '../helpers/cli.ts';

const lineOf = (f: () => unknown): string => {
  try {
    f();
  } catch (e) {
    if (e instanceof UserError) return e.oneLine();
    throw e;
  }
  return 'no error';
};

describe('hold-out', () => {
  const dir = tempDir('holdout');
  const trace = path.join(dir, 'tiny.jsonl.gz');
  beforeAll(async () => {
    await generateTrace({ profile: 'mixtral-8x7b', out: trace, requests: 6, promptTokens: 8, outputTokens: 8 });
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('bad options name the flag and the value', () => {
    expect(lineOf(() => parseHoldoutArgs([]))).toBe('trace: a trace file is required');
    expect(lineOf(() => parseHoldoutArgs([path.join(dir, 'none.gz')]))).toMatch(/^trace: no such file \(got /);
    expect(lineOf(() => parseHoldoutArgs([trace, '--sizes', '2,x']))).toBe(
      '--sizes: must be a positive integer (got "x")',
    );
    expect(lineOf(() => parseHoldoutArgs([trace, '--reset', 'sometimes']))).toBe(
      '--reset: must be never or request (got "sometimes")',
    );
    expect(lineOf(() => parseHoldoutArgs([trace, '--evals']))).toBe('--evals: needs a value');
    expect(parseHoldoutArgs([trace, '--sizes', '2,4', '--reset', 'request', '--evals', '3']).o).toEqual({
      sizes: [2, 4],
      reset: 'request',
      sharedFraction: true,
      maxEvaluations: 3,
    });
  });

  it('a tiny hold-out reports twin − real per size', async () => {
    const h = await holdout(trace, { sizes: [2, 4], maxEvaluations: 2 });
    expect(h.sizes).toEqual([2, 4]);
    h.sizes.forEach((_, i) => {
      expect(h.lruErrorPoints[i]).toBeCloseTo(100 * (h.twin.lru[i]! - h.real.lru[i]!), 0);
      expect(h.real.belady[i]).toBeGreaterThanOrEqual(h.real.lru[i]! - 1e-12);
    });
  }, 60_000);
});
