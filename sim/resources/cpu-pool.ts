/**
 * A pool of CPU cores computing attention (and optionally experts).
 *
 * A task asks for `cores` cores and has a FLOP-bound time `computeNs` (on those cores) and
 * `bytes` of host-DRAM traffic. Its duration is max(computeNs, bytes / its DRAM rate), where
 * the DRAM rate is its share of the host-DRAM `FluidShare`, capped at what its cores can draw
 * (cores × per-core bandwidth) and at the rate that would make it exactly FLOP-bound
 * (bytes / computeNs): a task never finishes before its FLOPs allow, and slows down when DMA
 * and other tasks saturate DRAM. Tasks start in FIFO order when enough cores are free
 * (head-of-line blocking is intended: attention tasks are issued in pipeline order).
 */
import { SimError } from '../kernel/errors.ts';
import { EventPriority, type Scheduler } from '../kernel/simulation.ts';
import type { Ns } from '../kernel/time.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import type { ResourceEvent } from './events.ts';
import type { FluidShare } from './fluid-share.ts';

export interface CpuTaskSpec {
  readonly cores: number;
  readonly computeNs: Ns;
  readonly bytes: number;
  readonly label: string;
  readonly category: string;
  readonly onDone?: () => void;
}

interface RunningTask {
  readonly id: number;
  readonly spec: CpuTaskSpec;
  readonly startNs: Ns;
  readonly coreIds: number[];
}

export interface CpuPoolOptions {
  readonly name?: string;
  readonly cores: number;
  readonly perCoreBytesPerSec: number;
  readonly sched: Scheduler<ResourceEvent>;
  readonly dram: FluidShare;
  readonly sink?: TraceSink;
}

export class CpuPool {
  readonly name: string;
  readonly cores: number;
  private readonly perCoreBytesPerSec: number;
  private readonly sched: Scheduler<ResourceEvent>;
  private readonly dram: FluidShare;
  private readonly sink: TraceSink | undefined;
  private readonly queue: CpuTaskSpec[] = [];
  private readonly running = new Map<number, RunningTask>();
  private readonly coreFree: boolean[];
  private freeCores: number;
  private nextId = 0;
  /** Σ over completed tasks of cores × duration. */
  busyCoreNs = 0;
  tasks = 0;

  constructor(o: CpuPoolOptions) {
    if (!(o.cores >= 1) || !Number.isInteger(o.cores))
      throw new RangeError(`cpu cores must be an integer ≥ 1, got ${o.cores}`);
    // Checked here, not when the first task with bytes fails in FluidShare.start with its cores taken.
    if (!(o.perCoreBytesPerSec > 0))
      throw new RangeError(`cpu per-core bandwidth must be > 0 B/s, got ${o.perCoreBytesPerSec}`);
    this.name = o.name ?? 'cpu';
    this.cores = o.cores;
    this.perCoreBytesPerSec = o.perCoreBytesPerSec;
    this.sched = o.sched;
    this.dram = o.dram;
    this.sink = o.sink;
    this.coreFree = Array.from({ length: o.cores }, () => true);
    this.freeCores = o.cores;
  }

  get busyCores(): number {
    return this.cores - this.freeCores;
  }

  get queued(): number {
    return this.queue.length;
  }

  submit(spec: CpuTaskSpec): void {
    if (!(spec.cores >= 1 && spec.cores <= this.cores)) {
      throw new SimError(`cpu task needs ${spec.cores} cores (pool has ${this.cores})`, this.sched.now, this.name);
    }
    // An integer computeNs: a fractional one would only fail when scheduled, with the task's cores taken.
    if (!(spec.bytes >= 0) || !(spec.computeNs >= 0) || !Number.isSafeInteger(spec.computeNs)) {
      throw new SimError(
        `cpu task needs bytes ≥ 0 and an integer computeNs ≥ 0 (got ${spec.bytes}, ${spec.computeNs})`,
        this.sched.now,
        this.name,
      );
    }
    this.queue.push(spec);
    this.pump();
  }

  /** Handler of `cpu.taskDone`. */
  onTaskDone(taskId: number): void {
    const t = this.running.get(taskId);
    if (!t) throw new SimError(`unknown cpu task ${taskId}`, this.sched.now, this.name);
    this.running.delete(taskId);
    for (const c of t.coreIds) this.coreFree[c] = true;
    this.freeCores += t.coreIds.length;
    this.busyCoreNs += (this.sched.now - t.startNs) * t.coreIds.length;
    this.tasks++;
    this.sink?.onCpuTask?.({
      pool: this.name,
      label: t.spec.label,
      category: t.spec.category,
      cores: t.coreIds.length,
      firstCore: t.coreIds[0]!,
      startNs: t.startNs,
      endNs: this.sched.now,
    });
    this.pump();
    t.spec.onDone?.();
  }

  /** Busy core-ns including running tasks up to now. */
  busyCoreTimeNs(): number {
    let b = this.busyCoreNs;
    for (const t of this.running.values()) b += (this.sched.now - t.startNs) * t.coreIds.length;
    return b;
  }

  private pump(): void {
    while (this.queue.length > 0 && this.queue[0]!.cores <= this.freeCores) {
      const spec = this.queue.shift()!;
      const id = this.nextId++;
      const coreIds: number[] = [];
      for (let c = 0; c < this.cores && coreIds.length < spec.cores; c++) {
        if (this.coreFree[c]) {
          this.coreFree[c] = false;
          coreIds.push(c);
        }
      }
      this.freeCores -= spec.cores;
      this.running.set(id, { id, spec, startNs: this.sched.now, coreIds });
      if (spec.bytes > 0) {
        const coreCap = spec.cores * this.perCoreBytesPerSec;
        const flopCap = spec.computeNs > 0 ? (spec.bytes * 1e9) / spec.computeNs : Infinity;
        this.dram.start(spec.bytes, Math.min(coreCap, flopCap), () => this.onTaskDone(id));
      } else {
        this.sched.post(
          (this.sched.now + spec.computeNs) as Ns,
          { kind: 'cpu.taskDone', taskId: id },
          EventPriority.completion,
        );
      }
    }
  }
}
