/**
 * What the task-graph executor (`task-graph.ts`) reports about itself: totals, the critical path
 * of a finished run, holds, why each stuck task is not running, and the deadlock error built
 * from that. Read-only functions over the executor's records: nothing here changes a run.
 */
import type { Ns } from '../kernel/time.ts';
import { SimError } from '../kernel/errors.ts';
import type { MemoryPool } from '../resources/memory-pool.ts';
import { showId } from './batch.ts';
import type { HoldEntry, MutableBusy, Node } from './nodes.ts';
import {
  POOL_NAMES,
  TASK_KINDS,
  type BusyStats,
  type HoldInfo,
  type PoolName,
  type StuckTask,
  type TaskGraphStats,
  type TaskId,
  type TaskKind,
} from './types.ts';

/** Thrown when the graph cannot make progress: nothing of it runs and tasks remain. */
export class TaskGraphDeadlockError extends SimError {
  override readonly name: string = 'TaskGraphDeadlockError';
  constructor(
    message: string,
    simTimeNs: number,
    origin: string,
    readonly stuck: readonly StuckTask[],
  ) {
    super(message, simTimeNs, origin);
  }
}

/** The executor's records the diagnostics read. */
export interface GraphRecords {
  /** The node of an added task's id. */
  readonly nodeOf: (id: TaskId) => Node;
  readonly bySeq: readonly Node[];
  readonly holds: ReadonlyMap<string, HoldEntry>;
  readonly pools: Readonly<Record<PoolName, MemoryPool>>;
  readonly byKind: Readonly<Record<TaskKind, MutableBusy>>;
  readonly byCategory: ReadonlyMap<string, MutableBusy>;
  readonly finishedCount: number;
  readonly firstStartNs: Ns | undefined;
  readonly lastFinished: Node | undefined;
}

/** Totals over finished tasks. */
export function graphStats(g: GraphRecords): TaskGraphStats {
  const copy = (b: MutableBusy): BusyStats => ({ finished: b.finished, busyNs: b.busyNs });
  const byKind = Object.fromEntries(TASK_KINDS.map((k) => [k, copy(g.byKind[k])])) as Record<TaskKind, BusyStats>;
  const byCategory: Record<string, BusyStats> = {};
  for (const [c, b] of g.byCategory) byCategory[c] = copy(b);
  return {
    added: g.bySeq.length,
    finished: g.finishedCount,
    byKind,
    byCategory,
    ...(g.firstStartNs !== undefined ? { firstStartNs: g.firstStartNs } : {}),
    ...(g.lastFinished ? { lastFinishNs: g.lastFinished.finishNs } : {}),
  };
}

/** The dependency chain that ends at `last`, back through the dep that finished last each time (see `TaskGraphExecutor.criticalPath`). */
export function criticalPathFrom(last: Node | undefined, nodeOf: (id: TaskId) => Node): TaskId[] {
  const path: TaskId[] = [];
  let n = last;
  while (n) {
    path.push(n.spec.id);
    let next: Node | undefined;
    for (const id of n.deps) {
      const d = nodeOf(id);
      if (!next || d.finishNs > next.finishNs) next = d;
    }
    n = next;
  }
  return path.reverse();
}

/** Holds registered (announced by an unfinished holder, or live), in registration order. */
export function holdsInfo(g: GraphRecords): HoldInfo[] {
  return [...g.holds.values()].map((h) => {
    const bytesByPool: Record<PoolName, number> = { vram: 0, host: 0 };
    if (h.live) for (const a of h.allocations) bytesByPool[a.pool] += a.alloc.bytes;
    else for (const p of POOL_NAMES) bytesByPool[p] = heldBytesOf(h.holder, h.key, p);
    return {
      key: h.key,
      holder: h.holder.spec.id,
      ...(h.releaser ? { releaser: h.releaser.spec.id } : {}),
      live: h.live,
      bytesByPool,
    };
  });
}

/** Why each unfinished, undispatched task is not running now, in add order. */
export function stuckTasks(g: GraphRecords): StuckTask[] {
  const out: StuckTask[] = [];
  for (const n of g.bySeq) {
    if (n.state === 'pending') {
      const waitsFor = n.deps.map(g.nodeOf).filter((d) => d.state !== 'done');
      out.push({
        id: n.spec.id,
        label: n.label,
        state: 'pending',
        waitsFor: waitsFor.map((d) => d.spec.id),
        memory: [],
        reason: `waits for ${waitsFor.map((d) => `${showId(d.spec.id)} (${d.state})`).join(', ')}`,
      });
    } else if (n.state === 'ready') {
      const memory = POOL_NAMES.filter((p) => !g.pools[p].canAllocate(n.needBytes[p])).map((p) => ({
        pool: p,
        neededBytes: n.needBytes[p],
        freeBytes: g.pools[p].freeBytes,
        capacityBytes: g.pools[p].capacityBytes,
      }));
      const reason =
        memory.length > 0
          ? memory
              .map(
                (m) =>
                  `needs ${m.neededBytes} B of ${m.pool}, ${m.freeBytes} B free of ${m.capacityBytes} B${describePoolUse(g, m.pool)}`,
              )
              .join('; ')
          : `waits for ${n.lane.name} (${n.lane.outstanding} of this graph's tasks on it)`;
      out.push({ id: n.spec.id, label: n.label, state: 'ready', waitsFor: [], memory, reason });
    }
  }
  return out;
}

function heldBytesOf(holder: Node, key: string, pool: PoolName): number {
  let b = 0;
  for (const a of holder.spec.alloc ?? []) if (a.hold === key && a.pool === pool) b += a.bytes;
  return b;
}

/** ` (in use: "k" 8 B held by 1, released by 3 (pending); 2 B outside this graph)` for a pool. */
function describePoolUse(g: GraphRecords, pool: PoolName): string {
  const parts: string[] = [];
  let ours = 0;
  for (const h of g.holds.values()) {
    if (!h.live) continue;
    let b = 0;
    for (const a of h.allocations) if (a.pool === pool) b += a.alloc.bytes;
    if (b === 0) continue;
    ours += b;
    const rel = h.releaser
      ? `released by ${showId(h.releaser.spec.id)} (${h.releaser.state})`
      : 'no releasing task yet';
    parts.push(`${JSON.stringify(h.key)} ${b} B held by ${showId(h.holder.spec.id)}, ${rel}`);
  }
  for (const n of g.bySeq) {
    for (const a of n.allocations) {
      if (a.pool === pool) ours += a.alloc.bytes;
    }
  }
  const outside = g.pools[pool].usedBytes - ours;
  if (outside > 0) parts.push(`${outside} B outside this graph`);
  return parts.length > 0 ? ` (in use: ${parts.join('; ')})` : '';
}

/** The error of a graph that cannot proceed, listing (up to 20 of) its stuck tasks. */
export function deadlockError(g: GraphRecords, nowNs: Ns, origin: string): TaskGraphDeadlockError {
  const stuck = stuckTasks(g);
  const shown = stuck
    .slice(0, 20)
    .map(
      (t) => `\n  - task ${showId(t.id)}${t.label !== String(t.id) ? ` "${t.label}"` : ''} (${t.state}): ${t.reason}`,
    );
  const more = stuck.length > 20 ? `\n  ... and ${stuck.length - 20} more` : '';
  return new TaskGraphDeadlockError(
    `deadlock: nothing of the graph is running and ${stuck.length} task(s) cannot proceed:${shown.join('')}${more}`,
    nowNs,
    origin,
    stuck,
  );
}
