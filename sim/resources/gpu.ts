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
 *
 * Chains (`submitChain`, speed): kernels that run back to back with nothing to decide between
 * them (the serving executor's attention → router) are one completion event; each is still
 * accounted and traced on its own.
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
  /**
   * A chain: kernels that run back to back on this stream as one unit (`durationNs` is their
   * sum), accounted and traced each on its own. See `Gpu.submitChain`.
   */
  readonly parts?: readonly KernelPart[];
}

/** One kernel of a chain. */
export interface KernelPart {
  readonly durationNs: Ns;
  readonly label: string;
  readonly category: string;
}

/** The kernel running on a stream (one reused record per stream). */
interface RunningKernel {
  durationNs: Ns;
  label: string;
  category: string;
  onDone: (() => void) | undefined;
  parts: readonly KernelPart[] | undefined;
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
  /** Waiting kernels per stream, and their submission numbers (parallel arrays). */
  private readonly queues: KernelSpec[][];
  private readonly queueSeqs: number[][];
  private queued = 0;
  /**
   * The kernel running on each stream, in a record per stream reused for every kernel (its
   * spec's fields copied in), so a kernel started at once (`submitKernel`) allocates nothing;
   * `runningOn` says whether one runs.
   */
  private readonly running: RunningKernel[];
  private readonly runningOn: boolean[];
  private readonly startedNs: number[];
  private runningCount = 0;
  private seq = 0;
  private readonly names: readonly string[];
  /** Each stream's completion event, built once (plain immutable data). */
  private readonly doneEvents: readonly ResourceEvent[];
  /** Busy ns per stream (completed kernels). */
  readonly busyNsByStream: number[];
  /**
   * Busy ns per kernel category (completed kernels), in first-seen order. Kept as parallel
   * arrays searched by string identity (a handful of category literals) rather than a Map
   * updated per kernel; the Map is built when asked for.
   */
  private readonly catNames: string[] = [];
  private readonly catNs: number[] = [];
  get busyNsByCategory(): Map<string, number> {
    const m = new Map<string, number>();
    for (let i = 0; i < this.catNames.length; i++) m.set(this.catNames[i]!, this.catNs[i]!);
    return m;
  }
  /** Time during which at least one kernel ran. */
  private engineBusyNs = 0;
  private engineBusySince: Ns | -1 = -1;
  kernels = 0;

  constructor(o: GpuOptions) {
    if (!(o.streams >= 1) || !Number.isInteger(o.streams))
      throw new RangeError(`gpu streams must be an integer ≥ 1, got ${o.streams}`);
    this.streams = o.streams;
    this.concurrentStreams = o.concurrentStreams;
    this.sched = o.sched;
    this.sink = o.sink;
    this.queues = Array.from({ length: o.streams }, () => []);
    this.queueSeqs = Array.from({ length: o.streams }, () => []);
    this.running = Array.from({ length: o.streams }, () => ({
      durationNs: 0 as Ns,
      label: '',
      category: '',
      onDone: undefined,
      parts: undefined,
    }));
    this.runningOn = Array.from({ length: o.streams }, () => false);
    this.startedNs = Array.from({ length: o.streams }, () => 0);
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
    this.checkDuration(spec.label, spec.durationNs);
    const seq = this.seq++;
    if (this.startsNow(spec.stream)) {
      this.start(spec.stream, spec.durationNs, spec.label, spec.category, spec.onDone, spec.parts);
      return;
    }
    this.queues[spec.stream]!.push(spec);
    this.queueSeqs[spec.stream]!.push(seq);
    this.queued++;
    this.pump();
  }

  /**
   * Nothing waits and the engine (or, with concurrent streams, `stream`) is free: a kernel
   * submitted now starts now — what `pump` would choose, without queueing it first.
   */
  private startsNow(stream: number): boolean {
    return this.queued === 0 && (this.concurrentStreams ? !this.runningOn[stream] : this.runningCount === 0);
  }

  /**
   * `submit` of one kernel given by its fields: when it can start at once (the usual case of an
   * executor with one kernel at a time) no spec object is made.
   */
  submitKernel(stream: number, durationNs: Ns, label: string, category: string, onDone: () => void): void {
    if (this.tryStartNow(stream, durationNs, label, category, onDone, undefined)) return;
    this.submit({ stream, durationNs, label, category, onDone });
  }

  /** Starts a kernel at once, without a spec object, when `stream` may run it now and nothing is queued; false otherwise. */
  private tryStartNow(
    stream: number,
    durationNs: Ns,
    label: string,
    category: string,
    onDone: () => void,
    parts: readonly KernelPart[] | undefined,
  ): boolean {
    if (!(stream >= 0 && stream < this.streams && this.startsNow(stream))) return false;
    this.checkDuration(label, durationNs);
    this.seq++;
    this.start(stream, durationNs, label, category, onDone, parts);
    return true;
  }

  /**
   * Queues a chain: `parts` run back to back on `stream` as one unit, and `onDone` runs when the
   * last one completes. Busy time, kernel counts and trace spans are each part's, exactly as if
   * each part had been submitted when the one before it completed — provided nothing else could
   * have run between them: the caller submits nothing else meanwhile and, without
   * `concurrentStreams`, no other stream has queued work (a kernel queued on another stream
   * would have run between two parts submitted one at a time). The one completion event is
   * stamped with the time the last part would have been submitted, so it keeps its place among
   * simultaneous completions posted at other times.
   */
  submitChain(stream: number, parts: readonly KernelPart[], onDone: () => void): void {
    if (parts.length === 1) {
      const p = parts[0]!;
      this.submit({ stream, durationNs: p.durationNs, label: p.label, category: p.category, onDone });
      return;
    }
    let total = 0;
    for (const p of parts) {
      this.checkDuration(p.label, p.durationNs);
      total += p.durationNs;
    }
    if (this.tryStartNow(stream, total as Ns, parts[0]!.label, parts[0]!.category, onDone, parts)) return;
    this.submit({
      stream,
      durationNs: total as Ns,
      label: parts[0]!.label,
      category: parts[0]!.category,
      onDone,
      parts,
    });
  }

  /** Throws unless `durationNs` is a non-negative integer of ns. */
  private checkDuration(label: string, durationNs: number): void {
    if (!Number.isSafeInteger(durationNs) || durationNs < 0) {
      throw new SimError(
        `kernel ${label} duration must be a non-negative integer of ns, got ${durationNs}`,
        this.sched.now,
        'gpu',
      );
    }
  }

  /** True when no kernel runs and none is queued. */
  get idle(): boolean {
    return this.runningCount === 0 && this.queued === 0;
  }

  /** Handler of `gpu.kernelDone`. */
  onKernelDone(stream: number): void {
    if (!this.runningOn[stream]) throw new SimError(`kernel done on idle stream ${stream}`, this.sched.now, 'gpu');
    const spec = this.running[stream]!;
    // Read before `pump` may start the next kernel into the same record.
    const onDone = spec.onDone;
    const startNs = this.startedNs[stream]!;
    this.runningOn[stream] = false;
    this.runningCount--;
    const now = this.sched.now;
    this.busyNsByStream[stream]! += now - startNs;
    if (spec.parts === undefined) {
      this.account(stream, spec.label, spec.category, startNs, now);
    } else {
      let t = startNs;
      for (const p of spec.parts) {
        this.account(stream, p.label, p.category, t, t + p.durationNs);
        t += p.durationNs;
      }
    }
    if (this.runningCount === 0 && this.engineBusySince >= 0) {
      this.engineBusyNs += now - this.engineBusySince;
      this.engineBusySince = -1;
    }
    spec.onDone = undefined;
    spec.parts = undefined;
    if (this.queued > 0) this.pump();
    onDone?.();
  }

  private account(stream: number, label: string, category: string, startNs: number, endNs: number): void {
    const names = this.catNames;
    let i = 0;
    while (i < names.length && names[i] !== category) i++;
    if (i === names.length) {
      names.push(category);
      this.catNs.push(0);
    }
    this.catNs[i]! += endNs - startNs;
    this.kernels++;
    this.sink?.onKernel?.({
      stream: this.streamName(stream),
      label,
      category,
      startNs: startNs as Ns,
      endNs: endNs as Ns,
    });
  }

  /** Time during which at least one kernel ran, up to now. */
  busyTimeNs(): number {
    return this.engineBusyNs + (this.engineBusySince >= 0 ? this.sched.now - this.engineBusySince : 0);
  }

  private pump(): void {
    for (;;) {
      if (this.queued === 0) return;
      if (!this.concurrentStreams && this.runningCount > 0) return;
      let bestStream = -1;
      let bestSeq = Infinity;
      for (let s = 0; s < this.streams; s++) {
        if (this.runningOn[s]) continue;
        const q = this.queueSeqs[s]!;
        if (q.length > 0 && q[0]! < bestSeq) {
          bestSeq = q[0]!;
          bestStream = s;
        }
      }
      if (bestStream < 0) return;
      this.queueSeqs[bestStream]!.shift();
      this.queued--;
      const spec = this.queues[bestStream]!.shift()!;
      this.start(bestStream, spec.durationNs, spec.label, spec.category, spec.onDone, spec.parts);
    }
  }

  private start(
    stream: number,
    durationNs: Ns,
    label: string,
    category: string,
    onDone: (() => void) | undefined,
    parts: readonly KernelPart[] | undefined,
  ): void {
    const now = this.sched.now;
    const r = this.running[stream]!;
    r.durationNs = durationNs;
    r.label = label;
    r.category = category;
    r.onDone = onDone;
    r.parts = parts;
    this.runningOn[stream] = true;
    this.startedNs[stream] = now;
    if (this.runningCount === 0) this.engineBusySince = now;
    this.runningCount++;
    // A chain's completion is stamped when its last part would have been submitted.
    const stamp = parts === undefined ? now : now + durationNs - parts[parts.length - 1]!.durationNs;
    this.sched.post((now + durationNs) as Ns, this.doneEvents[stream]!, EventPriority.completion, stamp);
  }
}
