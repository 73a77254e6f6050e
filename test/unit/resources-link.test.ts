/**
 * PcieLink: hand-computed timelines.
 *
 * The link used throughout: 3 GB/s (3 B/ns), 500 ns latency per transfer, 1000 B packets.
 * A full packet takes ⌈1000 / 3⌉ = ⌈333.33⌉ = 334 ns; a half packet ⌈166.67⌉ = 167 ns.
 * Each packet's time is rounded up separately, so a 3500 B transfer costs
 * 500 + 3·334 + 167 = 1669 ns, not 500 + ⌈1166.67⌉ = 1667 ns.
 */
import { describe, expect, it, vi } from 'vitest';
import { SimError } from '../../sim/kernel/errors.ts';
import { Simulation } from '../../sim/kernel/simulation.ts';
import type { ResourceEvent } from '../../sim/resources/events.ts';
import { PcieLink, type Transfer, type TransferSpec } from '../../sim/resources/pcie-link.ts';
import { makeRig, type Rig } from './resources-helpers.ts';

const BW = 3e9;
const LAT = 500;
const PKT = 1000;
const FULL = 334; // ns per 1000 B packet
const HALF = 167; // ns per 500 B packet

function rig(latencyNs = LAT): Rig & { link: PcieLink } {
  const r = makeRig({ link: { bytesPerSec: BW, latencyNs, packetBytes: PKT } });
  return r as Rig & { link: PcieLink };
}

function spec(bytes: number, priority: number, label: string, onDone?: (t: Transfer) => void): TransferSpec {
  return { bytes, priority, label, category: 'expert', onDone };
}

function expectAccountingHolds(link: PcieLink): void {
  expect(link.bytesMoved).toBe(link.completedBytes + link.cancelledSentBytes);
}

describe('PcieLink timelines', () => {
  it('a 3.5-packet transfer pays the latency once, then each packet rounded up separately', () => {
    const { link, sim, sink, runAll } = rig();
    const done = vi.fn();
    const t = link.submit(spec(3500, 0, 'e0', done));
    expect(t.state).toBe('active');
    expect(link.idle).toBe(false);
    runAll();
    expect(t.state).toBe('done');
    expect(t.doneNs).toBe(LAT + 3 * FULL + HALF); // 1669
    expect(sim.now).toBe(1669);
    expect(done).toHaveBeenCalledTimes(1);
    expect(done).toHaveBeenCalledWith(t);
    expect(sink.packets.map((p) => [p.bytes, p.startNs, p.endNs])).toEqual([
      [1000, 500, 834],
      [1000, 834, 1168],
      [1000, 1168, 1502],
      [500, 1502, 1669],
    ]);
    expect(sink.transfers).toEqual([
      {
        link: 'h2d',
        id: t.id,
        label: 'e0',
        category: 'expert',
        bytes: 3500,
        priority: 0,
        submitNs: 0,
        startNs: 0,
        endNs: 1669,
        outcome: 'done',
        sentBytes: 3500,
      },
    ]);
    expect(link.bytesMoved).toBe(3500);
    expect(link.completedBytes).toBe(3500);
    expect(link.completedTransfers).toBe(1);
    expect(link.busyTimeNs()).toBe(1669);
    expect(link.idle).toBe(true);
    expect(link.pending).toHaveLength(0);
  });

  it('without latency the first packet starts at once', () => {
    const { link, runAll } = rig(0);
    const t = link.submit(spec(3500, 0, 'e0'));
    runAll();
    expect(t.doneNs).toBe(3 * FULL + HALF); // 1169
  });

  it('equal priorities are served FIFO, each paying its own latency', () => {
    const { link, runAll } = rig();
    const a = link.submit(spec(1000, 3, 'a'));
    const b = link.submit(spec(1000, 3, 'b'));
    expect(b.state).toBe('queued');
    runAll();
    expect(a.doneNs).toBe(LAT + FULL); // 834
    expect(b.startNs).toBe(834);
    expect(b.doneNs).toBe(834 + LAT + FULL); // 1668
  });

  it('a high-priority transfer submitted mid-packet overtakes at the next packet boundary', () => {
    const { link, sink, runUntil, runAll } = rig();
    const low = link.submit(spec(3500, 5, 'low'));
    runUntil(700); // low's first packet is on the wire, 500 → 834
    const high = link.submit(spec(1000, 0, 'high'));
    expect(high.state).toBe('queued');
    runAll();
    // high: picked at 834, latency 834 → 1334, packet 1334 → 1668.
    expect(high.startNs).toBe(834);
    expect(high.doneNs).toBe(834 + LAT + FULL); // 1668
    // low resumes without paying its latency again: 1668 + 334 + 334 + 167.
    expect(low.doneNs).toBe(1668 + 2 * FULL + HALF); // 2503
    expect(low.startNs).toBe(0);
    expect(sink.packets.map((p) => `${p.transferId}:${p.startNs}-${p.endNs}`)).toEqual([
      `${low.id}:500-834`,
      `${high.id}:1334-1668`,
      `${low.id}:1668-2002`,
      `${low.id}:2002-2336`,
      `${low.id}:2336-2503`,
    ]);
    expect(link.busyTimeNs()).toBe(2503); // never idle: latency counts as busy
  });

  it('a transfer in its latency phase still sends one packet before being overtaken', () => {
    // The boundary is a *packet* boundary: low's latency (0 → 500) is followed by its first
    // packet (500 → 834), and only then does high take over. Same timeline as above.
    const { link, runUntil, runAll } = rig();
    const low = link.submit(spec(3500, 5, 'low'));
    runUntil(300);
    const high = link.submit(spec(1000, 0, 'high'));
    runAll();
    expect(high.doneNs).toBe(1668);
    expect(low.doneNs).toBe(2503);
  });

  it('an urgent transfer is not preempted by a later, less urgent one', () => {
    const { link, runUntil, runAll } = rig();
    const first = link.submit(spec(3000, 1, 'first'));
    runUntil(600);
    const later = link.submit(spec(1000, 2, 'later'));
    runAll();
    expect(first.doneNs).toBe(LAT + 3 * FULL); // 1502
    expect(later.doneNs).toBe(1502 + LAT + FULL); // 2336
  });
});

describe('PcieLink cancellation', () => {
  it('cancelling a queued transfer moves no bytes and never calls onDone', () => {
    const { link, sink, runUntil, runAll } = rig();
    const a = link.submit(spec(2000, 0, 'a'));
    const onDoneB = vi.fn();
    const b = link.submit(spec(5000, 1, 'b', onDoneB));
    runUntil(100);
    expect(link.cancel(b)).toBe(true);
    expect(b.state).toBe('cancelled');
    expect(link.cancel(b)).toBe(false); // idempotent
    // The cancelled transfer is reported at once, with nothing sent.
    expect(sink.transfers).toMatchObject([{ id: b.id, outcome: 'cancelled', sentBytes: 0, startNs: 100, endNs: 100 }]);
    runAll();
    expect(onDoneB).not.toHaveBeenCalled();
    expect(b.sentBytes).toBe(0);
    expect(a.doneNs).toBe(LAT + 2 * FULL); // 1168, unaffected
    expect(link.bytesMoved).toBe(2000);
    expect(link.cancelledSentBytes).toBe(0);
    expect(link.cancelledTransfers).toBe(1);
    expect(sink.packets.every((p) => p.transferId === a.id)).toBe(true);
    expect(link.cancel(a)).toBe(false); // already done
    expectAccountingHolds(link);
  });

  it('cancelling a running transfer stops it after the packet on the wire', () => {
    const { link, sink, runUntil, runAll } = rig();
    const onDoneA = vi.fn();
    const a = link.submit(spec(3500, 0, 'a', onDoneA));
    const b = link.submit(spec(1000, 9, 'b'));
    runUntil(900); // a's second packet is on the wire, 834 → 1168
    expect(link.cancel(a)).toBe(true);
    // Not yet reported: the packet in flight is accounted when it lands.
    expect(sink.transfers).toHaveLength(0);
    expect(link.cancelledSentBytes).toBe(1000);
    expectAccountingHolds(link);
    runAll();
    expect(onDoneA).not.toHaveBeenCalled();
    expect(a.sentBytes).toBe(2000);
    expect(link.bytesMoved).toBe(2000 + 1000);
    expect(link.cancelledSentBytes).toBe(2000);
    expect(link.completedBytes).toBe(1000);
    expect(sink.transfers[0]).toMatchObject({
      id: a.id,
      outcome: 'cancelled',
      sentBytes: 2000,
      startNs: 0,
      endNs: 1168,
    });
    // b starts when a's last packet lands: 1168 + 500 + 334.
    expect(b.startNs).toBe(1168);
    expect(b.doneNs).toBe(2002);
    expect(link.busyTimeNs()).toBe(2002);
    expectAccountingHolds(link);
  });

  it('cancelling a transfer during its latency sends nothing; the next one starts when the latency ends', () => {
    const { link, sink, runUntil, runAll } = rig();
    const a = link.submit(spec(3000, 0, 'a'));
    const b = link.submit(spec(1000, 1, 'b'));
    runUntil(200);
    expect(link.cancel(a)).toBe(true);
    runAll();
    expect(a.sentBytes).toBe(0);
    expect(sink.transfers[0]).toMatchObject({ id: a.id, outcome: 'cancelled', sentBytes: 0, endNs: 500 });
    expect(b.doneNs).toBe(500 + LAT + FULL); // 1334
    expect(link.bytesMoved).toBe(1000);
    expectAccountingHolds(link);
  });

  it('cancelling an overtaken, partly sent transfer counts its sent bytes', () => {
    const { link, runUntil, runAll } = rig();
    const low = link.submit(spec(3500, 5, 'low'));
    runUntil(700);
    link.submit(spec(1000, 0, 'high'));
    runUntil(1000); // high in latency; low waits with 1000 B sent
    expect(low.sentBytes).toBe(1000);
    expect(low.state).toBe('active');
    // Mid-run, a partly sent transfer's bytes are moved but neither completed nor cancelled.
    expect([link.bytesMoved, link.completedBytes, link.cancelledSentBytes]).toEqual([1000, 0, 0]);
    expect(link.cancel(low)).toBe(true);
    runAll();
    expect(link.cancelledSentBytes).toBe(1000);
    expect(link.completedBytes).toBe(1000);
    expect(link.bytesMoved).toBe(2000);
    expect(link.busyTimeNs()).toBe(1668);
    expectAccountingHolds(link);
  });

  it('cancelling the last packet in flight wins: the transfer is cancelled, its bytes counted as cancelled', () => {
    const { link, runUntil, runAll } = rig();
    const onDone = vi.fn();
    const a = link.submit(spec(1000, 0, 'a', onDone));
    runUntil(600);
    expect(link.cancel(a)).toBe(true);
    runAll();
    expect(onDone).not.toHaveBeenCalled();
    expect(a.state).toBe('cancelled');
    expect(link.cancelledSentBytes).toBe(1000);
    expect(link.completedBytes).toBe(0);
    expectAccountingHolds(link);
  });
});

describe('PcieLink re-prioritisation', () => {
  it('raising a queued transfer makes it overtake at the next packet boundary', () => {
    const { link, runUntil, runAll } = rig();
    const a = link.submit(spec(2000, 5, 'a'));
    const b = link.submit(spec(1000, 6, 'b'));
    const c = link.submit(spec(1000, 7, 'c'));
    runUntil(100);
    link.reprioritize(c, 1);
    expect(c.priority).toBe(1);
    runAll();
    expect(c.doneNs).toBe(834 + LAT + FULL); // 1668
    expect(a.doneNs).toBe(1668 + FULL); // 2002
    expect(b.doneNs).toBe(2002 + LAT + FULL); // 2836
  });

  it('lowering the running transfer lets the queued ones pass at the next boundary', () => {
    const { link, runUntil, runAll } = rig();
    const a = link.submit(spec(2000, 5, 'a'));
    const b = link.submit(spec(1000, 6, 'b'));
    runUntil(600);
    link.reprioritize(a, 10);
    runAll();
    expect(b.doneNs).toBe(834 + LAT + FULL); // 1668
    expect(a.doneNs).toBe(1668 + FULL); // 2002
  });

  it('does nothing to finished or cancelled transfers', () => {
    const { link, runAll } = rig();
    const a = link.submit(spec(1000, 5, 'a'));
    const b = link.submit(spec(1000, 5, 'b'));
    link.cancel(b);
    runAll();
    link.reprioritize(a, 0);
    link.reprioritize(b, 0);
    expect([a.priority, b.priority]).toEqual([5, 5]);
  });
});

describe('PcieLink accounting and validation', () => {
  it('bytesMoved = completedBytes + cancelledSentBytes over a mixed run', () => {
    const { link, runUntil, runAll } = rig();
    const ts = [link.submit(spec(2500, 3, 'a')), link.submit(spec(1200, 1, 'b')), link.submit(spec(4000, 2, 'c'))];
    runUntil(1200);
    link.cancel(ts[2]!);
    link.submit(spec(700, 0, 'd'));
    runUntil(2600);
    link.cancel(ts[0]!);
    runAll();
    expectAccountingHolds(link);
    expect(link.completedTransfers + link.cancelledTransfers).toBe(4);
    expect(link.completedBytes).toBe(
      ts
        .filter((t) => t.state === 'done')
        .map((t) => t.bytes)
        .reduce((s, x) => s + x, 0) + 700,
    );
  });

  it('busy time excludes idle gaps and includes the running part of a packet', () => {
    const { link, runUntil, runAll } = rig();
    link.submit(spec(1000, 0, 'a')); // busy 0 → 834
    runUntil(2000);
    expect(link.busyTimeNs()).toBe(834);
    link.submit(spec(1000, 0, 'b')); // busy 2000 → 2834
    runUntil(2100);
    expect(link.busyTimeNs()).toBe(834 + 100);
    runAll();
    expect(link.busyTimeNs()).toBe(834 + 834);
    expect(link.busyNs).toBe(1668);
  });

  it('onDone may submit the next transfer (chaining) and is called after the link has moved on', () => {
    const { link, runAll } = rig();
    const order: string[] = [];
    const second = (t: Transfer) => order.push(`${t.label}@${t.doneNs}`);
    link.submit(
      spec(1000, 0, 'first', (t) => {
        order.push(`${t.label}@${t.doneNs}`);
        link.submit(spec(1000, 0, 'second', second));
      }),
    );
    runAll();
    expect(order).toEqual(['first@834', 'second@1668']);
  });

  it('rejects bad transfers and bad links', () => {
    const { link } = rig();
    expect(() => link.submit(spec(0, 0, 'zero'))).toThrow(SimError);
    expect(() => link.submit(spec(1.5, 0, 'frac'))).toThrow(/positive integer/);
    expect(() => link.submit(spec(-3, 0, 'neg'))).toThrow(SimError);
    const sched = new Simulation<ResourceEvent>();
    const base = { name: 'h2d' as const, bytesPerSec: BW, latencyNs: 0, packetBytes: PKT, sched };
    expect(() => new PcieLink({ ...base, bytesPerSec: 0 })).toThrow(RangeError);
    expect(() => new PcieLink({ ...base, packetBytes: 0.5 })).toThrow(RangeError);
    expect(() => new PcieLink({ ...base, latencyNs: -1 })).toThrow(RangeError);
  });
});
