/**
 * The storage link: reads from an NVMe drive into host DRAM (the SSD tier's third link, beside
 * the two PCIe directions). A drive is not a pipe with one latency: it keeps many commands in
 * flight, each paying a per-request latency that depends on how deep the queue is, while the
 * bytes come off the flash at the drive's sequential rate.
 *
 * - A read's bytes are rounded up to the drive's read granularity (the page / LBA unit: a read
 *   of 5 000 B moves 8 192 B at 4 KiB granularity), so bytes moved are device bytes.
 * - At most `maxQueueDepth` reads are issued at once; more wait, most urgent first (lower
 *   `priority`, then submission order).
 * - An issued read first pays its latency: the drive profile's (queue depth, latency) table
 *   interpolated linearly at the queue depth it was issued at (the reads outstanding, itself
 *   included), clamped to the table's ends. Latencies of issued reads overlap each other.
 * - Then its bytes cross one data channel at the sequential read rate, one read at a time, the
 *   most urgent ready read first (non-preemptive). Data time = ⌈bytes / rate⌉ ns. With deep
 *   queues the latencies hide behind other reads' data, as on a real drive; 4 KiB reads at
 *   depth q reach q / latency(q) IOPS (Little's law, how the profiles' tables were derived).
 * - A read can be cancelled at any stage; in its data phase it stops at once and the bytes
 *   already read (⌊elapsed · rate⌋) count as cancelled-sent bytes.
 *
 * Accounting (as the PCIe link): `bytesMoved = completedBytes + cancelledSentBytes` at every
 * instant (a read's bytes count when its data phase ends or is cut). Each read is reported to
 * the sink as one packet (its data phase, when it moved bytes) and one transfer record.
 */
import { SimError } from '../kernel/errors.ts';
import { EventPriority, type EventHandle, type Scheduler } from '../kernel/simulation.ts';
import { bytesToNs, ceilNs, type Ns } from '../kernel/time.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import type { StorageEvent } from './events.ts';

export type NvmeReadState = 'queued' | 'latency' | 'ready' | 'active' | 'done' | 'cancelled';

export interface NvmeRead {
  readonly id: number;
  /** Device bytes: the requested bytes rounded up to the read granularity. */
  readonly bytes: number;
  readonly label: string;
  readonly category: string;
  readonly submitNs: Ns;
  priority: number;
  state: NvmeReadState;
  /** Queue depth it was issued at (−1 before issue) and its latency. */
  queueDepth: number;
  latencyNs: Ns;
  issueNs: Ns | -1;
  /** Start of its data phase (−1 before). */
  startNs: Ns | -1;
  doneNs: Ns | -1;
  sentBytes: number;
  readonly seq: number;
  readonly tag: number;
  onDone: ((r: NvmeRead) => void) | undefined;
  handle: EventHandle | null;
}

export interface NvmeLinkOptions {
  readonly bytesPerSec: number;
  /** (queue depth, latency ns) points, increasing depth. */
  readonly latencyNsByQueueDepth: readonly (readonly [number, number])[];
  readonly granularityBytes: number;
  readonly maxQueueDepth: number;
  readonly sched: Scheduler<StorageEvent>;
  readonly sink?: TraceSink;
}

/** Pure: a read's latency at queue depth `qd`, linear between the table's points, clamped at its ends. */
export function latencyAtDepth(table: readonly (readonly [number, number])[], qd: number): Ns {
  const first = table[0];
  if (!first) throw new RangeError('nvme: empty latency table');
  if (qd <= first[0]) return ceilNs(first[1]);
  for (let i = 1; i < table.length; i++) {
    const [q1, l1] = table[i]!;
    if (qd <= q1) {
      const [q0, l0] = table[i - 1]!;
      return ceilNs(l0 + ((l1 - l0) * (qd - q0)) / (q1 - q0));
    }
  }
  return ceilNs(table[table.length - 1]![1]);
}

/** Pure: device bytes of a read of `bytes` at `granularity` (rounded up to whole units). */
export const deviceBytes = (bytes: number, granularity: number): number => Math.ceil(bytes / granularity) * granularity;

export class NvmeLink {
  readonly name = 'nvme';
  readonly bytesPerSec: number;
  readonly granularityBytes: number;
  readonly maxQueueDepth: number;
  private readonly table: readonly (readonly [number, number])[];
  private readonly sched: Scheduler<StorageEvent>;
  private readonly sink: TraceSink | undefined;
  private readonly waiting: NvmeRead[] = [];
  private readonly ready: NvmeRead[] = [];
  private readonly inLatency = new Map<number, NvmeRead>();
  private active: NvmeRead | null = null;
  private outstanding = 0;
  private nextId = 0;
  private nextSeq = 0;
  private readonly dataDoneEvent: StorageEvent = { kind: 'nvme.dataDone' };

  bytesMoved = 0;
  completedBytes = 0;
  cancelledSentBytes = 0;
  completedReads = 0;
  cancelledReads = 0;
  /** Time the data channel spent moving bytes. */
  busyNs = 0;
  /** Deepest queue any read was issued at. */
  peakQueueDepth = 0;

  constructor(o: NvmeLinkOptions) {
    if (!(o.bytesPerSec > 0)) throw new RangeError(`nvme: read bandwidth must be > 0 B/s, got ${o.bytesPerSec}`);
    if (!(o.granularityBytes >= 1)) throw new RangeError(`nvme: granularity must be ≥ 1 B, got ${o.granularityBytes}`);
    if (!(o.maxQueueDepth >= 1)) throw new RangeError(`nvme: maxQueueDepth must be ≥ 1, got ${o.maxQueueDepth}`);
    if (o.latencyNsByQueueDepth.length === 0) throw new RangeError('nvme: empty latency table');
    this.bytesPerSec = o.bytesPerSec;
    this.granularityBytes = Math.floor(o.granularityBytes);
    this.maxQueueDepth = Math.floor(o.maxQueueDepth);
    this.table = o.latencyNsByQueueDepth;
    this.sched = o.sched;
    this.sink = o.sink;
  }

  /** Reads issued and not yet done (in latency, ready or moving data). */
  get queueDepth(): number {
    return this.outstanding;
  }

  get idle(): boolean {
    return this.outstanding === 0 && this.waiting.length === 0;
  }

  /** Submits a read of `bytes` (rounded up to the granularity). */
  submitRead(
    bytes: number,
    priority: number,
    label: string,
    category: string,
    onDone?: (r: NvmeRead) => void,
    tag = -1,
  ): NvmeRead {
    if (!(bytes > 0) || !Number.isSafeInteger(bytes)) throw new RangeError(`nvme: read of ${bytes} B`);
    const r: NvmeRead = {
      id: this.nextId++,
      bytes: deviceBytes(bytes, this.granularityBytes),
      label,
      category,
      submitNs: this.sched.now,
      priority,
      state: 'queued',
      queueDepth: -1,
      latencyNs: 0 as Ns,
      issueNs: -1,
      startNs: -1,
      doneNs: -1,
      sentBytes: 0,
      seq: this.nextSeq++,
      tag,
      onDone,
      handle: null,
    };
    this.waiting.push(r);
    this.issueWaiting();
    return r;
  }

  /** Changes a pending read's priority (used at the next issue or channel choice). */
  reprioritize(r: NvmeRead, priority: number): void {
    if (r.state !== 'done' && r.state !== 'cancelled') r.priority = priority;
  }

  /** Cancels a read at any stage before done; in its data phase the bytes read so far count as sent. */
  cancel(r: NvmeRead): void {
    const now = this.sched.now;
    switch (r.state) {
      case 'done':
      case 'cancelled':
        return;
      case 'queued':
        remove(this.waiting, r);
        break;
      case 'latency':
        this.sched.cancel(r.handle!);
        this.inLatency.delete(r.id);
        this.outstanding--;
        break;
      case 'ready':
        remove(this.ready, r);
        this.outstanding--;
        break;
      case 'active': {
        this.sched.cancel(r.handle!);
        const elapsed = now - (r.startNs as number);
        r.sentBytes = Math.min(r.bytes, Math.floor((elapsed * this.bytesPerSec) / 1e9));
        this.bytesMoved += r.sentBytes;
        this.cancelledSentBytes += r.sentBytes;
        this.busyNs += elapsed;
        this.active = null;
        this.outstanding--;
        if (r.sentBytes > 0) this.reportPacket(r, r.sentBytes);
        break;
      }
    }
    r.state = 'cancelled';
    r.handle = null;
    this.cancelledReads++;
    this.report(r, 'cancelled');
    this.issueWaiting();
    this.pumpChannel();
  }

  /** Handler of `nvme.latencyDone`: the read's command latency has elapsed; its data may flow. */
  onLatencyDone(readId: number): void {
    const r = this.inLatency.get(readId);
    if (!r) throw new SimError(`latency done for unknown read ${readId}`, this.sched.now, 'nvme');
    this.inLatency.delete(readId);
    r.handle = null;
    r.state = 'ready';
    this.ready.push(r);
    this.pumpChannel();
  }

  /** Handler of `nvme.dataDone`: the active read's bytes are in host memory. */
  onDataDone(): void {
    const r = this.active;
    if (!r) throw new SimError('data done while idle', this.sched.now, 'nvme');
    const now = this.sched.now;
    this.active = null;
    this.outstanding--;
    r.handle = null;
    r.sentBytes = r.bytes;
    r.state = 'done';
    r.doneNs = now;
    this.busyNs += now - (r.startNs as number);
    this.bytesMoved += r.bytes;
    this.completedBytes += r.bytes;
    this.completedReads++;
    this.reportPacket(r, r.bytes);
    this.report(r, 'done');
    this.issueWaiting();
    this.pumpChannel();
    r.onDone?.(r);
  }

  /** Busy time of the data channel including the read in progress. */
  busyTimeNs(): number {
    const a = this.active;
    return this.busyNs + (a ? this.sched.now - (a.startNs as number) : 0);
  }

  private issueWaiting(): void {
    while (this.outstanding < this.maxQueueDepth && this.waiting.length > 0) {
      const r = takeMostUrgent(this.waiting);
      this.outstanding++;
      if (this.outstanding > this.peakQueueDepth) this.peakQueueDepth = this.outstanding;
      r.state = 'latency';
      r.queueDepth = this.outstanding;
      r.latencyNs = latencyAtDepth(this.table, this.outstanding);
      r.issueNs = this.sched.now;
      this.inLatency.set(r.id, r);
      const ev: StorageEvent = { kind: 'nvme.latencyDone', readId: r.id };
      r.handle = this.sched.schedule((this.sched.now + r.latencyNs) as Ns, ev, EventPriority.completion);
    }
  }

  private pumpChannel(): void {
    if (this.active || this.ready.length === 0) return;
    const r = takeMostUrgent(this.ready);
    r.state = 'active';
    r.startNs = this.sched.now;
    this.active = r;
    const at = (this.sched.now + bytesToNs(r.bytes, this.bytesPerSec)) as Ns;
    r.handle = this.sched.schedule(at, this.dataDoneEvent, EventPriority.completion);
  }

  private reportPacket(r: NvmeRead, bytes: number): void {
    this.sink?.onPacket?.({
      link: this.name,
      transferId: r.id,
      label: r.label,
      category: r.category,
      bytes,
      startNs: r.startNs as Ns,
      endNs: this.sched.now,
    });
  }

  private report(r: NvmeRead, outcome: 'done' | 'cancelled'): void {
    this.sink?.onTransfer?.({
      link: this.name,
      id: r.id,
      label: r.label,
      category: r.category,
      bytes: r.bytes,
      priority: r.priority,
      submitNs: r.submitNs,
      startNs: r.startNs === -1 ? this.sched.now : r.startNs,
      endNs: this.sched.now,
      outcome,
      sentBytes: r.sentBytes,
    });
  }
}

/** Removes and returns the most urgent read (lowest priority, then oldest); the list is unordered. */
function takeMostUrgent(list: NvmeRead[]): NvmeRead {
  let bi = 0;
  for (let i = 1; i < list.length; i++) {
    const a = list[i]!;
    const b = list[bi]!;
    if (a.priority < b.priority || (a.priority === b.priority && a.seq < b.seq)) bi = i;
  }
  const best = list[bi]!;
  const last = list.pop()!;
  if (bi < list.length) list[bi] = last;
  return best;
}

function remove(list: NvmeRead[], r: NvmeRead): void {
  const i = list.indexOf(r);
  if (i < 0) return;
  const last = list.pop()!;
  if (i < list.length) list[i] = last;
}
