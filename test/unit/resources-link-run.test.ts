/**
 * The PCIe link's helpers called directly, on hand-built clocks and transfers: `packetsPassed`
 * (before, at and after the latency's end, past the run's last packet, and at packet boundaries
 * k = 1 and k = 2 under every order of priority, stamp and seq the kernel can give the current
 * event), `LinkRunGroup`'s claim (granted once, released and interrupted only by another
 * holder), `bestTransfer`'s tie on priority and `unqueue` of a transfer not queued. The link's
 * own tests reach these only through runs; a Stryker run of sim/resources found the listed
 * branches unguarded.
 */
import { describe, expect, it } from 'vitest';
import { EventPriority } from '../../sim/kernel/simulation.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import { packetsPassed, type RunClock } from '../../sim/resources/link-run.ts';
import { bestTransfer, LinkRunGroup, type Transfer, unqueue } from '../../sim/resources/pcie-transfer.ts';

const C = EventPriority.completion;
const LATER = EventPriority.resource; // dispatched after every completion of the instant

const clock = (now: number, priority: number, stamp = now, seq = 0): RunClock => ({
  now: now as Ns,
  currentPriority: priority,
  currentStamp: stamp as Ns,
  currentSeq: seq,
});

/** The run's event has seq 5; full packets of 100 ns. */
const SEQ = 5;
const FULL = 100;

describe('packetsPassed', () => {
  // A run whose latency began at 50 and whose first packet starts at 300.
  const inLatency = (c: RunClock, packets = 3) => packetsPassed(c, 300, 50, FULL, packets, SEQ);

  it('is −1 throughout the latency, whatever the current event', () => {
    expect(inLatency(clock(0, LATER))).toBe(-1);
    expect(inLatency(clock(299, LATER))).toBe(-1);
  });

  it("at the latency's end: passed after completions, or at completion with a later stamp or seq", () => {
    expect(inLatency(clock(300, LATER))).toBe(0);
    expect(inLatency(clock(300, C - 1))).toBe(-1);
    expect(inLatency(clock(300, C, 100))).toBe(0); // stamp 100 after the latency's 50
    expect(inLatency(clock(300, C, 20))).toBe(-1);
    expect(inLatency(clock(300, C, 50, SEQ + 1))).toBe(0);
    expect(inLatency(clock(300, C, 50, SEQ))).toBe(-1); // the run's own event: not before itself
    expect(inLatency(clock(300, C, 50, SEQ - 1))).toBe(-1);
  });

  it("past the run's end: its last packet, never more", () => {
    expect(inLatency(clock(300 + 10 * FULL, LATER))).toBe(2);
    expect(packetsPassed(clock(1_000, C, 0), 0, -1, FULL, 4, SEQ)).toBe(3);
  });

  it('at boundary 2: the previous completion (stamp start + 100) decides by stamp, then passes', () => {
    const at2 = (c: RunClock) => packetsPassed(c, 0, -1, FULL, 4, SEQ);
    expect(at2(clock(200, LATER))).toBe(2);
    expect(at2(clock(200, C - 1))).toBe(1);
    expect(at2(clock(200, C, 150))).toBe(2);
    expect(at2(clock(200, C, 50))).toBe(1);
    expect(at2(clock(200, C, 100, SEQ - 1))).toBe(2); // equal stamps past the first packet: passed
    expect(at2(clock(250, C, 0))).toBe(2); // between boundaries
  });

  it('at boundary 1: equal stamps pass after a latency, else by seq against the run', () => {
    // Latency 0 → 300 (latStartNs 0 ≥ 0), first packet 300 → 400.
    expect(packetsPassed(clock(400, C, 300, SEQ - 1), 300, 0, FULL, 4, SEQ)).toBe(1);
    // No latency.
    const at1 = (c: RunClock) => packetsPassed(c, 300, -1, FULL, 4, SEQ);
    expect(at1(clock(400, C, 300, SEQ - 1))).toBe(0);
    expect(at1(clock(400, C, 300, SEQ))).toBe(0);
    expect(at1(clock(400, C, 300, SEQ + 1))).toBe(1);
    expect(at1(clock(400, C, 350))).toBe(1);
  });
});

describe('LinkRunGroup', () => {
  it('grants one claim, ended by its holder or by another holder acting, never by the holder acting', () => {
    const g = new LinkRunGroup();
    const materialized: string[] = [];
    const a = { materialize: () => materialized.push('a') };
    const b = { materialize: () => materialized.push('b') };
    g.interrupt(a); // nobody holds it: nothing happens
    expect(g.tryExclusive(a)).toBe(true);
    expect(g.tryExclusive(b)).toBe(false);
    expect(g.tryExclusive(a)).toBe(false);
    g.releaseExclusive(b); // not the holder
    expect(g.tryExclusive(b)).toBe(false);
    g.interrupt(a); // the holder itself
    expect(materialized).toEqual([]);
    expect(g.tryExclusive(b)).toBe(false);
    g.interrupt(b);
    expect(materialized).toEqual(['a']);
    expect(g.tryExclusive(b)).toBe(true);
    g.releaseExclusive(b);
    expect(g.tryExclusive(a)).toBe(true);
  });
});

describe('the pending queue', () => {
  const t = (priority: number, seq: number) => ({ priority, seq }) as Transfer;

  it('bestTransfer: lowest priority, then the older of equal priorities wherever it sits', () => {
    const q = [t(5, 2), t(5, 1), t(7, 0)];
    expect(bestTransfer(q)).toBe(q[1]);
    expect(bestTransfer([t(3, 4), t(1, 9), t(1, 6)])).toEqual(t(1, 6));
  });

  it('unqueue: the last takes the removed one’s place; a transfer not queued leaves the queue as it is', () => {
    const [x, y, z, other] = [t(0, 0), t(0, 1), t(0, 2), t(0, 3)];
    const q = [x, y, z];
    unqueue(q, other);
    expect(q).toEqual([x, y, z]);
    unqueue(q, x);
    expect(q[0]).toBe(z);
    expect(q[1]).toBe(y);
    expect(q.length).toBe(2);
  });
});
