/**
 * Gpu: per-stream order, serialisation across streams (default) by submission order, overlap
 * with `concurrentStreams`, busy accounting per stream, per category and for the engine.
 */
import { describe, expect, it } from 'vitest';
import { SimError } from '../../sim/kernel/errors.ts';
import { Simulation } from '../../sim/kernel/simulation.ts';
import type { ResourceEvent } from '../../sim/resources/events.ts';
import { Gpu } from '../../sim/resources/gpu.ts';
import { makeRig, nsOf } from './resources-helpers.ts';

function gpuRig(streams: number, concurrentStreams: boolean) {
  const r = makeRig({ gpu: { streams, concurrentStreams } });
  const gpu = r.gpu!;
  const done: string[] = [];
  const kernel = (stream: number, label: string, durationNs: number, category = 'expert') =>
    gpu.submit({
      stream,
      durationNs: nsOf(durationNs),
      label,
      category,
      onDone: () => done.push(`${label}@${r.sim.now}`),
    });
  const timeline = () => r.sink.kernels.map((k) => `${k.stream}:${k.label}:${k.startNs}-${k.endNs}`);
  return { ...r, gpu, done, kernel, timeline };
}

describe('Gpu, serialised streams (default)', () => {
  it('runs one kernel at a time, choosing the earliest-submitted head among streams', () => {
    const { gpu, kernel, timeline, done, runAll } = gpuRig(2, false);
    kernel(0, 'k1', 100);
    kernel(1, 'k2', 50);
    kernel(0, 'k3', 30);
    expect(gpu.idle).toBe(false);
    runAll();
    expect(timeline()).toEqual(['gpu.stream0:k1:0-100', 'gpu.stream1:k2:100-150', 'gpu.stream0:k3:150-180']);
    expect(done).toEqual(['k1@100', 'k2@150', 'k3@180']);
    expect(gpu.busyNsByStream).toEqual([130, 50]);
    expect(gpu.busyTimeNs()).toBe(180);
    expect(gpu.kernels).toBe(3);
    expect(gpu.idle).toBe(true);
  });

  it('keeps per-stream order even when a later stream head was submitted earlier', () => {
    // s1:a is submitted first, so it runs first; s0's two kernels then run in their order.
    const { kernel, timeline, runAll } = gpuRig(3, false);
    kernel(1, 'a', 10);
    kernel(0, 'b', 10);
    kernel(0, 'c', 10);
    kernel(2, 'd', 10);
    runAll();
    expect(timeline()).toEqual([
      'gpu.stream1:a:0-10',
      'gpu.stream0:b:10-20',
      'gpu.stream0:c:20-30',
      'gpu.stream2:d:30-40',
    ]);
  });

  it('kernels submitted from onDone queue behind what is already waiting', () => {
    const { gpu, kernel, timeline, sim, runAll } = gpuRig(2, false);
    gpu.submit({
      stream: 0,
      durationNs: nsOf(10),
      label: 'first',
      category: 'attention',
      onDone: () => kernel(0, 'follow-up', 5),
    });
    kernel(1, 'other', 20);
    runAll();
    expect(timeline()).toEqual(['gpu.stream0:first:0-10', 'gpu.stream1:other:10-30', 'gpu.stream0:follow-up:30-35']);
    expect(sim.now).toBe(35);
  });
});

describe('Gpu, concurrent streams', () => {
  it('overlaps kernels of different streams, keeping each stream in order', () => {
    const { gpu, kernel, timeline, runAll } = gpuRig(2, true);
    kernel(0, 'k1', 100);
    kernel(1, 'k2', 50);
    kernel(0, 'k3', 30);
    runAll();
    expect(timeline()).toEqual(['gpu.stream1:k2:0-50', 'gpu.stream0:k1:0-100', 'gpu.stream0:k3:100-130']);
    expect(gpu.busyNsByStream).toEqual([130, 50]);
    // The engine is busy while at least one kernel runs: 0 → 130, not 130 + 50.
    expect(gpu.busyTimeNs()).toBe(130);
  });
});

describe('Gpu busy accounting', () => {
  it('per stream and per category, excluding idle gaps, including a running kernel up to now', () => {
    const { gpu, kernel, runUntil, runAll } = gpuRig(2, false);
    kernel(0, 'attn', 100, 'attention');
    kernel(1, 'e1', 40, 'expert');
    runUntil(500); // idle 140 → 500
    expect(gpu.busyTimeNs()).toBe(140);
    kernel(1, 'e2', 60, 'expert');
    runUntil(530);
    expect(gpu.busyTimeNs()).toBe(170); // e2 has run 30 of its 60 ns
    expect(gpu.busyNsByStream).toEqual([100, 40]); // completed kernels only
    runAll();
    expect(gpu.busyTimeNs()).toBe(200);
    expect(gpu.busyNsByStream).toEqual([100, 100]);
    expect(Object.fromEntries(gpu.busyNsByCategory)).toEqual({ attention: 100, expert: 100 });
  });

  it('a zero-length kernel completes at once and adds no busy time', () => {
    const { gpu, kernel, done, runAll } = gpuRig(1, false);
    kernel(0, 'empty', 0);
    kernel(0, 'k', 10);
    runAll();
    expect(done).toEqual(['empty@0', 'k@10']);
    expect(gpu.busyTimeNs()).toBe(10);
  });

  it('reports stream names given at construction', () => {
    const sim = new Simulation<ResourceEvent>();
    const gpu = new Gpu({ streams: 2, concurrentStreams: false, sched: sim, streamNames: ['attention', 'experts'] });
    expect([gpu.streamName(0), gpu.streamName(1), gpu.streamName(5)]).toEqual(['attention', 'experts', 'gpu.stream5']);
  });
});

describe('Gpu validation', () => {
  it('rejects unknown streams and bad stream counts', () => {
    const { gpu } = gpuRig(2, false);
    expect(() => gpu.submit({ stream: 2, durationNs: nsOf(1), label: 'x', category: 'expert' })).toThrow(SimError);
    expect(() => gpu.submit({ stream: -1, durationNs: nsOf(1), label: 'x', category: 'expert' })).toThrow(
      /no stream -1/,
    );
    const sim = new Simulation<ResourceEvent>();
    expect(() => new Gpu({ streams: 0, concurrentStreams: false, sched: sim })).toThrow(RangeError);
    expect(() => new Gpu({ streams: 1.5, concurrentStreams: false, sched: sim })).toThrow(RangeError);
  });

  it('rejects negative or fractional durations before touching the stream', () => {
    const { gpu, kernel, timeline, runAll } = gpuRig(1, false);
    for (const bad of [-5, 1.5, Number.NaN]) {
      expect(() => gpu.submit({ stream: 0, durationNs: bad as never, label: 'bad', category: 'expert' })).toThrow(
        /gpu.*duration/,
      );
    }
    expect(gpu.idle).toBe(true);
    kernel(0, 'ok', 10);
    runAll();
    expect(timeline()).toEqual(['gpu.stream0:ok:0-10']);
  });

  it('a kernel-done event on an idle stream is an error', () => {
    const { gpu } = gpuRig(1, false);
    expect(() => gpu.onKernelDone(0)).toThrow(SimError);
  });
});

describe('Gpu chains (submitChain)', () => {
  it('runs the parts back to back as one event, each accounted and traced as if submitted one after another', () => {
    const chained = gpuRig(1, false);
    chained.gpu.submitChain(
      0,
      [
        { durationNs: nsOf(40), label: 'attention', category: 'attention' },
        { durationNs: nsOf(0), label: 'empty', category: 'router' },
        { durationNs: nsOf(7), label: 'router', category: 'router' },
      ],
      () => chained.done.push(`chain@${chained.sim.now}`),
    );
    chained.runAll();
    // Worked by hand: attention 0–40, an empty kernel at 40, router 40–47; done at 47.
    expect(chained.timeline()).toEqual([
      'gpu.stream0:attention:0-40',
      'gpu.stream0:empty:40-40',
      'gpu.stream0:router:40-47',
    ]);
    expect(chained.done).toEqual(['chain@47']);
    expect(Object.fromEntries(chained.gpu.busyNsByCategory)).toEqual({ attention: 40, router: 7 });
    expect(chained.gpu.busyNsByStream).toEqual([47]);
    expect(chained.gpu.kernels).toBe(3);
    expect(chained.gpu.busyTimeNs()).toBe(47);
    expect(chained.sim.eventsProcessed).toBe(1);

    // The same kernels one at a time, each submitted from the previous one's completion.
    const single = gpuRig(1, false);
    single.gpu.submit({
      stream: 0,
      durationNs: nsOf(40),
      label: 'attention',
      category: 'attention',
      onDone: () =>
        single.gpu.submit({
          stream: 0,
          durationNs: nsOf(0),
          label: 'empty',
          category: 'router',
          onDone: () => single.kernel(0, 'router', 7, 'router'),
        }),
    });
    single.runAll();
    expect(single.timeline()).toEqual(chained.timeline());
    expect(single.gpu.busyNsByCategory).toEqual(chained.gpu.busyNsByCategory);
    expect(single.gpu.kernels).toBe(chained.gpu.kernels);
  });

  it('orders its completion among simultaneous completions by when its last part would have been submitted', () => {
    // Concurrent streams: stream 0 runs the chain a (0–40) + r (40–47); stream 1 ends a kernel
    // at 47 too, submitted at `submitAt`. Stamp order: submitted at 10 (< 40) it completes
    // before the chain; submitted at 45 (> 40), after — as with r submitted at 40.
    for (const [submitAt, expected] of [
      [10, ['other', 'chain']],
      [45, ['chain', 'other']],
    ] as const) {
      const { gpu, runAll } = gpuRig(2, true);
      const order: string[] = [];
      gpu.submitChain(
        0,
        [
          { durationNs: nsOf(40), label: 'a', category: 'attention' },
          { durationNs: nsOf(7), label: 'r', category: 'router' },
        ],
        () => order.push('chain'),
      );
      gpu.submit({
        stream: 1,
        durationNs: nsOf(submitAt),
        label: 'lead-in',
        category: 'expert',
        onDone: () =>
          gpu.submit({
            stream: 1,
            durationNs: nsOf(47 - submitAt),
            label: 'other',
            category: 'expert',
            onDone: () => order.push('other'),
          }),
      });
      runAll();
      expect(order).toEqual(expected);
    }
  });
});
