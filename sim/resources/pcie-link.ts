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
 * Accounting invariant: `bytesMoved = completedBytes + cancelledSentBytes + Σ sentBytes of
 * pending transfers` (partly sent ones, e.g. overtaken), so `bytesMoved = completedBytes +
 * cancelledSentBytes` once nothing is pending. A packet in flight counts when it lands.
 */
import { SimError } from '../kernel/errors.ts';
import { EventPriority, type Scheduler } from '../kernel/simulation.ts';
import { bytesToNs, type Ns } from '../kernel/time.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import type { LinkName, ResourceEvent } from './events.ts';
import type { FluidShare } from './fluid-share.ts';

export type TransferState = 'queued' | 'active' | 'done' | 'cancelled';

export interface TransferSpec {
  readonly bytes: number;
  /** Lower is more urgent. */
  readonly priority: number;
  readonly label: string;
  readonly category: string;
  /** Called once when the last byte has arrived. */
  readonly onDone?: (t: Transfer) => void;
}

export interface Transfer {
  readonly id: number;
  readonly bytes: number;
  readonly label: string;
  readonly category: string;
  readonly submitNs: Ns;
  priority: number;
  state: TransferState;
  sentBytes: number;
  startNs: Ns | -1;
  doneNs: Ns | -1;
  readonly seq: number;
  latencyPaid: boolean;
  onDone: ((t: Transfer) => void) | undefined;
}

export interface PcieLinkOptions {
  readonly name: LinkName;
  readonly bytesPerSec: number;
  readonly latencyNs: number;
  readonly packetBytes: number;
  readonly sched: Scheduler<ResourceEvent>;
  readonly dram?: FluidShare;
  readonly sink?: TraceSink;
}

export class PcieLink {
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
    this.sched = o.sched;
    this.dram = o.dram;
    this.sink = o.sink;
    this.packetDoneEvent = { kind: 'link.packetDone', link: o.name };
    this.latencyDoneEvent = { kind: 'link.latencyDone', link: o.name };
  }

  /** Transfers waiting or running, in no particular order. */
  get pending(): readonly Transfer[] {
    return this.queue;
  }

  get idle(): boolean {
    return this.curTransfer === null && this.latencyFor === null;
  }

  submit(spec: TransferSpec): Transfer {
    if (!(spec.bytes > 0) || !Number.isSafeInteger(spec.bytes)) {
      throw new SimError(`transfer bytes must be a positive integer, got ${spec.bytes}`, this.sched.now, `link ${this.name}`);
    }
    const t: Transfer = {
      id: this.nextId,
      bytes: spec.bytes,
      label: spec.label,
      category: spec.category,
      submitNs: this.sched.now,
      priority: spec.priority,
      state: 'queued',
      sentBytes: 0,
      startNs: -1,
      doneNs: -1,
      seq: this.nextId++,
      latencyPaid: false,
      onDone: spec.onDone,
    };
    this.queue.push(t);
    this.pump();
    return t;
  }

  /**
   * Cancels a queued or running transfer: it moves no further bytes (a packet on the wire
   * completes). Returns false if it had already completed or been cancelled.
   */
  cancel(t: Transfer): boolean {
    if (t.state === 'done' || t.state === 'cancelled') return false;
    t.state = 'cancelled';
    const i = this.queue.indexOf(t);
    if (i >= 0) this.queue.splice(i, 1);
    this.cancelledTransfers++;
    this.cancelledSentBytes += t.sentBytes;
    // A packet in flight is accounted when it lands (see onPacketDone).
    if (this.curTransfer !== t && this.latencyFor !== t) this.recordTransfer(t, 'cancelled');
    return true;
  }

  /** Changes the priority of a queued or running transfer; takes effect at the next packet boundary. */
  reprioritize(t: Transfer, priority: number): void {
    if (t.state === 'queued' || t.state === 'active') t.priority = priority;
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
    this.startPacket(t);
  }

  /** Handler of `link.packetDone` (or the flow completion in the DRAM share). */
  onPacketDone(): void {
    const t = this.curTransfer;
    if (!t) throw new SimError('packet done while idle', this.sched.now, `link ${this.name}`);
    const bytes = this.curBytes;
    this.curTransfer = null;
    this.bytesMoved += bytes;
    t.sentBytes += bytes;
    this.sink?.onPacket?.({ link: this.name, transferId: t.id, label: t.label, category: t.category, bytes, startNs: this.curStartNs, endNs: this.sched.now });
    if (t.state === 'cancelled') {
      this.cancelledSentBytes += bytes;
      this.recordTransfer(t, 'cancelled');
    } else if (t.sentBytes === t.bytes) {
      t.state = 'done';
      t.doneNs = this.sched.now;
      const i = this.queue.indexOf(t);
      if (i >= 0) this.queue.splice(i, 1);
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
    const queue = this.queue;
    if (queue.length === 0) return;
    let best = queue[0]!;
    for (let i = 1; i < queue.length; i++) {
      const t = queue[i]!;
      if (t.priority < best.priority || (t.priority === best.priority && t.seq < best.seq)) best = t;
    }
    if (this.busySinceNs < 0) this.busySinceNs = this.sched.now;
    if (best.state === 'queued') {
      best.state = 'active';
      best.startNs = this.sched.now;
    }
    if (!best.latencyPaid && this.latencyNs > 0) {
      this.latencyFor = best;
      this.sched.schedule((this.sched.now + this.latencyNs) as Ns, this.latencyDoneEvent, EventPriority.completion);
      return;
    }
    best.latencyPaid = true;
    this.startPacket(best);
  }

  private startPacket(t: Transfer): void {
    const bytes = Math.min(this.packetBytes, t.bytes - t.sentBytes);
    this.curTransfer = t;
    this.curBytes = bytes;
    this.curStartNs = this.sched.now;
    if (this.dram) {
      this.dram.start(bytes, this.bytesPerSec, this.packetDoneCallback);
    } else {
      const at = (this.sched.now + bytesToNs(bytes, this.bytesPerSec)) as Ns;
      this.sched.schedule(at, this.packetDoneEvent, EventPriority.completion);
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
    this.sink?.onTransfer?.({
      link: this.name,
      id: t.id,
      label: t.label,
      category: t.category,
      bytes: t.bytes,
      priority: t.priority,
      submitNs: t.submitNs,
      startNs: t.startNs === -1 ? this.sched.now : t.startNs,
      endNs: this.sched.now,
      outcome,
      sentBytes: t.sentBytes,
    });
  }
}
