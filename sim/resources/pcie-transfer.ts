/**
 * What a PCIe link (`pcie-link.ts`) is given and hands back: a transfer's spec and its record,
 * the link's options, and the run group that links share when their DMA does not draw on a DRAM
 * share. Kept apart so the link's file holds only its packet and run scheduling.
 */
import type { Ns } from '../kernel/time.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
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
