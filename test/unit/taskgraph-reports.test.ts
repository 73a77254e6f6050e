/**
 * What the task-graph executor reports and when it gives up: its options, idle listeners and
 * counts, totals per kind and category, each task's timing as it is reached, holds, why each
 * stuck task waits (every part of a pool's use) and the deadlock check at the end of an instant.
 * Written from the mutation survivors of task-graph.ts, accounting.ts and diagnostics.ts; every
 * expectation is worked out by hand in the world of `test/helpers/taskgraph-world.ts` (8 cores,
 * links at 1 B/ns, so 1 MB takes 1 ms).
 */
import { describe, expect, it } from 'vitest';
import { TaskGraphDeadlockError, type TaskSpec } from '../../sim/taskgraph/index.ts';
import { foreignAt, MB, ms, simErrorOf, thrownSimError, world } from '../helpers/taskgraph-world.ts';

const gpu = (id: string, durationMs: number, extra: Record<string, unknown> = {}): TaskSpec =>
  ({ id, kind: 'gpu', durationNs: ms(durationMs), category: 'x', ...extra }) as TaskSpec;
const cpu = (id: string, computeMs: number, extra: Record<string, unknown> = {}): TaskSpec =>
  ({ id, kind: 'cpu', cores: 1, computeNs: ms(computeMs), bytes: 0, category: 'x', ...extra }) as TaskSpec;
const barrier = (id: string, deps: string[], extra: Record<string, unknown> = {}): TaskSpec =>
  ({ id, kind: 'barrier', category: 'sync', deps, ...extra }) as TaskSpec;
const vram = (bytes: number, hold?: string) => ({ pool: 'vram', bytes, category: 'workspace', hold });
const host = (bytes: number, hold?: string) => ({ pool: 'host', bytes, category: 'workspace', hold });

describe('task graph options', () => {
  it.each([0, 1.5, -1, Number.NaN])('maxQueuedTransfers %s is refused', (v) => {
    expect(() => world({ graph: { maxQueuedTransfers: v } })).toThrow(
      new RangeError(`maxQueuedTransfers must be an integer ≥ 1 or Infinity, got ${v}`),
    );
  });

  it.each([1, Number.POSITIVE_INFINITY])('maxQueuedTransfers %s is accepted', (v) => {
    expect(world({ graph: { maxQueuedTransfers: v } }).graph.isDone()).toBe(true);
  });
});

describe('task graph idle listeners and counts', () => {
  it('each listener is called when everything added has finished, until it unregisters (twice is harmless)', () => {
    const { sim, graph } = world();
    const calls: string[] = [];
    const offA = graph.onIdle(() => calls.push(`a@${sim.now}`));
    graph.onIdle(() => calls.push(`b@${sim.now}`));
    graph.add(gpu('x', 1));
    sim.run();
    offA();
    offA();
    graph.add(gpu('y', 1));
    sim.run();
    expect(calls).toEqual([`a@${ms(1)}`, `b@${ms(1)}`, `b@${ms(2)}`]);
  });

  it('counts unfinished and dispatched tasks as the run goes', () => {
    const { sim, graph } = world();
    graph.add([gpu('a', 1), gpu('b', 1, { deps: ['a'] })]);
    expect([graph.unfinishedCount, graph.dispatchedCount]).toEqual([2, 0]); // dispatched by the next event
    sim.run({ until: ms(0.5) });
    expect([graph.unfinishedCount, graph.dispatchedCount]).toEqual([2, 1]);
    sim.run({ until: ms(1.5) });
    expect([graph.unfinishedCount, graph.dispatchedCount]).toEqual([1, 1]);
    sim.run();
    expect([graph.unfinishedCount, graph.dispatchedCount]).toEqual([0, 0]);
  });

  it('an empty batch schedules nothing', () => {
    const { sim, graph } = world();
    graph.add([]);
    expect(sim.pending).toBe(0);
  });
});

describe('task graph totals and timings', () => {
  // p: GPU 0–1 ms; r: CPU 1–3 ms after p; s: GPU 1–2 ms after p, another category.
  const tasks = [
    gpu('p', 1, { category: 'attn' }),
    cpu('r', 2, { deps: ['p'], category: 'attn' }),
    gpu('s', 1, { deps: ['p'], category: 'expert' }),
  ];

  it('totals per kind and per category, the first start and the last finish', () => {
    const { sim, graph } = world();
    graph.add(tasks);
    const before = graph.stats();
    expect('firstStartNs' in before || 'lastFinishNs' in before).toBe(false);
    sim.run();
    const st = graph.stats();
    expect([st.added, st.finished, st.firstStartNs, st.lastFinishNs]).toEqual([3, 3, 0, ms(3)]);
    expect(st.byKind.gpu).toEqual({ finished: 2, busyNs: ms(2) });
    expect(st.byKind.cpu).toEqual({ finished: 1, busyNs: ms(2) });
    expect(st.byKind.h2d).toEqual({ finished: 0, busyNs: 0 });
    expect(st.byCategory).toEqual({ attn: { finished: 2, busyNs: ms(3) }, expert: { finished: 1, busyNs: ms(1) } });
  });

  it('the first start is the earliest start, not the start of the first task to finish', () => {
    const { sim, graph, r } = world({ vramBytes: 10 * MB });
    const outside = r.vram.allocate(10 * MB, 'workspace', 'someone else');
    graph.add([cpu('long', 5), gpu('late', 1, { alloc: [vram(1 * MB)] })]); // late waits for memory
    foreignAt(r, 1, () => r.vram.free(outside)); // late runs 1–2 ms and finishes first
    sim.run();
    expect(graph.timing('late')).toMatchObject({ startNs: ms(1), finishNs: ms(2) });
    expect([graph.stats().firstStartNs, graph.stats().lastFinishNs]).toEqual([0, ms(5)]);
  });

  it('a timing holds only the times reached', () => {
    const { sim, graph } = world();
    graph.add(tasks);
    const base = { id: 'r', kind: 'cpu', label: 'r', category: 'attn', priority: 0, addedNs: 0 };
    expect(graph.timing('r')).toStrictEqual({ ...base, state: 'pending' });
    sim.run({ until: ms(2) });
    // A start is known when the task finishes (the resource says when it ran).
    expect(graph.timing('r')).toStrictEqual({ ...base, state: 'dispatched', readyNs: ms(1), dispatchNs: ms(1) });
    sim.run();
    expect(graph.timing('r')).toStrictEqual({
      ...base,
      state: 'done',
      readyNs: ms(1),
      dispatchNs: ms(1),
      startNs: ms(1),
      finishNs: ms(3),
    });
  });
});

describe('task graph holds', () => {
  it('an announced hold shows its holder’s bytes of that key and pool only, and its releaser if any', () => {
    const { sim, graph } = world();
    graph.add([
      gpu('h', 1, { alloc: [vram(2 * MB, 'k'), host(3 * MB, 'k'), vram(4 * MB, 'j'), vram(1 * MB)] }),
      barrier('r', ['h'], { release: ['k'] }),
    ]);
    expect(graph.holdsInfo()).toStrictEqual([
      { key: 'k', holder: 'h', releaser: 'r', live: false, bytesByPool: { vram: 2 * MB, host: 3 * MB } },
      { key: 'j', holder: 'h', live: false, bytesByPool: { vram: 4 * MB, host: 0 } },
    ]);
    sim.run();
    expect(graph.holdsInfo()).toStrictEqual([
      { key: 'j', holder: 'h', live: true, bytesByPool: { vram: 4 * MB, host: 0 } },
    ]);
  });

  it('two allocations under one key are both held, and both freed by its release', () => {
    const { sim, graph, r } = world();
    graph.add([
      gpu('h', 1, { alloc: [vram(2 * MB, 'k'), vram(3 * MB, 'k')] }),
      gpu('u', 1, { deps: ['h'], release: ['k'] }),
    ]);
    sim.run({ until: ms(1.5) });
    expect(graph.holdsInfo().map((h) => [h.live, h.bytesByPool.vram])).toEqual([[true, 5 * MB]]);
    expect(r.vram.usedBytes).toBe(5 * MB);
    sim.run();
    expect(r.vram.usedBytes).toBe(0);
  });
});

describe('task graph: why a task waits', () => {
  it('names every part of a pool’s use: live holds (with or without a releaser), what is outside; running tasks’ own bytes are not outside', () => {
    const { sim, graph, r } = world({ vramBytes: 10 * MB, hostBytes: 10 * MB });
    r.vram.allocate(1 * MB, 'workspace', 'someone else');
    r.host.allocate(8 * MB, 'workspace', 'someone else');
    graph.add([
      gpu('h', 1, { alloc: [vram(4 * MB, 'k')] }), // 0–1 ms
      gpu('h2', 1, { deps: ['h'], alloc: [vram(2 * MB, 'm')] }), // 1–2 ms
      gpu('w', 10, { deps: ['h2'], alloc: [vram(3 * MB)] }), // 2–12 ms, its own 3 MB
      gpu('b', 1, { deps: ['h2'], priority: 1, alloc: [vram(5 * MB), host(5 * MB)] }),
      barrier('z', ['b'], { release: ['k'] }),
      barrier('p', ['h', 'b']),
    ]);
    sim.run({ until: ms(5) });
    const stuck = graph.stuckTasks();
    expect(stuck.map((t) => [t.id, t.state, t.waitsFor])).toEqual([
      ['b', 'ready', []],
      ['z', 'pending', ['b']],
      ['p', 'pending', ['b']],
    ]);
    expect(stuck[0]!.reason).toBe(
      'needs 5000000 B of vram, 0 B free of 10000000 B (in use: "k" 4000000 B held by "h", released by "z" (pending); ' +
        '"m" 2000000 B held by "h2", no releasing task yet; 1000000 B outside this graph); ' +
        'needs 5000000 B of host, 2000000 B free of 10000000 B (in use: 8000000 B outside this graph)',
    );
    expect(stuck[2]).toStrictEqual({
      id: 'p',
      label: 'p',
      state: 'pending',
      waitsFor: ['b'],
      memory: [],
      reason: 'waits for "b" (ready)',
    });
  });

  it('a pool used only by running tasks’ own buffers gets no "in use" part', () => {
    const { sim, graph } = world({ vramBytes: 10 * MB });
    graph.add([gpu('w', 10, { alloc: [vram(8 * MB)] }), cpu('b', 1, { alloc: [vram(5 * MB)] })]);
    sim.run({ until: ms(1) });
    expect(graph.stuckTasks().map((t) => t.reason)).toEqual(['needs 5000000 B of vram, 2000000 B free of 10000000 B']);
  });

  it('the deadlock error, whole: one line per stuck task, a pending task listing every unfinished dep', () => {
    const { sim, graph, r } = world({ vramBytes: 10 * MB });
    r.vram.allocate(8 * MB, 'workspace', 'someone else');
    graph.add([gpu('b', 1, { alloc: [vram(5 * MB)] }), barrier('c', ['b']), barrier('d', ['b', 'c'])]);
    const err = thrownSimError(() => sim.run()) as TaskGraphDeadlockError;
    expect(err.message).toBe(
      '[t=0ns taskgraph] deadlock: nothing of the graph is running and 3 task(s) cannot proceed:' +
        '\n  - task "b" (ready): needs 5000000 B of vram, 2000000 B free of 10000000 B (in use: 8000000 B outside this graph)' +
        '\n  - task "c" (pending): waits for "b" (ready)' +
        '\n  - task "d" (pending): waits for "b" (ready), "c" (pending)',
    );
  });

  it('the deadlock error lists 20 stuck tasks and counts the rest; at 20 it counts none', () => {
    const deadlock = (waiting: number) => {
      const { sim, graph, r } = world({ vramBytes: 10 * MB });
      r.vram.allocate(8 * MB, 'workspace', 'someone else');
      const deps = Array.from({ length: waiting }, (_, i) => barrier(`t${i}`, ['b']));
      graph.add([gpu('b', 1, { alloc: [vram(5 * MB)] }), ...deps]);
      return thrownSimError(() => sim.run()) as TaskGraphDeadlockError;
    };
    const over = deadlock(21);
    expect(over).toBeInstanceOf(TaskGraphDeadlockError);
    expect(over.name).toBe('TaskGraphDeadlockError');
    expect(over.stuck).toHaveLength(22);
    expect(over.message).toContain('deadlock: nothing of the graph is running and 22 task(s) cannot proceed:');
    expect(over.message.split('\n  - task ')).toHaveLength(21);
    expect(over.message.endsWith('\n  ... and 2 more')).toBe(true);
    const exactly = deadlock(19);
    expect(exactly.message.split('\n  - task ')).toHaveLength(21);
    expect(exactly.message).not.toContain('more');
    expect(exactly.message.endsWith('waits for "b" (ready)')).toBe(true);
  });
});

describe('task graph: the deadlock check at the end of an instant', () => {
  it('a graph that finishes within the instant of its check is not stalled', () => {
    const { sim, graph, r } = world({ vramBytes: 10 * MB });
    const outside = r.vram.allocate(10 * MB, 'workspace', 'someone else');
    graph.add(gpu('a', 0, { alloc: [vram(4 * MB)] }));
    sim.step(); // the dispatch pass: a is parked, the check is scheduled at the end of the instant
    expect(sim.pending).toBe(1);
    foreignAt(r, 0, () => r.vram.free(outside)); // same instant, before the check: a runs and finishes
    expect(sim.run().stoppedBy).toBe('empty');
    expect(graph.isDone()).toBe(true);
  });

  it('a check that found the graph running does not stop a later one', () => {
    const { sim, graph, r } = world({ vramBytes: 10 * MB });
    const outside = r.vram.allocate(10 * MB, 'workspace', 'someone else');
    const onDone = () => {
      r.vram.allocate(10 * MB, 'workspace', 'someone else again');
      graph.add(gpu('b', 1, { alloc: [vram(4 * MB)] }));
    };
    graph.add(gpu('a', 1, { alloc: [vram(4 * MB)], onDone }));
    sim.step(); // a is parked: a check is scheduled at the end of the instant
    foreignAt(r, 0, () => r.vram.free(outside)); // a runs 0–1 ms: that check sees it running
    const err = thrownSimError(() => sim.run()) as TaskGraphDeadlockError;
    expect(err).toBeInstanceOf(TaskGraphDeadlockError);
    expect(err.simTimeNs).toBe(ms(1));
    expect(err.stuck.map((t) => t.id)).toEqual(['b']);
  });

  it('a SimError thrown inside onDone (a refused add) reaches the caller as it is', () => {
    const { sim, graph } = world();
    graph.add(gpu('a', 1, { onDone: (ctx: { add: (t: TaskSpec) => void }) => ctx.add(gpu('a', 1)) }));
    const message = simErrorOf(() => sim.run());
    expect(message).not.toContain('onDone of task');
    expect(message).toContain('"a"');
  });
});
