/**
 * PcieLink against a simple model, driving the Simulation with `run({until})` as a command.
 *
 * The model does not replay the link's schedule. It knows, per transfer, its bytes, its current
 * priority, when it was submitted or last re-prioritised, and whether it is pending, cancelled
 * or done (the last learnt from `onDone`). From that, after every command, it checks:
 *
 * - accounting: bytesMoved = Σ bytes of completed transfers + Σ sent bytes of cancelled ones
 *   + Σ sent bytes of pending (partly sent) ones — so the first two alone once nothing is
 *   pending — = Σ packet bytes reported to the sink = Σ sentBytes over all transfers;
 * - each completed transfer's onDone was called exactly once, and never for a cancelled one;
 * - no transfer completes sooner than latency + Σ over its packets of ⌈packet bytes / bw⌉
 *   after it started (hence never before latency + ⌈bytes / bw⌉ after its submission), even
 *   when host-DRAM contention slows packets down;
 * - packets never overlap on the wire; the link is never idle while a transfer is pending
 *   (work conservation); every pending transfer completes when the simulation is run dry.
 *
 * Priority, stated precisely for packetisation. Write X ≺ Y ("X is more urgent") when
 * (priority, submission order) of X is lexicographically smaller than Y's.
 *
 * (P1, selection) When X completes at t, any Y still pending with Y ≺ X (current priorities)
 *   became so after X's last selection: max(lastChange(X), lastChange(Y)) ≥ sel(X), where
 *   lastChange is the submission or last re-prioritisation time and sel(X) is the start of
 *   X's last packet, or X's start if X had a single packet (a one-packet transfer is selected
 *   once, before its latency; the first packet after a latency is not a selection point).
 * (P2, order) If at some instant A is pending, B has not started, and A ≺ B, then — as long
 *   as neither is re-prioritised — B does not start before A has completed or been cancelled.
 *   So a strictly more urgent transfer queued before another started never completes after
 *   it, and equal priorities are FIFO. A *started* transfer carries no such guarantee: a more
 *   urgent one arriving later overtakes it at the next packet boundary.
 * (P3, overtaking delay; without DRAM contention, where packet times are known) A transfer H
 *   submitted at s more urgent than every pending transfer starts by s + latency + ⌈packet
 *   bytes / bw⌉ (the link may be in another transfer's latency, which is followed by one packet),
 *   unless something more urgent arrives, or H is re-prioritised or cancelled, before it starts.
 *
 * Replay a failure as described in `replay.ts`.
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Simulation } from '../../sim/kernel/simulation.ts';
import { bytesToNs, ns } from '../../sim/kernel/time.ts';
import type { ResourceEvent } from '../../sim/resources/events.ts';
import { FluidShare } from '../../sim/resources/fluid-share.ts';
import { PcieLink, type Transfer } from '../../sim/resources/pcie-link.ts';
import { RecordingSink } from '../unit/resources-helpers.ts';
import { assertParams, commandsConstraints } from './replay.ts';

interface LinkConfig {
  readonly bytesPerSec: number;
  readonly latencyNs: number;
  readonly packetBytes: number;
  /** Host-DRAM capacity when DMA shares it (and DRAM-load commands compete), else null. */
  readonly dramBytesPerSec: number | null;
}

interface ModelTransfer {
  readonly id: number;
  readonly bytes: number;
  priority: number;
  readonly submitNs: number;
  lastChangeNs: number;
  status: 'pending' | 'done' | 'cancelled';
  /** Completion or cancellation time. */
  endNs: number;
}

interface Model {
  readonly cfg: LinkConfig;
  now: number;
  readonly tx: ModelTransfer[];
  /** How many entries of `real.completions` the model has taken in. */
  seenCompletions: number;
  /** P2 obligations: B must not start before A ends. Keyed `a:b`. */
  readonly mustWait: Map<string, { readonly a: number; readonly b: number }>;
  /** P3 obligations: transfer id → latest start time. */
  readonly startBy: Map<number, number>;
}

interface Real {
  readonly sim: Simulation<ResourceEvent>;
  readonly link: PcieLink;
  readonly dram: FluidShare | undefined;
  readonly sink: RecordingSink;
  /** Indexed by transfer id. */
  readonly transfers: Transfer[];
  readonly doneCalls: number[];
  /** Transfer ids in the order onDone was called. */
  readonly completions: number[];
}

const urgent = (x: { priority: number; id: number }, y: { priority: number; id: number }) =>
  x.priority < y.priority || (x.priority === y.priority && x.id < y.id);

const sum = (xs: readonly number[]) => xs.reduce((s, x) => s + x, 0);

function takeInCompletions(m: Model, r: Real): void {
  const { latencyNs, bytesPerSec } = m.cfg;
  for (const id of r.completions.slice(m.seenCompletions)) {
    const x = m.tx[id]!;
    const t = r.transfers[id]!;
    expect(x.status, `transfer ${id} completed but the model has it ${x.status}`).toBe('pending');
    expect(t.state).toBe('done');
    expect(t.doneNs).toBeLessThanOrEqual(m.now);

    const packets = r.sink.packets.filter((p) => p.transferId === id);
    expect(sum(packets.map((p) => p.bytes))).toBe(t.bytes);
    const minNs = latencyNs + sum(packets.map((p) => bytesToNs(p.bytes, bytesPerSec)));
    expect(t.doneNs - (t.startNs as number)).toBeGreaterThanOrEqual(minNs);
    expect(t.doneNs - t.submitNs).toBeGreaterThanOrEqual(latencyNs + bytesToNs(t.bytes, bytesPerSec));

    // P1: Y pending now (completions later in this batch are still pending at t) and Y ≺ X.
    const sel = packets.length === 1 ? (t.startNs as number) : packets[packets.length - 1]!.startNs;
    for (const y of m.tx) {
      if (y.id === id || y.status !== 'pending' || !urgent(y, x)) continue;
      expect(
        Math.max(y.lastChangeNs, x.lastChangeNs),
        `transfer ${id} (prio ${x.priority}) completed at ${t.doneNs} while more urgent ${y.id} (prio ${y.priority}, since ${y.lastChangeNs}) waited since before its selection at ${sel}`,
      ).toBeGreaterThanOrEqual(sel);
    }
    x.status = 'done';
    x.endNs = t.doneNs;
  }
  m.seenCompletions = r.completions.length;
}

function checkOrderObligations(m: Model, r: Real): void {
  for (const [key, { a, b }] of m.mustWait) {
    const tb = r.transfers[b]!;
    if (tb.state === 'cancelled' && tb.startNs === -1) {
      m.mustWait.delete(key);
      continue;
    }
    if (tb.startNs === -1) continue;
    const ma = m.tx[a]!;
    expect(ma.status, `transfer ${b} started at ${tb.startNs} while more urgent ${a} was pending`).not.toBe('pending');
    expect(ma.endNs).toBeLessThanOrEqual(tb.startNs);
    m.mustWait.delete(key);
  }
  // New obligations from the current state.
  const pending = m.tx.filter((x) => x.status === 'pending');
  for (const a of pending) {
    for (const b of pending) {
      if (a !== b && r.transfers[b.id]!.state === 'queued' && urgent(a, b))
        m.mustWait.set(`${a.id}:${b.id}`, { a: a.id, b: b.id });
    }
  }
}

function checkOvertakingDelay(m: Model, r: Real): void {
  for (const [id, deadline] of m.startBy) {
    const t = r.transfers[id]!;
    if (t.startNs !== -1) {
      expect(t.startNs, `transfer ${id} started later than its deadline ${deadline}`).toBeLessThanOrEqual(deadline);
      m.startBy.delete(id);
    } else {
      expect(m.now, `transfer ${id} had not started by its deadline ${deadline}`).toBeLessThan(deadline);
    }
  }
}

/** A transfer that becomes more urgent than H before H starts voids H's P3 obligation. */
function voidOvertaken(m: Model, by: ModelTransfer): void {
  for (const id of m.startBy.keys()) if (id !== by.id && urgent(by, m.tx[id]!)) m.startBy.delete(id);
}

/** Everything that must hold after every command. */
function checkAll(m: Model, r: Real): void {
  const { link, sink } = r;
  expect(r.sim.now).toBe(m.now);
  takeInCompletions(m, r);

  let doneBytes = 0;
  let cancelledSent = 0;
  for (const x of m.tx) {
    const t = r.transfers[x.id]!;
    expect(r.doneCalls[x.id]).toBe(x.status === 'done' ? 1 : 0);
    expect(t.sentBytes).toBeLessThanOrEqual(t.bytes);
    expect(t.sentBytes % m.cfg.packetBytes === 0 || t.sentBytes === t.bytes).toBe(true);
    expect(t.priority).toBe(x.priority);
    if (x.status === 'pending') expect(['queued', 'active']).toContain(t.state);
    else expect(t.state).toBe(x.status);
    if (t.state === 'queued') expect([t.sentBytes, t.startNs]).toEqual([0, -1]);
    if (x.status === 'done') doneBytes += x.bytes;
    if (x.status === 'cancelled') cancelledSent += t.sentBytes;
  }

  // Partly sent pending transfers have moved bytes that are neither completed nor cancelled.
  const pendingSent = sum(m.tx.filter((x) => x.status === 'pending').map((x) => r.transfers[x.id]!.sentBytes));
  expect(link.bytesMoved).toBe(link.completedBytes + link.cancelledSentBytes + pendingSent);
  if (pendingSent === 0) expect(link.bytesMoved).toBe(link.completedBytes + link.cancelledSentBytes);
  expect(link.completedBytes).toBe(doneBytes);
  expect(link.cancelledSentBytes).toBe(cancelledSent);
  expect(link.bytesMoved).toBe(sum(sink.packets.map((p) => p.bytes)));
  expect(link.bytesMoved).toBe(sum(r.transfers.map((t) => t.sentBytes)));
  expect(link.completedTransfers).toBe(m.tx.filter((x) => x.status === 'done').length);
  expect(link.cancelledTransfers).toBe(m.tx.filter((x) => x.status === 'cancelled').length);

  const pendingIds = m.tx.filter((x) => x.status === 'pending').map((x) => x.id);
  expect(link.pending.map((t) => t.id).sort((p, q) => p - q)).toEqual(pendingIds);
  if (pendingIds.length > 0) expect(link.idle, 'link idle with transfers pending').toBe(false);

  let wireNs = 0;
  for (let i = 0; i < sink.packets.length; i++) {
    const p = sink.packets[i]!;
    if (i > 0) expect(p.startNs).toBeGreaterThanOrEqual(sink.packets[i - 1]!.endNs);
    expect(p.endNs - p.startNs).toBeGreaterThanOrEqual(bytesToNs(p.bytes, m.cfg.bytesPerSec));
    wireNs += p.endNs - p.startNs;
  }
  expect(link.busyTimeNs()).toBeLessThanOrEqual(m.now);
  expect(link.busyTimeNs()).toBeGreaterThanOrEqual(wireNs);

  checkOrderObligations(m, r);
  checkOvertakingDelay(m, r);
}

function pendingOf(m: Readonly<Model>): ModelTransfer[] {
  return m.tx.filter((x) => x.status === 'pending');
}

class SubmitCommand implements fc.Command<Model, Real> {
  constructor(
    readonly bytes: number,
    readonly priority: number,
  ) {}
  check = (m: Readonly<Model>) => m.tx.length < 40;
  run(m: Model, r: Real): void {
    const wasIdle = r.link.idle;
    r.doneCalls.push(0);
    const t = r.link.submit({
      bytes: this.bytes,
      priority: this.priority,
      label: `t${m.tx.length}`,
      category: 'expert',
      onDone: (done) => {
        r.doneCalls[done.id]!++;
        r.completions.push(done.id);
      },
    });
    r.transfers.push(t);
    expect(t.id).toBe(m.tx.length);
    expect(t.submitNs).toBe(m.now);
    if (wasIdle) expect(t.state).toBe('active');
    const x: ModelTransfer = {
      id: t.id,
      bytes: this.bytes,
      priority: this.priority,
      submitNs: m.now,
      lastChangeNs: m.now,
      status: 'pending',
      endNs: -1,
    };
    voidOvertaken(m, x);
    if (m.cfg.dramBytesPerSec === null && pendingOf(m).every((y) => urgent(x, y))) {
      m.startBy.set(x.id, m.now + m.cfg.latencyNs + bytesToNs(m.cfg.packetBytes, m.cfg.bytesPerSec));
    }
    m.tx.push(x);
    checkAll(m, r);
  }
  toString = () => `submit(${this.bytes} B, prio ${this.priority})`;
}

class CancelCommand implements fc.Command<Model, Real> {
  constructor(readonly index: number) {}
  check = (m: Readonly<Model>) => pendingOf(m).length > 0;
  run(m: Model, r: Real): void {
    const ps = pendingOf(m);
    const x = ps[this.index % ps.length]!;
    expect(r.link.cancel(r.transfers[x.id]!)).toBe(true);
    x.status = 'cancelled';
    x.endNs = m.now;
    m.startBy.delete(x.id);
    checkAll(m, r);
  }
  toString = () => `cancel(pending #${this.index})`;
}

/** Cancelling or re-prioritising a finished transfer changes nothing. */
class TouchFinishedCommand implements fc.Command<Model, Real> {
  constructor(
    readonly index: number,
    readonly priority: number,
  ) {}
  check = (m: Readonly<Model>) => m.tx.some((x) => x.status !== 'pending');
  run(m: Model, r: Real): void {
    const fs = m.tx.filter((x) => x.status !== 'pending');
    const x = fs[this.index % fs.length]!;
    const t = r.transfers[x.id]!;
    const before = [
      r.link.bytesMoved,
      r.link.completedBytes,
      r.link.cancelledSentBytes,
      r.link.cancelledTransfers,
      t.state,
    ];
    expect(r.link.cancel(t)).toBe(false);
    r.link.reprioritize(t, this.priority);
    expect([
      r.link.bytesMoved,
      r.link.completedBytes,
      r.link.cancelledSentBytes,
      r.link.cancelledTransfers,
      t.state,
    ]).toEqual(before);
    checkAll(m, r);
  }
  toString = () => `touchFinished(#${this.index}, prio ${this.priority})`;
}

class ReprioritiseCommand implements fc.Command<Model, Real> {
  constructor(
    readonly index: number,
    readonly priority: number,
  ) {}
  check = (m: Readonly<Model>) => pendingOf(m).length > 0;
  run(m: Model, r: Real): void {
    const ps = pendingOf(m);
    const x = ps[this.index % ps.length]!;
    r.link.reprioritize(r.transfers[x.id]!, this.priority);
    x.priority = this.priority;
    x.lastChangeNs = m.now;
    // P2 obligations assumed fixed priorities: drop those involving this transfer.
    for (const [key, o] of m.mustWait) if (o.a === x.id || o.b === x.id) m.mustWait.delete(key);
    m.startBy.delete(x.id);
    voidOvertaken(m, x);
    checkAll(m, r);
  }
  toString = () => `reprioritise(pending #${this.index}, prio ${this.priority})`;
}

class AdvanceCommand implements fc.Command<Model, Real> {
  constructor(readonly dtNs: number) {}
  check = () => true;
  run(m: Model, r: Real): void {
    r.sim.run({ until: ns(m.now + this.dtNs) });
    m.now += this.dtNs;
    checkAll(m, r);
  }
  toString = () => `advance(${this.dtNs} ns)`;
}

class RunDryCommand implements fc.Command<Model, Real> {
  check = () => true;
  run(m: Model, r: Real): void {
    expect(r.sim.run({ maxEvents: 1_000_000 }).stoppedBy).toBe('empty');
    expect(r.sim.now).toBeGreaterThanOrEqual(m.now);
    m.now = r.sim.now;
    checkAll(m, r);
    expect(pendingOf(m)).toEqual([]);
    expect(r.link.idle).toBe(true);
  }
  toString = () => 'runDry';
}

/** CPU-like traffic on host DRAM competing with DMA (only when the link shares DRAM). */
class DramLoadCommand implements fc.Command<Model, Real> {
  constructor(
    readonly bytes: number,
    readonly capBytesPerSec: number,
  ) {}
  check = (m: Readonly<Model>) => m.cfg.dramBytesPerSec !== null;
  run(m: Model, r: Real): void {
    r.dram!.start(this.bytes, this.capBytesPerSec, () => {});
    checkAll(m, r);
  }
  toString = () => `dramLoad(${this.bytes} B at ≤ ${this.capBytesPerSec} B/s)`;
}

const priority = fc.integer({ min: 0, max: 3 });
const commands = [
  fc.tuple(fc.integer({ min: 1, max: 6000 }), priority).map(([b, p]) => new SubmitCommand(b, p)),
  fc.tuple(fc.integer({ min: 1, max: 6000 }), priority).map(([b, p]) => new SubmitCommand(b, p)),
  fc.nat(40).map((i) => new CancelCommand(i)),
  fc.tuple(fc.nat(40), priority).map(([i, p]) => new TouchFinishedCommand(i, p)),
  fc.tuple(fc.nat(40), priority).map(([i, p]) => new ReprioritiseCommand(i, p)),
  fc
    .oneof(fc.integer({ min: 0, max: 1500 }), fc.integer({ min: 1500, max: 20_000 }))
    .map((dt) => new AdvanceCommand(dt)),
  fc
    .oneof(fc.integer({ min: 0, max: 1500 }), fc.integer({ min: 1500, max: 20_000 }))
    .map((dt) => new AdvanceCommand(dt)),
  fc.constant(new RunDryCommand()),
  fc
    .tuple(fc.integer({ min: 1, max: 8000 }), fc.constantFrom(5e8, 1e9, 4e9))
    .map(([b, c]) => new DramLoadCommand(b, c)),
];

const config: fc.Arbitrary<LinkConfig> = fc.record({
  bytesPerSec: fc.constantFrom(1e9, 3e9, 7e8),
  latencyNs: fc.constantFrom(0, 50, 500),
  packetBytes: fc.constantFrom(100, 1000, 4096),
  dramBytesPerSec: fc.constantFrom(null, 1e9, 2e9),
});

describe('PcieLink (model-based)', () => {
  it('accounts bytes, calls onDone once, respects latency + bandwidth and priorities', () => {
    fc.assert(
      fc.property(config, fc.commands(commands, commandsConstraints(50)), (cfg, cmds) => {
        const setup = () => {
          const sim = new Simulation<ResourceEvent>();
          const sink = new RecordingSink();
          const dram = cfg.dramBytesPerSec === null ? undefined : new FluidShare('hostDram', cfg.dramBytesPerSec, sim);
          const link = new PcieLink({
            name: 'h2d',
            bytesPerSec: cfg.bytesPerSec,
            latencyNs: cfg.latencyNs,
            packetBytes: cfg.packetBytes,
            sched: sim,
            dram,
            sink,
          });
          sim.setHandlers({
            'gpu.kernelDone': () => {
              throw new Error('no gpu');
            },
            'link.latencyDone': () => link.onLatencyDone(),
            'link.packetDone': () => link.onPacketDone(),
            'link.runDone': () => link.onRunDone(),
            'fluid.flowDone': (e) => dram!.onFlowDone(e.flowId),
            'cpu.taskDone': () => {
              throw new Error('no cpu');
            },
          });
          const model: Model = { cfg, now: 0, tx: [], seenCompletions: 0, mustWait: new Map(), startBy: new Map() };
          const real: Real = { sim, link, dram, sink, transfers: [], doneCalls: [], completions: [] };
          return { model, real };
        };
        fc.modelRun(setup, cmds);
      }),
      assertParams(200),
    );
  });
});
