/**
 * The kernel's error texts and value formatting, to the character: a user sees these lines (the
 * CLI prints `oneLine()`), so an emptied message or a lost origin is a defect even when the
 * right error class is still thrown. Also the rate checks of bytesToNs / flopsToNs, which must
 * name the rate rather than fail later on an infinite duration.
 */
import { describe, expect, it } from 'vitest';
import { formatValue, SimError } from '../../sim/kernel/errors.ts';
import { Simulation } from '../../sim/kernel/simulation.ts';
import { bytesToNs, ceilNs, flopsToNs, ns } from '../../sim/kernel/time.ts';

type Ev = { kind: 'mark' };

/** The SimError `f` throws (fails the test when it throws nothing or something else). */
function simErrorOf(f: () => unknown): SimError {
  try {
    f();
  } catch (e) {
    if (e instanceof SimError) return e;
    throw e;
  }
  throw new Error('expected a SimError');
}

describe('formatValue', () => {
  it('quotes a string whole, however long (only JSON of objects is cut at 80 characters)', () => {
    const s = 'x'.repeat(100);
    expect(formatValue(s)).toBe(`"${s}"`); // 102 characters, not cut
  });

  it('keeps a serialisation of exactly 80 characters and cuts one of 81 to 77 + "..."', () => {
    // [ "…76 x…" ] is 2 + 76 + 2 = 80 characters.
    const eighty = [`${'x'.repeat(76)}`];
    expect(JSON.stringify(eighty)).toHaveLength(80);
    expect(formatValue(eighty)).toBe(JSON.stringify(eighty));
    const cut = formatValue([`${'x'.repeat(77)}`]);
    expect(cut).toBe(`["${'x'.repeat(75)}...`);
    expect(cut).toHaveLength(80);
  });

  it('names NaN and ±Infinity inside objects', () => {
    expect(formatValue({ a: Number.NaN, b: [Number.NEGATIVE_INFINITY] })).toBe('{"a":"NaN","b":["-Infinity"]}');
    expect(formatValue(Number.POSITIVE_INFINITY)).toBe('Infinity');
  });
});

describe('time helpers: messages', () => {
  it('ns and ceilNs say what they got', () => {
    expect(() => ns(-3)).toThrow('time must be a non-negative safe integer of nanoseconds, got -3');
    expect(() => ceilNs(Number.NaN)).toThrow('duration must be finite and non-negative, got NaN ns');
  });

  it('bytesToNs and flopsToNs reject a non-positive rate by name, and accept a positive one', () => {
    expect(() => bytesToNs(1, 0)).toThrow('rate must be positive, got 0 B/s');
    expect(() => bytesToNs(1, Number.NaN)).toThrow('rate must be positive, got NaN B/s');
    expect(() => flopsToNs(1, -2)).toThrow('rate must be positive, got -2 FLOP/s');
    expect(bytesToNs(1000, 1e9)).toBe(1000);
  });
});

describe('Simulation: messages', () => {
  it('scheduling into the past names the event, the times and the origin', () => {
    const sim = new Simulation<Ev>();
    sim.setHandlers({ mark: () => {} });
    sim.schedule(ns(10), { kind: 'mark' });
    sim.run();
    for (const f of [() => sim.schedule(ns(4), { kind: 'mark' }), () => sim.post(ns(4), { kind: 'mark' })]) {
      const e = simErrorOf(f);
      expect(e.message).toBe('[t=10ns kernel] cannot schedule mark at 4ns (now 10ns)');
      expect(e.origin).toBe('kernel');
    }
  });

  it('running to a time in the past, or without handlers, says so', () => {
    const sim = new Simulation<Ev>();
    sim.setHandlers({ mark: () => {} });
    sim.run({ until: ns(20) });
    expect(simErrorOf(() => sim.run({ until: ns(5) })).message).toBe('[t=20ns kernel] cannot run until 5ns (now 20ns)');
    const bare = new Simulation<Ev>();
    bare.schedule(ns(3), { kind: 'mark' });
    const e = simErrorOf(() => bare.run());
    expect(e.message).toBe('[t=0ns kernel] no handlers installed');
    expect(e.origin).toBe('kernel');
  });
});
