/**
 * What a PCIe link (`pcie-link.ts`) is given and hands back: a transfer's spec and its record,
 * the link's options, the run group that links share when their DMA does not draw on a DRAM
 * share, and the link's queue of pending transfers (most urgent, removal) and the records it
 * reports. Kept apart so the link's file holds only its packet and run scheduling.
 */
import type { Ns } from '../kernel/time.ts';
import type { PacketRecord, TraceSink, TransferRecord } from '../observe/trace-sink.ts';
import type { Scheduler } from '../kernel/simulation.ts';
import type { LinkName, ResourceEvent } from './events.ts';
import type { ExclusiveHolder, ExclusiveLock, FluidShare } from './fluid-share.ts';

export type TransferState = 'queued' | 'active' | 'done' | 'cancelled';

export interface TransferSpec {
  readonly bytes: number;
  /** Lower is more urgent. */
  readonly priority: number;
  readonly label: string;
  readonly category: string;
  /** Called once when the last byte has arrived. */
  readonly onDone?: (t: Transfer) => void;
  /** The submitter's own number for this transfer (e.g. the expert it carries); default −1. */
  readonly tag?: number;
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
  readonly tag: number;
}

export interface PcieLinkOptions {
  readonly name: LinkName;
  readonly bytesPerSec: number;
  readonly latencyNs: number;
  readonly packetBytes: number;
  readonly sched: Scheduler<ResourceEvent>;
  readonly dram?: FluidShare;
  readonly sink?: TraceSink;
  /** Send back-to-back packets as one run (default true; false: one event per packet, the reference the runs are tested against). */
  readonly packetRuns?: boolean;
  /** Without `dram`: the group of links whose runs exclude each other (default: this link alone). */
  readonly runGroup?: LinkRunGroup;
}

/**
 * The claim on running that links share when their DMA does not draw on a DRAM share (which
 * otherwise arbitrates): at most one link of a group runs, and only while the others are idle
 * — any activity of another link splits the run, so simultaneous completions on the two links
 * keep the order one event per packet gives them.
 */
export class LinkRunGroup implements ExclusiveLock {
  private holder: ExclusiveHolder | null = null;
  tryExclusive(holder: ExclusiveHolder): boolean {
    if (this.holder !== null) return false;
    this.holder = holder;
    return true;
  }
  releaseExclusive(holder: ExclusiveHolder): void {
    if (this.holder === holder) this.holder = null;
  }
  interrupt(holder: ExclusiveHolder): void {
    const h = this.holder;
    if (h !== null && h !== holder) {
      this.holder = null;
      h.materialize();
    }
  }
}

/** The most urgent pending transfer (lowest priority, then oldest); `queue` is not empty. */
export function bestTransfer(queue: readonly Transfer[]): Transfer {
  let best = queue[0]!;
  for (let i = 1; i < queue.length; i++) {
    const t = queue[i]!;
    if (t.priority < best.priority || (t.priority === best.priority && t.seq < best.seq)) best = t;
  }
  return best;
}

/**
 * Removes `t` from the pending transfers: the last one takes its place (the queue has no
 * order: `bestTransfer` picks by priority, then submission), so nothing is shifted or allocated.
 */
export function unqueue(queue: Transfer[], t: Transfer): void {
  const i = queue.indexOf(t);
  if (i < 0) return;
  const last = queue.pop()!;
  if (i < queue.length) queue[i] = last;
}

/** What the trace sink is told of a transfer that ended at `nowNs` (done or cancelled). */
export function transferRecord(link: LinkName, t: Transfer, nowNs: Ns, outcome: 'done' | 'cancelled'): TransferRecord {
  return {
    link,
    id: t.id,
    label: t.label,
    category: t.category,
    bytes: t.bytes,
    priority: t.priority,
    submitNs: t.submitNs,
    startNs: t.startNs === -1 ? nowNs : t.startNs,
    endNs: nowNs,
    outcome,
    sentBytes: t.sentBytes,
  };
}

/** What the trace sink is told of one packet of `t` on the wire from `startNs` to `endNs`. */
export function packetRecord(link: LinkName, t: Transfer, bytes: number, startNs: Ns, endNs: Ns): PacketRecord {
  return { link, transferId: t.id, label: t.label, category: t.category, bytes, startNs, endNs };
}
