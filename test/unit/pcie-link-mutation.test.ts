/**
 * PcieLink at exact packet boundaries, through its public API only (submit / cancel /
 * reprioritize / sync, the counters, the trace sink): a command is delivered by an event landing
 * exactly on a packet boundary, ±1 ns, with every priority and stamp order a real event can have
 * there, and the link with packet runs must behave exactly as the reference with one event per
 * packet (`packetRuns: false`) — what the command sees (sent bytes, counters, busy time) and
 * everything afterwards (packets, transfer records, completion order, counters). The same grid
 * runs without a trace sink and with a sink that has no hooks (the paths that account a run's
 * packets at once), which must give the same counters. Hand-computed cases pin defaults, input
 * checks and handler errors. Written to kill the mutants the mutation run left in the link's
 * run and boundary arithmetic (docs/MUTATION.md).
 */
import { describe, expect, it } from 'vitest';
import { Simulation } from '../../sim/kernel/simulation.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import type { TraceSink } from '../../sim/observe/trace-sink.ts';
import type { LinkName, ResourceEvent } from '../../sim/resources/events.ts';
import { FluidShare } from '../../sim/resources/fluid-share.ts';
import { LinkRunGroup, PcieLink, type Transfer } from '../../sim/resources/pcie-link.ts';
import { RecordingSink } from './resources-helpers.ts';

/** A command event of the test (not a resource event): runs `cmds[id]` when dispatched. */
type Cmd = { readonly kind: 'cmd'; readonly id: number };
type Ev = ResourceEvent | Cmd;

/** 1 B/ns and 100 B packets: a full packet takes 100 ns, the 450 B transfer's last 50 B take 50 ns. */
const BW = 1e9;
const PKT = 100;

type Action =
  | 'urgent'
  | 'lesser'
  | 'cancelA'
  | 'cancelC'
  | 'demoteA'
  | 'keepA'
  | 'raiseC'
  | 'sync'
  | 'other'
  | 'cancelAB';

interface Case {
  readonly latencyNs: number;
  readonly dram: boolean;
  /** When the command lands. */
  readonly at: number;
  /** Its priority (10 = completion, as a packet's). */
  readonly priority: number;
  /** When it was scheduled (its stamp): a relay event at that time schedules it. */
  readonly from: number;
  /** At `from` = 0: 5 schedules the command before the transfers are submitted, 20 after; later: the relay's priority. */
  readonly relayPriority: number;
  readonly action: Action;
  /**
   * 60 ns before `at`, an urgent transfer on the other link or on this one splits A's run (its packet
   * in flight becomes a real packet, or a flow injected into the DRAM share).
   */
  readonly presplit: 'none' | 'other' | 'same';
}

type SinkKind = 'record' | 'none' | 'empty';

/** Actions that always split A's run when it is running. */
const SPLITS: ReadonlySet<Action> = new Set<Action>(['urgent', 'cancelA', 'demoteA', 'raiseC', 'other', 'cancelAB']);

/** Runs one case; returns everything observable. */
function simulate(c: Case, packetRuns: boolean, sinkKind: SinkKind): unknown {
  const sim = new Simulation<Ev>();
  const rec = new RecordingSink();
  const sink: TraceSink | undefined = sinkKind === 'record' ? rec : sinkKind === 'empty' ? {} : undefined;
  const dram = c.dram ? new FluidShare('hostDram', 1e12, sim) : undefined;
  const runGroup = new LinkRunGroup();
  const mk = (name: LinkName): PcieLink =>
    new PcieLink({
      name,
      bytesPerSec: BW,
      latencyNs: c.latencyNs,
      packetBytes: PKT,
      sched: sim,
      dram,
      sink,
      packetRuns,
      runGroup,
    });
  const links = { h2d: mk('h2d'), d2h: mk('d2h') };
  const link = links.h2d;
  const done: unknown[] = [];
  const onDone = (t: Transfer): void => void done.push([t.label, t.doneNs, sim.now]);
  const seen: unknown[] = [];
  const cmds: (() => void)[] = [];
  const look = (): void =>
    void seen.push([
      sim.now,
      A.sentBytes,
      A.state,
      C.sentBytes,
      C.state,
      link.bytesMoved,
      link.busyTimeNs(),
      link.idle,
    ]);
  let B: Transfer | undefined;
  const act = (): void => {
    // Before the command only what a run keeps up to date at once (its bytes are accounted on sync).
    seen.push([sim.now, A.state, C.state, link.busyTimeNs(), link.idle]);
    switch (c.action) {
      case 'urgent':
        B = link.submit({ bytes: 150, priority: 0, label: 'B', category: 'x', onDone });
        break;
      case 'lesser':
        B = link.submit({ bytes: 100, priority: 9, label: 'B', category: 'x', onDone });
        break;
      case 'cancelA':
        seen.push(link.cancel(A), link.cancel(A));
        break;
      case 'cancelC':
        seen.push(link.cancel(C));
        break;
      case 'demoteA':
        link.reprioritize(A, 8);
        break;
      case 'keepA':
        link.reprioritize(A, 6);
        break;
      case 'raiseC':
        link.reprioritize(C, 1);
        break;
      case 'sync':
        link.sync();
        break;
      case 'other':
        B = links.d2h.submit({ bytes: 250, priority: 0, label: 'B', category: 'x', onDone });
        break;
      case 'cancelAB':
        B = link.submit({ bytes: 150, priority: 0, label: 'B', category: 'x', onDone });
        seen.push(link.cancel(A));
        break;
    }
    link.sync();
    look();
    // A split run gives its transfer back its unpaid latency; a run that goes on has paid it at its start.
    if (SPLITS.has(c.action)) seen.push(A.latencyPaid);
  };
  cmds.push(act);
  const cmdAt = (): void => void sim.schedule(c.at as Ns, { kind: 'cmd', id: 0 }, c.priority);
  // The relay: at `from`, schedules the command (so its stamp is `from`, as a real event's is).
  cmds.push(cmdAt);
  sim.setHandlers({
    'gpu.kernelDone': () => {
      throw new Error('no gpu');
    },
    'link.latencyDone': (e) => links[e.link].onLatencyDone(),
    'link.packetDone': (e) => links[e.link].onPacketDone(),
    'link.runDone': (e) => links[e.link].onRunDone(),
    'fluid.flowDone': (e) => dram!.onFlowDone(e.flowId),
    'cpu.taskDone': () => {
      throw new Error('no cpu');
    },
    cmd: (e) => cmds[e.id]!(),
  });
  // A first event takes seq 0, so a command scheduled next is ordered after anything given seq 0.
  cmds[9] = () => {};
  sim.schedule(0 as Ns, { kind: 'cmd', id: 9 }, 20);
  // Relay at time 0 before the transfers are submitted (its seq precedes the run's) when its priority is low.
  if (c.from === 0 && c.relayPriority < 10) cmdAt();
  const A = link.submit({ bytes: 450, priority: 5, label: 'A', category: 'x', onDone });
  const C = link.submit({ bytes: 120, priority: 7, label: 'C', category: 'x', onDone, tag: 3 });
  if (c.presplit !== 'none') {
    const splitter = c.presplit === 'other' ? links.d2h : link;
    cmds[2] = () => void splitter.submit({ bytes: 30, priority: 0, label: 'S', category: 'x', onDone });
    sim.schedule(Math.max(0, c.at - 60) as Ns, { kind: 'cmd', id: 2 }, 20);
  }
  if (c.from === 0 && c.relayPriority >= 10) cmdAt();
  else if (c.from > 0) sim.schedule(c.from as Ns, { kind: 'cmd', id: 1 }, c.relayPriority);
  sim.run();
  const counters = (l: PcieLink) => [
    l.bytesMoved,
    l.completedBytes,
    l.cancelledSentBytes,
    l.completedTransfers,
    l.cancelledTransfers,
    l.busyNs,
    l.busyTimeNs(),
    l.idle,
    l.pending.length,
  ];
  const all = [A, C, ...(B ? [B] : [])];
  const conserved =
    link.bytesMoved === link.completedBytes + link.cancelledSentBytes &&
    links.d2h.bytesMoved === links.d2h.completedBytes + links.d2h.cancelledSentBytes;
  return {
    seen,
    done,
    conserved,
    counters: [counters(link), counters(links.d2h), dram?.bytesServed(), sim.now],
    transfers: all.map((t) => [t.label, t.state, t.sentBytes, t.startNs, t.doneNs, t.priority, t.tag, t.latencyPaid]),
    packets: rec.packets.map((p) => [p.link, p.transferId, p.bytes, p.startNs, p.endNs]),
    records: rec.transfers.map((r) => [r.link, r.id, r.outcome, r.startNs, r.endNs, r.sentBytes, r.priority]),
  };
}

/** Actions also tried after a split 60 ns earlier. */
const PRESPLIT: ReadonlySet<Action> = new Set<Action>(['sync', 'urgent', 'cancelA']);

/** The grid: boundaries of A's run (and ±1 ns), every priority order and stamp a command can have there. */
function cases(): Case[] {
  const out: Case[] = [];
  const actions: Action[] = [
    'urgent',
    'lesser',
    'cancelA',
    'cancelC',
    'demoteA',
    'keepA',
    'raiseC',
    'sync',
    'other',
    'cancelAB',
  ];
  for (const latencyNs of [0, 50]) {
    for (const dram of [false, true]) {
      // A's packets start at latency + k·100 (k = 0..4); it ends at latency + 450.
      const times = new Set<number>();
      for (let k = 0; k <= 5; k++) for (const d of [-1, 0, 1]) times.add(latencyNs + k * PKT + d);
      times.add(0);
      for (const at of [...times].filter((t) => t >= 0).sort((a, b) => a - b)) {
        // Stamps: at 0, at the previous boundary (the packet's start), just after it, and `at` itself.
        const prev = at - PKT;
        const froms = [...new Set([0, prev, prev + 1, at].filter((f) => f >= 0 && f <= at))];
        // A relay at 0 runs before or after the transfers are submitted; a later relay runs after
        // the completions of its instant (a relay that ran before them, or among them but
        // scheduled earlier, is the case the run cannot tell from its own schedule: see
        // `packetsPassed`).
        for (const priority of [5, 10, 20])
          for (const from of froms)
            for (const relayPriority of from === 0 ? [5, 20] : [20]) {
              // A relay at `at` cannot schedule into the part of the instant already dispatched.
              if (from === at && priority < relayPriority) continue;
              for (const action of actions) {
                out.push({ latencyNs, dram, at, priority, from, relayPriority, action, presplit: 'none' });
                if (PRESPLIT.has(action))
                  for (const presplit of ['other', 'same'] as const)
                    out.push({ latencyNs, dram, at, priority, from, relayPriority, action, presplit });
              }
            }
      }
    }
  }
  return out;
}

describe('PcieLink runs at exact packet boundaries', () => {
  const grid = cases();

  it(`behave as one event per packet in ${grid.length} scripted cases`, () => {
    const bad: string[] = [];
    for (const c of grid) {
      const ref = JSON.stringify(simulate(c, false, 'record'));
      const run = JSON.stringify(simulate(c, true, 'record'));
      if (run !== ref && bad.length < 3) bad.push(`${JSON.stringify(c)}\n ref ${ref}\n run ${run}`);
    }
    expect(bad).toEqual([]);
  });

  it('give the same counters, transfers and completions without a sink and with a sink without hooks', () => {
    const bad: string[] = [];
    const strip = (o: unknown): string => {
      const { packets: _p, records: _r, ...rest } = o as Record<string, unknown>;
      return JSON.stringify(rest);
    };
    for (const c of grid) {
      if (c.relayPriority === 5 && c.priority !== 10) continue; // a third of the grid is enough here
      const ref = strip(simulate(c, false, 'record'));
      for (const kind of ['none', 'empty'] as const) {
        const got = strip(simulate(c, true, kind));
        if (got !== ref && bad.length < 3) bad.push(`${kind} ${JSON.stringify(c)}\n ref ${ref}\n got ${got}`);
      }
    }
    expect(bad).toEqual([]);
  });

  it('conserve bytes in every case', () => {
    for (const c of grid.filter((x) => x.priority === 10 && x.relayPriority === 20)) {
      for (const runs of [false, true])
        expect((simulate(c, runs, 'none') as { conserved: boolean }).conserved).toBe(true);
    }
  });
});

describe('PcieLink defaults, records and checks (hand-computed)', () => {
  /** 1 B/ns, 100 B packets, 50 ns latency; a sink keeps every record. */
  function oneLink(latencyNs = 50) {
    const sim = new Simulation<ResourceEvent>();
    const sink = new RecordingSink();
    const link = new PcieLink({ name: 'd2h', bytesPerSec: BW, latencyNs, packetBytes: PKT, sched: sim, sink });
    sim.setHandlers({
      'gpu.kernelDone': () => {},
      'link.latencyDone': () => link.onLatencyDone(),
      'link.packetDone': () => link.onPacketDone(),
      'link.runDone': () => link.onRunDone(),
      'fluid.flowDone': () => {},
      'cpu.taskDone': () => {},
    });
    return { sim, sink, link };
  }

  it('a transfer without a tag has tag −1, and doneNs −1 until its last byte lands', () => {
    const { sim, link } = oneLink();
    const a = link.submit({ bytes: 250, priority: 0, label: 'a', category: 'x' });
    const b = link.submit({ bytes: 10, priority: 1, label: 'b', category: 'x', tag: 7 });
    expect([a.tag, b.tag, a.doneNs, b.doneNs, a.startNs, b.startNs]).toEqual([-1, 7, -1, -1, 0, -1]);
    sim.run({ until: 299 as Ns });
    link.sync();
    // 50 ns latency, packets end at 150 and 250; the last 50 B end at 300.
    expect([a.doneNs, a.sentBytes, link.bytesMoved]).toEqual([-1, 200, 200]);
    sim.run();
    expect([a.doneNs, b.startNs, b.doneNs]).toEqual([300, 300, 360]);
  });

  it('transfer records carry the start of the transfer, or the cancel time for one never started', () => {
    const { sim, sink, link } = oneLink();
    const a = link.submit({ bytes: 250, priority: 0, label: 'a', category: 'x' });
    const b = link.submit({ bytes: 10, priority: 1, label: 'b', category: 'y' });
    sim.run({ until: 120 as Ns });
    expect(link.cancel(b)).toBe(true);
    sim.run();
    expect(a.state).toBe('done');
    expect(
      sink.transfers.map((r) => [r.label, r.category, r.outcome, r.submitNs, r.startNs, r.endNs, r.sentBytes]),
    ).toEqual([
      ['b', 'y', 'cancelled', 0, 120, 120, 0],
      ['a', 'x', 'done', 0, 0, 300, 250],
    ]);
    expect(sink.packets.map((p) => [p.link, p.bytes, p.startNs, p.endNs])).toEqual([
      ['d2h', 100, 50, 150],
      ['d2h', 100, 150, 250],
      ['d2h', 50, 250, 300],
    ]);
  });

  it('busy time from 0 stops at an idle gap and resumes after it', () => {
    for (const packetRuns of [true, false]) {
      const sim = new Simulation<ResourceEvent>();
      const link = new PcieLink({
        name: 'h2d',
        bytesPerSec: BW,
        latencyNs: 0,
        packetBytes: PKT,
        sched: sim,
        packetRuns,
      });
      sim.setHandlers({
        'gpu.kernelDone': () => {},
        'link.latencyDone': () => link.onLatencyDone(),
        'link.packetDone': () => link.onPacketDone(),
        'link.runDone': () => link.onRunDone(),
        'fluid.flowDone': () => {},
        'cpu.taskDone': () => {},
      });
      link.submit({ bytes: 250, priority: 0, label: 'a', category: 'x' }); // busy 0 → 250
      sim.run({ until: 400 as Ns });
      expect([link.busyNs, link.busyTimeNs(), link.idle]).toEqual([250, 250, true]);
      link.submit({ bytes: 150, priority: 0, label: 'b', category: 'x' }); // busy 400 → 550
      sim.run({ until: 500 as Ns });
      expect([link.busyTimeNs(), link.idle]).toEqual([350, false]);
      sim.run();
      expect([link.busyNs, link.busyTimeNs(), sim.now]).toEqual([400, 400, 550]);
    }
  });

  it('sync with no run in progress changes nothing', () => {
    const { link } = oneLink();
    link.sync();
    expect([link.bytesMoved, link.busyTimeNs(), link.idle, link.pending.length]).toEqual([0, 0, true, 0]);
  });

  it('names the link and the bad value in its checks', () => {
    const sched = new Simulation<ResourceEvent>();
    const base = { name: 'd2h' as const, bytesPerSec: BW, latencyNs: 0, packetBytes: PKT, sched };
    expect(() => new PcieLink({ ...base, bytesPerSec: -2 })).toThrow('d2h: bandwidth must be > 0 B/s, got -2');
    expect(() => new PcieLink({ ...base, bytesPerSec: 0 })).toThrow('d2h: bandwidth must be > 0 B/s, got 0');
    expect(() => new PcieLink({ ...base, bytesPerSec: Number.NaN })).toThrow('got NaN');
    expect(() => new PcieLink({ ...base, packetBytes: 0 })).toThrow('d2h: packetBytes must be ≥ 1, got 0');
    expect(() => new PcieLink({ ...base, latencyNs: -0.5 })).toThrow('d2h: latencyNs must be ≥ 0, got -0.5');
    expect(new PcieLink({ ...base, packetBytes: 1 }).packetBytes).toBe(1);
    expect(new PcieLink({ ...base, latencyNs: 2.6, packetBytes: 99.9 })).toMatchObject({
      latencyNs: 3,
      packetBytes: 99,
    });
    const link = new PcieLink(base);
    expect(() => link.submit({ bytes: 2.5, priority: 0, label: 'frac', category: 'x' })).toThrow(
      '[t=0ns link d2h] transfer bytes must be a positive integer, got 2.5',
    );
    expect(() => link.submit({ bytes: 2 ** 53, priority: 0, label: 'big', category: 'x' })).toThrow('positive integer');
    expect(() => link.onLatencyDone()).toThrow('[t=0ns link d2h] latency done without a transfer');
    expect(() => link.onPacketDone()).toThrow('[t=0ns link d2h] packet done while idle');
  });
});
