/**
 * Gpu engine busy time with concurrent streams when a kernel starts while another already runs:
 * the engine is busy over the union of the kernels' intervals, measured from the first start.
 * A whole-set mutation sample found this unguarded (every kernel of the suite started at an idle
 * engine or at the same instant as the other).
 */
import { describe, expect, it } from 'vitest';
import { makeRig, nsOf } from './resources-helpers.ts';

describe('Gpu, concurrent streams, staggered starts', () => {
  it('busy time is the union of [0, 100) and [40, 140): 140 ns, and 100 ns at t = 100', () => {
    const r = makeRig({ gpu: { streams: 2, concurrentStreams: true } });
    const gpu = r.gpu!;
    const kernel = (stream: number, durationNs: number) =>
      gpu.submit({ stream, durationNs: nsOf(durationNs), label: `s${stream}`, category: 'expert', onDone: () => {} });
    kernel(0, 100);
    r.runUntil(40);
    kernel(1, 100);
    r.runUntil(100);
    expect(gpu.busyTimeNs()).toBe(100);
    r.runAll();
    expect(gpu.busyTimeNs()).toBe(140);
    expect(gpu.busyNsByStream).toEqual([100, 100]);
  });
});
