/**
 * One direction of the PCIe link (H2D or D2H; the two are independent, full duplex).
 *
 * - Effective bandwidth (measured, pinned) and a fixed per-transfer latency, paid once before a
 *   transfer's first packet (DMA setup), during which the link is busy.
 * - A priority queue (lower `priority` first, FIFO among equals). Transfers are split into
 *   packets of `packetBytes`; the link picks the most urgent transfer at every packet boundary,
 *   so a higher-priority transfer overtakes a running one after at most one packet.
 * - Queued or running transfers can be cancelled (no further bytes move; a packet already on
 *   the wire completes) and re-prioritised.
 * - When a host-DRAM `FluidShare` is given, every packet is a flow in it capped at the link's
 *   bandwidth, so heavy CPU memory traffic slows DMA down (and vice versa).
 *
 * Runs (speed, same schedule): a transfer that would send several packets back to back — on a
 * link without a DRAM share, or alone in it (`FluidShare.tryExclusive`) — is sent as one *run*:
 * one event at the end of its last packet instead of one per packet (and, when it starts with
 * its latency, instead of the latency's event too). Packet boundaries stay
 * exact, computed arithmetically (start + k · ⌈packet / bw⌉): the run is split back into
 * packets — its packet in flight becomes a real packet, ending at its boundary — as soon as
 * anything could change what happens at a boundary: a more urgent transfer is submitted, a
 * re-prioritisation changes the most urgent pending transfer, the running transfer is
 * cancelled, or another flow starts in the DRAM share (which then turns the packet in flight
 * into a flow started at the packet's start, as it would have been). A boundary at exactly
 * `now` has passed when its virtual completion event would already have run (kernel order
 * (time, priority, stamp, seq), see `Simulation`). Packets of a run are reported to the sink,
 * and counted in `bytesMoved` / `sentBytes`, when the run ends or is split (`sync()` brings
 * them up to date at any time).
 *
 * Accounting invariant: `bytesMoved = completedBytes + cancelledSentBytes + Σ sentBytes of
 * pending transfers` (partly sent ones, e.g. overtaken), so `bytesMoved = completedBytes +
 * cancelledSentBytes` once nothing is pending. A packet in flight counts when it lands.
 */
import { SimError } from '../kernel/errors.ts';
import { EventPriority, type EventHandle, type Scheduler } from '../kernel/simulation.ts';
import { bytesToNs, type Ns } from '../kernel/time.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import type { LinkName, ResourceEvent } from './events.ts';
import type { ExclusiveHolder, ExclusiveLock, FluidShare } from './fluid-share.ts';
import { packetsPassed } from './link-run.ts';
import {
  bestTransfer,
  LinkRunGroup,
  packetRecord,
  type PcieLinkOptions,
  type Transfer,
  type TransferSpec,
  transferRecord,
  unqueue,
} from './pcie-transfer.ts';

export {
  LinkRunGroup,
  type PcieLinkOptions,
  type Transfer,
  type TransferSpec,
  type TransferState,
} from './pcie-transfer.ts';

export class PcieLink implements ExclusiveHolder {
  readonly name: LinkName;
  readonly bytesPerSec: number;
  readonly latencyNs: number;
  readonly packetBytes: number;
  private readonly sched: Scheduler<ResourceEvent>;
  private readonly dram: FluidShare | undefined;
  private readonly sink: TraceSink | undefined;
  private readonly queue: Transfer[] = [];
  private nextId = 0;
  /**
   * The packet on the wire: its transfer (null when none), size and start. Plain fields rather
   * than an object per packet: packets are most of the simulator's events.
   */
  private curTransfer: Transfer | null = null;
  private curBytes = 0;
  private curStartNs = 0 as Ns;
  private latencyFor: Transfer | null = null;
  private busySinceNs: Ns | -1 = -1;
  /** Bound once: passed to the DRAM share for every packet (no closure per packet). */
  private readonly packetDoneCallback = (): void => this.onPacketDone();
  /** This link's events, built once (plain immutable data, so one object serves every packet). */
  private readonly packetDoneEvent: ResourceEvent;
  private readonly latencyDoneEvent: ResourceEvent;
  private readonly runDoneEvent: ResourceEvent;
  /**
   * The run in progress (see the module comment): `curTransfer` sends its remaining bytes from
   * `runStartNs` as `runPackets` packets, full ones of `runFullNs` each and a last one of
   * `runLastBytes` in `runLastNs`; `runFlushed` of them have been accounted.
   */
  private runActive = false;
  private runStartNs = 0;
  /** When the run began with the transfer's latency: its start (the first packet starts at `runStartNs`); else −1. */
  private runLatStartNs = -1;
  private runPackets = 0;
  /** A full packet's time on the wire (constant: the link's packet size and bandwidth). */
  private readonly runFullNs: Ns;
  private runLastBytes = 0;
  private runLastNs = 0;
  /** The last `runLastNs` computed and its bytes (an expert's remainder repeats from run to run). */
  private memoLastBytes = -1;
  private memoLastNs = 0;
  private runFlushed = 0;
  private runHandle: EventHandle | null = null;
  /** Kernel seq of the run's event (where its first packet's completion would have been scheduled). */
  private runSeq = 0;
  private readonly packetRuns: boolean;
  private readonly lock: ExclusiveLock;

  /** Bytes of packets completed on the wire. */
  bytesMoved = 0;
  /** Σ bytes of transfers that completed. */
  completedBytes = 0;
  /** Bytes already sent by transfers that were then cancelled. */
  cancelledSentBytes = 0;
  completedTransfers = 0;
  cancelledTransfers = 0;
  /** Time the link spent busy (latency or packets). */
  busyNs = 0;

  constructor(o: PcieLinkOptions) {
    if (!(o.bytesPerSec > 0)) throw new RangeError(`${o.name}: bandwidth must be > 0 B/s, got ${o.bytesPerSec}`);
    if (!(o.packetBytes >= 1)) throw new RangeError(`${o.name}: packetBytes must be ≥ 1, got ${o.packetBytes}`);
    if (!(o.latencyNs >= 0)) throw new RangeError(`${o.name}: latencyNs must be ≥ 0, got ${o.latencyNs}`);
    this.name = o.name;
    this.bytesPerSec = o.bytesPerSec;
    this.latencyNs = Math.round(o.latencyNs);
    this.packetBytes = Math.floor(o.packetBytes);
    this.runFullNs = bytesToNs(this.packetBytes, this.bytesPerSec);
    this.sched = o.sched;
    this.dram = o.dram;
    this.sink = o.sink;
    this.packetDoneEvent = { kind: 'link.packetDone', link: o.name };
    this.latencyDoneEvent = { kind: 'link.latencyDone', link: o.name };
    this.runDoneEvent = { kind: 'link.runDone', link: o.name };
    this.packetRuns = o.packetRuns ?? true;
    this.lock = o.dram ?? o.runGroup ?? new LinkRunGroup();
  }

  /** Transfers waiting or running, in no particular order. */
  get pending(): readonly Transfer[] {
    return this.queue;
  }

  get idle(): boolean {
    return this.curTransfer === null && this.latencyFor === null;
  }

  submit(spec: TransferSpec): Transfer {
    return this.submitTransfer(spec.bytes, spec.priority, spec.label, spec.category, spec.onDone, spec.tag ?? -1);
  }

  /** `submit` with the spec's fields as arguments (no spec object: the serving executor's every fetch). */
  submitTransfer(
    bytes: number,
    priority: number,
    label: string,
    category: string,
    onDone: ((t: Transfer) => void) | undefined,
    tag: number,
  ): Transfer {
    if (!(bytes > 0) || !Number.isSafeInteger(bytes)) {
      throw new SimError(
        `transfer bytes must be a positive integer, got ${bytes}`,
        this.sched.now,
        `link ${this.name}`,
      );
    }
    const t: Transfer = {
      id: this.nextId,
      bytes,
      label,
      category,
      submitNs: this.sched.now,
      priority,
      state: 'queued',
      sentBytes: 0,
      startNs: -1,
      doneNs: -1,
      seq: this.nextId++,
      latencyPaid: false,
      onDone,
      tag,
    };
    this.queue.push(t);
    if (this.runActive && t.priority < this.curTransfer!.priority) this.splitRun();
    this.pump();
    return t;
  }

  /**
   * Cancels a queued or running transfer: it moves no further bytes (a packet on the wire
   * completes). Returns false if it had already completed or been cancelled.
   */
  cancel(t: Transfer): boolean {
    if (t.state === 'done' || t.state === 'cancelled') return false;
    if (this.runActive && this.curTransfer === t) this.splitRun();
    t.state = 'cancelled';
    unqueue(this.queue, t);
    this.cancelledTransfers++;
    this.cancelledSentBytes += t.sentBytes;
    // A packet in flight is accounted when it lands (see onPacketDone).
    if (this.curTransfer !== t && this.latencyFor !== t) this.recordTransfer(t, 'cancelled');
    return true;
  }

  /** Changes the priority of a queued or running transfer; takes effect at the next packet boundary. */
  reprioritize(t: Transfer, priority: number): void {
    if (t.state !== 'queued' && t.state !== 'active') return;
    t.priority = priority;
    if (this.runActive && bestTransfer(this.queue) !== this.curTransfer) this.splitRun();
  }

  /** Accounts the packets of the run in progress that have completed by now (see the module comment). */
  sync(): void {
    if (this.runActive) this.flushRun(this.packetsPassed());
  }

  /** Handler of `link.runDone`: the last packet of a run landed. */
  onRunDone(): void {
    const last = this.runPackets - 1;
    this.flushRun(last);
    this.runActive = false;
    this.runHandle = null;
    this.curBytes = this.runLastBytes;
    this.curStartNs = (this.runStartNs + last * this.runFullNs) as Ns;
    this.lock.releaseExclusive(this);
    this.dram?.addServed(this.runLastBytes, this.bytesPerSec, this.runLastNs);
    this.onPacketDone();
  }

  /** The DRAM share needs the packet in flight as a real flow (`ExclusiveHolder`). */
  materialize(): void {
    if (this.runActive) this.splitRun();
  }

  /** Handler of `link.latencyDone`. */
  onLatencyDone(): void {
    const t = this.latencyFor;
    if (!t) throw new SimError('latency done without a transfer', this.sched.now, `link ${this.name}`);
    this.latencyFor = null;
    t.latencyPaid = true;
    if (t.state === 'cancelled') {
      this.recordTransfer(t, 'cancelled');
      this.markIdleIfDone();
      this.pump();
      return;
    }
    // Chosen before its latency: a more urgent transfer may have arrived since (it overtakes
    // after this first packet, so no run).
    this.startPacket(t, bestTransfer(this.queue) === t);
  }

  /** Handler of `link.packetDone` (or the flow completion in the DRAM share). */
  onPacketDone(): void {
    const t = this.curTransfer;
    if (!t) throw new SimError('packet done while idle', this.sched.now, `link ${this.name}`);
    const bytes = this.curBytes;
    this.curTransfer = null;
    this.bytesMoved += bytes;
    t.sentBytes += bytes;
    this.sink?.onPacket?.(packetRecord(this.name, t, bytes, this.curStartNs, this.sched.now));
    if (t.state === 'cancelled') {
      this.cancelledSentBytes += bytes;
      this.recordTransfer(t, 'cancelled');
    } else if (t.sentBytes === t.bytes) {
      t.state = 'done';
      t.doneNs = this.sched.now;
      unqueue(this.queue, t);
      this.completedBytes += t.bytes;
      this.completedTransfers++;
      this.recordTransfer(t, 'done');
      this.markIdleIfDone();
      this.pump();
      t.onDone?.(t);
      return;
    }
    this.markIdleIfDone();
    this.pump();
  }

  /** Busy time including the running packet up to now. */
  busyTimeNs(): number {
    return this.busyNs + (this.busySinceNs >= 0 ? this.sched.now - this.busySinceNs : 0);
  }

  private pump(): void {
    if (this.curTransfer || this.latencyFor) return;
    if (this.queue.length === 0) return;
    const best = bestTransfer(this.queue);
    if (this.busySinceNs < 0) this.busySinceNs = this.sched.now;
    if (best.state === 'queued') {
      best.state = 'active';
      best.startNs = this.sched.now;
    }
    if (!best.latencyPaid && this.latencyNs > 0) {
      // Latency and packets as one run when the link may run (see the module comment).
      if (this.packetRuns && this.lock.tryExclusive(this, this.bytesPerSec)) {
        best.latencyPaid = true;
        this.startRun(best, best.bytes - best.sentBytes, this.latencyNs);
        return;
      }
      this.lock.interrupt(this);
      this.latencyFor = best;
      this.sched.post((this.sched.now + this.latencyNs) as Ns, this.latencyDoneEvent, EventPriority.completion);
      return;
    }
    best.latencyPaid = true;
    this.startPacket(best, true);
  }

  private startPacket(t: Transfer, mostUrgent: boolean): void {
    const remaining = t.bytes - t.sentBytes;
    if (
      mostUrgent &&
      this.packetRuns &&
      remaining > this.packetBytes &&
      this.lock.tryExclusive(this, this.bytesPerSec)
    ) {
      this.startRun(t, remaining, 0);
      return;
    }
    this.lock.interrupt(this);
    const bytes = Math.min(this.packetBytes, remaining);
    this.curTransfer = t;
    this.curBytes = bytes;
    this.curStartNs = this.sched.now;
    if (this.dram) {
      this.dram.start(bytes, this.bytesPerSec, this.packetDoneCallback);
    } else {
      const at = (this.sched.now + bytesToNs(bytes, this.bytesPerSec)) as Ns;
      this.sched.post(at, this.packetDoneEvent, EventPriority.completion);
    }
  }

  /** A run of `t`'s `remaining` bytes, after `latencyNs` of DMA setup (0: none, or already paid). */
  private startRun(t: Transfer, remaining: number, latencyNs: number): void {
    const now = (this.sched.now + latencyNs) as Ns;
    const packets = Math.ceil(remaining / this.packetBytes);
    this.runActive = true;
    this.runLatStartNs = latencyNs > 0 ? this.sched.now : -1;
    this.runStartNs = now;
    this.runPackets = packets;
    const lastBytes = remaining - (packets - 1) * this.packetBytes;
    this.runLastBytes = lastBytes;
    if (lastBytes !== this.memoLastBytes) {
      this.memoLastBytes = lastBytes;
      this.memoLastNs = bytesToNs(lastBytes, this.bytesPerSec);
    }
    this.runLastNs = this.memoLastNs;
    this.runFlushed = 0;
    this.curTransfer = t;
    this.curBytes = this.runLastBytes;
    this.curStartNs = now;
    const lastStart = now + (packets - 1) * this.runFullNs;
    // Stamped with the start of the last packet: it runs where that packet's completion would
    // (a one-packet run after a latency: where the latency's completion would schedule it).
    this.runHandle = this.sched.schedule(
      (lastStart + this.runLastNs) as Ns,
      this.runDoneEvent,
      EventPriority.completion,
      lastStart,
    );
    this.runSeq = this.runHandle.seq;
  }

  /** Packets of the run completed by the event being dispatched (−1: still in its latency); see `link-run.ts`. */
  private packetsPassed(): number {
    return packetsPassed(this.sched, this.runStartNs, this.runLatStartNs, this.runFullNs, this.runPackets, this.runSeq);
  }

  /** Accounts packets [runFlushed, upTo) of the run as landed, in order, as their completions would have. */
  private flushRun(upTo: number): void {
    const t = this.curTransfer!;
    const full = this.packetBytes;
    const fullNs = this.runFullNs;
    if (this.sink === undefined && upTo > this.runFlushed) {
      // Nothing to report per packet: the byte counts at once (integers), the DRAM share's
      // served bytes packet by packet as before (a float sum: same additions, same order).
      const n = upTo - this.runFlushed;
      this.bytesMoved += n * full;
      t.sentBytes += n * full;
      this.dram?.addServedRepeated(full, this.bytesPerSec, fullNs, n);
      this.runFlushed = upTo;
      return;
    }
    for (let k = this.runFlushed; k < upTo; k++) {
      const startNs = this.runStartNs + k * fullNs;
      this.bytesMoved += full;
      t.sentBytes += full;
      this.dram?.addServed(full, this.bytesPerSec, fullNs);
      this.sink?.onPacket?.(packetRecord(this.name, t, full, startNs as Ns, (startNs + fullNs) as Ns));
    }
    if (upTo > this.runFlushed) this.runFlushed = upTo;
  }

  /** Ends the run: packets landed are accounted, the one in flight becomes a real packet (or flow). */
  private splitRun(): void {
    const k = this.packetsPassed();
    this.runActive = false;
    if (this.runHandle) this.sched.cancel(this.runHandle);
    this.runHandle = null;
    if (k < 0) {
      // Still in the latency: it becomes the latency event it stands for.
      const t = this.curTransfer!;
      this.curTransfer = null;
      this.latencyFor = t;
      t.latencyPaid = false;
      this.lock.releaseExclusive(this);
      this.sched.post(
        this.runStartNs as Ns,
        this.latencyDoneEvent,
        EventPriority.completion,
        this.runLatStartNs,
        this.runSeq,
      );
      return;
    }
    this.flushRun(k);
    const last = k === this.runPackets - 1;
    const bytes = last ? this.runLastBytes : this.packetBytes;
    const durNs = last ? this.runLastNs : this.runFullNs;
    const startNs = (this.runStartNs + k * this.runFullNs) as Ns;
    this.curBytes = bytes;
    this.curStartNs = startNs;
    if (this.dram) {
      this.dram.injectFlow(bytes, this.bytesPerSec, this.packetDoneCallback, startNs, this.runSeq);
    } else {
      this.lock.releaseExclusive(this);
      // The run's seq: exact for the first packet (its completion would have been scheduled where
      // the run's event was), and before every event scheduled at a later boundary otherwise.
      this.sched.post((startNs + durNs) as Ns, this.packetDoneEvent, EventPriority.completion, startNs, this.runSeq);
    }
  }

  private markIdleIfDone(): void {
    if (this.curTransfer || this.latencyFor) return;
    if (this.busySinceNs >= 0) {
      this.busyNs += this.sched.now - this.busySinceNs;
      this.busySinceNs = -1;
    }
  }

  private recordTransfer(t: Transfer, outcome: 'done' | 'cancelled'): void {
    this.sink?.onTransfer?.(transferRecord(this.name, t, this.sched.now, outcome));
  }
}
