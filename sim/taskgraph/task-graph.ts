/**
 * The task-graph executor of the throughput family (DESIGN §7): it runs a growing DAG of
 * tasks — GPU kernels, CPU work, H2D / D2H copies, barriers — on the machine's resources, each
 * as soon as its deps have finished and its memory can be allocated. Policies (MoE-Gen,
 * MoE-Lens, FlexGen-like ...) build the graph; the executor only enforces order and limits.
 *
 * Usage: the caller owns the simulation and its handler table.
 *
 * ```ts
 * const sim = new Simulation<ResourceEvent | TaskGraphEvent>();
 * const r = createResources(hw, sim, sink, { streamNames: ['compute'] });
 * const graph = new TaskGraphExecutor(r, sim);
 * sim.setHandlers({ ...resourceHandlers(r), ...graph.handlers() });
 * graph.add([...tasks]);
 * sim.run();
 * graph.assertDone();
 * ```
 *
 * Semantics (each decision, and why):
 *
 * - **Adding.** `add` validates a whole batch first and adds all of it or nothing. Deps name
 *   tasks already added (finished or not) or tasks of the same batch, in any order; an
 *   unknown dep, a duplicate id or a cycle is an error (a dep on a task that does not exist yet
 *   would make "is this task ready?" depend on the future). Tasks may be added at any time,
 *   notably from `onDone` (routing is only known when a router task finishes).
 * - **Ready → dispatched.** Dispatching is deferred to one `taskgraph.dispatch` event at the
 *   current instant with `EventPriority.resource`, so it sees every completion of the instant
 *   (kernel order: completions first) and ready tasks are compared all together. A pass walks
 *   the ready tasks of every resource in one global order (priority, then add order) and
 *   dispatches each one whose resource has room and whose memory can be allocated now.
 * - **How much each resource is given.** The GPU gets one kernel at a time from this
 *   executor (one per stream with `concurrentStreams`): its stream queues are FIFO, so
 *   handing it everything ready would freeze the order at hand-over time and lose the
 *   priorities of tasks that become ready later. The CPU pool gets a task only when enough of
 *   its cores are free for it to start at once, in strict priority order (head-of-line: a wide
 *   task whose memory is available is not overtaken by narrower ones, as in `CpuPool`; one
 *   whose memory is short holds nothing). A PCIe link gets every ready
 *   transfer (up to `maxQueuedTransfers`): it has its own priority queue and lets a more
 *   urgent transfer overtake at a packet boundary, which only works if it sees the waiting
 *   transfers. A barrier finishes at the instant it is dispatched.
 * - **Memory.** A task's allocations are acquired together when it is dispatched (checked
 *   per pool first, so there is never a partial allocation to undo). For a transfer that is
 *   when it enters the link's queue, which may precede its first byte: the destination
 *   buffer must exist before a copy is enqueued. If memory is short the task stays ready and
 *   the pass goes on to the next one — a memory-blocked task never blocks its resource for
 *   tasks behind it, which avoids the obvious priority-inversion deadlock (an urgent task
 *   waiting for a buffer that only a less urgent task on the same resource would free). The
 *   executor is woken by the pools (`MemoryPool.whenFreed`) and by its own completions; it
 *   never polls. The price is that a large request can wait while smaller ones keep going;
 *   and memory is granted greedily with no look-ahead, so a graph whose low-priority tasks can
 *   fill a pool before a high-priority task needing it becomes ready can deadlock: builders
 *   bound such prefetches with deps (e.g. a buffer's next fill depends on its last release).
 *   Memory-blocked tasks are parked in groups of equal need (see `ParkGroup`), so a pass
 *   costs about the tasks it can start, not every task waiting for memory.
 * - **Holds.** An allocation with `hold: key` survives its task until the task releasing
 *   `key` finishes. The releaser must depend (directly or not) on the holder, so a hold is
 *   always live before it is released.
 * - **Deadlock.** When, at the end of an instant, nothing of the graph is dispatched and
 *   tasks remain, nothing inside the graph can ever make progress; with `onStall: 'throw'`
 *   (default) the executor throws `TaskGraphDeadlockError` listing each stuck task and why
 *   (unfinished deps; memory needed vs free and which holds occupy the pool).
 * - **Determinism.** Every order is (priority, add order) or event order; no Map is iterated
 *   for decisions except in insertion order; no randomness.
 * - **Sharing.** The executor assumes it is the only client of the GPU and CPU pool it drives
 *   (others only delay its tasks; a CPU task's recorded start is then its dispatch time), and
 *   one executor per simulation (its event kinds are fixed). Nothing here writes files;
 *   memory peaks are recorded by the pools, timelines by the resources' trace sink.
 *
 * Known gaps: no cancellation or re-prioritisation of tasks; no blocked-on-data accounting
 * for the GPU (`TraceSink.onBlocked`): the resources account busy time, the timings show
 * waits; finished tasks are kept for `timing` for the executor's whole life.
 */
import { Heap } from 'heap-js';
import { InvariantError, SimError } from '../kernel/errors.ts';
import { EventPriority, type Handlers, type Scheduler } from '../kernel/simulation.ts';
import type { Ns } from '../kernel/time.ts';
import type { Resources } from '../resources/index.ts';
import type { MemoryPool } from '../resources/memory-pool.ts';
import { showId, validateBatch, type GraphView } from './batch.ts';
import {
  criticalPathFrom,
  deadlockError,
  type GraphRecords,
  graphStats,
  holdsInfo,
  stuckTasks,
  type TaskGraphDeadlockError,
} from './diagnostics.ts';
import {
  compareHeads,
  type HoldEntry,
  type Lane,
  type LaneKind,
  type MutableBusy,
  type Node,
  type ParkGroup,
  type Source,
} from './nodes.ts';
import { ReadyList } from './ready-list.ts';

export { TaskGraphDeadlockError } from './diagnostics.ts';
import {
  POOL_NAMES,
  TASK_KINDS,
  type HoldInfo,
  type PoolName,
  type StuckTask,
  type TaskContext,
  type TaskGraphEvent,
  type TaskGraphOptions,
  type TaskGraphStats,
  type TaskId,
  type TaskKind,
  type TaskSpec,
  type TaskTiming,
} from './types.ts';

/** The resources the executor drives (a subset of `Resources`, so tests can build just these). */
export type TaskGraphResources = Pick<Resources, 'gpu' | 'h2d' | 'd2h' | 'cpu' | 'vram' | 'host'>;

/**
 * Priority of the deadlock check: after every standard `EventPriority` of the same instant, so
 * that a decision or arrival at that instant may still add tasks or free memory first.
 */
export const STALL_CHECK_PRIORITY = 1000;

export class TaskGraphExecutor {
  readonly name: string;
  private readonly r: TaskGraphResources;
  private readonly sched: Scheduler<TaskGraphEvent>;
  private readonly onStall: 'throw' | 'wait';
  private readonly pools: Readonly<Record<PoolName, MemoryPool>>;
  private readonly nodes = new Map<TaskId, Node>();
  private readonly bySeq: Node[] = [];
  private readonly holds = new Map<string, HoldEntry>();
  /** Lanes in a fixed order; `gpuLaneOfStream[s]` is the lane of GPU stream s. */
  private readonly lanes: readonly Lane[];
  private readonly gpuLaneOfStream: readonly Lane[];
  private readonly laneOf: Readonly<Record<'h2d' | 'd2h' | 'cpu' | 'barrier', Lane>>;
  private readonly waitingOnPool: Record<PoolName, boolean> = { vram: false, host: false };
  /**
   * Ready tasks that found a pool short, out of their lanes, grouped by (pool, lane, bytes
   * needed there); key `pool:lane:bytes`. A group takes part in a pass only while the pool has
   * that many bytes free (a pass never frees memory). In insertion order, for determinism of
   * anything that iterates them (the merge itself orders by task).
   */
  private readonly parkGroups = new Map<string, ParkGroup>();
  private readonly view: GraphView;
  private cpuCoresInUse = 0;
  private inFlight = 0;
  private unfinished = 0;
  private dispatchPending = false;
  private stallCheckPending = false;
  private readonly idleListeners: (() => void)[] = [];
  private finishedCount = 0;
  private readonly byKind: Record<TaskKind, MutableBusy>;
  private readonly byCategory = new Map<string, MutableBusy>();
  private firstStartNs: Ns | undefined;
  private lastFinished: Node | undefined;

  /**
   * @param resources the machine (the executor submits to its GPU, links and CPU pool, and
   *   allocates from its VRAM and host pools)
   * @param sched the simulation, for the executor's own events (`handlers()`)
   * @throws RangeError if `maxQueuedTransfers` is not an integer ≥ 1 or Infinity
   */
  constructor(resources: TaskGraphResources, sched: Scheduler<TaskGraphEvent>, opts: TaskGraphOptions = {}) {
    const maxQueued = opts.maxQueuedTransfers ?? Number.POSITIVE_INFINITY;
    if (!(maxQueued === Number.POSITIVE_INFINITY || (Number.isInteger(maxQueued) && maxQueued >= 1))) {
      throw new RangeError(`maxQueuedTransfers must be an integer ≥ 1 or Infinity, got ${maxQueued}`);
    }
    this.name = opts.name ?? 'taskgraph';
    this.r = resources;
    this.sched = sched;
    this.onStall = opts.onStall ?? 'throw';
    this.pools = { vram: resources.vram, host: resources.host };
    let laneIndex = 0;
    const lane = (name: string, kind: LaneKind, capacity: number): Lane => ({
      index: laneIndex++,
      name,
      kind,
      ready: new ReadyList<Node>(),
      outstanding: 0,
      capacity,
    });
    const gpu = resources.gpu;
    const streamNames = Array.from({ length: gpu.streams }, (_, s) => gpu.streamName(s));
    // Concurrent streams overlap fully, so each is its own resource; otherwise the SMs run one
    // kernel at a time whatever its stream, so all streams share one lane.
    const gpuLanes = gpu.concurrentStreams
      ? streamNames.map((n) => lane(`gpu ${n}`, 'gpu', 1))
      : [lane('gpu', 'gpu', 1)];
    this.gpuLaneOfStream = streamNames.map((_, s) => gpuLanes[gpu.concurrentStreams ? s : 0]!);
    this.laneOf = {
      h2d: lane('h2d', 'link', maxQueued),
      d2h: lane('d2h', 'link', maxQueued),
      cpu: lane('cpu', 'cpu', Number.POSITIVE_INFINITY),
      barrier: lane('barrier', 'barrier', Number.POSITIVE_INFINITY),
    };
    this.lanes = [...gpuLanes, this.laneOf.h2d, this.laneOf.d2h, this.laneOf.cpu, this.laneOf.barrier];
    this.byKind = Object.fromEntries(TASK_KINDS.map((k) => [k, { finished: 0, busyNs: 0 }])) as Record<
      TaskKind,
      MutableBusy
    >;
    this.view = {
      has: (id) => this.nodes.has(id),
      isDone: (id) => this.nodes.get(id)?.state === 'done',
      depsOf: (id) => this.nodes.get(id)?.t.deps ?? [],
      hold: (key) => {
        const h = this.holds.get(key);
        return h && { holder: h.holder.t.spec.id, releaser: h.releaser?.t.spec.id };
      },
      gpuStreams: streamNames,
      cpuCores: resources.cpu.cores,
      poolCapacityBytes: { vram: resources.vram.capacityBytes, host: resources.host.capacityBytes },
    };
  }

  /** Handlers of the executor's events, to spread into the simulation's handler table. */
  handlers(): Handlers<TaskGraphEvent> {
    return {
      'taskgraph.dispatch': () => this.onDispatch(),
      'taskgraph.barrierDone': (e) => {
        const node = this.bySeq[e.task];
        if (!node) throw new InvariantError(`barrier done for unknown task #${e.task}`, this.sched.now, this.name);
        this.finish(node);
      },
      'taskgraph.stallCheck': () => this.onStallCheck(),
    };
  }

  /**
   * Adds one task or a batch (see the module doc for the rules). Tasks whose deps have all
   * finished are ready at once and dispatched at the current instant.
   *
   * @throws SimError (nothing is added) on: an id already added or repeated in the batch; an
   *   unknown dep or a dep on itself; a cycle in the batch; an invalid kind, priority, stream,
   *   core count, duration or byte count; an allocation larger than its pool's capacity or of
   *   an unknown pool or category; a hold key in use; a release of a key nobody holds, already
   *   released, or held by a task that is neither finished nor an ancestor of the releaser.
   */
  add(tasks: TaskSpec | readonly TaskSpec[]): void {
    const specs = (Array.isArray(tasks) ? tasks : [tasks]) as readonly TaskSpec[];
    if (specs.length === 0) return;
    const normalized = validateBatch(specs, this.view, (message) => {
      throw new SimError(message, this.sched.now, this.name);
    });
    const now = this.sched.now;
    const created = normalized.map((t): Node => {
      const lane = t.spec.kind === 'gpu' ? this.gpuLaneOfStream[t.stream]! : this.laneOf[t.spec.kind];
      const node: Node = {
        t,
        priority: t.priority,
        seq: this.bySeq.length,
        lane,
        deps: [],
        dependents: [],
        remainingDeps: 0,
        state: 'pending',
        addedNs: now,
        readyNs: undefined,
        dispatchNs: undefined,
        startNs: undefined,
        finishNs: undefined,
        allocations: [],
        transfer: undefined,
        parkedIn: undefined,
      };
      this.nodes.set(t.spec.id, node);
      this.bySeq.push(node);
      return node;
    });
    for (const node of created) {
      for (const id of node.t.deps) {
        const dep = this.nodes.get(id)!;
        node.deps.push(dep);
        if (dep.state !== 'done') {
          dep.dependents.push(node);
          node.remainingDeps++;
        }
      }
      for (const key of node.t.holds)
        this.holds.set(key, { key, holder: node, releaser: undefined, allocations: [], live: false });
    }
    for (const node of created) for (const key of node.t.releases) this.holds.get(key)!.releaser = node;
    this.unfinished += created.length;
    for (const node of created) if (node.remainingDeps === 0) this.makeReady(node);
    this.requestDispatch();
  }

  /**
   * Registers `listener`, called each time every task added so far has finished (right after
   * the last one's `onDone`, which may have added more, in which case it is not called).
   * Returns a function that unregisters it.
   */
  onIdle(listener: () => void): () => void {
    this.idleListeners.push(listener);
    return () => {
      const i = this.idleListeners.indexOf(listener);
      if (i >= 0) this.idleListeners.splice(i, 1);
    };
  }

  /** True when every task added so far has finished (also before any task is added). */
  isDone(): boolean {
    return this.unfinished === 0;
  }

  /** Tasks added and not finished. */
  get unfinishedCount(): number {
    return this.unfinished;
  }

  /** Tasks handed to a resource and not finished. */
  get dispatchedCount(): number {
    return this.inFlight;
  }

  /** Whether a task with this id has been added. */
  has(id: TaskId): boolean {
    return this.nodes.has(id);
  }

  /** What is known of one task. @throws SimError for an unknown id. */
  timing(id: TaskId): TaskTiming {
    const node = this.nodes.get(id);
    if (!node) throw new SimError(`no task ${showId(id)}`, this.sched.now, this.name);
    return this.timingOf(node);
  }

  /** Timings of every task, in the order they were added. */
  timings(): TaskTiming[] {
    return this.bySeq.map((n) => this.timingOf(n));
  }

  /** Totals over finished tasks. */
  /** Totals over finished tasks. */
  stats(): TaskGraphStats {
    return graphStats(this.records());
  }

  /**
   * The dependency chain that ends at the task that finished last (the last of those that
   * finished at the latest time), going back each time through the dep that finished last
   * (the first listed among equals); first task first. Where a task started later than its
   * last dep finished, it waited for its resource or its memory (see `timing`). Empty before
   * any task has finished.
   */
  criticalPath(): TaskId[] {
    return criticalPathFrom(this.lastFinished);
  }

  /** Holds registered (announced by an unfinished holder, or live), in registration order. */
  holdsInfo(): HoldInfo[] {
    return holdsInfo(this.records());
  }

  /** Why each unfinished, undispatched task is not running now, in add order. */
  stuckTasks(): StuckTask[] {
    return stuckTasks(this.records());
  }

  /**
   * Checks, after a run, that every task finished.
   * @throws TaskGraphDeadlockError if tasks remain and nothing of the graph is running;
   *   SimError if tasks are still running (the run was stopped early).
   */
  assertDone(): void {
    if (this.unfinished === 0) return;
    if (this.inFlight > 0) {
      throw new SimError(
        `not done: ${this.unfinished} task(s) unfinished, ${this.inFlight} still running`,
        this.sched.now,
        this.name,
      );
    }
    throw this.deadlockError();
  }

  // ---------------------------------------------------------------------------------------

  private timingOf(n: Node): TaskTiming {
    const s = n.t.spec;
    return {
      id: s.id,
      kind: s.kind,
      label: n.t.label,
      category: s.category,
      priority: n.priority,
      state: n.state,
      addedNs: n.addedNs,
      ...(n.readyNs !== undefined ? { readyNs: n.readyNs } : {}),
      ...(n.dispatchNs !== undefined ? { dispatchNs: n.dispatchNs } : {}),
      ...(n.startNs !== undefined ? { startNs: n.startNs } : {}),
      ...(n.finishNs !== undefined ? { finishNs: n.finishNs } : {}),
    };
  }

  private makeReady(node: Node): void {
    node.state = 'ready';
    node.readyNs = this.sched.now;
    node.lane.ready.insert(node);
  }

  private requestDispatch(): void {
    if (this.dispatchPending) return;
    this.dispatchPending = true;
    this.sched.schedule(this.sched.now, { kind: 'taskgraph.dispatch' }, EventPriority.resource);
  }

  private laneHasRoom(lane: Lane): boolean {
    return lane.outstanding < lane.capacity;
  }

  /**
   * One dispatch pass. Its outcome is that of walking every ready task once in (priority, add
   * order) and, for each: skip it if its resource has no room left (a lane is full; the CPU
   * lane is closed once its most urgent task that has its memory lacks cores: head-of-line
   * blocking); skip it if a pool is short (it does not block anything); else allocate its
   * memory and hand it to its resource. Implemented as a heap merge of the lanes' ready lists
   * and the park groups whose need is free, dropping a list as soon as none of its remaining
   * tasks can start in this pass.
   */
  private onDispatch(): void {
    this.dispatchPending = false;
    const free: Record<PoolName, number> = { vram: this.pools.vram.freeBytes, host: this.pools.host.freeBytes };
    const heap = new Heap<Source>(compareHeads);
    const visited: Source[] = [];
    const addSource = (list: ReadyList<Node>, lane: Lane, group: ParkGroup | undefined): void => {
      if (list.length === 0 || !this.laneHasRoom(lane)) return;
      const src: Source = { list, lane, group, cursor: 0 };
      visited.push(src);
      heap.push(src);
    };
    for (const l of this.lanes) addSource(l.ready, l, undefined);
    for (const g of this.parkGroups.values()) if (g.needBytes <= free[g.pool]) addSource(g.list, g.lane, g);
    let cpuClosed = false;
    const moved: [Node, PoolName][] = [];
    for (;;) {
      const src = heap.pop();
      if (!src) break;
      const { lane, group } = src;
      if (!this.laneHasRoom(lane) || (lane.kind === 'cpu' && cpuClosed)) continue; // none of it can start now
      if (group && group.needBytes > this.pools[group.pool].freeBytes) continue; // nor can any of this group
      const node = src.list.at(src.cursor)!;
      const short = POOL_NAMES.find((p) => !this.pools[p].canAllocate(node.t.needBytes[p]));
      const spec = node.t.spec;
      if (short === undefined && spec.kind === 'cpu' && spec.cores > this.r.cpu.cores - this.cpuCoresInUse) {
        cpuClosed = true; // head-of-line: narrower, less urgent tasks do not overtake it (it stays)
        continue;
      }
      // Every task a source's cursor passes leaves it: dispatched, or parked (again) after the pass.
      src.cursor++;
      if (short !== undefined) {
        moved.push([node, short]);
      } else {
        this.allocate(node);
        this.submit(node);
      }
      if (src.cursor < src.list.length) heap.push(src);
    }
    for (const src of visited) {
      if (src.cursor === 0) continue;
      src.list.removeFirst(src.cursor);
      if (src.group && src.list.length === 0) this.parkGroups.delete(src.group.key);
    }
    for (const [node, pool] of moved) this.park(node, pool);
    if (this.onStall === 'throw' && this.inFlight === 0 && this.unfinished > 0 && !this.stallCheckPending) {
      this.stallCheckPending = true;
      this.sched.schedule(this.sched.now, { kind: 'taskgraph.stallCheck' }, STALL_CHECK_PRIORITY);
    }
  }

  private onStallCheck(): void {
    this.stallCheckPending = false;
    if (this.inFlight === 0 && this.unfinished > 0 && !this.dispatchPending) throw this.deadlockError();
  }

  /** Acquires all of the node's memory (the caller has checked that it fits). */
  private allocate(node: Node): void {
    for (const a of node.t.spec.alloc ?? []) {
      const label = a.hold !== undefined ? `${node.t.label} [${a.hold}]` : node.t.label;
      const alloc = this.pools[a.pool].tryAllocate(a.bytes, a.category, label);
      if (!alloc)
        throw new InvariantError(
          `allocation of ${a.bytes} B of ${a.pool} failed after the check`,
          this.sched.now,
          this.name,
        );
      node.allocations.push({ alloc, pool: a.pool, hold: a.hold });
    }
  }

  /** Puts a ready task whose memory is short in `pool` into its park group, and asks the pool for a wake-up. */
  private park(node: Node, pool: PoolName): void {
    const needBytes = node.t.needBytes[pool];
    const key = `${pool}:${node.lane.index}:${needBytes}`;
    let group = this.parkGroups.get(key);
    if (!group) {
      group = { key, pool, lane: node.lane, needBytes, list: new ReadyList<Node>() };
      this.parkGroups.set(key, group);
    }
    group.list.insert(node);
    node.parkedIn = group;
    // Our own finishes request a dispatch anyway; this catches frees by anyone else.
    if (!this.waitingOnPool[pool]) {
      this.waitingOnPool[pool] = true;
      this.pools[pool].whenFreed(() => {
        this.waitingOnPool[pool] = false;
        this.requestDispatch();
      });
    }
  }

  private submit(node: Node): void {
    const s = node.t.spec;
    node.state = 'dispatched';
    node.parkedIn = undefined;
    node.dispatchNs = this.sched.now;
    node.lane.outstanding++;
    this.inFlight++;
    const onDone = (): void => this.finish(node);
    const label = node.t.label;
    switch (s.kind) {
      case 'gpu':
        this.r.gpu.submit({ stream: node.t.stream, durationNs: s.durationNs, label, category: s.category, onDone });
        break;
      case 'h2d':
      case 'd2h':
        node.transfer = this.r[s.kind].submit({
          bytes: s.bytes,
          priority: node.priority,
          label,
          category: s.category,
          onDone,
        });
        break;
      case 'cpu':
        this.cpuCoresInUse += s.cores;
        this.r.cpu.submit({
          cores: s.cores,
          computeNs: s.computeNs,
          bytes: s.bytes,
          label,
          category: s.category,
          onDone,
        });
        break;
      case 'barrier':
        this.sched.schedule(
          this.sched.now,
          { kind: 'taskgraph.barrierDone', task: node.seq },
          EventPriority.completion,
        );
        break;
    }
  }

  private finish(node: Node): void {
    const now = this.sched.now;
    const s = node.t.spec;
    if (node.state !== 'dispatched')
      throw new InvariantError(`task ${showId(s.id)} finished while ${node.state}`, now, this.name);
    node.state = 'done';
    node.finishNs = now;
    node.lane.outstanding--;
    this.inFlight--;
    this.unfinished--;
    switch (s.kind) {
      case 'gpu':
        node.startNs = (now - s.durationNs) as Ns;
        break;
      case 'h2d':
      case 'd2h': {
        const start = node.transfer?.startNs ?? -1;
        if (start < 0)
          throw new InvariantError(`transfer of task ${showId(s.id)} done without a start`, now, this.name);
        node.startNs = start as Ns;
        break;
      }
      case 'cpu':
        this.cpuCoresInUse -= s.cores;
        node.startNs = node.dispatchNs;
        break;
      case 'barrier':
        node.startNs = node.dispatchNs;
        break;
    }

    // Memory: own buffers go back, held ones move under their keys, released keys go back.
    for (const a of node.allocations) {
      if (a.hold === undefined) this.pools[a.pool].free(a.alloc);
      else this.holds.get(a.hold)!.allocations.push(a);
    }
    node.allocations = [];
    for (const key of node.t.holds) this.holds.get(key)!.live = true;
    for (const key of node.t.releases) {
      const h = this.holds.get(key);
      if (!h?.live)
        throw new InvariantError(
          `task ${showId(s.id)} releases ${JSON.stringify(key)}, which is not live`,
          now,
          this.name,
        );
      this.holds.delete(key);
      for (const a of h.allocations) this.pools[a.pool].free(a.alloc);
    }

    this.account(node);
    for (const d of node.dependents) if (--d.remainingDeps === 0) this.makeReady(d);
    this.requestDispatch();

    if (s.onDone) {
      const ctx: TaskContext = { nowNs: now, task: s, timing: this.timingOf(node), add: (tasks) => this.add(tasks) };
      try {
        s.onDone(ctx);
      } catch (e) {
        if (e instanceof SimError) throw e;
        const err = new SimError(
          `onDone of task ${showId(s.id)} threw: ${e instanceof Error ? e.message : String(e)}`,
          now,
          this.name,
        );
        err.cause = e;
        throw err;
      }
    }
    if (this.unfinished === 0) for (const l of [...this.idleListeners]) l();
  }

  private account(node: Node): void {
    const busy = node.finishNs! - node.startNs!;
    this.finishedCount++;
    const k = this.byKind[node.t.spec.kind];
    k.finished++;
    k.busyNs += busy;
    let c = this.byCategory.get(node.t.spec.category);
    if (!c) {
      c = { finished: 0, busyNs: 0 };
      this.byCategory.set(node.t.spec.category, c);
    }
    c.finished++;
    c.busyNs += busy;
    if (this.firstStartNs === undefined || node.startNs! < this.firstStartNs) this.firstStartNs = node.startNs;
    // The last of the latest: a join (barrier) finishing at the same instant as its deps wins.
    if (!this.lastFinished || node.finishNs! >= this.lastFinished.finishNs!) this.lastFinished = node;
  }

  /** The records the diagnostics read (`diagnostics.ts`). */
  private records(): GraphRecords {
    return {
      bySeq: this.bySeq,
      holds: this.holds,
      pools: this.pools,
      byKind: this.byKind,
      byCategory: this.byCategory,
      finishedCount: this.finishedCount,
      firstStartNs: this.firstStartNs,
      lastFinished: this.lastFinished,
    };
  }

  private deadlockError(): TaskGraphDeadlockError {
    return deadlockError(this.records(), this.sched.now, this.name);
  }
}
