/**
 * PCIe runs (a transfer of many packets as one event, `PcieLink` module comment) against the
 * reference they replace: the same random scenario is simulated twice, once with runs and once
 * with one event per packet (`packetRuns: false`), and everything observable must be identical —
 * every packet (start, end, bytes, in order per link), every transfer record, completion times
 * and `onDone` order, link counters and busy time, the host-DRAM share's bytes served and
 * contended time, the order of CPU task completions.
 *
 * Scenarios are built to hit the hard cases: two links sharing a small host-DRAM share with CPU
 * tasks that draw on it (contention, flows starting mid-packet), and commands — submit, cancel,
 * re-prioritise — issued both between events and from inside completion events (CPU tasks of
 * zero bytes, priority `completion`) timed to land exactly on packet boundaries, where the
 * order of simultaneous events decides whether a boundary has passed. Packet times are round
 * numbers (1 B/ns, 100 B packets) so boundaries coincide often.
 *
 * The same scenarios run with and without a trace sink on the links: without one a run accounts
 * its packets at once (the path the benchmarks time); completion times and order, every counter,
 * bytes per transfer and the DRAM share must be identical, and both conserve bytes (moved =
 * completed + cancelled-sent = Σ sent per link). Each property asserts what its scenarios
 * reached (cancel mid-transfer, multi-packet transfers, DRAM contention, both links busy).
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Simulation } from '../../sim/kernel/simulation.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import { CpuPool } from '../../sim/resources/cpu-pool.ts';
import type { LinkName, ResourceEvent } from '../../sim/resources/events.ts';
import { FluidShare } from '../../sim/resources/fluid-share.ts';
import { LinkRunGroup, PcieLink, type Transfer } from '../../sim/resources/pcie-link.ts';
import { RecordingSink } from '../unit/resources-helpers.ts';
import { CoverageTally } from '../helpers/coverage.ts';
import { assertParams } from './replay.ts';

type Action =
  | { readonly kind: 'submit'; readonly link: LinkName; readonly bytes: number; readonly priority: number }
  | { readonly kind: 'cancel'; readonly which: number }
  | { readonly kind: 'reprioritize'; readonly which: number; readonly priority: number }
  | { readonly kind: 'cpuLoad'; readonly bytes: number; readonly computeNs: number };

/**
 * An action at `at` ns: between events (`inEvent` false) or from a zero-byte CPU task completing
 * at `at`, submitted `lead` ns earlier (so its event is stamped anywhere before `at`).
 */
interface Step {
  readonly at: number;
  readonly inEvent: boolean;
  readonly lead: number;
  readonly action: Action;
}

interface Scenario {
  readonly latencyNs: number;
  readonly dramBytesPerSec: number | null;
  readonly steps: readonly Step[];
}

const action: fc.Arbitrary<Action> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('submit' as const),
      link: fc.constantFrom<LinkName>('h2d', 'd2h'),
      bytes: fc.oneof(
        fc.integer({ min: 1, max: 9 }).map((k) => k * 100),
        fc.integer({ min: 1, max: 900 }),
      ),
      priority: fc.integer({ min: 0, max: 4 }),
    }),
  },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('cancel' as const), which: fc.nat(3) }) },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('reprioritize' as const),
      which: fc.nat(3),
      priority: fc.integer({ min: 0, max: 4 }),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('cpuLoad' as const),
      bytes: fc.integer({ min: 1, max: 400 }),
      computeNs: fc.integer({ min: 0, max: 300 }),
    }),
  },
);

const scenario: fc.Arbitrary<Scenario> = fc.record({
  latencyNs: fc.constantFrom(0, 0, 0, 100, 7),
  dramBytesPerSec: fc.constantFrom(null, 1e9, 1.5e9, 2.5e9),
  steps: fc.array(
    fc.record({
      // Mostly multiples of 100 ns: packet boundaries, when transfers start on them too.
      at: fc.oneof(
        { weight: 3, arbitrary: fc.integer({ min: 0, max: 20 }).map((k) => k * 100) },
        { weight: 1, arbitrary: fc.integer({ min: 0, max: 2000 }) },
      ),
      inEvent: fc.boolean(),
      lead: fc.oneof(
        { weight: 3, arbitrary: fc.integer({ min: 0, max: 8 }).map((k) => k * 100) },
        { weight: 1, arbitrary: fc.integer({ min: 0, max: 700 }) },
      ),
      action,
    }),
    // At least a few steps: shorter scenarios rarely overlap a cancel or a CPU load with a transfer.
    { minLength: 4, maxLength: 30 },
  ),
});

interface Observed {
  readonly packets: Record<string, unknown[]>;
  readonly transfers: unknown[];
  readonly done: unknown[];
  readonly cpu: unknown[];
  readonly counters: unknown;
  readonly conservation: string[];
}

/**
 * Runs a scenario. `linkSink` false: the links get no trace sink, so a run accounts its packets
 * at once (the path `flushRun` takes without a sink, the one the benchmarks time); packets and
 * transfer records are then unobserved (empty), everything else must be the same.
 */
function simulate(sc: Scenario, packetRuns: boolean, linkSink = true): Observed {
  const sim = new Simulation<ResourceEvent>();
  const sink = new RecordingSink();
  const dram = new FluidShare('hostDram', sc.dramBytesPerSec ?? 1e12, sim);
  const linkDram = sc.dramBytesPerSec === null ? undefined : dram;
  const runGroup = new LinkRunGroup();
  const mk = (name: LinkName) =>
    new PcieLink({
      name,
      bytesPerSec: 1e9,
      latencyNs: sc.latencyNs,
      packetBytes: 100,
      sched: sim,
      dram: linkDram,
      sink: linkSink ? sink : undefined,
      packetRuns,
      runGroup,
    });
  const links = { h2d: mk('h2d'), d2h: mk('d2h') };
  const cpu = new CpuPool({ cores: 64, perCoreBytesPerSec: 0.5e9, sched: sim, dram, sink });
  sim.setHandlers({
    'gpu.kernelDone': () => {
      throw new Error('no gpu');
    },
    'link.latencyDone': (e) => links[e.link].onLatencyDone(),
    'link.packetDone': (e) => links[e.link].onPacketDone(),
    'link.runDone': (e) => links[e.link].onRunDone(),
    'fluid.flowDone': (e) => dram.onFlowDone(e.flowId),
    'cpu.taskDone': (e) => cpu.onTaskDone(e.taskId),
  });
  const transfers: { t: Transfer; link: PcieLink }[] = [];
  const done: unknown[] = [];
  /** The which-th most recent transfer (recent ones are the likely running ones). */
  const recent = (which: number) => transfers[transfers.length - 1 - (which % Math.max(1, transfers.length))];
  const apply = (a: Action): void => {
    switch (a.kind) {
      case 'submit': {
        const link = links[a.link];
        const id = transfers.length;
        const t = link.submit({
          bytes: a.bytes,
          priority: a.priority,
          label: `t${id}`,
          category: 'x',
          onDone: (x) => done.push([id, x.doneNs, sim.now]),
        });
        transfers.push({ t, link });
        break;
      }
      case 'cancel': {
        const x = recent(a.which);
        if (x) x.link.cancel(x.t);
        break;
      }
      case 'reprioritize': {
        const x = recent(a.which);
        if (x) x.link.reprioritize(x.t, a.priority);
        break;
      }
      case 'cpuLoad':
        cpu.submit({ cores: 1, computeNs: a.computeNs as Ns, bytes: a.bytes, label: 'load', category: 'cpu' });
        break;
    }
  };
  // In-event steps: a zero-byte CPU task submitted `lead` ns before `at`, completing at `at` (priority `completion`).
  const timed = sc.steps.map((s) => {
    if (!s.inEvent) return { at: s.at, run: () => apply(s.action) };
    const from = Math.max(0, s.at - s.lead);
    return {
      at: from,
      run: () =>
        cpu.submit({
          cores: 1,
          computeNs: (s.at - from) as Ns,
          bytes: 0,
          label: 'cmd',
          category: 'cmd',
          onDone: () => apply(s.action),
        }),
    };
  });
  timed.sort((a, b) => a.at - b.at);
  for (const s of timed) {
    sim.run({ until: s.at as Ns });
    s.run();
  }
  sim.run();
  const packets: Record<string, unknown[]> = { h2d: [], d2h: [] };
  for (const p of sink.packets) packets[p.link]!.push([p.transferId, p.bytes, p.startNs, p.endNs]);
  const counters = (['h2d', 'd2h'] as const).map((n) => {
    const l = links[n];
    return [
      l.bytesMoved,
      l.completedBytes,
      l.cancelledSentBytes,
      l.completedTransfers,
      l.cancelledTransfers,
      l.busyTimeNs(),
      l.idle,
    ];
  });
  return {
    packets,
    transfers: sink.transfers.map((r) => [r.link, r.id, r.outcome, r.startNs, r.endNs, r.sentBytes, r.priority]),
    done,
    cpu: sink.cpuTasks.map((r) => [r.label, r.startNs, r.endNs, r.firstCore]),
    counters: [
      counters,
      dram.bytesServed(),
      dram.contendedTimeNs(),
      sim.now,
      transfers.map((x) => [x.t.state, x.t.sentBytes, x.t.startNs, x.t.doneNs]),
    ],
    conservation: conservation(links, transfers),
  };
}

/**
 * Byte conservation once nothing is pending, from the links' counters and the transfers alone
 * (no sink needed): per link bytesMoved = completedBytes + cancelledSentBytes = Σ sentBytes of
 * its transfers; a done transfer sent exactly its bytes, a cancelled one at most its bytes.
 * Returns the violations (empty when conserved).
 */
function conservation(
  links: Record<LinkName, PcieLink>,
  transfers: readonly { t: Transfer; link: PcieLink }[],
): string[] {
  const out: string[] = [];
  for (const [name, l] of Object.entries(links)) {
    const mine = transfers.filter((x) => x.link === l).map((x) => x.t);
    const sent = mine.reduce((a, t) => a + t.sentBytes, 0);
    if (l.bytesMoved !== l.completedBytes + l.cancelledSentBytes)
      out.push(
        `${name}: moved ${l.bytesMoved} ≠ completed ${l.completedBytes} + cancelled-sent ${l.cancelledSentBytes}`,
      );
    if (l.bytesMoved !== sent) out.push(`${name}: moved ${l.bytesMoved} ≠ Σ sentBytes ${sent}`);
    for (const t of mine) {
      if (t.state === 'done' && t.sentBytes !== t.bytes)
        out.push(`${name}: done transfer sent ${t.sentBytes} of ${t.bytes}`);
      if (t.state === 'cancelled' && t.sentBytes > t.bytes)
        out.push(`${name}: cancelled transfer sent ${t.sentBytes} of ${t.bytes}`);
      if (t.state !== 'done' && t.state !== 'cancelled') out.push(`${name}: transfer left ${t.state}`);
    }
  }
  return out;
}

/** Counterexamples found on the way (simultaneous completions on both links, splits at a boundary). */
const REGRESSIONS: Scenario[] = [
  {
    latencyNs: 0,
    dramBytesPerSec: null,
    steps: [
      { at: 300, inEvent: false, lead: 0, action: { kind: 'submit', link: 'd2h', bytes: 900, priority: 0 } },
      { at: 1000, inEvent: true, lead: 101, action: { kind: 'submit', link: 'h2d', bytes: 200, priority: 0 } },
    ],
  },
  {
    latencyNs: 0,
    dramBytesPerSec: null,
    steps: [
      { at: 500, inEvent: true, lead: 100, action: { kind: 'submit', link: 'd2h', bytes: 1, priority: 0 } },
      { at: 400, inEvent: false, lead: 0, action: { kind: 'submit', link: 'h2d', bytes: 100, priority: 0 } },
      { at: 0, inEvent: false, lead: 0, action: { kind: 'submit', link: 'd2h', bytes: 501, priority: 1 } },
    ],
  },
  {
    latencyNs: 0,
    dramBytesPerSec: null,
    steps: [
      { at: 100, inEvent: true, lead: 100, action: { kind: 'submit', link: 'h2d', bytes: 1, priority: 0 } },
      { at: 0, inEvent: false, lead: 0, action: { kind: 'submit', link: 'h2d', bytes: 200, priority: 1 } },
      { at: 100, inEvent: true, lead: 100, action: { kind: 'reprioritize', which: 0, priority: 0 } },
    ],
  },
];

/** What a scenario reached, from the run with a sink: the cases these properties must cover. */
function reached(o: Observed): Record<string, boolean> {
  const tr = o.transfers as [string, number, string, number, number, number, number][];
  const packetsPer = new Map<string, number>();
  for (const [link, ps] of Object.entries(o.packets))
    for (const p of ps as [number][]) packetsPer.set(`${link}#${p[0]}`, (packetsPer.get(`${link}#${p[0]}`) ?? 0) + 1);
  const c = o.counters as [unknown, number, number][];
  return {
    cancelMidway: tr.some((r) => r[2] === 'cancelled' && r[5] > 0),
    multiPacketDone: tr.some((r) => r[2] === 'done' && (packetsPer.get(`${r[0]}#${r[1]}`) ?? 0) > 1),
    dramContention: (c[2] as unknown as number) > 0,
    bothLinks: o.packets.h2d!.length > 0 && o.packets.d2h!.length > 0,
  };
}

describe('PcieLink runs (model-based)', () => {
  it('are indistinguishable from one event per packet', () => {
    const tally = new CoverageTally('pcie runs vs packets', [
      'cancelMidway',
      'multiPacketDone',
      'dramContention',
      'bothLinks',
    ]);
    fc.assert(
      fc.property(scenario, (sc) => {
        const runs = simulate(sc, true);
        expect(runs).toEqual(simulate(sc, false));
        expect(runs.conservation).toEqual([]);
        tally.record(reached(runs));
      }),
      { ...assertParams<[Scenario]>(1000), examples: REGRESSIONS.map((r): [Scenario] => [r]) },
    );
    tally.check();
  });

  it('conserve bytes and give the same outcomes with and without a trace sink', () => {
    const tally = new CoverageTally('pcie with/without sink', [
      'cancelMidway',
      'multiPacketDone',
      'dramContention',
      'bothLinks',
    ]);
    fc.assert(
      fc.property(scenario, fc.boolean(), (sc, packetRuns) => {
        const withSink = simulate(sc, packetRuns, true);
        const without = simulate(sc, packetRuns, false);
        // Without a sink nothing is reported per packet or transfer; all the rest is identical:
        // completion times and order, counters, bytes per transfer, DRAM share, CPU completions.
        expect(without.packets).toEqual({ h2d: [], d2h: [] });
        expect(without.transfers).toEqual([]);
        expect(without.done).toEqual(withSink.done);
        expect(without.counters).toEqual(withSink.counters);
        expect(without.cpu).toEqual(withSink.cpu);
        expect(withSink.conservation).toEqual([]);
        expect(without.conservation).toEqual([]);
        // With a sink, the packets reported add up to the bytes moved.
        const moved = (withSink.counters as [number[][]])[0]!.map((c) => c[0]!);
        const packetBytes = (['h2d', 'd2h'] as const).map((l) =>
          (withSink.packets[l] as [number, number][]).reduce((a, p) => a + p[1], 0),
        );
        expect(packetBytes).toEqual(moved);
        tally.record(reached(withSink));
      }),
      { ...assertParams<[Scenario, boolean]>(500), examples: REGRESSIONS.map((r): [Scenario, boolean] => [r, true]) },
    );
    tally.check();
  });
});
