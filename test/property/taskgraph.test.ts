/**
 * Properties of the task-graph executor on random small DAGs (≤ 30 tasks of every kind, random
 * durations, bytes, priorities, deps on earlier tasks, GPU streams, and memory needs, some held
 * until a later task releases them).
 *
 * Memory is drawn so that the graph can never deadlock (all holds together and any one task's
 * own buffers fit in a pool: whenever nothing runs, only holds are live and any ready task
 * fits), so every run must finish; a task's buffers are often large enough that two or three
 * tasks cannot hold theirs at once, so tasks do wait for memory. Host DRAM is wide
 * enough that nothing is slowed by sharing it, so every task's uncontended duration is exact:
 * links at 1 B/ns, so a transfer takes latency + bytes ns whatever its packets.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Simulation } from '../../sim/kernel/simulation.ts';
import { ceilNs, ns } from '../../sim/kernel/time.ts';
import type { TraceSink } from '../../sim/observe/trace-sink.ts';
import { CpuPool } from '../../sim/resources/cpu-pool.ts';
import type { ResourceEvent } from '../../sim/resources/events.ts';
import { FluidShare } from '../../sim/resources/fluid-share.ts';
import { Gpu } from '../../sim/resources/gpu.ts';
import { resourceHandlers, type Resources } from '../../sim/resources/index.ts';
import { MemoryPool } from '../../sim/resources/memory-pool.ts';
import { PcieLink } from '../../sim/resources/pcie-link.ts';
import {
  staticCriticalPath,
  TaskGraphExecutor,
  type MemoryRequest,
  type PoolName,
  type TaskGraphEvent,
  type TaskKind,
  type TaskId,
  type TaskSpec,
  type TaskTiming,
} from '../../sim/taskgraph/index.ts';
import {
  type GraphView,
  type HoldRecord,
  type MakeNormalized,
  type NormalizedTask,
  validateBatch,
} from '../../sim/taskgraph/batch.ts';
import { normalizeBuiltBatch } from '../../sim/taskgraph/built-batch.ts';

const CAPACITY = 1000;
const MAX_HOLD = 8; // 30 holders × 8 B = 240 B
const MAX_OWN_EACH = 380; // two of them: 760 B ≤ CAPACITY − 240 B
const CORES = 4;
const PER_CORE_BYTES_PER_SEC = 1e9;
const LATENCY_NS = 7;

interface Machine {
  readonly concurrentStreams: boolean;
  readonly packetBytes: number;
  readonly maxQueuedTransfers: number;
}

const rawTask = fc.record({
  kind: fc.constantFrom<TaskKind>('gpu', 'gpu', 'cpu', 'h2d', 'd2h', 'barrier'),
  amount: fc.integer({ min: 1, max: 3000 }),
  computeNs: fc.integer({ min: 0, max: 3000 }),
  cores: fc.integer({ min: 1, max: CORES }),
  stream: fc.integer({ min: 0, max: 1 }),
  priority: fc.integer({ min: 0, max: 3 }),
  depPicks: fc.array(fc.nat(), { maxLength: 3 }),
  own: fc.array(
    fc.record({
      pool: fc.constantFrom<PoolName>('vram', 'host'),
      bytes: fc.oneof(
        { weight: 1, arbitrary: fc.integer({ min: 0, max: 40 }) },
        { weight: 3, arbitrary: fc.integer({ min: 250, max: MAX_OWN_EACH }) },
      ),
    }),
    { minLength: 1, maxLength: 2 },
  ),
  hold: fc.option(
    fc.record({
      pool: fc.constantFrom<PoolName>('vram', 'host'),
      bytes: fc.integer({ min: 0, max: MAX_HOLD }),
      releaserPick: fc.option(fc.nat()),
    }),
  ),
});

// Lengths uniform in [1, 30] (fast-check's default size would keep most arrays under 10).
const graphArb = fc
  .integer({ min: 1, max: 30 })
  .chain((n) => fc.array(rawTask, { minLength: n, maxLength: n }))
  .map((raws): TaskSpec[] => {
    const deps: number[][] = raws.map((r, i) => (i === 0 ? [] : r.depPicks.map((p) => p % i)));
    const releases: string[][] = raws.map(() => []);
    raws.forEach((r, i) => {
      const pick = r.hold?.releaserPick;
      if (pick !== undefined && pick !== null && i + 1 < raws.length) {
        const j = i + 1 + (pick % (raws.length - i - 1));
        releases[j]!.push(`h${i}`);
        deps[j]!.push(i); // a releaser depends on its holder
      }
    });
    return raws.map((r, i): TaskSpec => {
      const alloc: MemoryRequest[] = r.own.map((o) => ({ pool: o.pool, bytes: o.bytes, category: 'workspace' }));
      if (r.hold) alloc.push({ pool: r.hold.pool, bytes: r.hold.bytes, category: 'expertWeights', hold: `h${i}` });
      const base = { id: i, category: `c${i % 3}`, priority: r.priority, deps: deps[i]!, alloc, release: releases[i]! };
      switch (r.kind) {
        case 'gpu':
          return { ...base, kind: 'gpu', stream: r.stream, durationNs: ns(r.amount) };
        case 'cpu':
          return {
            ...base,
            kind: 'cpu',
            cores: r.cores,
            computeNs: ns(r.computeNs),
            bytes: r.amount % 2 === 0 ? r.amount : 0,
          };
        case 'h2d':
        case 'd2h':
          return { ...base, kind: r.kind, bytes: r.amount };
        case 'barrier':
          return { ...base, kind: 'barrier' };
      }
    });
  });

const machineArb = fc.record({
  concurrentStreams: fc.boolean(),
  packetBytes: fc.constantFrom(100, 1000, 1e9),
  maxQueuedTransfers: fc.constantFrom(1, 2, Number.POSITIVE_INFINITY),
});

/** A task's duration with nothing else running (the same float expressions the resources use). */
function uncontendedNs(t: TaskSpec): number {
  switch (t.kind) {
    case 'gpu':
      return t.durationNs;
    case 'cpu': {
      if (t.bytes === 0) return t.computeNs;
      const flopCap = t.computeNs > 0 ? (t.bytes * 1e9) / t.computeNs : Number.POSITIVE_INFINITY;
      return ceilNs((t.bytes / Math.min(t.cores * PER_CORE_BYTES_PER_SEC, flopCap)) * 1e9);
    }
    case 'h2d':
    case 'd2h':
      return LATENCY_NS + t.bytes; // 1 B/ns: packets add up exactly
    case 'barrier':
      return 0;
  }
}

interface Run {
  readonly timings: TaskTiming[];
  readonly peak: Record<PoolName, number>;
  readonly overCapacity: number;
  readonly usedAtEnd: Record<PoolName, number>;
  readonly done: boolean;
}

/** Runs the graph, added whole or (with `cuts`) in consecutive batches cut before those positions, all at time 0. */
function run(tasks: readonly TaskSpec[], m: Machine, cuts: readonly number[] = [], built = false): Run {
  const sim = new Simulation<ResourceEvent | TaskGraphEvent>();
  const peak: Record<PoolName, number> = { vram: 0, host: 0 };
  let overCapacity = 0;
  const sink: TraceSink = {
    onMemory: (r) => {
      const pool = r.pool as PoolName;
      peak[pool] = Math.max(peak[pool], r.usedBytes);
      if (r.usedBytes > r.capacityBytes) overCapacity++;
    },
  };
  const hostDram = new FluidShare('hostDram', 1e15, sim);
  const link = (name: 'h2d' | 'd2h') =>
    new PcieLink({
      name,
      bytesPerSec: 1e9,
      latencyNs: LATENCY_NS,
      packetBytes: m.packetBytes,
      sched: sim,
      dram: hostDram,
      sink,
    });
  const r: Resources = {
    gpu: new Gpu({ streams: 2, concurrentStreams: m.concurrentStreams, sched: sim, sink, streamNames: ['s0', 's1'] }),
    h2d: link('h2d'),
    d2h: link('d2h'),
    cpu: new CpuPool({ cores: CORES, perCoreBytesPerSec: PER_CORE_BYTES_PER_SEC, sched: sim, dram: hostDram, sink }),
    hostDram,
    vram: new MemoryPool('vram', CAPACITY, sim, sink),
    host: new MemoryPool('host', CAPACITY, sim, sink),
  };
  const graph = new TaskGraphExecutor(r, sim, { maxQueuedTransfers: m.maxQueuedTransfers });
  sim.setHandlers({ ...resourceHandlers(r), ...graph.handlers() });
  let from = 0;
  for (const cut of [...new Set(cuts)].sort((x, y) => x - y)) {
    if (cut <= from || cut >= tasks.length) continue;
    if (built) graph.addBuilt(tasks.slice(from, cut));
    else graph.add(tasks.slice(from, cut));
    from = cut;
  }
  if (built) graph.addBuilt(tasks.slice(from));
  else graph.add(tasks.slice(from));
  sim.run({ maxEvents: 1_000_000 });
  return {
    timings: graph.timings(),
    peak: { vram: Math.max(peak.vram, r.vram.peakBytes), host: Math.max(peak.host, r.host.peakBytes) },
    overCapacity,
    usedAtEnd: { vram: r.vram.usedBytes, host: r.host.usedBytes },
    done: graph.isDone(),
  };
}

describe('task graph on random DAGs', () => {
  it('finishes every task, respects deps and capacities, stays within the critical-path and serial bounds, deterministically', () => {
    let splitRuns = 0;
    let repeatedDeps = 0;
    let releasing = 0;
    fc.assert(
      fc.property(graphArb, machineArb, fc.array(fc.nat(30), { maxLength: 4 }), (tasks, m, cuts) => {
        const a = run(tasks, m);
        expect(a.done).toBe(true);
        const byId = new Map(a.timings.map((t) => [t.id, t]));
        for (const spec of tasks) {
          const t = byId.get(spec.id)!;
          expect(t.state).toBe('done');
          const depsDone = Math.max(0, ...(spec.deps ?? []).map((d) => byId.get(d)!.finishNs!));
          // No task starts before all its deps finish; the stages are in order.
          expect(t.readyNs!).toBe(depsDone);
          expect(t.dispatchNs!).toBeGreaterThanOrEqual(t.readyNs!);
          expect(t.startNs!).toBeGreaterThanOrEqual(t.dispatchNs!);
          const took = t.finishNs! - t.startNs!;
          if (spec.kind === 'h2d' || spec.kind === 'd2h')
            expect(took).toBeGreaterThanOrEqual(uncontendedNs(spec)); // may be overtaken
          else expect(took).toBe(uncontendedNs(spec));
        }
        // Pools never exceed capacity; what is left is exactly the unreleased holds.
        expect(a.overCapacity).toBe(0);
        expect(a.peak.vram).toBeLessThanOrEqual(CAPACITY);
        expect(a.peak.host).toBeLessThanOrEqual(CAPACITY);
        const released = new Set(tasks.flatMap((t) => t.release ?? []));
        for (const pool of ['vram', 'host'] as const) {
          const left = tasks
            .flatMap((t) => t.alloc ?? [])
            .filter((x) => x.pool === pool && x.hold !== undefined && !released.has(x.hold));
          expect(a.usedAtEnd[pool]).toBe(left.reduce((s, x) => s + x.bytes, 0));
        }
        // Serialised streams: our kernels never overlap on the SMs.
        if (!m.concurrentStreams) {
          const kernels = a.timings
            .filter((t) => t.kind === 'gpu')
            .sort((x, y) => x.startNs! - y.startNs! || x.finishNs! - y.finishNs!);
          for (let i = 1; i < kernels.length; i++)
            expect(kernels[i]!.startNs!).toBeGreaterThanOrEqual(kernels[i - 1]!.finishNs!);
        }
        // Critical path ≤ makespan ≤ Σ durations (some task always runs until the end).
        const makespan = Math.max(...a.timings.map((t) => t.finishNs!));
        expect(makespan).toBeGreaterThanOrEqual(staticCriticalPath(tasks, uncontendedNs).lengthNs);
        expect(makespan).toBeLessThanOrEqual(tasks.reduce((s, t) => s + uncontendedNs(t), 0));
        // Same graph twice ⇒ identical timings; and added in several batches at time 0 (nodes whose
        // dependents span batches: lists made at their final length, then grown) ⇒ identical too.
        expect(run(tasks, m).timings).toEqual(a.timings);
        const split = run(tasks, m, cuts);
        if (cuts.some((c) => c > 0 && c < tasks.length)) splitRuns++;
        expect(split.timings).toEqual(a.timings);
        // A builder's batches (`addBuilt`: the same nodes without the checks) ⇒ the same run, whole
        // or in batches; repeated deps (dropped by both) and holds released in a later batch included.
        const built = run(tasks, m, cuts, true);
        expect(built).toEqual(split);
        if (tasks.some((t) => new Set(t.deps).size < (t.deps ?? []).length)) repeatedDeps++;
        if (tasks.some((t) => (t.release ?? []).length > 0)) releasing++;
      }),
      { numRuns: 300 },
    );
    expect(splitRuns).toBeGreaterThan(100);
    expect(repeatedDeps).toBeGreaterThan(30);
    expect(releasing).toBeGreaterThan(100);
  });
});

/** A graph view over plain maps (the executor's, without resources), recording its holds. */
function recordingView() {
  const tasks = new Map<TaskId, NormalizedTask>();
  const holds = new Map<string, HoldRecord<NormalizedTask>>();
  const view: GraphView<NormalizedTask> = {
    has: (id) => tasks.has(id),
    isDone: () => false,
    depsOf: (id) => tasks.get(id)?.deps ?? [],
    holdOf: (key) => holds.get(key),
    openHold: (key, holder) => {
      holds.set(key, { holder, releaser: undefined });
    },
    dropHold: (key) => {
      holds.delete(key);
    },
    setReleaser: (h, releaser) => {
      h.releaser = releaser;
    },
    gpuStreams: ['s0', 's1'],
    cpuCores: CORES,
    poolCapacityBytes: { vram: CAPACITY, host: CAPACITY },
  };
  const make: MakeNormalized<NormalizedTask> = (
    _i,
    spec,
    deps,
    priority,
    label,
    needBytes,
    holdKeys,
    releases,
    stream,
  ) => ({
    spec,
    deps,
    priority,
    label,
    needBytes,
    holds: holdKeys,
    releases,
    stream,
  });
  const add = (batch: readonly NormalizedTask[]) => {
    for (const t of batch) tasks.set(t.spec.id, t);
  };
  /** Each hold: its key, holder and releaser ids. */
  const holdsSeen = () => [...holds].map(([k, h]) => [k, h.holder.spec.id, h.releaser?.spec.id]);
  return { view, make, add, holdsSeen };
}

describe("a builder's batches (`normalizeBuiltBatch`)", () => {
  it('normalise every valid batch as validation does: the same tasks, deps without repeats, the same holds and releasers', () => {
    let repeated = 0;
    let named = 0;
    fc.assert(
      fc.property(graphArb, fc.array(fc.nat(30), { maxLength: 4 }), fc.boolean(), (tasks, cuts, byName) => {
        // Some GPU tasks name their stream (the executor resolves the name to its index).
        const specs = tasks.map((t) =>
          byName && t.kind === 'gpu' && t.stream === 1 ? { ...t, stream: 's1' } : t,
        ) as TaskSpec[];
        const checked = recordingView();
        const built = recordingView();
        const fail = (m: string): never => {
          throw new Error(m);
        };
        let from = 0;
        for (const cut of [
          ...[...new Set(cuts)].sort((x, y) => x - y).filter((c) => c > 0 && c < specs.length),
          specs.length,
        ]) {
          if (cut <= from) continue;
          const batch = specs.slice(from, cut);
          const a = validateBatch(batch, checked.view, fail, checked.make);
          const b = normalizeBuiltBatch(batch, built.view, built.make);
          expect(b).toEqual(a);
          checked.add(a);
          built.add(b);
          expect(built.holdsSeen()).toEqual(checked.holdsSeen());
          from = cut;
        }
        if (specs.some((t) => new Set(t.deps).size < (t.deps ?? []).length)) repeated++;
        if (specs.some((t) => t.kind === 'gpu' && typeof t.stream === 'string')) named++;
      }),
      { numRuns: 300 },
    );
    expect(repeated).toBeGreaterThan(30);
    expect(named).toBeGreaterThan(30);
  });
});
