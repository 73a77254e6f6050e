/**
 * The static critical path of a task DAG: the longest chain of durations through `deps`,
 * ignoring every resource and memory contention (DESIGN §8 MoE-Gen: "T comes from the
 * critical path of the pass's task DAG, longest path by dynamic programming over a
 * topological order"). A lower bound on the makespan the executor can reach for the same
 * tasks and durations. Pure; the caller prices each task (cost model, or bytes / bandwidth +
 * latency for a transfer).
 */
import type { TaskId, TaskSpec } from './types.ts';

export interface StaticCriticalPath {
  /** Length of the longest chain (ns; the sum of its durations). 0 for an empty graph. */
  readonly lengthNs: number;
  /** The chain, first task first (ties: the dep listed first; for the end, the task given last). */
  readonly path: readonly TaskId[];
  /** Earliest finish of every task under infinite resources, in input order. */
  readonly earliestFinishNs: ReadonlyMap<TaskId, number>;
}

/**
 * Longest path through `tasks` with task durations `durationNs(task)` (≥ 0).
 * Throws RangeError on a duplicate id, a dep not among `tasks`, a negative duration or a cycle.
 */
export function staticCriticalPath(
  tasks: readonly TaskSpec[],
  durationNs: (task: TaskSpec) => number,
): StaticCriticalPath {
  const index = new Map<TaskId, number>();
  tasks.forEach((t, i) => {
    if (index.has(t.id)) throw new RangeError(`staticCriticalPath: duplicate task id ${String(t.id)}`);
    index.set(t.id, i);
  });
  const deps = tasks.map((t) =>
    [...new Set(t.deps ?? [])].map((d) => {
      const j = index.get(d);
      if (j === undefined)
        throw new RangeError(`staticCriticalPath: task ${String(t.id)} depends on ${String(d)}, not in the graph`);
      return j;
    }),
  );
  const indegree = deps.map((ds) => ds.length);
  const dependents: number[][] = tasks.map(() => []);
  deps.forEach((ds, i) => ds.forEach((j) => dependents[j]!.push(i)));
  const finish = tasks.map(() => 0);
  const via = tasks.map(() => -1);
  const queue = indegree.flatMap((n, i) => (n === 0 ? [i] : []));
  let done = 0;
  for (let head = 0; head < queue.length; head++) {
    const i = queue[head]!;
    done++;
    // The binding dep is the one finishing last (the first listed among equals).
    for (const j of deps[i]!) if (via[i]! < 0 || finish[j]! > finish[via[i]!]!) via[i] = j;
    const start = via[i]! < 0 ? 0 : finish[via[i]!]!;
    const d = durationNs(tasks[i]!);
    if (!(d >= 0) || !Number.isFinite(d))
      throw new RangeError(`staticCriticalPath: task ${String(tasks[i]!.id)} has duration ${d}`);
    finish[i] = start + d;
    for (const k of dependents[i]!) if (--indegree[k]! === 0) queue.push(k);
  }
  if (done < tasks.length) throw new RangeError('staticCriticalPath: the graph has a cycle');
  let last = -1;
  // The last of the latest, as in TaskGraphExecutor.criticalPath: a final join wins its ties.
  finish.forEach((f, i) => {
    if (last < 0 || f >= finish[last]!) last = i;
  });
  const path: TaskId[] = [];
  for (let i = last; i >= 0; i = via[i]!) path.push(tasks[i]!.id);
  path.reverse();
  return {
    lengthNs: last < 0 ? 0 : finish[last]!,
    path,
    earliestFinishNs: new Map(tasks.map((t, i) => [t.id, finish[i]!])),
  };
}
