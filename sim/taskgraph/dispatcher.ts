/**
 * The dispatching part of the task-graph executor (`task-graph.ts`): it holds the ready tasks
 * of each resource, hands them to the GPU, the links and the CPU pool in one global order, and
 * allocates their memory when they go. Kept apart from the graph bookkeeping (adding tasks,
 * deps, holds, queries) because this is the executor's hot path and its own set of decisions:
 *
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
 *   dispatcher is woken by the pools (`MemoryPool.whenFreed`) and by the executor's
 *   completions; it never polls. The price is that a large request can wait while smaller ones
 *   keep going; and memory is granted greedily with no look-ahead, so a graph whose
 *   low-priority tasks can fill a pool before a high-priority task needing it becomes ready
 *   can deadlock: builders bound such prefetches with deps (e.g. a buffer's next fill depends
 *   on its last release). Memory-blocked tasks are parked in groups of equal need (see
 *   `ParkGroup`), so a pass costs about the tasks it can start, not every task waiting for
 *   memory.
 */
import { InvariantError } from '../kernel/errors.ts';
import { EventPriority, type Scheduler } from '../kernel/simulation.ts';
import type { Ns } from '../kernel/time.ts';
import type { Resources } from '../resources/index.ts';
import type { MemoryPool } from '../resources/memory-pool.ts';
import { showId } from './batch.ts';
import {
  compareHeads,
  type HeldAllocation,
  type Lane,
  type LaneKind,
  NO_SOURCE,
  type Node,
  type ParkGroup,
  type Source,
} from './nodes.ts';
import { MergeHeap } from './merge-heap.ts';
import { ReadyList } from './ready-list.ts';
import type { PoolName, TaskGraphEvent, TaskKind } from './types.ts';

/** The resources the executor drives (a subset of `Resources`, so tests can build just these). */
export type TaskGraphResources = Pick<Resources, 'gpu' | 'h2d' | 'd2h' | 'cpu' | 'vram' | 'host'>;

export class Dispatcher {
  /** Lanes in a fixed order; `gpuLaneOfStream[s]` is the lane of GPU stream s. */
  private readonly lanes: readonly Lane[];
  private readonly gpuLaneOfStream: readonly Lane[];
  private readonly laneOfKind: Readonly<Record<'h2d' | 'd2h' | 'cpu' | 'barrier', Lane>>;
  private readonly waitingOnPool: Record<PoolName, boolean> = { vram: false, host: false };
  /**
   * Ready tasks that found a pool short, out of their lanes, grouped by (pool, lane, bytes
   * needed there); key `pool:lane:bytes`. A group takes part in a pass only while the pool has
   * that many bytes free (a pass never frees memory). In insertion order, for determinism of
   * anything that iterates them (the merge itself orders by task).
   */
  private readonly parkGroups = new Map<string, ParkGroup>();
  /** Park groups per pool (a pool with one asks for a wake-up after each pass, `relisten`). */
  private readonly groupsOnPool: Record<PoolName, number> = { vram: 0, host: 0 };
  private cpuCoresInUse = 0;
  /** Tasks handed to a resource and not finished. */
  inFlight = 0;
  /** A `taskgraph.dispatch` event is scheduled and has not run yet. */
  dispatchPending = false;
  /**
   * A pass's merge of its sources, the sources it entered (`visitedCount` of them), and its
   * memory-blocked tasks (node, pool; `movedCount` entries): reused, never emptied by
   * `length = 0` (that gives an array's storage back, and the next pass grew it again).
   */
  private readonly heap = new MergeHeap<Source>(compareHeads);
  private readonly visited: Source[] = [];
  private visitedCount = 0;
  private readonly moved: (Node | PoolName)[] = [];
  private movedCount = 0;

  /**
   * @param finish called when a resource has finished a task (the executor's completion)
   * @param maxQueued most transfers queued on each link (validated by the executor)
   */
  constructor(
    private readonly r: TaskGraphResources,
    private readonly sched: Scheduler<TaskGraphEvent>,
    private readonly pools: Readonly<Record<PoolName, MemoryPool>>,
    private readonly name: string,
    maxQueued: number,
    private readonly finish: (node: Node) => void,
  ) {
    let laneIndex = 0;
    const lane = (laneName: string, kind: LaneKind, capacity: number): Lane => {
      const ready = new ReadyList<Node>();
      const l: Lane = { index: laneIndex++, name: laneName, kind, ready, outstanding: 0, capacity, source: NO_SOURCE };
      l.source = { list: ready, lane: l, group: undefined, cursor: 0 };
      return l;
    };
    const gpu = r.gpu;
    const streamNames = Array.from({ length: gpu.streams }, (_, s) => gpu.streamName(s));
    // Concurrent streams overlap fully, so each is its own resource; otherwise the SMs run one
    // kernel at a time whatever its stream, so all streams share one lane.
    const gpuLanes = gpu.concurrentStreams
      ? streamNames.map((n) => lane(`gpu ${n}`, 'gpu', 1))
      : [lane('gpu', 'gpu', 1)];
    this.gpuLaneOfStream = streamNames.map((_, s) => gpuLanes[gpu.concurrentStreams ? s : 0]!);
    this.laneOfKind = {
      h2d: lane('h2d', 'link', maxQueued),
      d2h: lane('d2h', 'link', maxQueued),
      cpu: lane('cpu', 'cpu', Number.POSITIVE_INFINITY),
      barrier: lane('barrier', 'barrier', Number.POSITIVE_INFINITY),
    };
    const k = this.laneOfKind;
    this.lanes = [...gpuLanes, k.h2d, k.d2h, k.cpu, k.barrier];
  }

  /** The lane a task waits in when ready. */
  laneOf(kind: TaskKind, stream: number): Lane {
    return kind === 'gpu' ? this.gpuLaneOfStream[stream]! : this.laneOfKind[kind];
  }

  /** Marks a task ready (its deps have finished) in its lane. */
  makeReady(node: Node): void {
    node.state = 'ready';
    node.readyNs = this.sched.now;
    node.lane.ready.insert(node);
  }

  /** Schedules a dispatch pass at the current instant, unless one is pending. */
  requestDispatch(): void {
    if (this.dispatchPending) return;
    this.dispatchPending = true;
    this.sched.schedule(this.sched.now, { kind: 'taskgraph.dispatch' }, EventPriority.resource);
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
  pass(): void {
    this.dispatchPending = false;
    // The heap and the lists are the dispatcher's own, emptied after each pass (a pass runs
    // per instant with completions: allocating them anew dominated the executor's garbage).
    const heap = this.heap;
    const visited = this.visited;
    const moved = this.moved;
    this.visitedCount = 0;
    this.movedCount = 0;
    const vram = this.pools.vram;
    const host = this.pools.host;
    for (const l of this.lanes) this.addSource(l.source);
    for (const g of this.parkGroups.values())
      if (g.needBytes <= (g.pool === 'vram' ? vram : host).freeBytes) this.addSource(g.source);
    let cpuClosed = false;
    for (;;) {
      const src = heap.pop();
      if (!src) break;
      const { lane, group } = src;
      if (!laneHasRoom(lane) || (lane.kind === 'cpu' && cpuClosed)) continue; // none of it can start now
      if (group && group.needBytes > this.pools[group.pool].freeBytes) continue; // nor can any of this group
      const node = src.list.at(src.cursor)!;
      // The first pool (in `POOL_NAMES` order: VRAM, host) that cannot grant the task's need now.
      const need = node.needBytes;
      const short: PoolName | undefined = !vram.canAllocate(need.vram)
        ? 'vram'
        : !host.canAllocate(need.host)
          ? 'host'
          : undefined;
      const spec = node.spec;
      if (short === undefined && spec.kind === 'cpu' && spec.cores > this.r.cpu.cores - this.cpuCoresInUse) {
        cpuClosed = true; // head-of-line: narrower, less urgent tasks do not overtake it (it stays)
        continue;
      }
      // Every task a source's cursor passes leaves it: dispatched, or parked (again) after the pass.
      src.cursor++;
      if (short !== undefined) {
        this.addMoved(node, short);
      } else {
        this.allocate(node);
        this.submit(node);
      }
      if (src.cursor < src.list.length) heap.push(src);
    }
    for (let i = 0; i < this.visitedCount; i++) {
      const src = visited[i]!;
      if (src.cursor === 0) continue;
      src.list.removeFirst(src.cursor);
      if (src.group && src.list.length === 0) {
        this.parkGroups.delete(src.group.key);
        this.groupsOnPool[src.group.pool]--;
      }
    }
    heap.clear();
    const movedCount = this.movedCount;
    for (let i = 0; i < movedCount; i += 2) this.park(moved[i] as Node, moved[i + 1] as PoolName);
    this.relisten(); // after the parks: a pool some parked task waits for wakes the dispatcher at its next free
  }

  /** Enters a list (a lane's or a park group's own source) into the pass's merge, if it has tasks and its lane has room. */
  private addSource(src: Source): void {
    if (src.list.length === 0 || !laneHasRoom(src.lane)) return;
    src.cursor = 0;
    if (this.visitedCount === this.visited.length) this.visited.push(src);
    else this.visited[this.visitedCount] = src;
    this.visitedCount++;
    this.heap.push(src);
  }

  /** Records a task the pass found short of `pool` (parked after the pass). */
  private addMoved(node: Node, pool: PoolName): void {
    const moved = this.moved;
    const i = this.movedCount;
    if (i === moved.length) moved.push(node, pool);
    else {
      moved[i] = node;
      moved[i + 1] = pool;
    }
    this.movedCount = i + 2;
  }

  /**
   * A resource finished `node`: frees its place on the resource and records when it started
   * there (the executor has set its finish time).
   * @throws InvariantError for a transfer that finished without starting
   */
  finished(node: Node, now: Ns): void {
    const s = node.spec;
    node.lane.outstanding--;
    this.inFlight--;
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
        node.transfer = undefined; // read once: a finished pass's transfers are garbage, not kept by its nodes
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
  }

  /** Acquires all of the node's memory (the caller has checked that it fits). */
  private allocate(node: Node): void {
    const allocs = node.spec.alloc;
    if (!allocs || allocs.length === 0) return;
    const held = new Array<HeldAllocation>(allocs.length); // its final length (see `NO_ALLOCATIONS`)
    for (let i = 0; i < allocs.length; i++) {
      const a = allocs[i]!;
      const label = a.hold !== undefined ? `${node.label} [${a.hold}]` : node.label;
      const alloc = this.pools[a.pool].tryAllocate(a.bytes, a.category, label);
      if (!alloc)
        throw new InvariantError(
          `allocation of ${a.bytes} B of ${a.pool} failed after the check`,
          this.sched.now,
          this.name,
        );
      held[i] = { alloc, pool: a.pool, hold: a.hold };
    }
    node.allocations = held;
  }

  /** Puts a ready task whose memory is short in `pool` into its park group (the pass then asks the pool for a wake-up). */
  private park(node: Node, pool: PoolName): void {
    const needBytes = node.needBytes[pool];
    const key = `${pool}:${node.lane.index}:${needBytes}`;
    let group = this.parkGroups.get(key);
    if (!group) {
      const list = new ReadyList<Node>();
      const lane = node.lane;
      group = { key, pool, lane, needBytes, list, source: NO_SOURCE };
      group.source = { list, lane, group, cursor: 0 };
      this.parkGroups.set(key, group);
      this.groupsOnPool[pool]++;
    }
    group.list.insert(node);
    node.parkedIn = group;
  }

  /**
   * Asks `pool` for a wake-up at its next free, unless one is asked. Our own finishes request a
   * dispatch anyway; this catches frees by anyone else. The wake-up is one-shot: a pass after a
   * free that was not enough for a parked group asks again (`relisten`).
   */
  private listen(pool: PoolName): void {
    if (this.waitingOnPool[pool]) return;
    this.waitingOnPool[pool] = true;
    this.pools[pool].whenFreed(() => {
      this.waitingOnPool[pool] = false;
      this.requestDispatch();
    });
  }

  /** After a pass: a wake-up from each pool some parked task still waits for. */
  private relisten(): void {
    if (this.groupsOnPool.vram > 0) this.listen('vram');
    if (this.groupsOnPool.host > 0) this.listen('host');
  }

  private submit(node: Node): void {
    const s = node.spec;
    node.state = 'dispatched';
    node.parkedIn = undefined;
    node.dispatchNs = this.sched.now;
    node.lane.outstanding++;
    this.inFlight++;
    // Not a named local: the TypeScript loader would give every such closure a name (a
    // defineProperty per task). `callback` returns its argument.
    const onDone = callback(() => this.finish(node));
    const label = node.label;
    switch (s.kind) {
      case 'gpu':
        this.r.gpu.submitKernel(node.stream, s.durationNs, label, s.category, onDone);
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
}

/** Its argument: a closure passed through a call is not named by the TypeScript loader (see `submit`). */
function callback(f: () => void): () => void {
  return f;
}

function laneHasRoom(lane: Lane): boolean {
  return lane.outstanding < lane.capacity;
}
