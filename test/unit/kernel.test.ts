/**
 * Kernel: event ordering (the same-time contract of DESIGN §3), run options, cancellation,
 * time helpers, named RNG streams and error formatting. Every expected number is worked out
 * by hand in a comment next to it.
 */
import seedrandom from 'seedrandom';
import { describe, expect, it } from 'vitest';
import {
  CapacityError,
  InvariantError,
  PolicyError,
  SimError,
  UserError,
  formatValue,
} from '../../sim/kernel/errors.ts';
import { Rng, RngStreams } from '../../sim/kernel/rng.ts';
import { EventPriority, Simulation } from '../../sim/kernel/simulation.ts';
import {
  addNs,
  bytesToNs,
  ceilNs,
  flopsToNs,
  maxNs,
  msToNs,
  ns,
  nsToMs,
  nsToSeconds,
  secondsToNs,
  usToNs,
} from '../../sim/kernel/time.ts';

type Ev = { readonly kind: 'mark'; readonly tag: string } | { readonly kind: 'spawn'; readonly tag: string };

/** A simulation whose handlers log `tag@time`; `spawn` events run `onSpawn` (to schedule from a handler). */
function logSim(onSpawn: (sim: Simulation<Ev>, tag: string) => void = () => {}) {
  const sim = new Simulation<Ev>();
  const log: string[] = [];
  sim.setHandlers({
    mark: (e) => log.push(`${e.tag}@${sim.now}`),
    spawn: (e) => {
      log.push(`${e.tag}@${sim.now}`);
      onSpawn(sim, e.tag);
    },
  });
  return { sim, log };
}

const mark = (tag: string): Ev => ({ kind: 'mark', tag });

describe('Simulation ordering', () => {
  it('runs events in ascending time regardless of scheduling order', () => {
    const { sim, log } = logSim();
    sim.schedule(ns(30), mark('c'));
    sim.schedule(ns(10), mark('a'));
    sim.schedule(ns(20), mark('b'));
    sim.schedule(ns(0), mark('z'));
    expect(sim.run()).toEqual({ events: 4, stoppedBy: 'empty' });
    expect(log).toEqual(['z@0', 'a@10', 'b@20', 'c@30']);
    expect(sim.now).toBe(30);
  });

  it('orders simultaneous events by priority, lower first, whatever the scheduling order', () => {
    const { sim, log } = logSim();
    sim.schedule(ns(5), mark('decision'), EventPriority.decision);
    sim.schedule(ns(5), mark('arrival'), EventPriority.arrival);
    sim.schedule(ns(5), mark('resource'), EventPriority.resource);
    sim.schedule(ns(5), mark('completion'), EventPriority.completion);
    sim.schedule(ns(5), mark('custom-3'), 3);
    sim.run();
    expect(log).toEqual(['custom-3@5', 'completion@5', 'resource@5', 'arrival@5', 'decision@5']);
  });

  it('the priority constants are ordered completion < resource < arrival < decision', () => {
    expect(EventPriority.completion).toBeLessThan(EventPriority.resource);
    expect(EventPriority.resource).toBeLessThan(EventPriority.arrival);
    expect(EventPriority.arrival).toBeLessThan(EventPriority.decision);
  });

  it('runs equal (time, priority) events in scheduling order', () => {
    const { sim, log } = logSim();
    for (const tag of ['first', 'second', 'third', 'fourth']) sim.schedule(ns(7), mark(tag), EventPriority.arrival);
    // An earlier-priority event scheduled last still goes first; later-time ones go last.
    sim.schedule(ns(8), mark('later'), EventPriority.completion);
    sim.schedule(ns(7), mark('urgent'), EventPriority.completion);
    sim.run();
    expect(log).toEqual(['urgent@7', 'first@7', 'second@7', 'third@7', 'fourth@7', 'later@8']);
  });

  it('defaults to the resource priority', () => {
    const { sim } = logSim();
    expect(sim.schedule(ns(1), mark('x')).priority).toBe(EventPriority.resource);
  });

  it('an event scheduled by a handler for the same instant runs by (priority, seq) among what is left', () => {
    // At t=10: decision D1 spawns a completion C (runs before D2: priority 10 < 80) and an
    // arrival A (after D2? no: arrival 50 < decision 80, so before D2 too), and another
    // decision D3 (same priority as D2, scheduled later: after D2).
    const { sim, log } = logSim((s, tag) => {
      if (tag === 'D1') {
        s.schedule(ns(10), mark('D3'), EventPriority.decision);
        s.schedule(ns(10), mark('A'), EventPriority.arrival);
        s.schedule(ns(10), mark('C'), EventPriority.completion);
      }
    });
    sim.schedule(ns(10), { kind: 'spawn', tag: 'D1' }, EventPriority.decision);
    sim.schedule(ns(10), mark('D2'), EventPriority.decision);
    sim.run();
    expect(log).toEqual(['D1@10', 'C@10', 'A@10', 'D2@10', 'D3@10']);
  });

  it('keeps seq per simulation: interleaved simulations do not influence each other', () => {
    const a = logSim();
    const b = logSim();
    const seqsA: number[] = [];
    const seqsB: number[] = [];
    for (let i = 0; i < 4; i++) {
      seqsA.push(a.sim.schedule(ns(1), mark(`a${i}`)).seq);
      seqsB.push(b.sim.schedule(ns(1), mark(`b${i}`)).seq);
      b.sim.schedule(ns(2), mark(`b-extra${i}`));
    }
    expect(seqsA).toEqual([0, 1, 2, 3]);
    expect(seqsB).toEqual([0, 2, 4, 6]);
    a.sim.run();
    b.sim.run();
    expect(a.log).toEqual(['a0@1', 'a1@1', 'a2@1', 'a3@1']);
    expect(b.log).toEqual(['b0@1', 'b1@1', 'b2@1', 'b3@1', 'b-extra0@2', 'b-extra1@2', 'b-extra2@2', 'b-extra3@2']);

    // A fresh simulation starts again at seq 0, whatever others did before.
    expect(new Simulation<Ev>().schedule(ns(0), mark('x')).seq).toBe(0);
  });

  it('same schedule ⇒ same order, run after run (no hidden global state)', () => {
    const once = () => {
      const { sim, log } = logSim();
      for (let i = 0; i < 50; i++) sim.schedule(ns((i * 7) % 5), mark(`e${i}`), (i * 3) % 4);
      sim.run();
      return log;
    };
    expect(once()).toEqual(once());
  });
});

describe('Simulation.run options', () => {
  it('run({until}) processes events at ≤ until, stops before later ones, and sets now = until', () => {
    const { sim, log } = logSim();
    sim.schedule(ns(5), mark('a'));
    sim.schedule(ns(10), mark('b'));
    sim.schedule(ns(15), mark('c'));
    expect(sim.run({ until: ns(10) })).toEqual({ events: 2, stoppedBy: 'until' });
    expect(log).toEqual(['a@5', 'b@10']);
    expect(sim.now).toBe(10);
    expect(sim.pending).toBe(1);

    expect(sim.run({ until: ns(12) })).toEqual({ events: 0, stoppedBy: 'until' });
    expect(sim.now).toBe(12);
    // Now is 12: scheduling at 11 is in the past.
    expect(() => sim.schedule(ns(11), mark('past'))).toThrow(SimError);

    expect(sim.run()).toEqual({ events: 1, stoppedBy: 'empty' });
    expect(log).toEqual(['a@5', 'b@10', 'c@15']);
    expect(sim.now).toBe(15);
  });

  it('run({until}) advances the clock to until even when the queue runs dry first', () => {
    const { sim, log } = logSim();
    sim.schedule(ns(3), mark('a'));
    const r = sim.run({ until: ns(100) });
    expect(r.events).toBe(1);
    expect(log).toEqual(['a@3']);
    expect(sim.now).toBe(100);
    // And with nothing scheduled at all.
    const idle = logSim().sim;
    idle.run({ until: ns(42) });
    expect(idle.now).toBe(42);
    // So work scheduled after an idle period starts from `until`, not from the last event.
    expect(() => sim.schedule(ns(50), mark('past'))).toThrow(SimError);
  });

  it('run({until}) never moves the clock backwards', () => {
    const { sim } = logSim();
    sim.schedule(ns(10), mark('a'));
    sim.schedule(ns(20), mark('b'));
    sim.run({ until: ns(15) });
    expect(sim.now).toBe(15);
    expect(() => sim.run({ until: ns(5) })).toThrow(SimError);
    expect(sim.now).toBe(15);
    // until = now is fine and processes nothing.
    expect(sim.run({ until: ns(15) })).toEqual({ events: 0, stoppedBy: 'until' });
    expect(sim.now).toBe(15);
  });

  it('runs events that a handler schedules at exactly `until`', () => {
    const { sim, log } = logSim((s) => {
      s.schedule(ns(10), mark('child@same'));
      s.schedule(ns(11), mark('child@later'));
    });
    sim.schedule(ns(10), { kind: 'spawn', tag: 'parent' });
    sim.run({ until: ns(10) });
    expect(log).toEqual(['parent@10', 'child@same@10']);
    expect(sim.pending).toBe(1);
  });

  it('maxEvents stops after that many events, leaving now at the last one processed', () => {
    const { sim, log } = logSim();
    for (let t = 1; t <= 5; t++) sim.schedule(ns(t * 10), mark(`e${t}`));
    expect(sim.run({ maxEvents: 2 })).toEqual({ events: 2, stoppedBy: 'maxEvents' });
    expect(log).toEqual(['e1@10', 'e2@20']);
    expect(sim.now).toBe(20);
    expect(sim.run({ maxEvents: 0 })).toEqual({ events: 0, stoppedBy: 'maxEvents' });
    // maxEvents wins over until when it is hit first; now is not moved to until then.
    expect(sim.run({ maxEvents: 1, until: ns(1000) })).toEqual({ events: 1, stoppedBy: 'maxEvents' });
    expect(sim.now).toBe(30);
    expect(sim.run()).toEqual({ events: 2, stoppedBy: 'empty' });
    expect(sim.eventsProcessed).toBe(5);
  });

  it('step() processes one event and returns false when empty', () => {
    const { sim, log } = logSim();
    const h = sim.schedule(ns(1), mark('cancelled'));
    sim.schedule(ns(2), mark('kept'));
    sim.cancel(h);
    expect(sim.step()).toBe(true);
    expect(log).toEqual(['kept@2']);
    expect(sim.step()).toBe(false);
  });

  it('throws a SimError when no handlers are installed', () => {
    const sim = new Simulation<Ev>();
    sim.schedule(ns(0), mark('x'));
    expect(() => sim.run()).toThrow(SimError);
  });

  it('tells observers about every processed event, with its time, before the handler', () => {
    const { sim, log } = logSim();
    const seen: string[] = [];
    sim.observe({ onEvent: (t, e) => seen.push(`${e.kind}:${e.kind === 'mark' ? e.tag : ''}@${t}/${log.length}`) });
    sim.observe({}); // an observer without hooks is fine
    const c = sim.schedule(ns(2), mark('gone'));
    sim.schedule(ns(3), mark('b'));
    sim.schedule(ns(1), mark('a'));
    sim.cancel(c);
    sim.run();
    expect(seen).toEqual(['mark:a@1/0', 'mark:b@3/1']);
  });
});

describe('Simulation.cancel', () => {
  it('skips cancelled events, does not count them, and is idempotent', () => {
    const { sim, log } = logSim();
    const a = sim.schedule(ns(1), mark('a'));
    sim.schedule(ns(2), mark('b'));
    const c = sim.schedule(ns(3), mark('c'));
    sim.cancel(a);
    sim.cancel(a);
    sim.cancel(c);
    expect(sim.pending).toBe(3); // cancelled entries stay until discarded
    expect(sim.run()).toEqual({ events: 1, stoppedBy: 'empty' });
    expect(log).toEqual(['b@2']);
    expect(sim.eventsProcessed).toBe(1);
    expect(sim.pending).toBe(0);
    // A cancelled event at the end does not move the clock.
    expect(sim.now).toBe(2);
  });

  it('a handler can cancel a later event of the same instant', () => {
    let victim: ReturnType<Simulation<Ev>['schedule']> | undefined;
    const { sim, log } = logSim((s) => s.cancel(victim!));
    sim.schedule(ns(4), { kind: 'spawn', tag: 'killer' }, EventPriority.completion);
    victim = sim.schedule(ns(4), mark('victim'), EventPriority.decision);
    sim.run();
    expect(log).toEqual(['killer@4']);
  });

  it('a cancelled head does not stop run({until}) early or count as processed', () => {
    const { sim, log } = logSim();
    const h = sim.schedule(ns(1), mark('x'));
    sim.schedule(ns(5), mark('y'));
    sim.cancel(h);
    expect(sim.run({ until: ns(5) })).toEqual({ events: 1, stoppedBy: 'empty' });
    expect(log).toEqual(['y@5']);
  });
});

describe('Simulation.schedule validation', () => {
  it('scheduling in the past throws a SimError naming the event kind and the times', () => {
    const { sim } = logSim();
    sim.schedule(ns(10), mark('a'));
    sim.run();
    let err: unknown;
    try {
      sim.schedule(ns(9), { kind: 'spawn', tag: 'late' });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(SimError);
    const se = err as SimError;
    expect(se.message).toContain('spawn');
    expect(se.message).toContain('9ns');
    expect(se.message).toContain('now 10ns');
    expect(se.simTimeNs).toBe(10);
    expect(se.origin).toBe('kernel');
    // Scheduling at now is allowed.
    expect(() => sim.schedule(ns(10), mark('now'))).not.toThrow();
  });

  it('rejects non-integer and non-finite times', () => {
    const { sim } = logSim();
    expect(() => sim.schedule(1.5 as never, mark('frac'))).toThrow(/cannot schedule mark/);
    expect(() => sim.schedule(Number.NaN as never, mark('nan'))).toThrow(SimError);
    expect(() => sim.schedule(Number.POSITIVE_INFINITY as never, mark('inf'))).toThrow(SimError);
  });
});

describe('time helpers', () => {
  it('ns() brands non-negative safe integers and rejects the rest', () => {
    expect(ns(0)).toBe(0);
    expect(ns(123)).toBe(123);
    expect(ns(Number.MAX_SAFE_INTEGER)).toBe(Number.MAX_SAFE_INTEGER);
    for (const bad of [-1, 1.5, 0.1, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]) {
      expect(() => ns(bad)).toThrow(RangeError);
    }
  });

  it('converts units, rounding up once and snapping float noise to the integer', () => {
    // 0.001 s × 1e9 = 1e6 ns exactly (no float residue left after snapping).
    expect(secondsToNs(0.001)).toBe(1_000_000);
    expect(secondsToNs(0.3)).toBe(300_000_000); // 0.3 × 1e9 = 299999999.99999994 in floats → snapped
    expect(msToNs(1.5)).toBe(1_500_000);
    expect(usToNs(0.0005)).toBe(1); // 0.5 ns → 1 ns: positive work never takes zero time
    expect(usToNs(2)).toBe(2000);
    expect(nsToSeconds(2_500_000_000)).toBe(2.5);
    expect(nsToMs(1_500_000)).toBe(1.5);
  });

  it('ceilNs snaps within 1e-6 ns of an integer and otherwise rounds up', () => {
    expect(ceilNs(2)).toBe(2);
    expect(ceilNs(2 + 1e-9)).toBe(2);
    expect(ceilNs(2 - 1e-9)).toBe(2);
    expect(ceilNs(2.00001)).toBe(3);
    expect(ceilNs(0.4)).toBe(1);
    expect(ceilNs(0)).toBe(0);
    for (const bad of [-1, -1e-3, Number.NaN, Number.POSITIVE_INFINITY]) expect(() => ceilNs(bad)).toThrow(RangeError);
  });

  it('bytesToNs and flopsToNs round up once', () => {
    // 1 B at 3 B/s = 0.333… s = 333 333 333.33… ns → 333 333 334 ns.
    expect(bytesToNs(1, 3)).toBe(333_333_334);
    // 3500 B at 3 GB/s = 1166.67 ns → 1167 ns when rounded once …
    expect(bytesToNs(3500, 3e9)).toBe(1167);
    // … but 1169 ns when rounded per 1000 B packet: 3 × ⌈333.33⌉ + ⌈166.67⌉ = 3 × 334 + 167.
    expect(3 * bytesToNs(1000, 3e9) + bytesToNs(500, 3e9)).toBe(1169);
    expect(bytesToNs(16 * 2 ** 20, 25e9)).toBe(671_089); // 16 MiB / 25 GB/s = 671088.64 ns
    expect(bytesToNs(0, 0)).toBe(0); // zero bytes take zero time, whatever the rate
    expect(() => bytesToNs(1, 0)).toThrow(RangeError);
    expect(() => bytesToNs(1, -5)).toThrow(RangeError);
    // 10 FLOP at 4 GFLOP/s = 2.5 ns → 3 ns.
    expect(flopsToNs(10, 4e9)).toBe(3);
    expect(flopsToNs(2e12, 1e12)).toBe(2e9);
    expect(flopsToNs(0, 0)).toBe(0);
    expect(() => flopsToNs(1, 0)).toThrow(RangeError);
  });

  it('addNs and maxNs', () => {
    expect(addNs(ns(2), ns(3))).toBe(5);
    expect(maxNs(ns(2), ns(3))).toBe(3);
    expect(maxNs(ns(7), ns(3))).toBe(7);
  });
});

function draws(rng: Rng, n: number): number[] {
  return Array.from({ length: n }, () => rng.next());
}

function mean(xs: readonly number[]): number {
  return xs.reduce((s, x) => s + x, 0) / xs.length;
}

describe('Rng', () => {
  it("draws exactly seedrandom's Alea sequence for the same seed (its step runs inline)", () => {
    for (const seed of ['', 'a', '1/routing', 'request 12/tokens', 'ünïcödé']) {
      const reference = seedrandom.alea(seed);
      const rng = new Rng(seed);
      for (let i = 0; i < 5000; i++) expect(rng.next()).toBe(reference());
    }
  });

  it("keeps seedrandom's Alea state, carry included, over long runs (the carry is taken with Math.floor, not | 0)", () => {
    for (const seed of ['', 'x', '7/tokens']) {
      const reference = seedrandom.alea(seed, { state: true }) as unknown as {
        (): number;
        state(): { s0: number; s1: number; s2: number; c: number };
      };
      const rng = new Rng(seed);
      for (let i = 0; i < 200_000; i++) {
        const a = rng.next();
        const b = reference();
        if (a !== b) expect(a).toBe(b);
      }
      const st = reference.state();
      expect(Array.from(rng.aleaState)).toEqual([st.s0, st.s1, st.s2, st.c]);
    }
  });
});

describe('RngStreams', () => {
  it('same master seed and name ⇒ same sequence', () => {
    expect(draws(new RngStreams(42).stream('arrivals'), 100)).toEqual(
      draws(new RngStreams(42).stream('arrivals'), 100),
    );
  });

  it('different names or seeds ⇒ different sequences', () => {
    const s = new RngStreams(42);
    const a = draws(s.stream('arrivals'), 20);
    const r = draws(s.stream('routing'), 20);
    const other = draws(new RngStreams(43).stream('arrivals'), 20);
    expect(a).not.toEqual(r);
    expect(a).not.toEqual(other);
  });

  it('adding or interleaving another stream does not change an existing one', () => {
    const alone = draws(new RngStreams(7).stream('arrivals'), 50);
    const s = new RngStreams(7);
    s.stream('policy:lru').next();
    const arrivals = s.stream('arrivals');
    const routing = s.stream('routing');
    const interleaved: number[] = [];
    for (let i = 0; i < 50; i++) {
      interleaved.push(arrivals.next());
      routing.gamma(0.7, 2);
      routing.normal();
    }
    expect(interleaved).toEqual(alone);
  });

  it('stream(name) returns the same object, continuing its sequence', () => {
    const s = new RngStreams(1);
    const x = s.stream('x');
    expect(s.stream('x')).toBe(x);
    const fresh = new RngStreams(1).stream('x');
    const first = fresh.next();
    expect(x.next()).toBe(first);
    expect(s.stream('x').next()).toBe(fresh.next());
    expect(s.masterSeed).toBe(1);
  });
});

describe('Rng distributions (fixed seed, so deterministic)', () => {
  const N = 20_000;

  it('next() is in [0, 1) and int(n) in [0, n)', () => {
    const r = new Rng('unit');
    for (let i = 0; i < 1000; i++) {
      const u = r.next();
      expect(u).toBeGreaterThanOrEqual(0);
      expect(u).toBeLessThan(1);
      const k = r.int(7);
      expect(Number.isInteger(k) && k >= 0 && k < 7).toBe(true);
    }
  });

  it('exponential(mean) has that mean', () => {
    const r = new Rng('exp');
    const xs = Array.from({ length: N }, () => r.exponential(5));
    // sd of the sample mean = 5 / √20000 ≈ 0.035; allow ~6 sd.
    expect(Math.abs(mean(xs) - 5)).toBeLessThan(0.2);
    expect(xs.every((x) => x >= 0 && Number.isFinite(x))).toBe(true);
  });

  it('normal() has mean 0 and variance 1', () => {
    const r = new Rng('normal');
    const xs = Array.from({ length: N }, () => r.normal());
    const m = mean(xs);
    const v = mean(xs.map((x) => (x - m) ** 2));
    expect(Math.abs(m)).toBeLessThan(0.05);
    expect(Math.abs(v - 1)).toBeLessThan(0.05);
  });

  it.each([
    // [shape, scale]: mean = shape·scale, variance = shape·scale²
    [2, 3],
    [0.5, 2],
    [9, 0.1],
    [1, 1],
  ])('gamma(%d, %d) has mean shape·scale and variance shape·scale²', (shape, scale) => {
    const r = new Rng(`gamma:${shape}:${scale}`);
    const xs = Array.from({ length: N }, () => r.gamma(shape, scale));
    const m = mean(xs);
    const v = mean(xs.map((x) => (x - m) ** 2));
    const expMean = shape * scale;
    const expVar = shape * scale * scale;
    // Sample-mean sd = √(var/N); allow 6 sd. Variance within 10 %.
    expect(Math.abs(m - expMean)).toBeLessThan(6 * Math.sqrt(expVar / N));
    expect(Math.abs(v - expVar) / expVar).toBeLessThan(0.1);
    expect(xs.every((x) => x > 0 && Number.isFinite(x))).toBe(true);
  });

  it('gamma rejects non-positive parameters', () => {
    const r = new Rng('g');
    expect(() => r.gamma(0, 1)).toThrow(RangeError);
    expect(() => r.gamma(1, 0)).toThrow(RangeError);
    expect(() => r.gamma(Number.NaN, 1)).toThrow(RangeError);
  });

  it('weighted() follows the weights and never picks a zero weight', () => {
    const r = new Rng('w');
    const counts = [0, 0, 0];
    for (let i = 0; i < N; i++) counts[r.weighted([1, 0, 3])]!++;
    expect(counts[1]).toBe(0);
    expect(Math.abs(counts[2]! / N - 0.75)).toBeLessThan(0.02);
    // An explicit total gives the same draw as the computed one.
    const a = new Rng('same');
    const b = new Rng('same');
    for (let i = 0; i < 100; i++) expect(a.weighted([2, 5, 1])).toBe(b.weighted([2, 5, 1], 8));
  });

  it('shuffle() permutes in place', () => {
    const xs = Array.from({ length: 20 }, (_, i) => i);
    const out = new Rng('s').shuffle(xs);
    expect(out).toBe(xs);
    expect([...xs].sort((p, q) => p - q)).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect(xs).not.toEqual(Array.from({ length: 20 }, (_, i) => i));
  });
});

describe('errors', () => {
  it('UserError.oneLine is `file: field: message (got value)`', () => {
    expect(new UserError('must be ≥ 1', 'exp.yaml', 'cache.slots', -3).oneLine()).toBe(
      'exp.yaml: cache.slots: must be ≥ 1 (got -3)',
    );
    expect(new UserError('unknown policy', undefined, 'policies[0].name', 'lru2').oneLine()).toBe(
      'policies[0].name: unknown policy (got "lru2")',
    );
    expect(new UserError('file not found', 'gpu.json').oneLine()).toBe('gpu.json: file not found');
    expect(new UserError('plain').oneLine()).toBe('plain');
    expect(new UserError('bad', undefined, undefined, { a: 1 }).oneLine()).toBe('bad (got {"a":1})');
  });

  it('UserError.oneLine does not repeat a value the message already shows and folds newlines', () => {
    expect(new UserError('size too big (got 9)', 'f', 'x', 9).oneLine()).toBe('f: x: size too big (got 9)');
    expect(new UserError('first line\n   second line\nthird', 'f').oneLine()).toBe('f: first line second line third');
    expect(new UserError('v', 'f', 'x', 'a\nb').oneLine()).toBe('f: x: v (got "a\\nb")');
    expect(new UserError('m').name).toBe('UserError');
  });

  it('formatValue truncates long values and survives unserialisable ones', () => {
    const long = formatValue(Array.from({ length: 100 }, (_, i) => i));
    expect(long).toHaveLength(80);
    expect(long.endsWith('...')).toBe(true);
    expect(formatValue(undefined)).toBe('undefined');
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(formatValue(cyclic)).toBe('[object Object]');
    expect(formatValue(10n)).toBe('10');
  });

  it('SimError and its subclasses carry time and origin', () => {
    const e = new SimError('boom', 12, 'link h2d');
    expect(e.message).toBe('[t=12ns link h2d] boom');
    expect(e).toBeInstanceOf(Error);
    expect(e.name).toBe('SimError');
    const c = new CapacityError('full', 3, 'vram', 10, 4);
    expect(c).toBeInstanceOf(SimError);
    expect([c.name, c.requestedBytes, c.freeBytes, c.origin]).toEqual(['CapacityError', 10, 4, 'vram']);
    const p = new PolicyError('bad decision', 5, 'lru', 'onMiss');
    expect(p.message).toBe('[t=5ns policy lru.onMiss] bad decision');
    expect([p.policy, p.hook, p.name]).toEqual(['lru', 'onMiss', 'PolicyError']);
    expect(new InvariantError('x', 0, 'k').name).toBe('InvariantError');
  });
});
