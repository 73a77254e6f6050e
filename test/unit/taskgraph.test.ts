/**
 * Unit tests of the task-graph executor (DESIGN §7, throughput family). Timelines are small
 * and computed by hand: links at 1 GB/s (1 B/ns, so 1 MB takes 1 ms) with no latency unless
 * stated, and packets larger than any transfer unless a test is about packets.
 */
import { describe, expect, it } from 'vitest';
import type { MemoryRecord } from '../../sim/observe/trace-sink.ts';
import {
  staticCriticalPath,
  TaskGraphDeadlockError,
  type TaskGraphExecutor,
  type TaskSpec,
} from '../../sim/taskgraph/index.ts';
import { foreignAt, MB, ms, simErrorOf, spans, world } from '../helpers/taskgraph-world.ts';

describe('task graph: the two-layer pipeline, timed by hand (acceptance)', () => {
  // Two MoE layers, each: dense weights H2D → GPU attention → two experts, each expert's
  // weights streamed while the previous GEMM computes; layer 2's weights prefetched during
  // layer 1's compute; KV copied D2H after attention; CPU attention of another micro-batch in
  // parallel. Every transfer is ready at t = 0, so the H2D link serves them in priority order.
  const tasks: TaskSpec[] = [
    // H2D, 2 MB each = 2 ms each, back to back by priority:
    //   L1.w [0,2]  L1.x0 [2,4]  L1.x1 [4,6]  L2.w [6,8]  L2.x0 [8,10]  L2.x1 [10,12]
    {
      id: 'L1.w',
      kind: 'h2d',
      bytes: 2 * MB,
      priority: 0,
      category: 'weights',
      alloc: [{ pool: 'vram', bytes: 2 * MB, category: 'denseWeights', hold: 'L1.w' }],
    },
    {
      id: 'L1.x0',
      kind: 'h2d',
      bytes: 2 * MB,
      priority: 1,
      category: 'weights',
      alloc: [{ pool: 'vram', bytes: 2 * MB, category: 'expertWeights', hold: 'L1.x0' }],
    },
    {
      id: 'L1.x1',
      kind: 'h2d',
      bytes: 2 * MB,
      priority: 2,
      category: 'weights',
      alloc: [{ pool: 'vram', bytes: 2 * MB, category: 'expertWeights', hold: 'L1.x1' }],
    },
    {
      id: 'L2.w',
      kind: 'h2d',
      bytes: 2 * MB,
      priority: 3,
      category: 'weights',
      alloc: [{ pool: 'vram', bytes: 2 * MB, category: 'denseWeights', hold: 'L2.w' }],
    },
    {
      id: 'L2.x0',
      kind: 'h2d',
      bytes: 2 * MB,
      priority: 4,
      category: 'weights',
      alloc: [{ pool: 'vram', bytes: 2 * MB, category: 'expertWeights', hold: 'L2.x0' }],
    },
    {
      id: 'L2.x1',
      kind: 'h2d',
      bytes: 2 * MB,
      priority: 5,
      category: 'weights',
      alloc: [{ pool: 'vram', bytes: 2 * MB, category: 'expertWeights', hold: 'L2.x1' }],
    },
    // Layer 1. GPU: attention waits for its weights (2) → [2,5].
    {
      id: 'L1.attn',
      kind: 'gpu',
      durationNs: ms(3),
      category: 'attention',
      deps: ['L1.w'],
      release: ['L1.w'],
      alloc: [{ pool: 'vram', bytes: 1 * MB, category: 'activations' }],
    },
    // CPU attention (4 cores, 4 ms of FLOPs, 1 MB of KV read: FLOP-bound) in parallel → [0,4].
    { id: 'L1.cpuAttn', kind: 'cpu', cores: 4, computeNs: ms(4), bytes: 1 * MB, category: 'attention' },
    // KV of layer 1 D2H after attention, 1 MB → [5,6].
    { id: 'L1.kv', kind: 'd2h', bytes: 1 * MB, category: 'kv', deps: ['L1.attn'] },
    // Expert 0: weights at 4, attention at 5 → [5,7]. Expert 1: weights at 6, GPU free at 7 → [7,9].
    { id: 'L1.e0', kind: 'gpu', durationNs: ms(2), category: 'expert', deps: ['L1.attn', 'L1.x0'], release: ['L1.x0'] },
    { id: 'L1.e1', kind: 'gpu', durationNs: ms(2), category: 'expert', deps: ['L1.attn', 'L1.x1'], release: ['L1.x1'] },
    // Layer 1 done when both experts and the CPU attention are: max(7, 9, 4) = 9.
    { id: 'L1.done', kind: 'barrier', category: 'sync', deps: ['L1.e0', 'L1.e1', 'L1.cpuAttn'] },
    // Layer 2: weights prefetched by 8, layer 1 done at 9 → attention [9,12]; CPU [9,13]; KV [12,13].
    {
      id: 'L2.attn',
      kind: 'gpu',
      durationNs: ms(3),
      category: 'attention',
      deps: ['L1.done', 'L2.w'],
      release: ['L2.w'],
    },
    {
      id: 'L2.cpuAttn',
      kind: 'cpu',
      cores: 4,
      computeNs: ms(4),
      bytes: 1 * MB,
      category: 'attention',
      deps: ['L1.done'],
    },
    { id: 'L2.kv', kind: 'd2h', bytes: 1 * MB, category: 'kv', deps: ['L2.attn'] },
    // Both experts' weights arrived (10, 12) before attention ends (12): [12,14], [14,16].
    { id: 'L2.e0', kind: 'gpu', durationNs: ms(2), category: 'expert', deps: ['L2.attn', 'L2.x0'], release: ['L2.x0'] },
    { id: 'L2.e1', kind: 'gpu', durationNs: ms(2), category: 'expert', deps: ['L2.attn', 'L2.x1'], release: ['L2.x1'] },
    { id: 'L2.done', kind: 'barrier', category: 'sync', deps: ['L2.e0', 'L2.e1', 'L2.cpuAttn', 'L2.kv'] },
  ];

  it('every task starts and finishes exactly when computed by hand', () => {
    const { sim, r, graph } = world();
    graph.add(tasks);
    sim.run();
    graph.assertDone();
    expect(
      spans(
        graph,
        tasks.map((t) => t.id),
      ),
    ).toEqual({
      'L1.w': [0, 2],
      'L1.x0': [2, 4],
      'L1.x1': [4, 6],
      'L2.w': [6, 8],
      'L2.x0': [8, 10],
      'L2.x1': [10, 12],
      'L1.attn': [2, 5],
      'L1.cpuAttn': [0, 4],
      'L1.kv': [5, 6],
      'L1.e0': [5, 7],
      'L1.e1': [7, 9],
      'L1.done': [9, 9],
      'L2.attn': [9, 12],
      'L2.cpuAttn': [9, 13],
      'L2.kv': [12, 13],
      'L2.e0': [12, 14],
      'L2.e1': [14, 16],
      'L2.done': [16, 16],
    });
    // Transfers were all handed to the link at 0 (memory allows), and waited there.
    expect(graph.timing('L2.x1')).toMatchObject({
      readyNs: 0,
      dispatchNs: 0,
      startNs: ms(10),
      finishNs: ms(12),
      state: 'done',
    });
    // L1.e1 was ready at 6 (its weights) but the GPU was busy until 7.
    expect(graph.timing('L1.e1')).toMatchObject({ readyNs: ms(6), dispatchNs: ms(7) });
    // VRAM: six 2 MB buffers reserved at 0, plus 1 MB of activations at 2 → peak 13 MB; all released at the end.
    expect(r.vram.peakBytes).toBe(13 * MB);
    expect(r.vram.usedBytes).toBe(0);
    expect(graph.holdsInfo()).toEqual([]);
    // Overlap: the GPU computed 14 ms, the H2D link moved 12 MB, in 16 ms.
    expect(r.gpu.busyTimeNs()).toBe(ms(14));
    expect(r.h2d.busyTimeNs()).toBe(ms(12));
    const st = graph.stats();
    expect(st).toMatchObject({ added: 18, finished: 18, firstStartNs: 0, lastFinishNs: ms(16) });
    expect(st.byKind).toEqual({
      gpu: { finished: 6, busyNs: ms(14) },
      cpu: { finished: 2, busyNs: ms(8) },
      h2d: { finished: 6, busyNs: ms(12) },
      d2h: { finished: 2, busyNs: ms(2) },
      barrier: { finished: 2, busyNs: 0 },
    });
    expect(Object.keys(st.byCategory)).toEqual(['weights', 'attention', 'kv', 'expert', 'sync']);
    // What made the run 16 ms long: the last expert weights of layer 1 gated everything after them.
    expect(graph.criticalPath()).toEqual(['L1.x1', 'L1.e1', 'L1.done', 'L2.attn', 'L2.e1', 'L2.done']);
    // With one resource per task (no link contention) the longest chain of durations is
    // L1.w 2 → L1.attn 3 → L1.e0 2 → L1.done → L2.attn 3 → L2.e0 2 = 12 ms (ties: first listed):
    // the 4 ms lost to contention are L1.x1 waiting behind L1.w and L1.x0 on the link.
    const durationNs = (t: TaskSpec): number =>
      t.kind === 'gpu' ? t.durationNs : t.kind === 'cpu' ? t.computeNs : t.kind === 'barrier' ? 0 : t.bytes; // 1 B/ns
    const cp = staticCriticalPath(tasks, durationNs);
    expect(cp.lengthNs).toBe(ms(12));
    expect(cp.path).toEqual(['L1.w', 'L1.attn', 'L1.e0', 'L1.done', 'L2.attn', 'L2.e0', 'L2.done']);
  });

  it('gives identical timings when run twice', () => {
    const a = world();
    a.graph.add(tasks);
    a.sim.run();
    const b = world();
    b.graph.add(tasks);
    b.sim.run();
    expect(b.graph.timings()).toEqual(a.graph.timings());
  });
});

describe('task graph: memory', () => {
  it('a task waits until a held buffer is released, without blocking less urgent tasks; VRAM never exceeds capacity', () => {
    const records: MemoryRecord[] = [];
    const { sim, r, graph } = world({ vramBytes: 10 * MB, sink: { onMemory: (m) => records.push(m) } });
    graph.add([
      // fill [0,6] holds 6 MB until use [6,8] releases it.
      {
        id: 'fill',
        kind: 'h2d',
        bytes: 6 * MB,
        category: 'weights',
        alloc: [{ pool: 'vram', bytes: 6 * MB, category: 'expertWeights', hold: 'buf' }],
      },
      { id: 'use', kind: 'gpu', durationNs: ms(2), category: 'expert', deps: ['fill'], release: ['buf'] },
      // next needs 6 MB: only 4 MB free until 8 → dispatched at 8; the link is busy with small until 9 → [9,15].
      {
        id: 'next',
        kind: 'h2d',
        bytes: 6 * MB,
        priority: 1,
        category: 'weights',
        alloc: [{ pool: 'vram', bytes: 6 * MB, category: 'expertWeights', hold: 'buf2' }],
      },
      // small is less urgent but fits (6 + 3 ≤ 10): dispatched at 0, waits for the link until 6 → [6,9].
      {
        id: 'small',
        kind: 'h2d',
        bytes: 3 * MB,
        priority: 2,
        category: 'weights',
        alloc: [{ pool: 'vram', bytes: 3 * MB, category: 'prefetchBuffer' }],
      },
      { id: 'use2', kind: 'gpu', durationNs: ms(1), category: 'expert', deps: ['next'], release: ['buf2'] },
    ]);
    sim.run();
    graph.assertDone();
    expect(spans(graph, ['fill', 'use', 'small', 'next', 'use2'])).toEqual({
      fill: [0, 6],
      use: [6, 8],
      small: [6, 9],
      next: [9, 15],
      use2: [15, 16],
    });
    expect(graph.timing('next')).toMatchObject({ readyNs: 0, dispatchNs: ms(8) });
    expect(graph.timing('small')).toMatchObject({ readyNs: 0, dispatchNs: 0 });
    // Peak: 6 + 3 at 0..6, then 3 + 6 at 8..9.
    expect(r.vram.peakBytes).toBe(9 * MB);
    expect(Math.max(...records.filter((m) => m.pool === 'vram').map((m) => m.usedBytes))).toBe(9 * MB);
    for (const m of records) expect(m.usedBytes).toBeLessThanOrEqual(m.capacityBytes);
    expect(r.vram.usedBytes).toBe(0);
  });

  it('acquires a task’s allocations all or nothing, across pools', () => {
    const { sim, r, graph } = world({ vramBytes: 10 * MB, hostBytes: 10 * MB });
    graph.add([
      {
        id: 'hostHog',
        kind: 'gpu',
        durationNs: ms(5),
        category: 'x',
        alloc: [{ pool: 'host', bytes: 8 * MB, category: 'kvCache' }],
      },
      // Needs both pools: VRAM is free but host is not until 5; nothing is taken meanwhile.
      {
        id: 'both',
        kind: 'cpu',
        cores: 1,
        computeNs: ms(1),
        bytes: 0,
        category: 'x',
        alloc: [
          { pool: 'vram', bytes: 4 * MB, category: 'workspace' },
          { pool: 'host', bytes: 4 * MB, category: 'kvCache' },
        ],
      },
    ]);
    sim.run({ until: ms(4) });
    expect(r.vram.usedBytes).toBe(0);
    expect(graph.timing('both').state).toBe('ready');
    sim.run();
    expect(spans(graph, ['both'])).toEqual({ both: [5, 6] });
  });

  it('is woken by a free outside the graph (onStall: wait), without polling', () => {
    const { sim, r, graph } = world({ vramBytes: 10 * MB, graph: { onStall: 'wait' } });
    const outside = r.vram.allocate(8 * MB, 'expertCache', 'someone else');
    // Foreign CPU work frees the outside allocation at 3 ms.
    foreignAt(r, 3, () => r.vram.free(outside));
    graph.add({
      id: 'g',
      kind: 'gpu',
      durationNs: ms(1),
      category: 'x',
      alloc: [{ pool: 'vram', bytes: 5 * MB, category: 'activations' }],
    });
    const result = sim.run();
    expect(result.events).toBeLessThan(10);
    expect(spans(graph, ['g'])).toEqual({ g: [3, 4] });
  });
});

describe('task graph: growth', () => {
  it('a router task’s onDone adds the expert tasks it routed to, and they run', () => {
    const { sim, graph } = world();
    const idleAt: number[] = [];
    graph.onIdle(() => idleAt.push(sim.now));
    const seen: number[] = [];
    graph.add({
      id: 'router',
      kind: 'gpu',
      durationNs: ms(1),
      category: 'router',
      onDone: (ctx) => {
        seen.push(ctx.nowNs, ctx.timing.finishNs!);
        const experts = [2, 5]; // "routing": known only now
        ctx.add(
          experts.flatMap((e): TaskSpec[] => [
            {
              id: `fetch${e}`,
              kind: 'h2d',
              bytes: 1 * MB,
              category: 'weights',
              alloc: [{ pool: 'vram', bytes: 1 * MB, category: 'expertWeights', hold: `w${e}` }],
            },
            {
              id: `gemm${e}`,
              kind: 'gpu',
              durationNs: ms(2),
              category: 'expert',
              deps: ['router', `fetch${e}`],
              release: [`w${e}`],
            },
          ]),
        );
        ctx.add({ id: 'combine', kind: 'barrier', category: 'sync', deps: experts.map((e) => `gemm${e}`) });
      },
    });
    sim.run();
    graph.assertDone();
    expect(seen).toEqual([ms(1), ms(1)]);
    // fetch2 [1,2], fetch5 [2,3]; gemm2 [2,4]; gemm5 ready at 3, GPU free at 4 → [4,6].
    expect(spans(graph, ['router', 'fetch2', 'fetch5', 'gemm2', 'gemm5', 'combine'])).toEqual({
      router: [0, 1],
      fetch2: [1, 2],
      fetch5: [2, 3],
      gemm2: [2, 4],
      gemm5: [4, 6],
      combine: [6, 6],
    });
    expect(idleAt).toEqual([ms(6)]);
    expect(graph.isDone()).toBe(true);
  });

  it('accepts deps on finished tasks and forward references inside a batch', () => {
    const { sim, graph } = world();
    graph.add({ id: 'a', kind: 'gpu', durationNs: ms(1), category: 'x' });
    sim.run();
    graph.add([
      { id: 'c', kind: 'gpu', durationNs: ms(1), category: 'x', deps: ['b'] },
      { id: 'b', kind: 'gpu', durationNs: ms(1), category: 'x', deps: ['a'] },
    ]);
    sim.run();
    expect(spans(graph, ['a', 'b', 'c'])).toEqual({ a: [0, 1], b: [1, 2], c: [2, 3] });
  });
});

describe('task graph: priorities on a contended resource', () => {
  it('the GPU runs waiting kernels by priority, then add order, including one that becomes ready later', () => {
    const { sim, graph } = world();
    graph.add([
      { id: 'k0', kind: 'gpu', durationNs: ms(5), category: 'x' },
      { id: 'a', kind: 'gpu', durationNs: ms(1), priority: 2, category: 'x' },
      { id: 'b', kind: 'gpu', durationNs: ms(1), priority: 0, category: 'x' },
      { id: 'c', kind: 'gpu', durationNs: ms(1), priority: 1, category: 'x' },
      { id: 'd', kind: 'gpu', durationNs: ms(1), priority: 1, category: 'x' },
      // e becomes ready at 5.5 (after the CPU task), while b runs: the most urgent, it goes next.
      { id: 'gate', kind: 'cpu', cores: 1, computeNs: ms(5.5), bytes: 0, category: 'x' },
      { id: 'e', kind: 'gpu', durationNs: ms(1), priority: -1, category: 'x', deps: ['gate'] },
    ]);
    sim.run();
    expect(spans(graph, ['k0', 'b', 'e', 'c', 'd', 'a'])).toEqual({
      k0: [0, 5],
      b: [5, 6],
      e: [6, 7],
      c: [7, 8],
      d: [8, 9],
      a: [9, 10],
    });
  });

  it('an urgent transfer overtakes a running one at the next packet boundary', () => {
    const { sim, graph } = world({ packetBytes: 1 * MB });
    graph.add([
      { id: 'big', kind: 'h2d', bytes: 4 * MB, priority: 5, category: 'weights' },
      { id: 'gate', kind: 'gpu', durationNs: ms(1.5), category: 'router' },
      // Ready at 1.5 in the middle of big's second packet [1,2]: goes at 2 → [2,3]; big resumes → 5.
      { id: 'urgent', kind: 'h2d', bytes: 1 * MB, priority: 0, category: 'weights', deps: ['gate'] },
    ]);
    sim.run();
    expect(spans(graph, ['big', 'urgent'])).toEqual({ big: [0, 5], urgent: [2, 3] });
  });

  it('with maxQueuedTransfers = 1 the link gets one transfer at a time, so nothing overtakes', () => {
    const { sim, graph } = world({ packetBytes: 1 * MB, graph: { maxQueuedTransfers: 1 } });
    graph.add([
      { id: 'big', kind: 'h2d', bytes: 4 * MB, priority: 5, category: 'weights' },
      { id: 'gate', kind: 'gpu', durationNs: ms(1.5), category: 'router' },
      { id: 'urgent', kind: 'h2d', bytes: 1 * MB, priority: 0, category: 'weights', deps: ['gate'] },
    ]);
    sim.run();
    expect(spans(graph, ['big', 'urgent'])).toEqual({ big: [0, 4], urgent: [4, 5] });
    expect(graph.timing('urgent')).toMatchObject({ readyNs: ms(1.5), dispatchNs: ms(4) });
  });

  it('the CPU serves by priority with head-of-line blocking on cores', () => {
    const { sim, graph } = world({ cores: 4 });
    graph.add([
      { id: 'w1', kind: 'cpu', cores: 3, computeNs: ms(2), bytes: 0, priority: 0, category: 'attention' },
      // wide needs 4 cores: waits for w1; narrow (1 core, less urgent) does not overtake it.
      { id: 'wide', kind: 'cpu', cores: 4, computeNs: ms(1), bytes: 0, priority: 1, category: 'attention' },
      { id: 'narrow', kind: 'cpu', cores: 1, computeNs: ms(1), bytes: 0, priority: 2, category: 'attention' },
    ]);
    sim.run();
    expect(spans(graph, ['w1', 'wide', 'narrow'])).toEqual({ w1: [0, 2], wide: [2, 3], narrow: [3, 4] });
  });

  it('a CPU task whose memory is short does not hold the CPU for less urgent tasks', () => {
    const { sim, graph } = world({ cores: 4 });
    graph.add([
      {
        id: 'hog',
        kind: 'gpu',
        durationNs: ms(5),
        category: 'x',
        alloc: [{ pool: 'vram', bytes: 60 * MB, category: 'workspace' }],
      },
      {
        id: 'wide',
        kind: 'cpu',
        cores: 4,
        computeNs: ms(1),
        bytes: 0,
        priority: 1,
        category: 'attention',
        alloc: [{ pool: 'vram', bytes: 10 * MB, category: 'activations' }],
      },
      { id: 'narrow', kind: 'cpu', cores: 1, computeNs: ms(1), bytes: 0, priority: 2, category: 'attention' },
    ]);
    sim.run();
    expect(spans(graph, ['hog', 'wide', 'narrow'])).toEqual({ hog: [0, 5], wide: [5, 6], narrow: [0, 1] });
  });

  it('tasks waiting for memory get it by priority when it frees, and smaller ones fill what is left', () => {
    const { sim, graph } = world({ vramBytes: 10 * MB });
    const buf = (id: string, mb: number, priority: number): TaskSpec => ({
      id,
      kind: 'h2d',
      bytes: mb * MB,
      priority,
      category: 'weights',
      alloc: [{ pool: 'vram', bytes: mb * MB, category: 'expertWeights' }],
    });
    graph.add([
      {
        id: 'hog',
        kind: 'gpu',
        durationNs: ms(2),
        category: 'x',
        alloc: [{ pool: 'vram', bytes: 9 * MB, category: 'workspace' }],
      },
      // All wait at 0 (1 MB free). At 2, 10 MB free: p1 and p2 (4 + 4) get it, p3 does not fit,
      // the 2 MB p5 does. The link: p1 [2,6], p2 [6,10]; p3 gets p1's 4 MB at 6 and, more urgent
      // than p5, goes first at 10 → [10,14]; p5 [14,16].
      buf('p3', 4, 3),
      buf('p1', 4, 1),
      buf('p2', 4, 2),
      buf('p5', 2, 5),
    ]);
    sim.run();
    expect(spans(graph, ['p1', 'p2', 'p3', 'p5'])).toEqual({ p1: [2, 6], p2: [6, 10], p3: [10, 14], p5: [14, 16] });
    expect(
      [graph.timing('p1'), graph.timing('p2'), graph.timing('p3'), graph.timing('p5')].map((t) => t.dispatchNs),
    ).toEqual([ms(2), ms(2), ms(6), ms(2)]);
  });

  it('concurrent GPU streams overlap; serialised streams share the SMs in priority order', () => {
    const two = (concurrentStreams: boolean) => {
      const { sim, graph } = world({ streamNames: ['attn', 'experts'], concurrentStreams });
      graph.add([
        { id: 'x', kind: 'gpu', stream: 'attn', durationNs: ms(2), priority: 1, category: 'attention' },
        { id: 'y', kind: 'gpu', stream: 'experts', durationNs: ms(2), priority: 0, category: 'expert' },
        { id: 'z', kind: 'gpu', stream: 1, durationNs: ms(1), priority: 0, category: 'expert' },
      ]);
      sim.run();
      return spans(graph, ['x', 'y', 'z']);
    };
    expect(two(true)).toEqual({ x: [0, 2], y: [0, 2], z: [2, 3] });
    expect(two(false)).toEqual({ y: [0, 2], z: [2, 3], x: [3, 5] });
  });
});

describe('task graph: deadlock', () => {
  const deadlocked: TaskSpec[] = [
    // a holds 8 of 10 MB until c releases it; c needs b, and b needs 5 MB: stuck at 8 ms.
    {
      id: 'a',
      kind: 'h2d',
      bytes: 8 * MB,
      category: 'weights',
      alloc: [{ pool: 'vram', bytes: 8 * MB, category: 'expertWeights', hold: 'a.buf' }],
    },
    {
      id: 'b',
      kind: 'gpu',
      durationNs: ms(1),
      category: 'expert',
      label: 'the GEMM',
      deps: ['a'],
      alloc: [{ pool: 'vram', bytes: 5 * MB, category: 'activations' }],
    },
    { id: 'c', kind: 'barrier', category: 'sync', deps: ['b'], release: ['a.buf'] },
  ];

  it('throws a SimError naming every stuck task and why', () => {
    const { sim, graph } = world({ vramBytes: 10 * MB });
    graph.add(deadlocked);
    let err: unknown;
    try {
      sim.run();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TaskGraphDeadlockError);
    const d = err as TaskGraphDeadlockError;
    expect(d.simTimeNs).toBe(ms(8));
    expect(d.stuck.map((t) => [t.id, t.state, t.waitsFor])).toEqual([
      ['b', 'ready', []],
      ['c', 'pending', ['b']],
    ]);
    expect(d.stuck[0]!.memory).toEqual([
      { pool: 'vram', neededBytes: 5 * MB, freeBytes: 2 * MB, capacityBytes: 10 * MB },
    ]);
    expect(d.message).toContain('[t=8000000ns taskgraph] deadlock');
    expect(d.message).toContain(
      'task "b" "the GEMM" (ready): needs 5000000 B of vram, 2000000 B free of 10000000 B (in use: "a.buf" 8000000 B held by "a", released by "c" (pending))',
    );
    expect(d.message).toContain('task "c" (pending): waits for "b" (ready)');
  });

  it('with onStall: wait, the run ends and assertDone throws the same diagnosis', () => {
    const { sim, graph } = world({ vramBytes: 10 * MB, graph: { onStall: 'wait' } });
    graph.add(deadlocked);
    expect(sim.run().stoppedBy).toBe('empty');
    expect(graph.isDone()).toBe(false);
    expect(() => graph.assertDone()).toThrow(TaskGraphDeadlockError);
    expect(graph.stuckTasks().map((t) => t.id)).toEqual(['b', 'c']);
  });

  it('assertDone distinguishes a run stopped early from a deadlock', () => {
    const { sim, graph } = world();
    graph.add({ id: 'g', kind: 'gpu', durationNs: ms(2), category: 'x' });
    sim.run({ until: ms(1) });
    expect(() => graph.assertDone()).toThrow(/not done: 1 task\(s\) unfinished, 1 still running/);
  });
});

describe('task graph: validation (a batch is added whole or not at all)', () => {
  const g = (id: string, extra: Partial<TaskSpec> = {}): TaskSpec =>
    ({ id, kind: 'gpu', durationNs: ms(1), category: 'x', ...extra }) as TaskSpec;
  const cases: [string, (graph: TaskGraphExecutor) => void, RegExp][] = [
    ['unknown dep', (x) => x.add([g('ok'), g('t', { deps: ['nope'] })]), /task "t": unknown dep "nope"/],
    ['duplicate id in batch', (x) => x.add([g('t'), g('t')]), /id appears twice/],
    ['id already added', (x) => (x.add(g('t')), x.add(g('t'))), /id already added/],
    ['self dep', (x) => x.add(g('t', { deps: ['t'] })), /depends on itself/],
    [
      'cycle',
      (x) => x.add([g('p', { deps: ['q'] }), g('q', { deps: ['p'] }), g('r')]),
      /dependency cycle among tasks "p", "q"/,
    ],
    ['unknown stream', (x) => x.add(g('t', { stream: 'nope' } as Partial<TaskSpec>)), /no GPU stream named "nope"/],
    [
      'fractional duration',
      (x) => x.add(g('t', { durationNs: 1.5 } as Partial<TaskSpec>)),
      /durationNs must be a non-negative integer/,
    ],
    [
      'too many cores',
      (x) => x.add({ id: 't', kind: 'cpu', cores: 99, computeNs: ms(1), bytes: 0, category: 'x' }),
      /cores must be an integer in \[1, 8\]/,
    ],
    [
      'empty transfer',
      (x) => x.add({ id: 't', kind: 'h2d', bytes: 0, category: 'x' }),
      /bytes must be a positive integer/,
    ],
    [
      'alloc over capacity',
      (x) => x.add(g('t', { alloc: [{ pool: 'vram', bytes: 65 * MB, category: 'workspace' }] })),
      /needs 65000000 B of vram, more than its capacity/,
    ],
    [
      'unknown category',
      (x) => x.add(g('t', { alloc: [{ pool: 'vram', bytes: 1, category: 'nope' as never }] })),
      /unknown memory category/,
    ],
    ['release of an unheld key', (x) => x.add(g('t', { release: ['k'] })), /releases "k", which no task holds/],
    [
      'a key released twice by one task',
      (x) =>
        x.add([
          g('h', { alloc: [{ pool: 'vram', bytes: 1, category: 'workspace', hold: 'k' }] }),
          g('t', { deps: ['h'], release: ['k', 'k'] }),
        ]),
      /task "t": releases "k" twice/,
    ],
    [
      // Numeric ids that are not consecutive: 6 is not in the batch (an index by subtraction would find it).
      'unknown dep between numeric ids',
      (x) => x.add([{ ...g('a'), id: 5 } as TaskSpec, { ...g('b', { deps: [6] }), id: 7 } as TaskSpec]),
      /task 7: unknown dep 6/,
    ],
    [
      'release by a non-descendant',
      (x) =>
        x.add([
          g('h', { alloc: [{ pool: 'vram', bytes: 1, category: 'workspace', hold: 'k' }] }),
          g('t', { release: ['k'] }),
        ]),
      /does not depend \(directly or not\) on its holder "h"/,
    ],
    [
      'hold key in use',
      (x) => (
        x.add(g('h', { alloc: [{ pool: 'vram', bytes: 1, category: 'workspace', hold: 'k' }] })),
        x.add(g('h2', { alloc: [{ pool: 'vram', bytes: 1, category: 'workspace', hold: 'k' }] }))
      ),
      /hold key "k" is in use \(held by task "h"\)/,
    ],
    [
      'two releasers',
      (x) =>
        x.add([
          g('h', { alloc: [{ pool: 'vram', bytes: 1, category: 'workspace', hold: 'k' }] }),
          g('r1', { deps: ['h'], release: ['k'] }),
          g('r2', { deps: ['h'], release: ['k'] }),
        ]),
      /task "r2": releases "k", already released by task "r1"/,
    ],
  ];
  for (const [name, act, message] of cases) {
    it(`rejects: ${name}`, () => {
      const { graph } = world();
      expect(simErrorOf(() => act(graph))).toMatch(message);
      // The failing batch left nothing behind.
      expect(graph.has('ok')).toBe(false);
      expect(graph.has('r')).toBe(false);
      expect(graph.has('h2')).toBe(false);
      // Nor a hold of it, nor a releaser of an older hold (validation registers holds as it goes).
      for (const h of graph.holdsInfo()) {
        expect(graph.has(h.holder)).toBe(true);
        if (h.releaser !== undefined) expect(graph.has(h.releaser)).toBe(true);
      }
    });
  }

  it('a failed batch undoes the holds and releases it registered', () => {
    const { sim, graph } = world();
    const hold = (key: string) => ({
      alloc: [{ pool: 'vram' as const, bytes: 1, category: 'workspace' as const, hold: key }],
    });
    graph.add(g('h', hold('k')));
    sim.run();
    // Holds 'k2', releases the live 'k', then fails on an unknown dep.
    expect(() => graph.add([g('h2', hold('k2')), g('r', { release: ['k'] }), g('bad', { deps: ['nope'] })])).toThrow(
      /unknown dep/,
    );
    // Holds 'k3' and releases 'k', then fails on a release of a key nobody holds.
    expect(() => graph.add([g('h3', hold('k3')), g('r', { release: ['k'] }), g('bad', { release: ['zz'] })])).toThrow(
      /which no task holds/,
    );
    expect(graph.holdsInfo().map((h) => [h.key, h.holder, h.releaser])).toEqual([['k', 'h', undefined]]);
    graph.add([g('h2', hold('k2')), g('r', { release: ['k'] }), g('r2', { deps: ['h2'], release: ['k2'] })]);
    sim.run();
    graph.assertDone();
    expect(graph.holdsInfo()).toEqual([]);
  });

  it('accepts a batch listing tasks before their deps, repeated deps, and a release through an indirect dep', () => {
    const { sim, graph } = world();
    const hold = { alloc: [{ pool: 'vram' as const, bytes: 1, category: 'workspace' as const, hold: 'k' }] };
    const many = Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? 'a' : 'm'));
    graph.add([
      g('t', { deps: ['m', 'm', 'a'], release: ['k'] }), // before its deps; holder 'a' reached through 'm'
      g('m', { deps: ['a', 'a'] }),
      g('a', hold),
      g('j', { deps: many }), // a long list with repeats (the set path)
    ]);
    sim.run();
    graph.assertDone();
    expect(graph.timing('t').startNs).toBe(ms(2));
    expect(graph.timing('j').startNs).toBe(ms(3)); // one GPU: after t (added first)
  });

  it('a later batch can release a live hold, and the key can be reused once its releaser has finished', () => {
    const { sim, r, graph } = world();
    graph.add({
      id: 'h',
      kind: 'h2d',
      bytes: 1 * MB,
      category: 'w',
      alloc: [{ pool: 'vram', bytes: 1 * MB, category: 'expertWeights', hold: 'k' }],
    });
    sim.run();
    expect(graph.holdsInfo()).toEqual([{ key: 'k', holder: 'h', live: true, bytesByPool: { vram: 1 * MB, host: 0 } }]);
    expect(r.vram.usedBytes).toBe(1 * MB);
    graph.add({ id: 'free', kind: 'barrier', category: 'sync', release: ['k'] }); // no dep needed: h is finished
    // The key stays in use until its releaser has finished.
    expect(() =>
      graph.add({
        id: 'h2',
        kind: 'barrier',
        category: 'sync',
        alloc: [{ pool: 'vram', bytes: 2, category: 'workspace', hold: 'k' }],
      }),
    ).toThrow(/in use/);
    sim.run();
    expect(r.vram.usedBytes).toBe(0);
    graph.add({
      id: 'h2',
      kind: 'barrier',
      category: 'sync',
      alloc: [{ pool: 'vram', bytes: 2, category: 'workspace', hold: 'k' }],
    });
    sim.run();
    expect(r.vram.usedBytes).toBe(2);
    expect(graph.holdsInfo().map((h) => [h.key, h.holder, h.live])).toEqual([['k', 'h2', true]]);
  });

  it('wraps an error thrown by onDone in a SimError naming the task', () => {
    const { sim, graph } = world();
    graph.add(
      g('t', {
        onDone: () => {
          throw new Error('boom');
        },
      }),
    );
    expect(() => sim.run()).toThrow(/\[t=1000000ns taskgraph\] onDone of task "t" threw: boom/);
  });

  it('timing of an unknown task throws', () => {
    const { graph } = world();
    expect(() => graph.timing('x')).toThrow(/no task "x"/);
  });
});

describe('task graph: a CPU task short of memory and of cores', () => {
  it('parks for memory (not a head-of-line CPU block): a narrower CPU task still starts at once', () => {
    const { sim, graph } = world({ cores: 8, vramBytes: 64 * MB });
    graph.add([
      { id: 'busy', kind: 'cpu', cores: 4, computeNs: ms(10), bytes: 0, category: 'x' },
      {
        id: 'fill',
        kind: 'gpu',
        durationNs: ms(5),
        category: 'x',
        alloc: [{ pool: 'vram', bytes: 60 * MB, category: 'activations' }],
      },
      {
        id: 'wide',
        kind: 'cpu',
        cores: 8,
        computeNs: ms(1),
        bytes: 0,
        category: 'x',
        alloc: [{ pool: 'vram', bytes: 10 * MB, category: 'activations' }],
      },
      { id: 'narrow', kind: 'cpu', cores: 2, computeNs: ms(1), bytes: 0, category: 'x' },
    ]);
    sim.run();
    // 'wide' lacks VRAM until 'fill' ends (5 ms) and cores until 'busy' ends (10 ms); 'narrow'
    // fits in the 4 free cores at 0.
    expect(spans(graph, ['busy', 'fill', 'wide', 'narrow'])).toEqual({
      busy: [0, 10],
      fill: [0, 5],
      wide: [10, 11],
      narrow: [0, 1],
    });
  });
});
