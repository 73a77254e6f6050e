/**
 * A bandwidth shared fluidly by concurrent flows: host DRAM, drawn on by H2D/D2H DMA and by
 * CPU attention (DESIGN §4). Each flow has a number of bytes and a cap on its own rate (a
 * PCIe link cannot go faster than its bandwidth; a CPU task cannot draw more than its cores
 * can). Rates are the max-min fair allocation of the capacity under those caps, recomputed
 * whenever a flow starts or finishes; flows whose rate changes get their completion event
 * rescheduled. When total demand fits, every flow runs at its cap and nobody is rescheduled.
 *
 * Progress is tracked in float bytes between events; completion times are rounded up to
 * integer ns once per (re)scheduling.
 */
import { SimError } from '../kernel/errors.ts';
import { EventPriority, type EventHandle, type Scheduler } from '../kernel/simulation.ts';
import { ceilNs, type Ns } from '../kernel/time.ts';
import type { ResourceEvent } from './events.ts';

interface Flow {
  readonly id: number;
  remainingBytes: number;
  readonly capBytesPerSec: number;
  rateBytesPerSec: number;
  handle: EventHandle | null;
  readonly onDone: () => void;
}

export class FluidShare {
  /** Running flows in start order (a handful at most: a plain array beats a Map here). */
  private readonly flows: Flow[] = [];
  private nextId = 0;
  private lastUpdateNs = 0 as Ns;
  /** Bytes served so far (integral of the allocated rates). */
  private servedBytes = 0;
  /** Time during which demand exceeded capacity. */
  private contendedNs = 0;
  private contended = false;

  constructor(
    readonly name: string,
    readonly capacityBytesPerSec: number,
    private readonly sched: Scheduler<ResourceEvent>,
  ) {
    if (!(capacityBytesPerSec > 0)) throw new RangeError(`${name}: capacity must be > 0 B/s, got ${capacityBytesPerSec}`);
  }

  get activeFlows(): number {
    return this.flows.length;
  }

  /** Starts a flow of `bytes` capped at `capBytesPerSec`; `onDone` runs when its last byte is served. */
  start(bytes: number, capBytesPerSec: number, onDone: () => void): number {
    if (!(bytes > 0)) throw new RangeError(`${this.name}: flow bytes must be > 0, got ${bytes}`);
    if (!(capBytesPerSec > 0)) throw new RangeError(`${this.name}: flow cap must be > 0, got ${capBytesPerSec}`);
    this.advance();
    const id = this.nextId++;
    this.flows.push({ id, remainingBytes: bytes, capBytesPerSec, rateBytesPerSec: 0, handle: null, onDone });
    this.rebalance();
    return id;
  }

  /** Handler of `fluid.flowDone`. */
  onFlowDone(flowId: number): void {
    const flows = this.flows;
    let i = 0;
    while (i < flows.length && flows[i]!.id !== flowId) i++;
    const flow = flows[i];
    if (!flow) throw new SimError(`unknown flow ${flowId}`, this.sched.now, this.name);
    this.advance();
    flows.splice(i, 1);
    if (flows.length > 0) this.rebalance();
    else this.contended = false;
    flow.onDone();
  }

  /** Bytes served so far, including the progress of running flows up to now. */
  bytesServed(): number {
    this.advance();
    return this.servedBytes;
  }

  /** Total time during which the flows' demand exceeded the capacity. */
  contendedTimeNs(): number {
    this.advance();
    return this.contendedNs;
  }

  private advance(): void {
    const now = this.sched.now;
    const dtNs = now - this.lastUpdateNs;
    if (dtNs > 0) {
      for (const f of this.flows) {
        const progressed = Math.min(f.remainingBytes, (f.rateBytesPerSec * dtNs) / 1e9);
        f.remainingBytes -= progressed;
        this.servedBytes += progressed;
      }
      if (this.contended) this.contendedNs += dtNs;
    }
    this.lastUpdateNs = now;
  }

  /** Max-min fair (water-filling) allocation under per-flow caps; reschedules flows whose rate changed. */
  private rebalance(): void {
    let demand = 0;
    for (const f of this.flows) demand += f.capBytesPerSec;
    this.contended = demand > this.capacityBytesPerSec * (1 + 1e-12);
    if (!this.contended) {
      // Fast path (the common case): everyone runs at its cap.
      for (const f of this.flows) this.setRate(f, f.capBytesPerSec);
      return;
    }
    const flows = [...this.flows].sort((a, b) => a.capBytesPerSec - b.capBytesPerSec || a.id - b.id);
    let capacity = this.capacityBytesPerSec;
    for (let i = 0; i < flows.length; i++) {
      const f = flows[i]!;
      const rate = Math.min(f.capBytesPerSec, capacity / (flows.length - i));
      capacity -= rate;
      this.setRate(f, rate);
    }
  }

  private setRate(f: Flow, rate: number): void {
    if (rate === f.rateBytesPerSec && f.handle !== null) return;
    f.rateBytesPerSec = rate;
    if (f.handle) this.sched.cancel(f.handle);
    const at = (this.sched.now + ceilNs((f.remainingBytes / rate) * 1e9)) as Ns;
    f.handle = this.sched.schedule(at, { kind: 'fluid.flowDone', flowId: f.id }, EventPriority.completion);
  }
}
