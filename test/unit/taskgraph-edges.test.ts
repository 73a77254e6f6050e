/**
 * The task-graph executor's input checks and edges, one field at a time: every refusal names
 * the task and the field with the value it got (and leaves nothing of its batch behind), and
 * the value just inside each bound is accepted. Written from the mutation survivors of
 * `sim/taskgraph` (batch.ts, dispatcher.ts): each case pins a branch or a message that no
 * other test read. Expectations are worked out by hand from the world of
 * `test/helpers/taskgraph-world.ts` (8 cores, 64 MB of VRAM, 1 GB of host, links at 1 B/ns).
 */
import { describe, expect, it } from 'vitest';
import type { TaskGraphExecutor, TaskSpec } from '../../sim/taskgraph/index.ts';
import { foreignAt, MB, ms, simErrorOf, spans, world } from '../helpers/taskgraph-world.ts';

const g = (id: string | number, extra: Record<string, unknown> = {}): TaskSpec =>
  ({ id, kind: 'gpu', durationNs: ms(1), category: 'x', ...extra }) as TaskSpec;
const cpu = (id: string, extra: Record<string, unknown> = {}): TaskSpec =>
  ({ id, kind: 'cpu', cores: 1, computeNs: ms(1), bytes: 0, category: 'x', ...extra }) as TaskSpec;
const vram = (bytes: number, hold?: string) => ({ pool: 'vram', bytes, category: 'workspace', hold });

/** The message of the error `act` throws (a SimError), checking that nothing of the batch was added. */
function refusal(act: (graph: TaskGraphExecutor) => void, idsOfTheBatch: readonly (string | number)[]): string {
  const { graph } = world({ streamNames: ['compute', 'copy'] });
  const message = simErrorOf(() => act(graph));
  for (const id of idsOfTheBatch) expect(graph.has(id)).toBe(false);
  expect(graph.holdsInfo()).toEqual([]);
  return message;
}

describe('task graph: each field refused with its name and value', () => {
  const cases: [string, TaskSpec[], RegExp][] = [
    [
      'an unknown kind',
      [{ id: 't', kind: 'tpu', category: 'x' } as unknown as TaskSpec],
      /task "t": unknown kind "tpu"/,
    ],
    ['a category that is not a string', [g('t', { category: 7 })], /task "t": category must be a string/],
    ['a NaN priority', [g('t', { priority: Number.NaN })], /task "t": priority must be a finite number \(got NaN\)/],
    [
      'an infinite priority',
      [g('t', { priority: Number.POSITIVE_INFINITY })],
      /task "t": priority must be a finite number \(got Infinity\)/,
    ],
    ['a string priority', [g('t', { priority: '1' })], /task "t": priority must be a finite number \(got 1\)/],
    [
      'an id that is neither a string nor a finite number',
      [g('a'), g(Number.NaN)],
      /task #1 of the batch: id must be a string or a finite number \(got NaN\)/,
    ],
    [
      'an object id',
      [g('a'), { ...g('b'), id: {} } as unknown as TaskSpec],
      /task #1 of the batch: id must be a string or a finite number \(got \[object Object\]\)/,
    ],
    [
      'an unknown pool',
      [g('t', { alloc: [{ pool: 'disk', bytes: 1, category: 'workspace' }] })],
      /task "t": unknown pool "disk"/,
    ],
    [
      'negative allocation bytes',
      [g('t', { alloc: [vram(-1)] })],
      /task "t": allocation bytes must be a non-negative integer \(got -1\)/,
    ],
    [
      'fractional allocation bytes',
      [g('t', { alloc: [vram(0.5)] })],
      /task "t": allocation bytes must be a non-negative integer \(got 0.5\)/,
    ],
    ['an empty hold key', [g('t', { alloc: [vram(1, '')] })], /task "t": hold key must be a non-empty string/],
    [
      'a hold key that is not a string',
      [g('t', { alloc: [{ ...vram(1), hold: 5 }] })],
      /task "t": hold key must be a non-empty string/,
    ],
    ['an empty release key', [g('t', { release: [''] })], /task "t": release keys must be non-empty strings/],
    [
      'a release key that is not a string',
      [g('t', { release: [3] })],
      /task "t": release keys must be non-empty strings/,
    ],
    ['a GPU stream index past the last', [g('t', { stream: 2 })], /task "t": no GPU stream 2 \(have 2\)/],
    ['a negative GPU stream index', [g('t', { stream: -1 })], /task "t": no GPU stream -1 \(have 2\)/],
    ['a fractional GPU stream index', [g('t', { stream: 0.5 })], /task "t": no GPU stream 0.5 \(have 2\)/],
    ['an unknown stream name', [g('t', { stream: 'dma' })], /no GPU stream named "dma" \(have "compute", "copy"\)/],
    [
      'a negative GPU duration',
      [g('t', { durationNs: -1 })],
      /task "t": durationNs must be a non-negative integer \(got -1\)/,
    ],
    ['zero cores', [cpu('t', { cores: 0 })], /task "t": cores must be an integer in \[1, 8\] \(got 0\)/],
    ['fractional cores', [cpu('t', { cores: 1.5 })], /task "t": cores must be an integer in \[1, 8\] \(got 1.5\)/],
    ['nine cores of eight', [cpu('t', { cores: 9 })], /task "t": cores must be an integer in \[1, 8\] \(got 9\)/],
    [
      'a negative CPU compute time',
      [cpu('t', { computeNs: -5 })],
      /task "t": computeNs must be a non-negative integer \(got -5\)/,
    ],
    ['fractional CPU bytes', [cpu('t', { bytes: 2.5 })], /task "t": bytes must be a non-negative integer \(got 2.5\)/],
    [
      'fractional transfer bytes',
      [{ id: 't', kind: 'd2h', bytes: 1.5, category: 'x' } as TaskSpec],
      /task "t": bytes must be a positive integer \(got 1.5\)/,
    ],
    [
      'negative transfer bytes',
      [{ id: 't', kind: 'h2d', bytes: -8, category: 'x' } as TaskSpec],
      /task "t": bytes must be a positive integer \(got -8\)/,
    ],
    [
      'host memory over its capacity (two allocations summed)',
      [
        g('t', {
          alloc: [
            { pool: 'host', bytes: 600 * MB, category: 'workspace' },
            { pool: 'host', bytes: 500 * MB, category: 'workspace' },
          ],
        }),
      ],
      /task "t": needs 1100000000 B of host, more than its capacity 1024000000 B/,
    ],
    [
      'VRAM over its capacity by one byte',
      [g('t', { alloc: [vram(32 * MB), vram(32 * MB + 1)] })],
      /task "t": needs 64000001 B of vram, more than its capacity 64000000 B/,
    ],
    [
      'a hold key held twice in one batch',
      [g('a', { alloc: [vram(1, 'k')] }), g('b', { alloc: [vram(1, 'k')] })],
      /task "b": hold key "k" is also held by task "a" of the batch/,
    ],
    ['a numeric id given twice in a batch', [g(1), g(2), g(1)], /task 1: id appears twice in the batch/],
  ];
  for (const [name, batch, message] of cases) {
    it(`refuses ${name}`, () => {
      const ids = batch.map((t) => t.id).filter((id) => typeof id === 'string' || Number.isFinite(id));
      expect(refusal((graph) => graph.add(batch), ids)).toMatch(message);
    });
  }

  it('an id already added is refused on the consecutive-id path too (ids 1, 2 after 0, 1)', () => {
    const { graph } = world();
    graph.add([g(0), g(1)]);
    expect(() => graph.add([g(1), g(2)])).toThrow(/task 1: id already added/);
    expect(graph.has(2)).toBe(false);
  });

  it('a cycle of twelve tasks names the first ten and then "..."', () => {
    const ids = Array.from({ length: 12 }, (_, i) => `c${i}`);
    const batch = ids.map((id, i) => g(id, { deps: [ids[(i + 1) % 12]] }));
    expect(refusal((graph) => graph.add(batch), ids)).toMatch(
      /dependency cycle among tasks "c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9", \.\.\.$/,
    );
  });

  it('a cycle of ten tasks names all ten and no "..."', () => {
    const ids = Array.from({ length: 10 }, (_, i) => `c${i}`);
    const batch = ids.map((id, i) => g(id, { deps: [ids[(i + 1) % 10]] }));
    expect(refusal((graph) => graph.add(batch), ids)).toMatch(/among tasks "c0", .*"c9"$/);
  });
});

describe('task graph: the values just inside each bound are accepted', () => {
  it('stream index 1 of 2, 8 cores of 8, zero bytes and durations, negative priority, exactly the capacity', () => {
    const { sim, graph } = world({ streamNames: ['compute', 'copy'] });
    graph.add([
      g('s1', { stream: 1, durationNs: 0, priority: -3 }),
      g('named', { stream: 'copy' }),
      cpu('wide', { cores: 8, computeNs: 0, bytes: 0 }),
      g('full', { alloc: [vram(32 * MB), vram(32 * MB)] }),
      g('empty', { alloc: [vram(0)] }),
      { id: 'tiny', kind: 'h2d', bytes: 1, category: 'x' } as TaskSpec,
      g(0.5),
    ]);
    sim.run();
    graph.assertDone();
    // A zero-length kernel on stream 1 at priority -3 runs first and ends at once.
    expect(graph.timing('s1').finishNs).toBe(0);
    // The wide CPU task of zero work ends at 0 too; the 1-byte copy takes 1 ns.
    expect(graph.timing('wide').finishNs).toBe(0);
    expect(graph.timing('tiny').finishNs).toBe(1);
  });

  it('repeated deps in a list of more than 16 are dropped (the set path), and the task runs once they finish', () => {
    const { sim, graph } = world();
    graph.add(g('a'));
    graph.add(g('b', { deps: Array.from({ length: 20 }, () => 'a') }));
    sim.run();
    graph.assertDone();
    // One GPU lane: a runs 0–1 ms, b after it 1–2 ms.
    expect(graph.timing('b').startNs).toBe(ms(1));
  });

  it('a task with a 17-entry dep list naming an unknown task is refused (the set path checks each first-seen dep)', () => {
    const deps = [...Array.from({ length: 16 }, () => 'a'), 'zz'];
    const { graph } = world();
    graph.add(g('a'));
    expect(() => graph.add(g('b', { deps }))).toThrow(/task "b": unknown dep "zz"/);
    expect(graph.has('b')).toBe(false);
  });
});

describe('task graph: dispatching edges', () => {
  it('a ready task names the lane it waits for (stuckTasks), for every lane', () => {
    const serial = world({ streamNames: ['compute', 'copy'], graph: { maxQueuedTransfers: 1 } });
    serial.graph.add([
      g('a'),
      g('b', { stream: 'copy' }),
      cpu('wide', { cores: 8 }),
      cpu('narrow'),
      { id: 'up1', kind: 'h2d', bytes: MB, category: 'x' } as TaskSpec,
      { id: 'up2', kind: 'h2d', bytes: MB, category: 'x' } as TaskSpec,
      { id: 'down1', kind: 'd2h', bytes: MB, category: 'x' } as TaskSpec,
      { id: 'down2', kind: 'd2h', bytes: MB, category: 'x' } as TaskSpec,
    ]);
    serial.sim.run({ until: ms(0.5) });
    const reasons = Object.fromEntries(serial.graph.stuckTasks().map((t) => [t.id, t.reason]));
    expect(reasons).toEqual({
      b: "waits for gpu (1 of this graph's tasks on it)",
      narrow: "waits for cpu (1 of this graph's tasks on it)",
      up2: "waits for h2d (1 of this graph's tasks on it)",
      down2: "waits for d2h (1 of this graph's tasks on it)",
    });
    // Concurrent streams: one lane per stream, named after it.
    const streams = world({ streamNames: ['compute', 'copy'], concurrentStreams: true });
    streams.graph.add([g('a'), g('b', { stream: 'copy' }), g('c', { stream: 'copy' })]);
    streams.sim.run({ until: ms(0.5) });
    expect(streams.graph.stuckTasks().map((t) => [t.id, t.reason])).toEqual([
      ['c', "waits for gpu copy (1 of this graph's tasks on it)"],
    ]);
  });

  it('a wide CPU task short of cores closes the CPU only: a less urgent GPU task starts in the same pass', () => {
    const { sim, graph } = world();
    graph.add([
      cpu('x', { cores: 8, computeNs: ms(10) }),
      cpu('w', { cores: 8, priority: 1, computeNs: ms(10) }),
      g('gpu', { priority: 2 }),
    ]);
    sim.run();
    expect(graph.timing('gpu').startNs).toBe(0);
    expect(graph.timing('w').startNs).toBe(ms(10));
  });

  it('a parked CPU task whose memory frees does not overtake a more urgent CPU task waiting for cores', () => {
    // VRAM 64 MB: h holds 60 MB until r (its releaser) ends at 2 ms. n (1 core, 10 MB, priority 5) is
    // parked at 0 for VRAM. w (8 cores, priority 1) is ready at 1.5 ms, when d ends, and waits for x's
    // 4 cores until 10 ms. At 2 ms n's memory is free and 4 cores are idle, but w is ahead of it on
    // the CPU (head-of-line): w runs 10–20 ms, n 20–21 ms.
    const { sim, graph } = world();
    graph.add([
      g('h', { alloc: [vram(60 * MB, 'k')] }),
      g('r', { deps: ['h'], release: ['k'] }),
      cpu('x', { cores: 4, computeNs: ms(10) }),
      cpu('d', { computeNs: ms(1.5) }),
      cpu('n', { priority: 5, alloc: [vram(10 * MB)] }),
      cpu('w', { cores: 8, priority: 1, computeNs: ms(10), deps: ['d'] }),
    ]);
    sim.run();
    graph.assertDone();
    expect(graph.timing('r').finishNs).toBe(ms(2));
    expect([graph.timing('w').startNs, graph.timing('n').startNs]).toEqual([ms(10), ms(20)]);
  });

  it('is woken by a free of host memory outside the graph (onStall: wait)', () => {
    const { sim, r, graph } = world({ hostBytes: 10 * MB, graph: { onStall: 'wait' } });
    const outside = r.host.allocate(8 * MB, 'pageCache', 'someone else');
    foreignAt(r, 3, () => r.host.free(outside));
    graph.add(g('t', { alloc: [{ pool: 'host', bytes: 5 * MB, category: 'activations' }] }));
    sim.run();
    graph.assertDone();
    expect(graph.timing('t').startNs).toBe(ms(3));
  });

  it('is woken again by a second outside free after a first one that was not enough', () => {
    // VRAM 10 MB, 8 MB used outside. At 3 ms the outside frees 8 MB and takes 6 MB back (4 MB free:
    // t, needing 5 MB, still waits); at 6 ms it frees those 6 MB and t runs 6–7 ms.
    const { sim, r, graph } = world({ vramBytes: 10 * MB, graph: { onStall: 'wait' } });
    const first = r.vram.allocate(8 * MB, 'expertCache', 'outside 1');
    let second: ReturnType<typeof r.vram.allocate> | undefined;
    foreignAt(r, 3, () => {
      r.vram.free(first);
      second = r.vram.allocate(6 * MB, 'expertCache', 'outside 2');
    });
    foreignAt(r, 6, () => r.vram.free(second!));
    graph.add(g('t', { alloc: [vram(5 * MB)] }));
    sim.run();
    graph.assertDone();
    expect(graph.timing('t').startNs).toBe(ms(6));
  });
  it('tasks short of different pools in successive passes each wait for their own pool', () => {
    // VRAM and host 10 MB each; the outside holds 8 MB of host until 1 ms. At 0 (the first pass): h, a
    // CPU task, takes 6 MB of VRAM (0–1 ms); x (CPU, 5 MB of host) and y (GPU, 6 MB of VRAM) are short of
    // different pools. At 1 ms both fit and run 1–2 ms. At 1.5 ms the outside takes 4 MB of VRAM until
    // 6 ms, so z (9 MB of VRAM, after y) is short at 2 ms, alone in its pass; the outside's free at 6 ms
    // wakes it: 6–7 ms.
    const { sim, r, graph } = world({ vramBytes: 10 * MB, hostBytes: 10 * MB, graph: { onStall: 'wait' } });
    const outsideHost = r.host.allocate(8 * MB, 'pageCache', 'outside');
    let outsideVram: ReturnType<typeof r.vram.allocate> | undefined;
    foreignAt(r, 1, () => r.host.free(outsideHost));
    foreignAt(r, 1.5, () => {
      outsideVram = r.vram.allocate(4 * MB, 'expertCache', 'outside');
    });
    foreignAt(r, 6, () => r.vram.free(outsideVram!));
    graph.add([
      cpu('h', { priority: -1, alloc: [vram(6 * MB)] }),
      cpu('x', { alloc: [{ pool: 'host', bytes: 5 * MB, category: 'activations' }] }),
      g('y', { priority: 1, alloc: [vram(6 * MB)] }),
      g('z', { deps: ['y'], alloc: [vram(9 * MB)] }),
    ]);
    sim.run();
    graph.assertDone();
    expect(spans(graph, ['h', 'x', 'y', 'z'])).toEqual({ h: [0, 1], x: [1, 2], y: [1, 2], z: [6, 7] });
  });
});

describe('task graph: ids, cycles and holds across batches', () => {
  it('a batch of consecutive numeric ids finds its own ids only: ids past either end, between or of another type are unknown', () => {
    for (const dep of [2, -1, 0.5, 'zz']) {
      const msg = refusal((graph) => graph.add([g(0), g(1, { deps: [dep] })]), [0, 1]);
      expect(msg).toMatch(new RegExp(`task 1: unknown dep ${typeof dep === 'string' ? '"zz"' : String(dep)} `));
    }
  });

  it('ids past 2^53 that round to the same double are refused as repeated, not taken for consecutive', () => {
    // 2^53 + 1 is 2^53 as a double: the two tasks have one id.
    const big = 2 ** 53;
    expect(refusal((graph) => graph.add([g(big), g(big + 1)]), [])).toMatch(
      /task 9007199254740992: id appears twice in the batch/,
    );
    // 2^53 − 1 is safe, but first + 3 is not: ids 2^53 − 1, 2^53 and 2^53 + 1 (= 2^53 again).
    expect(refusal((graph) => graph.add([g(big - 1), g(big), g(big + 1)]), [])).toMatch(
      /task 9007199254740992: id appears twice in the batch/,
    );
  });

  it('a cycle is reported alone, beside tasks that are fine (even one reached three times)', () => {
    const batch = [
      g('a'),
      g('b'),
      g('c'),
      g('t', { deps: ['a', 'b', 'c'] }),
      g('p', { deps: ['q'] }),
      g('q', { deps: ['p'] }),
    ];
    expect(refusal((graph) => graph.add(batch), ['a', 't', 'p'])).toMatch(/dependency cycle among tasks "p", "q"$/);
  });

  it('a release through an unfinished task of an earlier batch is accepted and runs', () => {
    const { sim, graph } = world();
    graph.add([g('h', { alloc: [vram(MB, 'k')] }), g('m', { deps: ['h'] })]);
    graph.add(g('r', { deps: ['m'], release: ['k'] }));
    sim.run();
    graph.assertDone();
    expect(graph.holdsInfo()).toEqual([]);
    expect(graph.timing('r').finishNs).toBe(ms(3));
  });

  it('a release by a task with deps, none leading to the unfinished holder, is refused (in its batch and in a later one)', () => {
    const msg = /task "t": releases "k" but does not depend \(directly or not\) on its holder "h"/;
    expect(
      refusal(
        (graph) => graph.add([g('h', { alloc: [vram(1, 'k')] }), g('o'), g('t', { deps: ['o'], release: ['k'] })]),
        ['h', 'o', 't'],
      ),
    ).toMatch(msg);
    const { graph } = world();
    graph.add([g('h', { alloc: [vram(1, 'k')] }), g('o'), g('o2', { deps: ['o'] })]);
    expect(() => graph.add(g('t', { deps: ['o2'], release: ['k'] }))).toThrow(msg);
    expect(() => graph.add(g('t', { release: ['k'] }))).toThrow(msg);
    expect(graph.has('t')).toBe(false);
  });

  it('a task holding two keys (one of them over two allocations) lets each be released on its own', () => {
    const { sim, graph } = world();
    graph.add([
      g('t', { alloc: [vram(MB, 'k1'), vram(2 * MB, 'k2'), vram(3 * MB, 'k1')] }),
      g('u', { deps: ['t'], release: ['k1'] }),
      g('v', { deps: ['u'], release: ['k2'] }),
    ]);
    expect(graph.holdsInfo().map((h) => [h.key, h.bytesByPool.vram])).toEqual([
      ['k1', 4 * MB],
      ['k2', 2 * MB],
    ]);
    sim.run({ until: ms(1.5) });
    expect(graph.holdsInfo().map((h) => [h.key, h.live])).toEqual([
      ['k1', true],
      ['k2', true],
    ]);
    sim.run();
    graph.assertDone();
    expect(graph.holdsInfo()).toEqual([]);
  });

  it('a task without a label is labelled by its id, whatever the id', () => {
    const { sim, graph } = world();
    const ids = [-1, 1.5, 200_000, 2 ** 18, 'x', 0];
    graph.add(ids.map((id) => g(id)));
    sim.run();
    expect(ids.map((id) => graph.timing(id).label)).toEqual(['-1', '1.5', '200000', '262144', 'x', '0']);
  });
});
