/**
 * The task-graph executor's internal records (`task-graph.ts`): a task node, the lane of
 * ready tasks per resource, holds, park groups of tasks waiting for memory, and busy counters.
 * Not part of the public surface (`index.ts`); shared with the executor's diagnostics.
 */
import type { Ns } from '../kernel/time.ts';
import type { Allocation } from '../resources/memory-pool.ts';
import type { Transfer } from '../resources/pcie-link.ts';
import type { HoldRecord, NormalizedTask } from './batch.ts';
import { compareRanked, type Ranked, type ReadyList } from './ready-list.ts';
import type { PoolName, TaskId, TaskState } from './types.ts';

/** Shared empty lists (never written: a node gets its own array when it has entries). */
export const NO_NODES: readonly Node[] = [];
export const NO_ALLOCATIONS = [] as HeldAllocation[];
export const NO_HOLD_ENTRIES = [] as HoldEntry[];
/** A node's time not reached yet. */
export const NOT_YET = -1 as Ns;

export type LaneKind = 'gpu' | 'link' | 'cpu' | 'barrier';

/** Where ready tasks of one resource wait, and how many of them the resource holds now. */
export interface Lane {
  readonly index: number;
  readonly name: string;
  readonly kind: LaneKind;
  readonly ready: ReadyList<Node>;
  /** Tasks of this lane dispatched and not finished. */
  outstanding: number;
  /** Most outstanding tasks (CPU: unbounded here, limited by cores). */
  readonly capacity: number;
  /** Its ready list as a dispatch pass walks it (one per lane, reused by every pass). */
  source: Source;
}

export interface HeldAllocation {
  readonly alloc: Allocation;
  readonly pool: PoolName;
  readonly hold: string | undefined;
}

/** One task of the graph: its validated fields (`NormalizedTask`, kept here: no separate object) and its run. */
export interface Node extends NormalizedTask, Ranked {
  readonly lane: Lane;
  /** Made at its final length for the dependents of the node's own batch; later batches push. */
  dependents: Node[];
  remainingDeps: number;
  state: TaskState;
  readonly addedNs: Ns;
  /**
   * Times reached so far, −1 until then (numbers from the start: a field that held `undefined`
   * would box each later time in a new heap number, kept as long as the node).
   */
  readyNs: Ns;
  dispatchNs: Ns;
  startNs: Ns;
  finishNs: Ns;
  allocations: HeldAllocation[];
  /**
   * The holds this task holds (as `holds`, in order) and those it releases (as `releases`), set
   * when its batch is added and dropped when it finishes: its finish reaches them without a
   * lookup by key. `NO_HOLD_ENTRIES` when none.
   */
  holdEntries: HoldEntry[];
  releaseEntries: HoldEntry[];
  transfer: Transfer | undefined;
  /** The group the task is parked in, out of its lane, while memory is short. */
  parkedIn: ParkGroup | undefined;
}

export interface HoldEntry extends HoldRecord<Node> {
  readonly key: string;
  /** Set when the holder finishes (`NO_ALLOCATIONS` until then: no array per announced hold). */
  allocations: HeldAllocation[];
  live: boolean;
}

/**
 * Ready tasks of one lane that found one pool short, all needing the same bytes there, by
 * priority. While the pool has fewer free bytes than that, none of them can start, and the
 * dispatch pass skips the whole group at once instead of trying each task (MoE graphs park
 * many equal buffers: every expert's weights have the same size).
 */
export interface ParkGroup {
  readonly key: string;
  readonly pool: PoolName;
  readonly lane: Lane;
  readonly needBytes: number;
  readonly list: ReadyList<Node>;
  /** Its list as a dispatch pass walks it (one per group, reused by every pass). */
  source: Source;
}

/** A list walked by a dispatch pass: a lane's ready list or a park group. */
export interface Source {
  readonly list: ReadyList<Node>;
  readonly lane: Lane;
  readonly group: ParkGroup | undefined;
  cursor: number;
}

/** Placeholder of a lane's or group's source while it is being made. */
export const NO_SOURCE = undefined as unknown as Source;

export const compareHeads = (a: Source, b: Source): number => compareRanked(a.list.at(a.cursor)!, b.list.at(b.cursor)!);

/**
 * The executor's nodes by task id: an array for ids that are small non-negative integers (the
 * builders number tasks 0, 1, 2 ...), a Map for any other id. Lookups only (never iterated).
 */
export class NodeIndex {
  private readonly byInt: (Node | undefined)[] = [];
  private readonly byOther = new Map<TaskId, Node>();

  get(id: TaskId): Node | undefined {
    if (typeof id === 'number' && isArrayIndex(id)) {
      const n = this.byInt[id];
      return n !== undefined || this.byOther.size === 0 ? n : this.byOther.get(id);
    }
    return this.byOther.get(id);
  }

  has(id: TaskId): boolean {
    return this.get(id) !== undefined;
  }

  set(id: TaskId, node: Node): void {
    if (typeof id === 'number' && isArrayIndex(id)) {
      // Grown one slot at a time (holes would make the array sparse); far ids go to the Map.
      if (id < this.byInt.length) this.byInt[id] = node;
      else if (id <= this.byInt.length + 1024) {
        while (this.byInt.length < id) this.byInt.push(undefined);
        this.byInt.push(node);
      } else this.byOther.set(id, node);
    } else this.byOther.set(id, node);
  }
}

/** A non-negative integer below 2^30 (an id a dense array may hold). */
const isArrayIndex = (id: number): boolean => Number.isInteger(id) && id >= 0 && id < 2 ** 30;

export interface MutableBusy {
  finished: number;
  busyNs: number;
}
