/**
 * How the pass DAG (`pass-dag.ts`) creates its tasks: consecutive integer ids from 0, the
 * engine chains (one CUDA stream, the chained H2D copies, the KV D2H copies, the CPU tasks:
 * each task of a chain depends on the previous one) and the rings of buffers whose reuse is a
 * dep. Kept apart so the layer builders (`pass-dag-layers.ts`) only say what each layer runs.
 */
import type { Ns } from '../kernel/time.ts';
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
  priority?: number;
  kind: TaskSpec['kind'];
  category: string;
  label?: string;
  deps: number[];
  alloc?: MemoryRequest[];
  release?: string[];
  durationNs?: Ns;
  cores?: number;
  computeNs?: Ns;
  bytes?: number;
}

/** A VRAM allocation held under `key` until a later task releases it. */
export function hold(bytes: number, category: MemoryCategory, key: string): MemoryRequest[] {
  return [{ pool: 'vram', bytes, category, hold: key }];
}

/** A ring of n buffers: fill f waits for the release of fill f − n. */
export class Ring {
  private readonly releasers: number[] = [];
  private fills = 0;
  constructor(
    private readonly size: number,
    private readonly prefix: string,
  ) {}
  /** The next fill: its index, hold key, and the releaser of the fill it reuses (-1: none). */
  next(): { readonly fill: number; readonly key: string; readonly waitFor: number } {
    const fill = this.fills++;
    const waitFor = fill >= this.size ? this.releasers[fill - this.size]! : -1;
    if (waitFor === undefined) throw new RangeError(`ring ${this.prefix}: fill ${fill - this.size} has no releaser`);
    return { fill, key: `${this.prefix}${fill}`, waitFor };
  }
  released(fill: number, by: number): void {
    this.releasers[fill] = by;
  }
}

/**
 * Creates the tasks of one pass in order. Deps of -1 (a task not built) are dropped; labels
 * are built only when asked for. Each method returns the new task's id.
 */
export class DagEmitter {
  /** Tasks created, unless streamed to `onTask`. */
  readonly tasks: TaskSpec[] = [];
  /** The tail of each engine chain (-1: none yet). */
  lastGpu = -1;
  lastH2d = -1;
  lastD2h = -1;
  lastCpu = -1;
  private nextId = 0;

  constructor(
    private readonly labels: boolean,
    private readonly onTask: ((t: TaskSpec) => void) | undefined,
    /** Cores of every CPU task. */
    private readonly cpuCores: number,
  ) {}

  /** A GPU kernel, after the previous one. */
  gpu(category: string, durationNs: Ns, deps: number[], label?: () => string, extra?: Partial<MutableTask>): number {
    const t = this.base('gpu', category, [this.lastGpu, ...deps], label);
    t.durationNs = durationNs;
    if (extra) Object.assign(t, extra, { deps: t.deps });
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
    extra?: Partial<MutableTask>,
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
    extra?: Partial<MutableTask>,
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
    extra?: Partial<MutableTask>,
  ): number {
    const t = this.base(kind, category, after === undefined ? deps : [after, ...deps], label);
    t.bytes = bytes;
    if (after === undefined) t.priority = URGENT_PRIORITY;
    if (extra) Object.assign(t, extra, { deps: t.deps });
    return this.emit(t);
  }

  /** A CPU task on `cpuCores` cores, after the previous one. */
  cpu(category: string, computeNs: Ns, bytes: number, deps: number[], label?: () => string): number {
    const t = this.base('cpu', category, [this.lastCpu, ...deps], label);
    t.cores = this.cpuCores;
    t.computeNs = computeNs;
    t.bytes = Math.round(bytes);
    this.lastCpu = this.emit(t);
    return this.lastCpu;
  }

  /** A join, releasing `release`. */
  barrier(category: string, deps: number[], release: string[], label?: () => string): number {
    const t = this.base('barrier', category, deps, label);
    if (release.length > 0) t.release = release;
    return this.emit(t);
  }

  private emit(t: MutableTask): number {
    if (this.onTask) this.onTask(t as unknown as TaskSpec);
    else this.tasks.push(t as unknown as TaskSpec);
    return t.id;
  }

  private base(
    kind: TaskSpec['kind'],
    category: string,
    deps: number[],
    label: (() => string) | undefined,
  ): MutableTask {
    const t: MutableTask = { id: this.nextId++, kind, category, deps: deps.filter((d) => d >= 0) };
    if (this.labels && label) t.label = label();
    return t;
  }
}
