/**
 * The pieces of experiments/parallel/ that need no simulation:
 * - `runInIndexOrder` dispatches in index order, at most `concurrency` at a time, and after a
 *   failure dispatches nothing more and throws the lowest failing index's error (the one a
 *   serial run stops at), after the runs under way have settled;
 * - the queue's wire encoding keeps NaN, ±Infinity and -0;
 * - errors cross a thread or a queue as the same typed errors.
 */
import { describe, expect, it } from 'vitest';
import { UserError } from '../../sim/kernel/errors.ts';
import { runInIndexOrder } from '../../experiments/parallel/pool.ts';
import { decode, encode, fromWireError, toWireError } from '../../experiments/parallel/wire.ts';
import { PluginError } from '../../experiments/runner.ts';

/** A promise settled by hand. */
function gate() {
  let open!: () => void;
  const p = new Promise<void>((r) => (open = r));
  return { p, open };
}

describe('runInIndexOrder', () => {
  it('starts runs in index order with at most `concurrency` under way', async () => {
    const started: number[] = [];
    let running = 0;
    let most = 0;
    await runInIndexOrder([0, 1, 2, 3, 4, 5, 6], 3, async (i) => {
      started.push(i);
      running++;
      most = Math.max(most, running);
      // Later indexes finish first: order of completion must not matter.
      await new Promise((r) => setImmediate(r));
      for (let k = 0; k < 7 - i; k++) await Promise.resolve();
      running--;
    });
    expect(started).toEqual([0, 1, 2, 3, 4, 5, 6]);
    expect(most).toBe(3);
  });

  it('after a failure dispatches nothing more, waits for the runs under way, and throws the lowest failing index', async () => {
    const g1 = gate();
    const started: number[] = [];
    const finished: number[] = [];
    const done = runInIndexOrder([0, 1, 2, 3, 4, 5], 2, async (i) => {
      started.push(i);
      if (i === 2) throw new Error('run 2 failed');
      if (i === 1) {
        await g1.p;
        finished.push(1);
        throw new Error('run 1 failed');
      }
      finished.push(i);
    });
    // Run 2 fails while run 1 is still under way: nothing after 2 starts.
    await new Promise((r) => setImmediate(r));
    expect(started).toEqual([0, 1, 2]);
    g1.open();
    await expect(done).rejects.toThrow('run 1 failed');
    expect(finished).toEqual([0, 1]);
    expect(started).toEqual([0, 1, 2]);
  });
});

describe('wire', () => {
  it('encode/decode keeps the numbers JSON cannot', () => {
    const v = { a: NaN, b: Infinity, c: -Infinity, d: -0, e: [1.5, NaN], f: 'x', g: null };
    const back = decode<typeof v>(encode(v));
    expect(back.a).toBeNaN();
    expect(back.b).toBe(Infinity);
    expect(back.c).toBe(-Infinity);
    expect(Object.is(back.d, -0)).toBe(true);
    expect(back.e[1]).toBeNaN();
    expect(back.f).toBe('x');
    expect(back.g).toBeNull();
  });

  it('a UserError and a PluginError come back as the same one-line report', () => {
    const u = new UserError('bad value', 'my.yaml', 'workload.requests', 0);
    const u2 = fromWireError(decode(encode(toWireError(u))), PluginError.make, 'test');
    expect(u2).toBeInstanceOf(UserError);
    expect((u2 as UserError).oneLine()).toBe(u.oneLine());
    const original = new Error('boom');
    const p = new PluginError('fifo', 'plugins/fifo.ts', 'onLayerRouted', 1.5e9, 'boom', undefined, original);
    const p2 = fromWireError(toWireError(p), PluginError.make, 'test');
    expect(p2).toBeInstanceOf(PluginError);
    expect((p2 as PluginError).oneLine()).toBe(p.oneLine());
    expect(((p2 as PluginError).original as Error).stack).toBe(original.stack);
  });

  it('any other error keeps its name, message and stack, and says where it ran', () => {
    const e = new TypeError('x is undefined');
    const e2 = fromWireError(toWireError(e), PluginError.make, 'worker thread, run 3');
    expect(e2.name).toBe('TypeError');
    expect(e2.message).toBe('x is undefined');
    expect(e2.stack).toContain(e.stack!);
    expect(e2.stack).toContain('worker thread, run 3');
  });
});
