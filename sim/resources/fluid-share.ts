/**
 * A bandwidth shared fluidly by concurrent flows: host DRAM, drawn on by H2D/D2H DMA and by
 * CPU attention (DESIGN §4). Each flow has a number of bytes and a cap on its own rate, its
 * demand (a PCIe link cannot go faster than its bandwidth; a CPU task cannot draw more than its
 * cores can, nor faster than its FLOPs let it consume bytes). When the demands fit the
 * capacity every flow runs at its cap and nobody is rescheduled. When they exceed it, every
 * flow gets a share **in proportion to its demand**: rate = cap × capacity / Σ caps, the same
 * slowdown factor for all (DESIGN §4: the memory controller serves outstanding requests as they
 * come, so a flow's share follows the requests it issues). A max-min fair share would instead
 * leave a 25 GB/s DMA flow untouched beside a 150 GB/s CPU demand, while MoE-Lens measured weight
 * transfers slowing from ~5 s to ~6 s per pass under heavy CPU attention (arXiv 2504.09345 §8,
 * "The Bandwidth Competition between CPU Attention and CPU-GPU Weight Transfer"). The share is
 * tested on hand-computed cases (test/unit/resources-fluid.test.ts); how much it slows the
 * transfers in MoE-Lens's setting is a judged result (experiments/moe-lens/FIDELITY.md). Rates
 * are recomputed whenever a flow starts or finishes; flows whose rate changes get their
 * completion event rescheduled.
 *
 * Progress is tracked in float bytes between events; completion times are rounded up to
 * integer ns once per (re)scheduling.
 */
import { SimError } from '../kernel/errors.ts';
import { EventPriority, type EventHandle, type Scheduler } from '../kernel/simulation.ts';
import { ceilNs, type Ns } from '../kernel/time.ts';
import type { ResourceEvent } from './events.ts';

/**
 * A user that runs alone in the share without a flow (a PCIe transfer of many packets as one
 * event, see `PcieLink`): it must turn its current packet into a real flow (`injectFlow`) when
 * anything else is about to happen in the share.
 */
export interface ExclusiveHolder {
  materialize(): void;
}

/** Who grants an exclusive claim (`FluidShare`, or a `LinkRunGroup` when DMA does not share DRAM). */
export interface ExclusiveLock {
  tryExclusive(holder: ExclusiveHolder, capBytesPerSec: number): boolean;
  releaseExclusive(holder: ExclusiveHolder): void;
  /** `holder` is about to act on the shared resource: another holder's claim ends (it materializes). */
  interrupt(holder: ExclusiveHolder): void;
}

interface Flow {
  /** Index of this record in `records`; the `flowId` of its completion event. */
  readonly id: number;
  /** The completion event of this record, built once: it names the record, not one use of it. */
  readonly doneEvent: ResourceEvent;
  /** False while the record is on the free list. */
  running: boolean;
  remainingBytes: number;
  capBytesPerSec: number;
  rateBytesPerSec: number;
  handle: EventHandle | null;
  onDone: (() => void) | null;
}

export class FluidShare implements ExclusiveLock {
  /** Running flows in start order (a handful at most: a plain array beats a Map here). */
  private readonly flows: Flow[] = [];
  /**
   * Every flow record ever made, by id, and the ids of those not running. A finished flow's
   * record (and its completion event) is reused by the next flow to start: a DMA stream starts
   * one flow per packet, so this saves two allocations per event. Reuse is safe because a
   * record has at most one live completion event: a reschedule cancels the previous one, and a
   * record is only freed once its event has run.
   */
  private readonly records: Flow[] = [];
  private readonly free: number[] = [];
  private lastUpdateNs = 0 as Ns;
  /** Bytes served so far (integral of the allocated rates). */
  private servedBytes = 0;
  /** Time during which demand exceeded capacity. */
  private contendedNs = 0;
  private contended = false;
  /** The user running alone without a flow, if any (see `ExclusiveHolder`). */
  private exclusive: ExclusiveHolder | null = null;

  constructor(
    readonly name: string,
    readonly capacityBytesPerSec: number,
    private readonly sched: Scheduler<ResourceEvent>,
  ) {
    if (!(capacityBytesPerSec > 0))
      throw new RangeError(`${name}: capacity must be > 0 B/s, got ${capacityBytesPerSec}`);
  }

  get activeFlows(): number {
    return this.flows.length;
  }

  /**
   * Starts a flow of `bytes` capped at `capBytesPerSec`; `onDone` runs when its last byte is
   * served. Returns the flow's id (valid while it runs: ids of finished flows are reused).
   */
  start(bytes: number, capBytesPerSec: number, onDone: () => void): number {
    if (!(bytes > 0)) throw new RangeError(`${this.name}: flow bytes must be > 0, got ${bytes}`);
    if (!(capBytesPerSec > 0)) throw new RangeError(`${this.name}: flow cap must be > 0, got ${capBytesPerSec}`);
    if (this.exclusive) this.materializeExclusive();
    this.advance();
    const f = this.newFlow(bytes, capBytesPerSec, onDone);
    this.flows.push(f);
    if (this.flows.length === 1) {
      // Alone (the common case of a DMA stream): it runs at its cap unless that exceeds the
      // capacity, which the general rebalance handles.
      this.contended = capBytesPerSec > this.capacityBytesPerSec * (1 + 1e-12);
      if (!this.contended) {
        this.setRate(f, capBytesPerSec);
        return f.id;
      }
    }
    this.rebalance();
    return f.id;
  }

  /**
   * Claims the share for a user that will run alone at `capBytesPerSec` without a flow per
   * packet. Granted only when no flow runs, nobody else holds it and the cap fits the capacity
   * (so the user's rate is its cap and stays so until someone else starts: then the share calls
   * `holder.materialize()` first).
   */
  tryExclusive(holder: ExclusiveHolder, capBytesPerSec: number): boolean {
    if (this.flows.length > 0 || this.exclusive !== null) return false;
    if (capBytesPerSec > this.capacityBytesPerSec * (1 + 1e-12)) return false;
    this.exclusive = holder;
    return true;
  }

  interrupt(holder: ExclusiveHolder): void {
    if (this.exclusive !== null && this.exclusive !== holder) this.materializeExclusive();
  }

  /** Ends an exclusive claim (the holder finished without materializing). */
  releaseExclusive(holder: ExclusiveHolder): void {
    if (this.exclusive === holder) this.exclusive = null;
  }

  /**
   * Accounts one packet an exclusive holder moved alone: `bytes` at `rate` for `dtNs` — the
   * bytes served exactly as a flow started and finished alone would have added them.
   */
  addServed(bytes: number, rate: number, dtNs: number): void {
    this.servedBytes += Math.min(bytes, (rate * dtNs) / 1e9);
  }

  /** `addServed` `n` times (the same additions, in order). */
  addServedRepeated(bytes: number, rate: number, dtNs: number, n: number): void {
    const v = Math.min(bytes, (rate * dtNs) / 1e9);
    let s = this.servedBytes;
    for (let i = 0; i < n; i++) s += v;
    this.servedBytes = s;
  }

  /**
   * The exclusive holder's packet in flight becomes a real flow, exactly as if it had been
   * started alone at `startNs` (≤ now) — the last time the share was touched — and nothing had
   * touched the share since; its completion event takes the kernel `seq` of the holder's own
   * (see `Simulation.schedule`). Ends the claim.
   */
  injectFlow(bytes: number, capBytesPerSec: number, onDone: () => void, startNs: Ns, seq: number): void {
    if (this.flows.length > 0) throw new SimError('flow injected into a busy share', this.sched.now, this.name);
    this.exclusive = null;
    this.lastUpdateNs = startNs;
    this.contended = false;
    const f = this.newFlow(bytes, capBytesPerSec, onDone);
    this.flows.push(f);
    f.rateBytesPerSec = capBytesPerSec;
    f.handle = this.sched.schedule(
      (startNs + ceilNs((bytes / capBytesPerSec) * 1e9)) as Ns,
      f.doneEvent,
      EventPriority.completion,
      startNs,
      seq,
    );
  }

  private materializeExclusive(): void {
    const h = this.exclusive!;
    this.exclusive = null;
    h.materialize();
  }

  private newFlow(bytes: number, capBytesPerSec: number, onDone: () => void): Flow {
    let f: Flow;
    const freeId = this.free.pop();
    if (freeId === undefined) {
      const id = this.records.length;
      f = {
        id,
        doneEvent: { kind: 'fluid.flowDone', flowId: id },
        running: false,
        remainingBytes: 0,
        capBytesPerSec: 0,
        rateBytesPerSec: 0,
        handle: null,
        onDone: null,
      };
      this.records.push(f);
    } else {
      f = this.records[freeId]!;
    }
    f.running = true;
    f.remainingBytes = bytes;
    f.capBytesPerSec = capBytesPerSec;
    f.rateBytesPerSec = 0;
    f.handle = null;
    f.onDone = onDone;
    return f;
  }

  /** Handler of `fluid.flowDone`. */
  onFlowDone(flowId: number): void {
    const flow = this.records[flowId];
    if (!flow || !flow.running) throw new SimError(`unknown flow ${flowId}`, this.sched.now, this.name);
    const flows = this.flows;
    this.advance();
    // Removed in place, keeping start order (`splice` would allocate the array of removed items).
    let i = flows.indexOf(flow);
    for (; i < flows.length - 1; i++) flows[i] = flows[i + 1]!;
    flows.pop();
    if (flows.length > 0) this.rebalance();
    else this.contended = false;
    const onDone = flow.onDone!;
    // Freed before `onDone`, which often starts the next flow (the next packet) on this record.
    flow.running = false;
    flow.handle = null;
    flow.onDone = null;
    this.free.push(flow.id);
    onDone();
  }

  /** Bytes served so far, including the progress of running flows up to now. */
  bytesServed(): number {
    if (this.exclusive) this.materializeExclusive();
    this.advance();
    return this.servedBytes;
  }

  /** Total time during which the flows' demand exceeded the capacity. */
  contendedTimeNs(): number {
    if (this.exclusive) this.materializeExclusive();
    this.advance();
    return this.contendedNs;
  }

  private advance(): void {
    const now = this.sched.now;
    const dtNs = now - this.lastUpdateNs;
    if (dtNs > 0) {
      const flows = this.flows;
      for (let i = 0; i < flows.length; i++) {
        const f = flows[i]!;
        const progressed = Math.min(f.remainingBytes, (f.rateBytesPerSec * dtNs) / 1e9);
        f.remainingBytes -= progressed;
        this.servedBytes += progressed;
      }
      if (this.contended) this.contendedNs += dtNs;
    }
    this.lastUpdateNs = now;
  }

  /** Every flow at its cap when the demands fit; otherwise shares proportional to demand. Reschedules flows whose rate changed. */
  private rebalance(): void {
    let demand = 0;
    for (const f of this.flows) demand += f.capBytesPerSec;
    this.contended = demand > this.capacityBytesPerSec * (1 + 1e-12);
    if (!this.contended) {
      // Fast path (the common case): everyone runs at its cap.
      for (const f of this.flows) this.setRate(f, f.capBytesPerSec);
      return;
    }
    // Oversubscribed: every flow slowed by the same factor capacity / demand (< 1).
    const factor = this.capacityBytesPerSec / demand;
    for (const f of this.flows) this.setRate(f, f.capBytesPerSec * factor);
  }

  private setRate(f: Flow, rate: number): void {
    if (rate === f.rateBytesPerSec && f.handle !== null) return;
    f.rateBytesPerSec = rate;
    if (f.handle) this.sched.cancel(f.handle);
    const at = (this.sched.now + ceilNs((f.remainingBytes / rate) * 1e9)) as Ns;
    f.handle = this.sched.schedule(at, f.doneEvent, EventPriority.completion);
  }
}
