/**
 * How the pass DAG (`pass-dag.ts`) creates its tasks: consecutive integer ids from 0, the
 * engine chains (one CUDA stream, the chained H2D copies, the KV D2H copies, the CPU tasks:
 * each task of a chain depends on the previous one) and the rings of buffers whose reuse is a
 * dep. Kept apart so the layer builders (`pass-dag-layers.ts`) only say what each layer runs.
 */
import type { HardwareProfile } from '../../hardware-profiles/types.ts';
import { bytesToNs, ceilNs, type Ns } from '../kernel/time.ts';
import type { MemoryCategory } from '../resources/memory-pool.ts';
import type { MemoryRequest, TaskSpec } from '../taskgraph/types.ts';

/**
 * Link priority of the unchained activation copies (hidden states, Q and attention output of
 * the CPU-attention path): ahead of the bulk weight/KV streams, which they overtake at the next
 * packet boundary (the default priority is 0, lower first).
 */
export const URGENT_PRIORITY = -1;

/** A task as it is built (a `TaskSpec` once emitted). */
export interface MutableTask {
  id: number;
  priority: number | undefined;
  kind: TaskSpec['kind'];
  category: string;
  label: string | undefined;
  deps: number[];
  alloc: MemoryRequest[] | undefined;
  release: string[] | undefined;
  durationNs: Ns | undefined;
  cores: number | undefined;
  computeNs: Ns | undefined;
  bytes: number | undefined;
}

/** What a task may add besides its deps: buffers it allocates (held or not) and hold keys it releases. */
export interface TaskExtra {
  readonly alloc?: MemoryRequest[] | undefined;
  readonly release?: string[] | undefined;
}

/** Sets a task's extras (the fields given, in this order; none copied when absent). */
function applyExtra(t: MutableTask, extra: TaskExtra): void {
  if (extra.alloc) t.alloc = extra.alloc;
  if (extra.release) t.release = extra.release;
}

/**
 * One buffer of a ring (a prefix and a fill): its hold key (`x0`, `x1` ...), the key's
 * one-element release list and its last hold request. Made once per process and shared by
 * every pass (every pass uses the same keys, mostly with the same sizes; a pass's executor
 * keeps its lists until the pass ends): strings, lists and requests made anew per fill were a
 * large part of a simulated pass's live objects. Neither the executor nor the builders write them.
 */
export interface RingSlot {
  readonly key: string;
  readonly release: string[];
  hold: MemoryRequest[] | undefined;
}
const RING_SLOTS = new Map<string, RingSlot[]>();
function ringSlots(prefix: string): RingSlot[] {
  let slots = RING_SLOTS.get(prefix);
  if (!slots) {
    slots = [];
    RING_SLOTS.set(prefix, slots);
  }
  return slots;
}

/** A VRAM allocation held under `slot`'s key until a later task releases it (a shared list: never written). */
export function hold(bytes: number, category: MemoryCategory, slot: RingSlot): MemoryRequest[] {
  const h = slot.hold?.[0];
  if (h && h.bytes === bytes && h.category === category) return slot.hold!;
  slot.hold = [{ pool: 'vram', bytes, category, hold: slot.key }];
  return slot.hold;
}

/** `[key]`, the release list of `slot`'s hold key (a shared list: never written). */
export function releasing(slot: RingSlot): string[] {
  return slot.release;
}

/** `[after, ...deps]` without the ids < 0, in one array of its final length (a pass keeps one per task). */
function keptDeps(after: number, deps: readonly number[]): number[] {
  let n = after >= 0 ? 1 : 0;
  for (let i = 0; i < deps.length; i++) if (deps[i]! >= 0) n++;
  const out = new Array<number>(n);
  let k = 0;
  if (after >= 0) out[k++] = after;
  for (let i = 0; i < deps.length; i++) if (deps[i]! >= 0) out[k++] = deps[i]!;
  return out;
}

/** A ring of n buffers: fill f waits for the release of fill f − n. */
export class Ring {
  private readonly releasers: number[] = [];
  private fills = 0;
  private readonly slots: RingSlot[];
  constructor(
    private readonly size: number,
    private readonly prefix: string,
  ) {
    this.slots = ringSlots(prefix);
  }
  /** The next fill: its index, buffer (hold key), and the releaser of the fill it reuses (-1: none). */
  next(): { readonly fill: number; readonly slot: RingSlot; readonly waitFor: number } {
    const fill = this.fills++;
    const waitFor = fill >= this.size ? this.releasers[fill - this.size]! : -1;
    if (waitFor === undefined) throw new RangeError(`ring ${this.prefix}: fill ${fill - this.size} has no releaser`);
    const slots = this.slots;
    while (slots.length <= fill) {
      const key = `${this.prefix}${slots.length}`;
      slots.push({ key, release: [key], hold: undefined });
    }
    return { fill, slot: slots[fill]!, waitFor };
  }
  /** `next()` without the object and key (the streaming builders): the releaser to wait for; the fill is `lastFill`. */
  nextWait(): number {
    const fill = this.fills++;
    const waitFor = fill >= this.size ? this.releasers[fill - this.size]! : -1;
    if (waitFor === undefined) throw new RangeError(`ring ${this.prefix}: fill ${fill - this.size} has no releaser`);
    return waitFor;
  }
  /** The fill `next()` or `nextWait()` returned last. */
  get lastFill(): number {
    return this.fills - 1;
  }
  released(fill: number, by: number): void {
    this.releasers[fill] = by;
  }
}

/**
 * The estimator's streaming mode: the earliest finish of each task (`estimator.ts`), priced
 * as the emitter creates it, with no task object — the same sums as `uncontendedNs` over the
 * built task (a transfer: latency + bytes / bandwidth; a CPU task: the longer of its compute
 * and its DRAM time; a barrier: 0), checked against it in `test/unit/throughput-estimator.test.ts`.
 */
export class EarliestFinishes {
  /** Earliest finish of task i (ns), for the ids created so far. */
  finish = new Float64Array(4096);
  private readonly latencyNs: number;
  private readonly h2dBytesPerSec: number;
  private readonly d2hBytesPerSec: number;

  constructor(private readonly hw: HardwareProfile) {
    const factor = hw.pinnedHostMemory ? 1 : hw.pcie.pageableFactor;
    this.latencyNs = Math.round(hw.pcie.latencyNs);
    this.h2dBytesPerSec = hw.pcie.h2dBytesPerSec * factor;
    this.d2hBytesPerSec = hw.pcie.d2hBytesPerSec * factor;
  }

  /** Task `id` runs `durNs` from the latest finish of `after` and `deps` (ids < 0 are none). */
  put(id: number, durNs: number, after: number, deps: readonly number[]): void {
    if (id >= this.finish.length) {
      const grown = new Float64Array(this.finish.length * 2);
      grown.set(this.finish);
      this.finish = grown;
    }
    const finish = this.finish;
    let start = 0;
    if (after >= 0 && finish[after]! > start) start = finish[after]!;
    for (let i = 0; i < deps.length; i++) {
      const d = deps[i]!;
      if (d >= 0 && finish[d]! > start) start = finish[d]!;
    }
    finish[id] = start + durNs;
  }

  /** `put` with up to four deps as numbers (-1: none): no deps array. */
  put4(id: number, durNs: number, after: number, a: number, b: number, c: number, d: number): void {
    if (id >= this.finish.length) {
      const grown = new Float64Array(this.finish.length * 2);
      grown.set(this.finish);
      this.finish = grown;
    }
    const finish = this.finish;
    let start = 0;
    if (after >= 0 && finish[after]! > start) start = finish[after]!;
    if (a >= 0 && finish[a]! > start) start = finish[a]!;
    if (b >= 0 && finish[b]! > start) start = finish[b]!;
    if (c >= 0 && finish[c]! > start) start = finish[c]!;
    if (d >= 0 && finish[d]! > start) start = finish[d]!;
    finish[id] = start + durNs;
  }

  copyNs(kind: 'h2d' | 'd2h', bytes: number): number {
    return this.latencyNs + bytesToNs(bytes, kind === 'h2d' ? this.h2dBytesPerSec : this.d2hBytesPerSec);
  }

  cpuNs(computeNs: number, bytes: number, cores: number): number {
    if (bytes === 0) return computeNs;
    const cpu = this.hw.cpu;
    const rate = Math.min(cpu.dramBytesPerSec, cores * cpu.perCoreDramBytesPerSec);
    return Math.max(computeNs, ceilNs((bytes / rate) * 1e9));
  }
}

/** The emitter's marks before its first materialised task (the search's streamed builds never make one). */
const NO_MARKS = new Uint8Array(0);
/** Marks made at the first materialised task (then doubled as ids pass the end). */
const FIRST_MARKS = 1024;

/**
 * Creates the tasks of one pass in order. Deps of -1 (a task not built) are dropped; labels
 * are built only when asked for. Each method returns the new task's id.
 */
export class DagEmitter {
  /** Tasks created, unless priced as they come (`finishes`). */
  readonly tasks: TaskSpec[] = [];
  /** The tail of each engine chain (-1: none yet). */
  lastGpu = -1;
  lastH2d = -1;
  lastD2h = -1;
  lastCpu = -1;
  private nextId = 0;
  /** Materialised tasks: 1 at an id some later task depends on (marked as each task is made; none when streaming). */
  private hasDependent = NO_MARKS;

  constructor(
    private readonly labels: boolean,
    /** Streaming mode: tasks are priced into it, not kept. */
    private readonly finishes: EarliestFinishes | undefined,
    /** Cores of every CPU task. */
    private readonly cpuCores: number,
  ) {}

  /** A GPU kernel, after the previous one. */
  gpu(category: string, durationNs: Ns, deps: number[], label?: () => string, extra?: TaskExtra): number {
    if (this.finishes) {
      this.finishes.put(this.nextId, durationNs, this.lastGpu, deps);
      this.lastGpu = this.nextId++;
      return this.lastGpu;
    }
    const t = this.base('gpu', category, this.lastGpu, deps, label);
    t.durationNs = durationNs;
    if (extra) applyExtra(t, extra);
    this.lastGpu = this.emit(t);
    return this.lastGpu;
  }

  /** A host-to-device copy: chained (bulk, after the previous chained copy) or not (urgent). */
  h2d(
    category: string,
    bytes: number,
    deps: number[],
    chained: boolean,
    label?: () => string,
    extra?: TaskExtra,
  ): number {
    const id = this.copy('h2d', chained ? this.lastH2d : undefined, category, bytes, deps, label, extra);
    if (chained) this.lastH2d = id;
    return id;
  }

  /** A device-to-host copy: chained (bulk, after the previous chained copy) or not (urgent). */
  d2h(
    category: string,
    bytes: number,
    deps: number[],
    chained: boolean,
    label?: () => string,
    extra?: TaskExtra,
  ): number {
    const id = this.copy('d2h', chained ? this.lastD2h : undefined, category, bytes, deps, label, extra);
    if (chained) this.lastD2h = id;
    return id;
  }

  /** A copy on one link: after `after` (the link's previous chained copy) when chained, else urgent. */
  private copy(
    kind: 'h2d' | 'd2h',
    after: number | undefined,
    category: string,
    bytes: number,
    deps: number[],
    label?: () => string,
    extra?: TaskExtra,
  ): number {
    if (this.finishes) {
      this.finishes.put(this.nextId, this.finishes.copyNs(kind, bytes), after ?? -1, deps);
      return this.nextId++;
    }
    const t = this.base(kind, category, after ?? -1, deps, label);
    t.bytes = bytes;
    if (after === undefined) t.priority = URGENT_PRIORITY;
    if (extra) applyExtra(t, extra);
    return this.emit(t);
  }

  /** A CPU task on `cpuCores` cores, after the previous one. */
  cpu(category: string, computeNs: Ns, bytes: number, deps: number[], label?: () => string): number {
    if (this.finishes) {
      this.finishes.put(
        this.nextId,
        this.finishes.cpuNs(computeNs, Math.round(bytes), this.cpuCores),
        this.lastCpu,
        deps,
      );
      this.lastCpu = this.nextId++;
      return this.lastCpu;
    }
    const t = this.base('cpu', category, this.lastCpu, deps, label);
    t.cores = this.cpuCores;
    t.computeNs = computeNs;
    t.bytes = Math.round(bytes);
    this.lastCpu = this.emit(t);
    return this.lastCpu;
  }

  /** A join, releasing `release`. */
  barrier(category: string, deps: number[], release: string[], label?: () => string): number {
    if (this.finishes) {
      this.finishes.put(this.nextId, 0, -1, deps);
      return this.nextId++;
    }
    const t = this.base('barrier', category, -1, deps, label);
    if (release.length > 0) t.release = release;
    return this.emit(t);
  }

  /**
   * Streaming mode: tasks are priced as they come and not kept. The builders' hot loops then
   * call the scalar forms below (deps as numbers, -1 none; no deps array, label or extras),
   * which price a task exactly as the array forms do (`test/unit/throughput-estimator.test.ts`).
   */
  get streaming(): boolean {
    return this.finishes !== undefined;
  }

  /** Streaming only: `gpu` with deps a … d. */
  gpuN(durationNs: Ns, a: number, b = -1, c = -1, d = -1): number {
    this.finishes!.put4(this.nextId, durationNs, this.lastGpu, a, b, c, d);
    this.lastGpu = this.nextId++;
    return this.lastGpu;
  }

  /** Streaming only: a chained `h2d` (`d2h`) with deps a, b. */
  chainedCopyN(kind: 'h2d' | 'd2h', bytes: number, a: number, b = -1): number {
    const f = this.finishes!;
    const id = this.nextId++;
    f.put4(id, f.copyNs(kind, bytes), kind === 'h2d' ? this.lastH2d : this.lastD2h, a, b, -1, -1);
    if (kind === 'h2d') this.lastH2d = id;
    else this.lastD2h = id;
    return id;
  }

  /** Streaming only: `barrier` with deps a, b. */
  barrierN(a: number, b: number): number {
    this.finishes!.put4(this.nextId, 0, -1, a, b, -1, -1);
    return this.nextId++;
  }

  private emit(t: MutableTask): number {
    this.tasks.push(t as unknown as TaskSpec);
    return t.id;
  }

  /** Materialised tasks nobody depends on so far, in id order (none when streaming: nothing is kept). */
  withoutDependents(): number[] {
    const marked = this.hasDependent;
    const out: number[] = [];
    for (let i = 0; i < this.tasks.length; i++) if (marked[i] === 0) out.push(i);
    return out;
  }

  /** Marks the deps of the new materialised task `nextId` (each an earlier id); keeps a slot for it. */
  private markDependedOn(deps: readonly number[]): void {
    if (this.nextId >= this.hasDependent.length) {
      // Ids come one at a time, so the new id is the current length: doubling makes room.
      const grown = new Uint8Array(Math.max(FIRST_MARKS, this.hasDependent.length * 2));
      grown.set(this.hasDependent);
      this.hasDependent = grown;
    }
    const marked = this.hasDependent;
    for (let i = 0; i < deps.length; i++) marked[deps[i]!] = 1;
  }

  /** A new task after `after` and `deps` (ids < 0 dropped; `after` first, as `[after, ...deps]`). */
  private base(
    kind: TaskSpec['kind'],
    category: string,
    after: number,
    deps: number[],
    label: (() => string) | undefined,
  ): MutableTask {
    // Every field at once (absent ones undefined, read as absent): one shape for every task, and
    // no property array added per task later (a literal's objects can be allocated old once they
    // survive, as a pass's tasks do; properties added afterwards would be young and copied).
    const kept = keptDeps(after, deps);
    this.markDependedOn(kept);
    return {
      id: this.nextId++,
      priority: undefined,
      kind,
      category,
      label: this.labels && label ? label() : undefined,
      deps: kept,
      alloc: undefined,
      release: undefined,
      durationNs: undefined,
      cores: undefined,
      computeNs: undefined,
      bytes: undefined,
    };
  }
}
