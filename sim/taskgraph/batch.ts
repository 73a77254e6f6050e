/**
 * Validation of one `add` batch, before anything is added: the batch is added whole or not at
 * all. It reads a view of the graph so far and registers the batch's holds there as it checks
 * them (undone if the batch fails); it returns the normalised tasks or throws through `fail`
 * (the executor turns that into a `SimError`).
 */
import { MEMORY_CATEGORIES } from '../resources/memory-pool.ts';
import { hasRepeat, holdKeys, idLabel, NO_KEYS, NONE, needsOf } from './built-batch.ts';
import { POOL_NAMES, TASK_KINDS, type PoolName, type TaskId, type TaskSpec } from './types.ts';

/** A hold as validation sees it: its holder and its releaser (once one is added). */
export interface HoldRecord<T> {
  readonly holder: T;
  releaser: T | undefined;
}

/** What validation needs to know about the graph and the machine, and where it registers holds. */
export interface GraphView<T extends NormalizedTask> {
  has(id: TaskId): boolean;
  isDone(id: TaskId): boolean;
  /** Deps of an already added task. */
  depsOf(id: TaskId): readonly TaskId[];
  /** The hold registered under `key` (holder added, releaser not finished), if any. */
  holdOf(key: string): HoldRecord<T> | undefined;
  /** Registers a new hold of `holder` (a task of the batch) under `key`, with no releaser. */
  openHold(key: string, holder: T): void;
  /** Removes the hold `openHold` registered under `key` (a failed batch). */
  dropHold(key: string): void;
  /** Names `releaser` (a task of the batch) the releaser of hold `h` (undone by resetting `h.releaser`). */
  setReleaser(h: HoldRecord<T>, releaser: T): void;
  readonly gpuStreams: readonly string[];
  readonly cpuCores: number;
  readonly poolCapacityBytes: Readonly<Record<PoolName, number>>;
}

/** A validated task's fields (the executor's `Node` carries them). */
export interface NormalizedTask {
  readonly spec: TaskSpec;
  readonly deps: readonly TaskId[];
  readonly priority: number;
  readonly label: string;
  /** Total bytes per pool (acquired together). */
  readonly needBytes: Readonly<Record<PoolName, number>>;
  /** Distinct hold keys, in order of first appearance. */
  readonly holds: readonly string[];
  readonly releases: readonly string[];
  /** GPU tasks: the stream index. */
  readonly stream: number;
}

export const showId = (id: TaskId): string => (typeof id === 'string' ? JSON.stringify(id) : String(id));

/** A task's name in messages (built only for a message: a string per task otherwise). */
const where = (s: TaskSpec): string => `task ${showId(s.id)}`;

const isSafeNonNegInt = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** Batch positions by id (a Map, or `IdRange` for a builder's consecutive ids). */
type BatchIndex = Pick<ReadonlyMap<TaskId, number>, 'get' | 'has'>;

/** The batch index of ids first, first + 1, ..., first + n − 1, by subtraction (no Map of n entries). */
class IdRange implements BatchIndex {
  constructor(
    private readonly first: number,
    private readonly n: number,
  ) {}
  get(id: TaskId): number | undefined {
    if (typeof id !== 'number') return undefined;
    const i = id - this.first;
    return Number.isInteger(i) && i >= 0 && i < this.n ? i : undefined;
  }
  has(id: TaskId): boolean {
    return this.get(id) !== undefined;
  }
}

/** An `IdRange` if the batch's ids are consecutive safe integers in order, else undefined. */
function consecutiveIds(specs: readonly TaskSpec[]): IdRange | undefined {
  const first = specs[0]?.id;
  if (!(typeof first === 'number' && Number.isSafeInteger(first) && Number.isSafeInteger(first + specs.length)))
    return undefined;
  for (let i = 1; i < specs.length; i++) if (specs[i]?.id !== first + i) return undefined;
  return new IdRange(first, specs.length);
}

/** The batch's ids → positions, each checked (well-formed, new to the graph, not repeated in the batch). */
function indexBatch(
  specs: readonly TaskSpec[],
  view: GraphView<NormalizedTask>,
  fail: (message: string) => never,
): BatchIndex {
  const range = consecutiveIds(specs);
  const inBatch: BatchIndex = range ?? new Map<TaskId, number>();
  for (let i = 0; i < specs.length; i++) {
    const s = specs[i]!;
    if (range) {
      // Ids first, first + 1, ...: valid and distinct; only a clash with the graph is possible.
      if (view.has(s.id)) fail(`task ${showId(s.id)}: id already added`);
      continue;
    }
    const id: unknown = s?.id;
    if (!(typeof id === 'string' || (typeof id === 'number' && Number.isFinite(id)))) {
      fail(`task #${i} of the batch: id must be a string or a finite number (got ${String(id)})`);
    }
    if (view.has(s.id)) fail(`task ${showId(s.id)}: id already added`);
    if (inBatch.has(s.id)) fail(`task ${showId(s.id)}: id appears twice in the batch`);
    (inBatch as Map<TaskId, number>).set(s.id, i);
  }
  return inBatch;
}

/**
 * Makes the record of the batch's i-th task from its normalised fields (the executor's node,
 * which keeps them: no normalised object per task besides it).
 */
export type MakeNormalized<T extends NormalizedTask> = (
  i: number,
  spec: TaskSpec,
  deps: readonly TaskId[],
  priority: number,
  label: string,
  needBytes: Readonly<Record<PoolName, number>>,
  holds: readonly string[],
  releases: readonly string[],
  stream: number,
) => T;

/**
 * Validates a batch. Throws (via `fail`) on the first problem found; see `TaskGraphExecutor.add`.
 * Returns the normalised tasks, each made by `make` (nothing escapes when validation fails).
 */
export function validateBatch<T extends NormalizedTask>(
  specs: readonly TaskSpec[],
  view: GraphView<T>,
  fail: (message: string) => never,
  make: MakeNormalized<T>,
): T[] {
  const inBatch = indexBatch(specs, view, fail);

  const out = new Array<T>(specs.length); // its final length (a pass adds tens of thousands)
  for (let i = 0; i < specs.length; i++) out[i] = normalizeOne(i, specs[i]!, view, inBatch, fail, make);

  // Cycles can only lie inside the batch: earlier tasks never depend on new ones. A batch whose
  // deps all point to earlier tasks of the batch (builders add in creation order) has none.
  const order = depsPointBack(out, inBatch) ? undefined : topologicalOrder(out, inBatch);
  if (order && order.length < out.length) {
    const placed = new Set(order);
    const stuck = out.map((_, i) => i).filter((i) => !placed.has(i));
    fail(
      `dependency cycle among tasks ${stuck
        .slice(0, 10)
        .map((i) => showId(out[i]!.spec.id))
        .join(', ')}${stuck.length > 10 ? ', ...' : ''}`,
    );
  }

  registerHolds(out, view, inBatch, fail);
  return out;
}

/**
 * Checks the batch's holds and releases and registers them in the graph's holds as it goes
 * (one map for the graph and the batch: a pass announces tens of thousands of holds). If a
 * check fails, what the batch registered is undone before `fail` throws, so a failed batch
 * leaves the graph as it was.
 */
function registerHolds<T extends NormalizedTask>(
  out: readonly T[],
  view: GraphView<T>,
  inBatch: BatchIndex,
  fail: (message: string) => never,
): void {
  const opened: string[] = [];
  const released: HoldRecord<T>[] = [];
  const undoAndFail = (message: string): never => {
    for (const key of opened) view.dropHold(key);
    for (const h of released) h.releaser = undefined;
    return fail(message);
  };
  for (let i = 0; i < out.length; i++) {
    const t = out[i]!;
    for (let j = 0; j < t.holds.length; j++) {
      const key = t.holds[j]!;
      const existing = view.holdOf(key);
      if (existing !== undefined) {
        const other = existing.holder.spec.id;
        undoAndFail(
          inBatch.has(other)
            ? `task ${showId(t.spec.id)}: hold key ${JSON.stringify(key)} is also held by task ${showId(other)} of the batch`
            : `task ${showId(t.spec.id)}: hold key ${JSON.stringify(key)} is in use (held by task ${showId(other)})`,
        );
      }
      view.openHold(key, t);
      opened.push(key);
    }
  }
  const depsOf = (id: TaskId): readonly TaskId[] => {
    const i = inBatch.get(id);
    return i !== undefined ? out[i]!.deps : view.depsOf(id);
  };
  const isDone = (id: TaskId): boolean => !inBatch.has(id) && view.isDone(id);
  for (let i = 0; i < out.length; i++) {
    const t = out[i]!;
    for (let j = 0; j < t.releases.length; j++) {
      const key = t.releases[j]!;
      const h = view.holdOf(key);
      if (h === undefined)
        undoAndFail(`task ${showId(t.spec.id)}: releases ${JSON.stringify(key)}, which no task holds`);
      const prior = h!.releaser;
      if (prior !== undefined)
        undoAndFail(
          `task ${showId(t.spec.id)}: releases ${JSON.stringify(key)}, already released by task ${showId(prior.spec.id)}`,
        );
      const holder = h!.holder.spec.id;
      if (!isDone(holder) && !isAncestor(holder, t.spec.id, depsOf, isDone)) {
        undoAndFail(
          `task ${showId(t.spec.id)}: releases ${JSON.stringify(key)} but does not depend (directly or not) on its holder ${showId(holder)}`,
        );
      }
      view.setReleaser(h!, t);
      released.push(h!);
    }
  }
}

function normalizeOne<T extends NormalizedTask>(
  index: number,
  s: TaskSpec,
  view: GraphView<NormalizedTask>,
  inBatch: BatchIndex,
  fail: (m: string) => never,
  make: MakeNormalized<T>,
): T {
  if (!(TASK_KINDS as readonly string[]).includes(s.kind)) fail(`${where(s)}: unknown kind ${JSON.stringify(s.kind)}`);
  if (typeof s.category !== 'string') fail(`${where(s)}: category must be a string`);
  const priority = s.priority ?? 0;
  if (typeof priority !== 'number' || !Number.isFinite(priority))
    fail(`${where(s)}: priority must be a finite number (got ${String(priority)})`);

  const given = s.deps ?? NONE;
  let deps: TaskId[];
  if (given.length <= 16 && !hasRepeat(given)) {
    // The usual case: checked in order, and the spec's own list kept, not copied (the executor
    // keeps the spec too and reads it until the task has run: a task must not change once added).
    for (let i = 0; i < given.length; i++) checkDep(s, given[i]!, view, inBatch, fail);
    deps = given as TaskId[];
  } else {
    // Repeated deps are dropped: a scan of the few kept so far, or a set for long lists.
    deps = [];
    const seen = given.length > 16 ? new Set<TaskId>() : undefined;
    for (const d of given) {
      if (seen ? seen.has(d) : deps.includes(d)) continue;
      seen?.add(d);
      checkDep(s, d, view, inBatch, fail);
      deps.push(d);
    }
  }

  const stream = checkKindFields(s, view, fail);

  const allocs = s.alloc ?? NONE;
  const holds: string[] = allocs.length > 0 ? holdKeys(allocs) : NO_KEYS;
  for (let i = 0; i < allocs.length; i++) {
    const a = allocs[i]!;
    if (!(POOL_NAMES as readonly string[]).includes(a.pool))
      fail(`${where(s)}: unknown pool ${JSON.stringify(a.pool)}`);
    if (!isSafeNonNegInt(a.bytes))
      fail(`${where(s)}: allocation bytes must be a non-negative integer (got ${String(a.bytes)})`);
    if (!(MEMORY_CATEGORIES as readonly string[]).includes(a.category))
      fail(`${where(s)}: unknown memory category ${JSON.stringify(a.category)}`);
    if (a.hold !== undefined && (typeof a.hold !== 'string' || a.hold === ''))
      fail(`${where(s)}: hold key must be a non-empty string`);
  }
  const needBytes = needsOf(allocs);
  for (const p of POOL_NAMES) {
    if (needBytes[p] > view.poolCapacityBytes[p]) {
      fail(`${where(s)}: needs ${needBytes[p]} B of ${p}, more than its capacity ${view.poolCapacityBytes[p]} B`);
    }
  }
  const released = s.release ?? NONE;
  for (let i = 0; i < released.length; i++) {
    const key = released[i];
    if (typeof key !== 'string' || key === '') fail(`${where(s)}: release keys must be non-empty strings`);
    for (let j = 0; j < i; j++) if (released[j] === key) fail(`${where(s)}: releases ${JSON.stringify(key)} twice`);
  }
  // Checked distinct: the spec's own list (as for deps).
  const releases = released.length > 0 ? (released as string[]) : NO_KEYS;
  return make(index, s, deps, priority, s.label ?? idLabel(s.id), needBytes, holds, releases, stream);
}

/** Checks one (first-seen) dep of `s`: not itself, and added before or in the batch. */
function checkDep(
  s: TaskSpec,
  d: TaskId,
  view: GraphView<NormalizedTask>,
  inBatch: BatchIndex,
  fail: (m: string) => never,
): void {
  if (d === s.id) fail(`${where(s)}: depends on itself`);
  if (!inBatch.has(d) && !view.has(d))
    fail(`${where(s)}: unknown dep ${showId(d)} (deps must be added before or in the same batch)`);
}

/** Checks the fields of the task's kind (duration and stream, cores, bytes). Returns its GPU stream (0 if none). */
function checkKindFields(s: TaskSpec, view: GraphView<NormalizedTask>, fail: (m: string) => never): number {
  let stream = 0;
  switch (s.kind) {
    case 'gpu': {
      if (!isSafeNonNegInt(s.durationNs))
        fail(`${where(s)}: durationNs must be a non-negative integer (got ${String(s.durationNs)})`);
      const st = s.stream ?? 0;
      if (typeof st === 'number') {
        if (!(Number.isInteger(st) && st >= 0 && st < view.gpuStreams.length))
          fail(`${where(s)}: no GPU stream ${st} (have ${view.gpuStreams.length})`);
        stream = st;
      } else {
        stream = view.gpuStreams.indexOf(st);
        if (stream < 0)
          fail(
            `${where(s)}: no GPU stream named ${JSON.stringify(st)} (have ${view.gpuStreams.map((n) => JSON.stringify(n)).join(', ')})`,
          );
      }
      break;
    }
    case 'cpu':
      if (!(Number.isInteger(s.cores) && s.cores >= 1 && s.cores <= view.cpuCores))
        fail(`${where(s)}: cores must be an integer in [1, ${view.cpuCores}] (got ${String(s.cores)})`);
      if (!isSafeNonNegInt(s.computeNs))
        fail(`${where(s)}: computeNs must be a non-negative integer (got ${String(s.computeNs)})`);
      if (!isSafeNonNegInt(s.bytes)) fail(`${where(s)}: bytes must be a non-negative integer (got ${String(s.bytes)})`);
      break;
    case 'h2d':
    case 'd2h':
      if (!(isSafeNonNegInt(s.bytes) && s.bytes > 0))
        fail(`${where(s)}: bytes must be a positive integer (got ${String(s.bytes)})`);
      break;
    case 'barrier':
      break;
  }
  return stream;
}

/** True if every dep inside the batch is an earlier task of the batch (then there is no cycle). */
function depsPointBack(tasks: readonly NormalizedTask[], inBatch: BatchIndex): boolean {
  for (let i = 0; i < tasks.length; i++) {
    for (const d of tasks[i]!.deps) {
      const j = inBatch.get(d);
      if (j !== undefined && j >= i) return false;
    }
  }
  return true;
}

/** Kahn's algorithm over the batch (deps outside the batch are already in the graph). Returns batch indices. */
function topologicalOrder(tasks: readonly NormalizedTask[], inBatch: BatchIndex): number[] {
  const indegree = tasks.map(() => 0);
  const dependents: number[][] = tasks.map(() => []);
  tasks.forEach((t, i) => {
    for (const d of t.deps) {
      const j = inBatch.get(d);
      if (j !== undefined) {
        indegree[i]!++;
        dependents[j]!.push(i);
      }
    }
  });
  const order: number[] = [];
  const queue = indegree.flatMap((n, i) => (n === 0 ? [i] : []));
  for (let head = 0; head < queue.length; head++) {
    const i = queue[head]!;
    order.push(i);
    for (const j of dependents[i]!) if (--indegree[j]! === 0) queue.push(j);
  }
  return order;
}

/**
 * True if `ancestor` is reachable from `id` through deps, not walking through finished tasks.
 * Breadth-first, so the usual case (the holder is a direct dep) costs one look at the deps.
 */
function isAncestor(
  ancestor: TaskId,
  id: TaskId,
  depsOf: (id: TaskId) => readonly TaskId[],
  isDone: (id: TaskId) => boolean,
): boolean {
  // The usual case first, without allocating: the holder is a direct dep.
  const direct = depsOf(id);
  for (let i = 0; i < direct.length; i++) if (direct[i] === ancestor) return true;
  const seen = new Set<TaskId>();
  const queue: TaskId[] = [id];
  for (let head = 0; head < queue.length; head++) {
    for (const d of depsOf(queue[head]!)) {
      if (d === ancestor) return true;
      if (seen.has(d) || isDone(d)) continue; // a finished task's ancestors are finished; the holder is not
      seen.add(d);
      queue.push(d);
    }
  }
  return false;
}
