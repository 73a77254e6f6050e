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
 *   notably from `onDone` (routing is only known when a router task finishes). `addBuilt` takes
 *   a batch of the simulator's own graph builder (`pass-dag.ts`) without the checks, into the
 *   same nodes; a property test holds that builder to what `add` accepts.
 * - **Dispatching** (ready → dispatched, how much each resource is given, memory): see
 *   `dispatcher.ts`, the part that hands ready tasks to the resources and allocates their memory.
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
import { InvariantError, SimError } from '../kernel/errors.ts';
import type { Handlers, Scheduler } from '../kernel/simulation.ts';
import type { MemoryPool } from '../resources/memory-pool.ts';
import { GraphAccounting, timingOf } from './accounting.ts';
import { type GraphView, type MakeNormalized, showId, validateBatch } from './batch.ts';
import { normalizeBuiltBatch } from './built-batch.ts';
import {
  criticalPathFrom,
  deadlockError,
  type GraphRecords,
  graphStats,
  holdsInfo,
  stuckTasks,
  type TaskGraphDeadlockError,
} from './diagnostics.ts';
import { Dispatcher, type TaskGraphResources } from './dispatcher.ts';
import { type HoldEntry, NO_ALLOCATIONS, NO_HOLD_ENTRIES, NO_NODES, type Node, NodeIndex, NOT_YET } from './nodes.ts';
import type {
  HoldInfo,
  PoolName,
  StuckTask,
  TaskContext,
  TaskGraphEvent,
  TaskGraphOptions,
  TaskGraphStats,
  TaskId,
  TaskSpec,
  TaskTiming,
} from './types.ts';

export { TaskGraphDeadlockError } from './diagnostics.ts';
export type { TaskGraphResources } from './dispatcher.ts';

/**
 * Priority of the deadlock check: after every standard `EventPriority` of the same instant, so
 * that a decision or arrival at that instant may still add tasks or free memory first.
 */
export const STALL_CHECK_PRIORITY = 1000;

export class TaskGraphExecutor {
  readonly name: string;
  private readonly sched: Scheduler<TaskGraphEvent>;
  private readonly onStall: 'throw' | 'wait';
  private readonly pools: Readonly<Record<PoolName, MemoryPool>>;
  private readonly nodes = new NodeIndex();
  /** The node of an added task's id (diagnostics resolve deps through it). */
  private readonly nodeOf = (id: TaskId): Node => this.nodes.get(id)!;
  private readonly bySeq: Node[] = [];
  private readonly holds = new Map<string, HoldEntry>();
  /** Hands ready tasks to the resources (lanes, park groups, allocation, submission). */
  private readonly dispatcher: Dispatcher;
  private readonly view: GraphView<Node>;
  private unfinished = 0;
  private stallCheckPending = false;
  private readonly idleListeners: (() => void)[] = [];
  private readonly acct = new GraphAccounting();
  private readonly fail = (message: string): never => {
    throw new SimError(message, this.sched.now, this.name);
  };
  /**
   * The node of a validated task: the batch's i-th task is added i-th, at the current instant.
   * An object literal, not a class instance: V8 allocates a literal site's objects in the old
   * generation once most of them survive (a pass keeps every node until it ends), so the
   * scavenges do not copy them twice.
   */
  private readonly makeNode: MakeNormalized<Node> = (
    i,
    spec,
    deps,
    priority,
    label,
    needBytes,
    holds,
    releases,
    stream,
  ) => ({
    spec,
    deps,
    priority,
    label,
    needBytes,
    holds,
    releases,
    stream,
    seq: this.bySeq.length + i,
    lane: this.dispatcher.laneOf(spec.kind, stream),
    dependents: NO_NODES as Node[],
    remainingDeps: 0,
    state: 'pending',
    addedNs: this.sched.now,
    readyNs: NOT_YET,
    dispatchNs: NOT_YET,
    startNs: NOT_YET,
    finishNs: NOT_YET,
    allocations: NO_ALLOCATIONS,
    holdEntries: NO_HOLD_ENTRIES,
    releaseEntries: NO_HOLD_ENTRIES,
    transfer: undefined,
    parkedIn: undefined,
  });

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
    this.sched = sched;
    this.onStall = opts.onStall ?? 'throw';
    this.pools = { vram: resources.vram, host: resources.host };
    this.dispatcher = new Dispatcher(resources, sched, this.pools, this.name, maxQueued, (node) => this.finish(node));
    const gpu = resources.gpu;
    this.view = {
      has: (id) => this.nodes.has(id),
      isDone: (id) => this.nodes.get(id)?.state === 'done',
      depsOf: (id) => this.nodes.get(id)?.deps ?? [],
      holdOf: (key) => this.holds.get(key),
      openHold: (key, holder) => {
        const h: HoldEntry = { key, holder, releaser: undefined, allocations: NO_ALLOCATIONS, live: false };
        this.holds.set(key, h);
        if (holder.holdEntries === NO_HOLD_ENTRIES) holder.holdEntries = [h];
        else holder.holdEntries.push(h);
      },
      setReleaser: (h, releaser) => {
        h.releaser = releaser;
        if (releaser.releaseEntries === NO_HOLD_ENTRIES) releaser.releaseEntries = [h as HoldEntry];
        else releaser.releaseEntries.push(h as HoldEntry);
      },
      dropHold: (key) => {
        this.holds.delete(key);
      },
      gpuStreams: Array.from({ length: gpu.streams }, (_, s) => gpu.streamName(s)),
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
    this.insert(validateBatch(specs, this.view, this.fail, this.makeNode));
  }

  /**
   * Adds a batch made by a graph builder of the simulator itself, whose every batch `add` would
   * accept (a property test guards it over the builder's inputs): the same nodes as `add`, without
   * its checks (see `normalizeBuiltBatch`). A policy's or a plugin's tasks go through `add`.
   */
  addBuilt(specs: readonly TaskSpec[]): void {
    if (specs.length === 0) return;
    this.insert(normalizeBuiltBatch(specs, this.view, this.makeNode));
  }

  /** Puts a normalised batch into the graph: indexes, dependents, ready tasks, a dispatch. */
  private insert(created: readonly Node[]): void {
    const firstSeq = this.bySeq.length;
    for (let i = 0; i < created.length; i++) {
      const node = created[i]!;
      this.nodes.set(node.spec.id, node);
      this.bySeq.push(node);
    }
    // Indexed loops and arrays of their final length: a pass adds tens of thousands of tasks,
    // and arrays grown by `push` from empty reserve 17 slots each. A new node's dependents in
    // this batch are counted first (in `remainingDeps`, reset below), so its list is made at
    // its final length and filled in the order `push` would have filled it.
    this.sizeDependents(created, firstSeq);
    const filled = new Int32Array(created.length);
    for (let i = 0; i < created.length; i++) {
      const node = created[i]!;
      const ids = node.deps;
      for (let j = 0; j < ids.length; j++) {
        const dep = this.nodes.get(ids[j]!)!;
        if (dep.state !== 'done') {
          if (dep.seq >= firstSeq) dep.dependents[filled[dep.seq - firstSeq]!++] = node;
          else if (dep.dependents === NO_NODES) dep.dependents = [node];
          else dep.dependents.push(node);
          node.remainingDeps++;
        }
      }
    }
    this.unfinished += created.length;
    for (let i = 0; i < created.length; i++)
      if (created[i]!.remainingDeps === 0) this.dispatcher.makeReady(created[i]!);
    this.dispatcher.requestDispatch();
  }

  /** Makes each new node's list of dependents within its batch at its final length (counted in `remainingDeps`, then reset). */
  private sizeDependents(created: readonly Node[], firstSeq: number): void {
    for (let i = 0; i < created.length; i++) {
      const ids = created[i]!.deps;
      for (let j = 0; j < ids.length; j++) {
        const dep = this.nodes.get(ids[j]!)!;
        if (dep.seq >= firstSeq) dep.remainingDeps++;
      }
    }
    for (let i = 0; i < created.length; i++) {
      const node = created[i]!;
      if (node.remainingDeps > 0) {
        node.dependents = new Array<Node>(node.remainingDeps);
        node.remainingDeps = 0;
      }
    }
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
    return this.dispatcher.inFlight;
  }

  /** Whether a task with this id has been added. */
  has(id: TaskId): boolean {
    return this.nodes.has(id);
  }

  /** What is known of one task. @throws SimError for an unknown id. */
  timing(id: TaskId): TaskTiming {
    const node = this.nodes.get(id);
    if (!node) throw new SimError(`no task ${showId(id)}`, this.sched.now, this.name);
    return timingOf(node);
  }

  /** Timings of every task, in the order they were added. */
  timings(): TaskTiming[] {
    return this.bySeq.map((n) => timingOf(n));
  }

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
    return criticalPathFrom(this.acct.lastFinished, this.nodeOf);
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
    const inFlight = this.dispatcher.inFlight;
    if (inFlight > 0) {
      throw new SimError(
        `not done: ${this.unfinished} task(s) unfinished, ${inFlight} still running`,
        this.sched.now,
        this.name,
      );
    }
    throw this.deadlockError();
  }

  // ---------------------------------------------------------------------------------------

  /** The dispatch pass, then (nothing running, tasks left) a deadlock check at the end of the instant. */
  private onDispatch(): void {
    this.dispatcher.pass();
    if (this.onStall === 'throw' && this.dispatcher.inFlight === 0 && this.unfinished > 0 && !this.stallCheckPending) {
      this.stallCheckPending = true;
      this.sched.schedule(this.sched.now, { kind: 'taskgraph.stallCheck' }, STALL_CHECK_PRIORITY);
    }
  }

  private onStallCheck(): void {
    this.stallCheckPending = false;
    const d = this.dispatcher;
    if (d.inFlight === 0 && this.unfinished > 0 && !d.dispatchPending) throw this.deadlockError();
  }

  private finish(node: Node): void {
    const now = this.sched.now;
    const s = node.spec;
    if (node.state !== 'dispatched')
      throw new InvariantError(`task ${showId(s.id)} finished while ${node.state}`, now, this.name);
    node.state = 'done';
    node.finishNs = now;
    this.unfinished--;
    this.dispatcher.finished(node, now);
    this.releaseMemory(node);
    this.acct.account(node);
    for (const d of node.dependents) if (--d.remainingDeps === 0) this.dispatcher.makeReady(d);
    this.dispatcher.requestDispatch();

    if (s.onDone) {
      const ctx: TaskContext = { nowNs: now, task: s, timing: timingOf(node), add: (tasks) => this.add(tasks) };
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

  /**
   * A finished task's memory: own buffers go back, held ones move under their holds, released
   * holds go back (each reached through the node's entries, not by key).
   */
  private releaseMemory(node: Node): void {
    const allocations = node.allocations;
    const holds = node.holdEntries;
    for (let i = 0; i < allocations.length; i++) {
      const a = allocations[i]!;
      if (a.hold === undefined) this.pools[a.pool].free(a.alloc);
      else {
        const h = entryOf(holds, a.hold);
        if (!h) throw new InvariantError(`task ${showId(node.spec.id)} holds no ${a.hold}`, this.sched.now, this.name);
        if (h.allocations === NO_ALLOCATIONS) h.allocations = [a];
        else h.allocations.push(a);
      }
    }
    node.allocations = NO_ALLOCATIONS;
    for (let i = 0; i < holds.length; i++) holds[i]!.live = true;
    node.holdEntries = NO_HOLD_ENTRIES;
    const releases = node.releaseEntries;
    for (let i = 0; i < releases.length; i++) {
      const h = releases[i]!;
      if (!h.live)
        throw new InvariantError(
          `task ${showId(node.spec.id)} releases ${JSON.stringify(h.key)}, which is not live`,
          this.sched.now,
          this.name,
        );
      this.holds.delete(h.key);
      for (const a of h.allocations) this.pools[a.pool].free(a.alloc);
    }
    node.releaseEntries = NO_HOLD_ENTRIES;
  }

  /** The records the diagnostics read (`diagnostics.ts`). */
  private records(): GraphRecords {
    const a = this.acct;
    return {
      nodeOf: this.nodeOf,
      bySeq: this.bySeq,
      holds: this.holds,
      pools: this.pools,
      byKind: a.byKind,
      byCategory: a.byCategory,
      finishedCount: a.finishedCount,
      firstStartNs: a.firstStartNs,
      lastFinished: a.lastFinished,
    };
  }

  private deadlockError(): TaskGraphDeadlockError {
    return deadlockError(this.records(), this.sched.now, this.name);
  }
}

/** The entry of `key` among a task's holds (usually its only one). */
function entryOf(holds: readonly HoldEntry[], key: string): HoldEntry | undefined {
  for (let i = 0; i < holds.length; i++) if (holds[i]!.key === key) return holds[i];
  return undefined;
}
