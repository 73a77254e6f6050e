/**
 * Plain data of the task-graph executor (DESIGN §7, throughput family): the tasks a graph
 * builder (a policy) adds, the timings the executor records, its events and its options.
 * The executor itself is in `task-graph.ts`.
 *
 * Units are in field names: `durationNs`, `computeNs` are integer ns (`Ns`), `bytes` are
 * integer bytes.
 */
import type { Ns } from '../kernel/time.ts';
import type { MemoryCategory } from '../resources/memory-pool.ts';

/** A task's name, unique within one executor for its whole life. `1` and `'1'` are different ids. */
export type TaskId = string | number;

/** The resources a task can run on. A `barrier` runs on nothing and takes no time. */
export const TASK_KINDS = ['gpu', 'cpu', 'h2d', 'd2h', 'barrier'] as const;
export type TaskKind = (typeof TASK_KINDS)[number];

/** The memory pools a task can allocate from (`Resources.vram`, `Resources.host`). */
export const POOL_NAMES = ['vram', 'host'] as const;
export type PoolName = (typeof POOL_NAMES)[number];

/**
 * One allocation a task needs while it runs.
 *
 * All of a task's allocations are acquired together, all or nothing, when the task is
 * dispatched (see `TaskGraphExecutor`). They are freed when the task finishes, except those
 * with a `hold` key: these stay alive, under that key, until the task that lists the key in
 * its `release` finishes (e.g. a weight buffer filled by an H2D task and freed after the
 * expert GEMM that read it).
 */
export interface MemoryRequest {
  readonly pool: PoolName;
  /** Non-negative integer. */
  readonly bytes: number;
  readonly category: MemoryCategory;
  /**
   * Keeps the allocation alive after the task under this key. A key names one buffer, not a
   * slot: it is in use from the moment its holder is added until its releaser finishes, and
   * adding another holder of a key in use is an error (name keys after what they hold, e.g.
   * `pass7.L3.e5`). Several allocations of one task may share a key.
   */
  readonly hold?: string;
}

/** What `onDone` receives. */
export interface TaskContext {
  readonly nowNs: Ns;
  readonly task: TaskSpec;
  readonly timing: TaskTiming;
  /** Adds tasks to the graph (same as `TaskGraphExecutor.add`): the graph grows as the run goes. */
  add(tasks: TaskSpec | readonly TaskSpec[]): void;
}

interface TaskBase {
  readonly id: TaskId;
  /** Shown in traces and errors. Default: `String(id)`. */
  readonly label?: string;
  /** What the task does, passed to the resource's accounting: 'attention', 'expert', 'weights', 'kv', ... */
  readonly category: string;
  /**
   * Tasks that must finish before this one becomes ready. Each must be a task already added
   * (finished or not) or a task of the same `add` batch (in any order). Duplicates are ignored.
   */
  readonly deps?: readonly TaskId[];
  /**
   * Lower first; default 0; any finite number. Orders ready tasks competing for a resource and
   * for memory, and is the PCIe priority of a transfer. Ties go to the task added first.
   */
  readonly priority?: number;
  readonly alloc?: readonly MemoryRequest[];
  /**
   * Hold keys whose allocations are freed when this task finishes. Each key must be held by a
   * task already added (or in the same batch) that is finished or is an ancestor of this task
   * through `deps`, and may be released by one task only.
   */
  readonly release?: readonly string[];
  /**
   * Called once when the task has finished, after its memory has been freed and its
   * dependents made ready, and before anything new is dispatched. It may add tasks. An error
   * it throws is re-thrown as a `SimError` naming the task (the run stops).
   */
  readonly onDone?: (ctx: TaskContext) => void;
}

/** A kernel on a GPU stream (by index or by name); `durationNs` is its time on the SMs. */
export interface GpuTask extends TaskBase {
  readonly kind: 'gpu';
  /** Stream index or name (`Gpu.streamName`). Default 0. */
  readonly stream?: number | string;
  readonly durationNs: Ns;
}

/**
 * Work on CPU cores: duration max(`computeNs`, `bytes` / its host-DRAM rate), see `CpuPool`.
 */
export interface CpuTask extends TaskBase {
  readonly kind: 'cpu';
  /** Integer in [1, pool cores]. */
  readonly cores: number;
  readonly computeNs: Ns;
  /** Host-DRAM traffic; 0 for pure compute. */
  readonly bytes: number;
}

/** A copy over the H2D or D2H PCIe link; `priority` is its link priority. */
export interface TransferTask extends TaskBase {
  readonly kind: 'h2d' | 'd2h';
  /** Positive integer (a zero-byte copy is a `barrier`). */
  readonly bytes: number;
}

/** A zero-duration join. It may allocate (with `hold`) and release like any task. */
export interface BarrierTask extends TaskBase {
  readonly kind: 'barrier';
}

export type TaskSpec = GpuTask | CpuTask | TransferTask | BarrierTask;

/**
 * - `pending`: some dep has not finished;
 * - `ready`: deps finished, waiting for its resource or its memory;
 * - `dispatched`: memory acquired and handed to its resource (maybe queued there, maybe running);
 * - `done`: finished.
 */
export type TaskState = 'pending' | 'ready' | 'dispatched' | 'done';

/** What the executor recorded about one task. Absent times have not happened yet. */
export interface TaskTiming {
  readonly id: TaskId;
  readonly kind: TaskKind;
  readonly label: string;
  readonly category: string;
  readonly priority: number;
  readonly state: TaskState;
  readonly addedNs: Ns;
  /** When its last dep finished (or when it was added, if that was later). */
  readonly readyNs?: Ns;
  /** When its memory was acquired and it was handed to its resource. */
  readonly dispatchNs?: Ns;
  /**
   * When its resource started working on it: for a transfer, when the link picked it (its
   * latency starts then); for a kernel, `finishNs - durationNs`; for a CPU task and a barrier,
   * `dispatchNs` (exact while the executor is the CPU pool's only client).
   */
  readonly startNs?: Ns;
  readonly finishNs?: Ns;
}

/** Per kind or per category totals over finished tasks. */
export interface BusyStats {
  readonly finished: number;
  /**
   * Σ (finishNs − startNs) of finished tasks. Spans of concurrent tasks (CPU tasks, a transfer
   * overtaken by another) overlap, so this is not a utilisation: use the resources' own busy
   * counters for that.
   */
  readonly busyNs: number;
}

export interface TaskGraphStats {
  readonly added: number;
  readonly finished: number;
  readonly byKind: Readonly<Record<TaskKind, BusyStats>>;
  /** In order of first appearance. */
  readonly byCategory: Readonly<Record<string, BusyStats>>;
  /** Earliest start and latest finish of finished tasks (undefined before the first finish). */
  readonly firstStartNs?: Ns;
  readonly lastFinishNs?: Ns;
}

/** A live or announced hold (see `MemoryRequest.hold`). */
export interface HoldInfo {
  readonly key: string;
  readonly holder: TaskId;
  readonly releaser?: TaskId;
  /** True once the holder has finished (its allocations now live under the key). */
  readonly live: boolean;
  readonly bytesByPool: Readonly<Record<PoolName, number>>;
}

/** Why an unfinished task cannot proceed (see `TaskGraphDeadlockError`). */
export interface StuckTask {
  readonly id: TaskId;
  readonly label: string;
  readonly state: 'pending' | 'ready';
  /** Unfinished deps (pending tasks). */
  readonly waitsFor: readonly TaskId[];
  /** Pools that cannot serve the task's request now (ready tasks). */
  readonly memory: readonly {
    readonly pool: PoolName;
    readonly neededBytes: number;
    readonly freeBytes: number;
    readonly capacityBytes: number;
  }[];
  /** One human-readable line. */
  readonly reason: string;
}

/** The executor's own events (spread `TaskGraphExecutor.handlers()` into the handler table). */
export type TaskGraphEvent =
  /** Hand ready tasks to their resources; scheduled at most once per instant, after the instant's completions. */
  | { readonly kind: 'taskgraph.dispatch' }
  /** A dispatched barrier finishes (same instant, as a completion). `task` is the internal sequence number. */
  | { readonly kind: 'taskgraph.barrierDone'; readonly task: number }
  /** End of an instant at which nothing of the graph was running: checks for a deadlock. */
  | { readonly kind: 'taskgraph.stallCheck' };

export interface TaskGraphOptions {
  /** Origin named in errors. Default 'taskgraph'. */
  readonly name?: string;
  /**
   * Most transfers handed to one PCIe link and not yet finished (queued in the link or on the
   * wire). Default `Infinity`: every ready transfer whose memory is available is handed to the
   * link at once and the link's priority queue orders them, so a more urgent transfer
   * overtakes at the next packet boundary. A finite value limits how much memory transfers
   * reserve ahead of the wire, at the cost of overtaking.
   */
  readonly maxQueuedTransfers?: number;
  /**
   * What to do when, at the end of an instant, nothing of the graph is running or queued on a
   * resource and unfinished tasks remain (they can never proceed unless someone outside the
   * graph frees memory or adds tasks):
   * - `'throw'` (default): throw `TaskGraphDeadlockError` from the simulation loop at once;
   * - `'wait'`: keep waiting (a pool's free or a new task wakes the executor); the caller
   *   checks with `assertDone()` after the run.
   */
  readonly onStall?: 'throw' | 'wait';
}
