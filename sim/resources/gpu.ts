/**
 * The GPU's compute engine with N streams.
 *
 * Kernels of one stream run in submission order. By default (DESIGN §4) compute kernels of
 * different streams serialise on the SMs: the engine runs one kernel at a time, choosing among
 * the heads of idle streams the one submitted first. With `concurrentStreams`, kernels of
 * different streams overlap fully (an idealisation for policies that want it). Copy engines
 * are separate resources (`PcieLink`).
 *
 * Busy time is accounted per stream and for the engine as a whole; blocked-on-data time is an
 * executor notion (the executor knows why the GPU has nothing to run) and is reported through
 * the trace sink's `onBlocked`.
 */
import { SimError } from '../kernel/errors.ts';
import { EventPriority, type Scheduler } from '../kernel/simulation.ts';
import type { Ns } from '../kernel/time.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import type { ResourceEvent } from './events.ts';

export interface KernelSpec {
  readonly stream: number;
  readonly durationNs: Ns;
  readonly label: string;
  readonly category: string;
  readonly onDone?: () => void;
}

interface Running {
  readonly spec: KernelSpec;
  readonly startNs: Ns;
}

export interface GpuOptions {
  readonly streams: number;
  readonly concurrentStreams: boolean;
  readonly sched: Scheduler<ResourceEvent>;
  readonly sink?: TraceSink;
  readonly streamNames?: readonly string[];
}

export class Gpu {
  readonly streams: number;
  readonly concurrentStreams: boolean;
  private readonly sched: Scheduler<ResourceEvent>;
  private readonly sink: TraceSink | undefined;
  private readonly queues: { spec: KernelSpec; seq: number }[][];
  private readonly running: (Running | null)[];
  private runningCount = 0;
  private seq = 0;
  private readonly names: readonly string[];
  /** Each stream's completion event, built once (plain immutable data). */
  private readonly doneEvents: readonly ResourceEvent[];
  /** Busy ns per stream (completed kernels). */
  readonly busyNsByStream: number[];
  /** Busy ns per kernel category (completed kernels). */
  readonly busyNsByCategory = new Map<string, number>();
  /** Time during which at least one kernel ran. */
  private engineBusyNs = 0;
  private engineBusySince: Ns | -1 = -1;
  kernels = 0;

  constructor(o: GpuOptions) {
    if (!(o.streams >= 1) || !Number.isInteger(o.streams)) throw new RangeError(`gpu streams must be an integer ≥ 1, got ${o.streams}`);
    this.streams = o.streams;
    this.concurrentStreams = o.concurrentStreams;
    this.sched = o.sched;
    this.sink = o.sink;
    this.queues = Array.from({ length: o.streams }, () => []);
    this.running = Array.from({ length: o.streams }, () => null);
    this.busyNsByStream = Array.from({ length: o.streams }, () => 0);
    this.names = o.streamNames ?? Array.from({ length: o.streams }, (_, i) => `gpu.stream${i}`);
    this.doneEvents = Array.from({ length: o.streams }, (_, stream) => ({ kind: 'gpu.kernelDone', stream }));
  }

  streamName(stream: number): string {
    return this.names[stream] ?? `gpu.stream${stream}`;
  }

  /** Queues a kernel on its stream; `onDone` runs when it completes. */
  submit(spec: KernelSpec): void {
    if (!(spec.stream >= 0 && spec.stream < this.streams)) {
      throw new SimError(`no stream ${spec.stream} (have ${this.streams})`, this.sched.now, 'gpu');
    }
    // Checked here: a bad duration would otherwise fail in the kernel with the stream left marked running.
    if (!Number.isSafeInteger(spec.durationNs) || spec.durationNs < 0) {
      throw new SimError(`kernel ${spec.label} duration must be a non-negative integer of ns, got ${spec.durationNs}`, this.sched.now, 'gpu');
    }
    this.queues[spec.stream]!.push({ spec, seq: this.seq++ });
    this.pump();
  }

  /** True when no kernel runs and none is queued. */
  get idle(): boolean {
    return this.runningCount === 0 && this.queues.every((q) => q.length === 0);
  }

  /** Handler of `gpu.kernelDone`. */
  onKernelDone(stream: number): void {
    const r = this.running[stream];
    if (!r) throw new SimError(`kernel done on idle stream ${stream}`, this.sched.now, 'gpu');
    this.running[stream] = null;
    this.runningCount--;
    const dur = this.sched.now - r.startNs;
    this.busyNsByStream[stream]! += dur;
    this.busyNsByCategory.set(r.spec.category, (this.busyNsByCategory.get(r.spec.category) ?? 0) + dur);
    this.kernels++;
    if (this.runningCount === 0 && this.engineBusySince >= 0) {
      this.engineBusyNs += this.sched.now - this.engineBusySince;
      this.engineBusySince = -1;
    }
    this.sink?.onKernel?.({
      stream: this.streamName(stream),
      label: r.spec.label,
      category: r.spec.category,
      startNs: r.startNs,
      endNs: this.sched.now,
    });
    this.pump();
    r.spec.onDone?.();
  }

  /** Time during which at least one kernel ran, up to now. */
  busyTimeNs(): number {
    return this.engineBusyNs + (this.engineBusySince >= 0 ? this.sched.now - this.engineBusySince : 0);
  }

  private pump(): void {
    for (;;) {
      if (!this.concurrentStreams && this.runningCount > 0) return;
      let bestStream = -1;
      let bestSeq = Infinity;
      for (let s = 0; s < this.streams; s++) {
        if (this.running[s]) continue;
        const head = this.queues[s]![0];
        if (head && head.seq < bestSeq) {
          bestSeq = head.seq;
          bestStream = s;
        }
      }
      if (bestStream < 0) return;
      const { spec } = this.queues[bestStream]!.shift()!;
      this.running[bestStream] = { spec, startNs: this.sched.now };
      if (this.runningCount === 0) this.engineBusySince = this.sched.now;
      this.runningCount++;
      this.sched.post((this.sched.now + spec.durationNs) as Ns, this.doneEvents[bestStream]!, EventPriority.completion);
    }
  }
}
