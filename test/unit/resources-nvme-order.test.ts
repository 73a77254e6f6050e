/**
 * The NVMe link's waiting reads leave most urgent first (lower priority, then older) and none is
 * lost when the most urgent one is not the last in the unordered list. A whole-set mutation
 * sample found the swap-back of that removal unguarded.
 */
import { describe, expect, it } from 'vitest';
import { Simulation } from '../../sim/kernel/simulation.ts';
import type { StorageEvent } from '../../sim/resources/events.ts';
import { NvmeLink } from '../../sim/resources/nvme-link.ts';

describe('NVMe link, waiting reads', () => {
  it('queue depth 1: issued in priority order, then submission order, every read completed', () => {
    const sim = new Simulation<StorageEvent>();
    const nvme = new NvmeLink({
      bytesPerSec: 4096e9 / 1000, // 4 096 B in 1 000 ns
      latencyNsByQueueDepth: [[1, 10_000]],
      granularityBytes: 4096,
      maxQueueDepth: 1,
      sched: sim,
    });
    sim.setHandlers({
      'nvme.latencyDone': (e) => nvme.onLatencyDone(e.readId),
      'nvme.dataDone': () => nvme.onDataDone(),
    });
    const done: [string, number][] = [];
    const read = (tag: string, priority: number) =>
      nvme.submitRead(4096, priority, tag, 'expert-read', () => done.push([tag, sim.now as number]));
    read('first', 9); // issued at once
    read('a', 5);
    read('b', 1);
    read('c', 3);
    read('d', 3);
    sim.run();
    // One at a time: 10 000 ns latency + 1 000 ns data each.
    expect(done).toEqual([
      ['first', 11_000],
      ['b', 22_000],
      ['c', 33_000],
      ['d', 44_000],
      ['a', 55_000],
    ]);
    expect(nvme.completedReads).toBe(5);
  });
});
