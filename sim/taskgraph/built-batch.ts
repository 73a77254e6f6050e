/**
 * The normalisation of a task batch that validation (`batch.ts`) and a builder's batches share,
 * and the path of a builder's batch (`TaskGraphExecutor.addBuilt`): the same normalised tasks
 * as `validateBatch` makes, without its checks. A batch goes this way only from a graph builder
 * of the simulator whose every batch `validateBatch` accepts; a property test runs both paths on
 * the builder's DAGs (`test/property/throughput.test.ts`) and on random graphs
 * (`test/property/taskgraph.test.ts`).
 */
import type { GraphView, MakeNormalized, NormalizedTask } from './batch.ts';
import type { MemoryRequest, PoolName, TaskId, TaskSpec } from './types.ts';

/**
 * Shared by every task without deps, allocations or releases: no array or object per such
 * task. Never written (a task with entries gets its own); not frozen, as frozen arrays have
 * another elements kind and made the loops over these lists polymorphic.
 */
export const NONE: readonly never[] = [];
export const NO_KEYS = NONE as unknown as string[];
const NO_BYTES: Readonly<Record<PoolName, number>> = { vram: 0, host: 0 };

/**
 * A batch made by a graph builder of the simulator itself (`pass-dag.ts`), normalised exactly
 * as `validateBatch` normalises it but without its checks, and its holds registered. Only for a
 * builder whose every batch `validateBatch` accepts, which a property test guards over the
 * builder's inputs (`test/property/throughput.test.ts`: the same pass through both paths gives
 * the same result). The checks were ~12 % of a MoE-Gen run's time (docs/PERFORMANCE.md); a
 * policy's or a plugin's tasks always go through `validateBatch`.
 */
export function normalizeBuiltBatch<T extends NormalizedTask>(
  specs: readonly TaskSpec[],
  view: GraphView<T>,
  make: MakeNormalized<T>,
): T[] {
  const out = new Array<T>(specs.length);
  for (let i = 0; i < specs.length; i++) out[i] = normalizeBuilt(i, specs[i]!, view, make);
  // As `registerHolds`: every hold of the batch opened, then the releasers named.
  for (let i = 0; i < out.length; i++) {
    const holds = out[i]!.holds;
    for (let j = 0; j < holds.length; j++) view.openHold(holds[j]!, out[i]!);
  }
  for (let i = 0; i < out.length; i++) {
    const releases = out[i]!.releases;
    for (let j = 0; j < releases.length; j++) view.setReleaser(view.holdOf(releases[j]!)!, out[i]!);
  }
  return out;
}

/** `normalizeOne`'s normalisation without its checks (the spec is known valid). */
function normalizeBuilt<T extends NormalizedTask>(
  index: number,
  s: TaskSpec,
  view: GraphView<NormalizedTask>,
  make: MakeNormalized<T>,
): T {
  const given = s.deps ?? NONE;
  const deps = given.length <= 16 && !hasRepeat(given) ? (given as TaskId[]) : distinct(given);
  let stream = 0;
  if (s.kind === 'gpu' && s.stream !== undefined)
    stream = typeof s.stream === 'number' ? s.stream : view.gpuStreams.indexOf(s.stream);
  const allocs = s.alloc ?? NONE;
  const holds: string[] = allocs.length > 0 ? holdKeys(allocs) : NO_KEYS;
  const released = s.release ?? NONE;
  const releases = released.length > 0 ? (released as string[]) : NO_KEYS;
  return make(index, s, deps, s.priority ?? 0, s.label ?? idLabel(s.id), needsOf(allocs), holds, releases, stream);
}

/** The ids of `given` without repeats, in order of first appearance. */
function distinct(given: readonly TaskId[]): TaskId[] {
  const deps: TaskId[] = [];
  const seen = new Set<TaskId>();
  for (const d of given) {
    if (seen.has(d)) continue;
    seen.add(d);
    deps.push(d);
  }
  return deps;
}

/**
 * Needs with nothing on the host, by VRAM bytes, made once per process (a pass's buffers come
 * in a few sizes, and the executor keeps each task's needs until the task has run). Never
 * written; bounded, as any number of sizes may come.
 */
const VRAM_NEEDS = new Map<number, Readonly<Record<PoolName, number>>>();
const MAX_VRAM_NEEDS = 4096;

/** A task's total bytes per pool, summed over its allocations. */
export function needsOf(allocs: readonly MemoryRequest[]): Readonly<Record<PoolName, number>> {
  let vramBytes = 0;
  let hostBytes = 0;
  for (let i = 0; i < allocs.length; i++) {
    const a = allocs[i]!;
    if (a.pool === 'vram') vramBytes += a.bytes;
    else hostBytes += a.bytes;
  }
  return needBytesOf(vramBytes, hostBytes);
}

/** A task's total bytes per pool: a shared record when only VRAM is needed. */
function needBytesOf(vram: number, host: number): Readonly<Record<PoolName, number>> {
  if (host !== 0) return { vram, host };
  if (vram === 0) return NO_BYTES;
  let need = VRAM_NEEDS.get(vram);
  if (need === undefined) {
    if (VRAM_NEEDS.size >= MAX_VRAM_NEEDS) VRAM_NEEDS.clear();
    need = { vram, host: 0 };
    VRAM_NEEDS.set(vram, need);
  }
  return need;
}

/**
 * The distinct hold keys of a task's allocations, in order of first appearance, in an array of
 * its final length (one grown by `push` from empty reserves 17 slots, and a pass keeps one per
 * holder). Keys are checked by the caller.
 */
export function holdKeys(allocs: readonly MemoryRequest[]): string[] {
  let n = 0;
  for (let i = 0; i < allocs.length; i++) if (isNewHold(allocs, i)) n++;
  if (n === 0) return NO_KEYS;
  const out = new Array<string>(n);
  let k = 0;
  for (let i = 0; i < allocs.length; i++) if (isNewHold(allocs, i)) out[k++] = allocs[i]!.hold!;
  return out;
}

/** Whether allocation i has a hold key not seen in allocations 0 … i − 1. */
function isNewHold(allocs: readonly MemoryRequest[], i: number): boolean {
  const key = allocs[i]!.hold;
  if (key === undefined) return false;
  for (let j = 0; j < i; j++) if (allocs[j]!.hold === key) return false;
  return true;
}

/**
 * Default labels of integer ids, made once per process: builders number every pass's tasks
 * 0, 1, 2 ..., and the executor keeps each task's label for its whole life.
 */
const ID_LABELS: string[] = [];
const MAX_CACHED_LABEL = 1 << 18;
export function idLabel(id: TaskId): string {
  if (typeof id !== 'number' || !(Number.isInteger(id) && id >= 0 && id < MAX_CACHED_LABEL)) return String(id);
  while (ID_LABELS.length <= id) ID_LABELS.push(String(ID_LABELS.length));
  return ID_LABELS[id]!;
}

/** True if some id appears twice in a short list. */
export function hasRepeat(ids: readonly TaskId[]): boolean {
  for (let i = 1; i < ids.length; i++) for (let j = 0; j < i; j++) if (ids[i] === ids[j]) return true;
  return false;
}
