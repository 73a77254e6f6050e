/**
 * The serving executor's kernel-duration memos (`sim/serving/parts/kernels.ts`): the idle-loop
 * memo by expert count, the two-pair memo of partial-expert durations and the last-pair memos of
 * attention and linear attention answer exactly what the cost model does, over random call sequences
 * (hits and misses both counted).
 */
import { describe, expect, it } from 'vitest';
import { Rng } from '../../sim/kernel/rng.ts';
import type { Operation } from '../../sim/cost/types.ts';
import { Kernels } from '../../sim/serving/parts/kernels.ts';
import type { ServingContext } from '../../sim/serving/parts/state.ts';

/** A cost model stub: a pure function of the operation, counting its calls. */
function stub(): { ctx: ServingContext; calls: () => number } {
  let calls = 0;
  const cost = {
    estimate(op: Operation) {
      calls++;
      const o = op as {
        kind: string;
        tokens?: number;
        count?: number;
        fraction?: number;
        contextTokens?: number;
        sequences?: number;
      };
      const ns =
        o.kind === 'idleExperts'
          ? 1000 + 37 * o.count!
          : o.kind === 'attention'
            ? 700 * o.tokens! + 3 * o.contextTokens!
            : o.kind === 'linearAttention'
              ? 900 * o.tokens! + 13 * o.sequences!
              : 5000 * o.tokens! * (o.fraction ?? 1) + 11;
      return { ns: Math.round(ns) };
    },
  };
  const ctx = { E: 8, model: { layers: 2 }, cost, sink: undefined } as unknown as ServingContext;
  return { ctx, calls: () => calls };
}

describe('kernel duration memos', () => {
  it('answer as the cost model, hits and misses both taken', () => {
    const { ctx, calls } = stub();
    const k = new Kernels(ctx, Int32Array.from([0, 1]));
    const rng = new Rng('kernel memos');
    const fractions = [0.25, 0.75, 0.5, 0.3];
    let asked = 0;
    for (let i = 0; i < 2000; i++) {
      if (rng.next() < 0.3) {
        const count = rng.next() < 0.05 ? 5000 + rng.int(10) : rng.int(60);
        expect(k.idleNs(count)).toBe(ctx.cost.estimate({ kind: 'idleExperts', count }).ns);
      } else {
        // Mostly alternating two fractions (split experts' top and bottom), sometimes others.
        const fraction = rng.next() < 0.9 ? fractions[i % 2]! : fractions[2 + rng.int(2)]!;
        const tokens = rng.next() < 0.9 ? 1 : 1 + rng.int(3);
        expect(k.partialExpertNs(tokens, fraction)).toBe(ctx.cost.estimate({ kind: 'expert', tokens, fraction }).ns);
      }
      asked++;
    }
    // Each check also asked the stub once: the memos answered the rest without it.
    const misses = calls() - asked;
    expect(misses).toBeGreaterThan(0);
    expect(misses).toBeLessThan(asked / 2);
  });

  it('attention and linear attention: the last pair asked is kept, and a change of either member is asked anew', () => {
    const { ctx, calls } = stub();
    const k = new Kernels(ctx, Int32Array.from([0, 1]));
    const rng = new Rng('attention memos');
    let asked = 0;
    for (let i = 0; i < 600; i++) {
      // Runs of repeats (an iteration's layers), then a change of one member or both.
      const tokens = 1 + rng.int(3);
      const other = 1 + rng.int(3);
      const repeats = 1 + rng.int(4);
      for (let j = 0; j < repeats; j++) {
        if (i % 2 === 0) {
          expect(k.attentionNs(tokens, other)).toBe(
            ctx.cost.estimate({ kind: 'attention', tokens, contextTokens: other }).ns,
          );
        } else {
          const op = { kind: 'linearAttention', tokens, sequences: other } as const;
          expect(k.linearAttentionNs(tokens, other)).toBe(ctx.cost.estimate(op).ns);
        }
        asked++;
      }
    }
    const misses = calls() - asked;
    expect(misses).toBeGreaterThan(0);
    expect(misses).toBeLessThan(asked);
  });
});
