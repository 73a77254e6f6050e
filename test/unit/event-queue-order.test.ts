/**
 * The kernel's event queue beyond the basic ordering contract: the `stamp` and `seq` tie-breaks
 * that stand-in events (PCIe runs) rely on, the pool of posted entries (a reused entry takes
 * every field of its new event; a handle from `schedule` is never reused), the dispatch
 * context (`currentPriority` / `currentStamp` / `currentSeq`), the heap on many events, and the
 * counters and validation of `run` / `post`.
 */
import { describe, expect, it } from 'vitest';
import { SimError } from '../../sim/kernel/errors.ts';
import { Rng } from '../../sim/kernel/rng.ts';
import { EventPriority, Simulation } from '../../sim/kernel/simulation.ts';
import { ns } from '../../sim/kernel/time.ts';

type Ev = { readonly kind: 'mark'; readonly tag: string };
const mark = (tag: string): Ev => ({ kind: 'mark', tag });

/** A simulation logging `tag@time` and, per event, the dispatch context the kernel reports. */
function ctxSim() {
  const sim = new Simulation<Ev>();
  const log: string[] = [];
  const ctx: string[] = [];
  sim.setHandlers({
    mark: (e) => {
      log.push(`${e.tag}@${sim.now}`);
      ctx.push(`${e.tag}:p${sim.currentPriority}/s${sim.currentStamp}/q${sim.currentSeq}`);
    },
  });
  return { sim, log, ctx };
}

describe('stamp and seq tie-breaks', () => {
  it('equal (time, priority): the earlier stamp runs first, whatever the seq', () => {
    const { sim, log } = ctxSim();
    sim.schedule(ns(10), mark('late-stamp'), EventPriority.completion, 5);
    sim.schedule(ns(10), mark('early-stamp'), EventPriority.completion, 3);
    sim.post(ns(10), mark('posted-stamp-4'), EventPriority.completion, 4);
    sim.run();
    expect(log).toEqual(['early-stamp@10', 'posted-stamp-4@10', 'late-stamp@10']);
  });

  it('priority outranks stamp, and time outranks both', () => {
    const { sim, log } = ctxSim();
    sim.schedule(ns(10), mark('decision-stamp0'), EventPriority.decision, 0);
    sim.schedule(ns(10), mark('completion-stamp9'), EventPriority.completion, 9);
    sim.schedule(ns(9), mark('t9-decision'), EventPriority.decision, 9);
    sim.run();
    expect(log).toEqual(['t9-decision@9', 'completion-stamp9@10', 'decision-stamp0@10']);
  });

  it('equal stamp: a given seq places the event among the others (a stand-in reuses a seq)', () => {
    const { sim, log, ctx } = ctxSim();
    sim.schedule(ns(5), mark('a'), EventPriority.resource, 0); // seq 0
    sim.schedule(ns(5), mark('b'), EventPriority.resource, 0); // seq 1
    sim.schedule(ns(5), mark('c'), EventPriority.resource, 0); // seq 2
    sim.post(ns(5), mark('stand-in'), EventPriority.resource, 0, 1); // seq 1 again, as a stand-in for b
    sim.schedule(ns(5), mark('seq-minus'), EventPriority.resource, 0, -1);
    sim.run();
    // seq −1 first; a (0); b and stand-in share seq 1 (order between them is the heap's, both
    // before c); c (2). The next default seq continues from 3, not from a given one.
    expect(log[0]).toBe('seq-minus@5');
    expect(log[1]).toBe('a@5');
    expect(new Set(log.slice(2, 4))).toEqual(new Set(['b@5', 'stand-in@5']));
    expect(log[4]).toBe('c@5');
    expect(ctx.find((c) => c.startsWith('stand-in'))).toBe('stand-in:p20/s0/q1');
    const h = sim.schedule(ns(6), mark('next'));
    expect(h.seq).toBe(3);
  });

  it('reports the running event’s priority, stamp and seq, and +∞ priority between events', () => {
    const { sim, ctx } = ctxSim();
    expect(sim.currentPriority).toBe(Number.POSITIVE_INFINITY);
    sim.schedule(ns(4), mark('x'), EventPriority.arrival, 2); // seq 0
    sim.post(ns(7), mark('y'), EventPriority.decision); // stamp = now = 0, seq 1
    sim.run();
    expect(ctx).toEqual(['x:p50/s2/q0', 'y:p80/s0/q1']);
    expect(sim.currentPriority).toBe(Number.POSITIVE_INFINITY);
    expect(sim.currentStamp).toBe(0);
    expect(sim.currentSeq).toBe(1);
  });

  it('the default stamp is the scheduling time', () => {
    const { sim, log } = ctxSim();
    sim.schedule(ns(20), mark('stamped-0'), EventPriority.resource); // scheduled at now = 0
    sim.schedule(ns(3), mark('advance'));
    sim.run({ until: ns(5) });
    // Scheduled at now = 5, same time and priority as stamped-0 but a later stamp; and one with an explicit stamp 0
    // and a later seq still runs before it (stamp decides before seq).
    sim.schedule(ns(20), mark('stamped-5'), EventPriority.resource);
    sim.schedule(ns(20), mark('explicit-0'), EventPriority.resource, 0);
    sim.run();
    expect(log).toEqual(['advance@3', 'stamped-0@20', 'explicit-0@20', 'stamped-5@20']);
  });
});

describe('posted entries are pooled', () => {
  it('a reused entry takes the time, priority, stamp, seq and event of its new post', () => {
    const { sim, log, ctx } = ctxSim();
    sim.post(ns(1), mark('first'), EventPriority.decision, 0);
    sim.run();
    // The pooled entry of `first` (decision, stamp 0) is reused for `second` at completion priority.
    sim.post(ns(8), mark('second'), EventPriority.completion, 1, 100);
    sim.schedule(ns(8), mark('scheduled'), EventPriority.resource, 0);
    sim.run();
    expect(log).toEqual(['first@1', 'second@8', 'scheduled@8']);
    expect(ctx[1]).toBe('second:p10/s1/q100');
  });

  it('a handle given out by schedule is never reused for a later post', () => {
    const { sim } = ctxSim();
    const h = sim.schedule(ns(5), mark('handled'), EventPriority.arrival);
    sim.run();
    for (let i = 0; i < 3; i++) sim.post(ns(9 + i), mark(`p${i}`));
    expect([h.time, h.seq, h.cancelled]).toEqual([5, 0, false]);
    sim.run();
    expect([h.time, h.seq]).toEqual([5, 0]);
  });

  it('post validates its time like schedule', () => {
    const { sim } = ctxSim();
    sim.schedule(ns(10), mark('x'));
    sim.run();
    expect(() => sim.post(ns(9), mark('past'))).toThrow(SimError);
    expect(() => sim.post(ns(9), mark('past'))).toThrow('cannot schedule mark at 9ns (now 10ns)');
    expect(() => sim.post(10.5 as never, mark('frac'))).toThrow(SimError);
    expect(() => sim.post(Number.POSITIVE_INFINITY as never, mark('inf'))).toThrow(SimError);
    expect(sim.pending).toBe(0);
  });
});

describe('heap order over many events', () => {
  it('pops 500 events of random (time, priority, stamp) in strict lexicographic order', () => {
    const rng = new Rng('event-queue-order');
    const sim = new Simulation<{ kind: 'e'; key: number[] }>();
    const seen: number[][] = [];
    sim.setHandlers({ e: (ev) => seen.push(ev.key) });
    const expected: number[][] = [];
    for (let i = 0; i < 500; i++) {
      const key = [rng.int(20), [10, 20, 50, 80][rng.int(4)]!, rng.int(5), i];
      expected.push(key);
      if (rng.int(2) === 0) sim.schedule(ns(key[0]!), { kind: 'e', key }, key[1], key[2]);
      else sim.post(ns(key[0]!), { kind: 'e', key }, key[1], key[2]);
    }
    expect(sim.pending).toBe(500);
    expect(sim.run()).toEqual({ events: 500, stoppedBy: 'empty' });
    const cmp = (a: number[], b: number[]) => a[0]! - b[0]! || a[1]! - b[1]! || a[2]! - b[2]! || a[3]! - b[3]!;
    expect(seen).toEqual([...expected].sort(cmp));
    expect(sim.eventsProcessed).toBe(500);
    expect(sim.pending).toBe(0);
  });

  it('keeps the order when events are interleaved with pops and cancellations', () => {
    const rng = new Rng('event-queue-interleaved');
    const sim = new Simulation<{ kind: 'e'; t: number; i: number }>();
    const seen: string[] = [];
    sim.setHandlers({ e: (ev) => seen.push(`${ev.t}/${ev.i}`) });
    const live = new Map<number, { t: number; h: ReturnType<typeof sim.schedule> }>();
    let i = 0;
    for (let round = 0; round < 40; round++) {
      for (let k = 0; k < 8; k++, i++) {
        const t = sim.now + rng.int(50);
        live.set(i, { t, h: sim.schedule(ns(t), { kind: 'e', t, i }) });
      }
      const victim = [...live.keys()][rng.int(live.size)]!;
      sim.cancel(live.get(victim)!.h);
      sim.cancel(live.get(victim)!.h); // idempotent
      live.delete(victim);
      for (let k = 0; k < 5; k++) sim.step();
      for (const [j, v] of live) if (seen.includes(`${v.t}/${j}`)) live.delete(j);
    }
    sim.run();
    const pairs = seen.map((s) => s.split('/').map(Number) as [number, number]);
    for (let k = 1; k < pairs.length; k++) {
      const [t0, i0] = pairs[k - 1]!;
      const [t1, i1] = pairs[k]!;
      expect(t1 > t0 || (t1 === t0 && i1 > i0)).toBe(true);
    }
    expect(pairs.length).toBe(40 * 8 - 40);
    expect(sim.eventsProcessed).toBe(pairs.length);
  });
});

describe('run and step bookkeeping', () => {
  it('pending counts cancelled entries until they are discarded; eventsProcessed does not', () => {
    const { sim, log } = ctxSim();
    const a = sim.schedule(ns(1), mark('a'));
    sim.schedule(ns(2), mark('b'));
    sim.cancel(a);
    expect(sim.pending).toBe(2);
    expect(sim.run({ until: ns(1) })).toEqual({ events: 0, stoppedBy: 'until' });
    expect(sim.pending).toBe(1);
    expect(sim.eventsProcessed).toBe(0);
    expect(sim.step()).toBe(true);
    expect(log).toEqual(['b@2']);
    expect(sim.eventsProcessed).toBe(1);
  });

  it('run({until}) rejects NaN and fractional bounds with the times in the message', () => {
    const { sim } = ctxSim();
    expect(() => sim.run({ until: Number.NaN as never })).toThrow('cannot run until NaNns (now 0ns)');
    expect(() => sim.run({ until: 2.5 as never })).toThrow(SimError);
    expect(sim.run({ until: ns(0) })).toEqual({ events: 0, stoppedBy: 'empty' });
  });

  it('an event exactly at until runs; one 1 ns later does not', () => {
    const { sim, log } = ctxSim();
    sim.schedule(ns(7), mark('at'));
    sim.schedule(ns(8), mark('after'));
    expect(sim.run({ until: ns(7) })).toEqual({ events: 1, stoppedBy: 'until' });
    expect(log).toEqual(['at@7']);
    expect(sim.now).toBe(7);
  });

  it('an observer without onEvent is skipped; observers see events in order', () => {
    const { sim } = ctxSim();
    const seen: number[] = [];
    sim.observe({});
    sim.observe({ onEvent: (t) => seen.push(t) });
    sim.post(ns(3), mark('x'));
    sim.post(ns(2), mark('y'));
    sim.run();
    expect(seen).toEqual([2, 3]);
  });
});
