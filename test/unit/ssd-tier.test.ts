/**
 * The SSD tier against hand-computed cases: one NVMe read (granularity, latency, data time),
 * queue-depth latency (interpolation, overlapped latencies, one data channel, a queue cap),
 * cancellation accounting, the page cache's LRU eviction and pins, and a miss path
 * NVMe → page cache → H2D into VRAM through `SsdSource` (end time to the nanosecond), then the
 * same fetch again as a page-cache hit (H2D only).
 */
import { describe, expect, it } from 'vitest';
import { Simulation } from '../../sim/kernel/simulation.ts';
import type { ResourceEvent, StorageEvent } from '../../sim/resources/events.ts';
import { latencyAtDepth, NvmeLink, type NvmeRead } from '../../sim/resources/nvme-link.ts';
import { PageCache } from '../../sim/resources/page-cache.ts';
import { PcieLink } from '../../sim/resources/pcie-link.ts';
import { SsdSource, storagePlanOf } from '../../sim/serving/parts/ssd-tier.ts';
import { loadHardware, loadModel } from '../../hardware-profiles/load.ts';
import { RecordingSink } from './resources-helpers.ts';

/** QD1 45 µs, QD32 23 µs (the 990 PRO profile's first two points), 7 GB/s, 4 KiB pages. */
const TABLE = [
  [1, 45_000],
  [32, 23_000],
] as const;

function rig(o: { maxQueueDepth?: number; pageCacheBytes?: number; h2d?: boolean } = {}) {
  const sim = new Simulation<ResourceEvent | StorageEvent>();
  const sink = new RecordingSink();
  const nvme = new NvmeLink({
    bytesPerSec: 7e9,
    latencyNsByQueueDepth: TABLE,
    granularityBytes: 4096,
    maxQueueDepth: o.maxQueueDepth ?? 32,
    sched: sim,
    sink,
  });
  const cache = new PageCache(o.pageCacheBytes ?? 1 << 30, nvme, sim, sink);
  const h2d = new PcieLink({
    name: 'h2d',
    bytesPerSec: 25e9,
    latencyNs: 10_000,
    packetBytes: 16 << 20,
    sched: sim,
    sink,
  });
  const never = (): never => {
    throw new Error('unexpected event');
  };
  sim.setHandlers({
    'gpu.kernelDone': never,
    'link.latencyDone': () => h2d.onLatencyDone(),
    'link.packetDone': () => h2d.onPacketDone(),
    'link.runDone': () => h2d.onRunDone(),
    'fluid.flowDone': never,
    'cpu.taskDone': never,
    'nvme.latencyDone': (e) => nvme.onLatencyDone(e.readId),
    'nvme.dataDone': () => nvme.onDataDone(),
  });
  return { sim, sink, nvme, cache, h2d };
}

describe('NVMe link', () => {
  it('one read: rounded up to the granularity, latency at depth 1, then bytes at the sequential rate', () => {
    const { sim, nvme, sink } = rig();
    let doneAt = -1;
    const r = nvme.submitRead(5000, 0, 'x', 'expert-read', () => (doneAt = sim.now));
    expect(r.bytes).toBe(8192);
    sim.run();
    // 45 000 ns latency + ⌈8192 B / 7e9 B/s⌉ = ⌈1170.29⌉ = 1171 ns.
    expect(doneAt).toBe(46_171);
    expect(nvme.bytesMoved).toBe(8192);
    expect(nvme.completedBytes).toBe(8192);
    expect(nvme.busyTimeNs()).toBe(1171);
    expect(sink.packets.map((p) => [p.link, p.bytes, p.startNs, p.endNs])).toEqual([['nvme', 8192, 45_000, 46_171]]);
    expect(sink.transfers.map((t) => [t.outcome, t.sentBytes])).toEqual([['done', 8192]]);
  });

  it('latency is interpolated by queue depth and clamped at the table ends', () => {
    expect(latencyAtDepth(TABLE, 1)).toBe(45_000);
    // 45 000 − 22 000 · 15/31 = 34 354.84 → 34 355.
    expect(latencyAtDepth(TABLE, 16)).toBe(34_355);
    expect(latencyAtDepth(TABLE, 32)).toBe(23_000);
    expect(latencyAtDepth(TABLE, 500)).toBe(23_000);
  });

  it('two reads at once: latencies overlap (depths 1 and 2), data crosses one channel in turn', () => {
    const { sim, nvme } = rig();
    const done: [string, number][] = [];
    nvme.submitRead(1_048_576, 0, 'a', 'r', () => done.push(['a', sim.now]));
    nvme.submitRead(1_048_576, 0, 'b', 'r', () => done.push(['b', sim.now]));
    sim.run();
    // b is issued at depth 2: 45 000 − 22 000/31 = 44 290.32 → 44 291 ns, ready before a (45 000).
    // Data: ⌈1 048 576 / 7e9 s⌉ = ⌈149 796.57⌉ = 149 797 ns each, one after the other.
    expect(done).toEqual([
      ['b', 44_291 + 149_797],
      ['a', 44_291 + 2 * 149_797],
    ]);
    expect(nvme.peakQueueDepth).toBe(2);
  });

  it('a queue cap of 1 issues the second read when the first is done, at depth 1 again', () => {
    const { sim, nvme } = rig({ maxQueueDepth: 1 });
    const done: number[] = [];
    nvme.submitRead(4096, 0, 'a', 'r', () => done.push(sim.now));
    nvme.submitRead(4096, 0, 'b', 'r', () => done.push(sim.now));
    sim.run();
    // ⌈4096 / 7e9 s⌉ = 586 ns of data after each 45 000 ns latency, strictly in series.
    expect(done).toEqual([45_586, 91_172]);
  });

  it('cancelled reads: queued ones send nothing, an active one counts what it had read', () => {
    const { sim, nvme } = rig({ maxQueueDepth: 1 });
    const a = nvme.submitRead(7_000_000, 0, 'a', 'r');
    const b: NvmeRead = nvme.submitRead(4096, 0, 'b', 'r');
    nvme.cancel(b);
    sim.run({ until: 545_000 as never }); // 500 µs into a's data phase (started at 45 µs)
    nvme.cancel(a);
    sim.run();
    expect(b.sentBytes).toBe(0);
    expect(a.sentBytes).toBe(3_500_000); // ⌊500 000 ns · 7 B/ns⌋
    expect(nvme.bytesMoved).toBe(nvme.completedBytes + nvme.cancelledSentBytes);
    expect(nvme.cancelledSentBytes).toBe(3_500_000);
    expect(nvme.cancelledReads).toBe(2);
  });
});

describe('page cache', () => {
  it('evicts the least recently used unpinned file, keeps a recently hit one, and never a pinned one', () => {
    const { sim, cache } = rig({ pageCacheBytes: 3 * 4096 });
    const take = (k: number) => {
      const t = cache.acquire(k, 4000, 0, `f${k}`, () => {});
      sim.run();
      return t;
    };
    for (const k of [1, 2, 3]) cache.release(take(k));
    const hit = cache.acquire(1, 4000, 0, 'f1', () => {});
    expect(hit.ready).toBe(true); // a hit is pinned at once, no read
    cache.release(hit);
    cache.release(take(4)); // room for 4: file 2 is the least recently used
    expect([1, 2, 3, 4].map((k) => cache.has(k))).toEqual([true, false, true, true]);
    const pinned = take(3); // a hit: 3 pinned (recency 1, 4, 3)
    cache.release(take(1));
    cache.release(take(4)); // recency 3, 1, 4: the pinned 3 is the least recent
    cache.release(take(5)); // evicts 1 (least recent unpinned), not the pinned 3
    expect([1, 3, 4, 5].map((k) => cache.has(k))).toEqual([false, true, true, true]);
    cache.release(pinned);
    expect(cache.stats).toMatchObject({ accesses: 9, hits: 4, reads: 5, evictions: 2, evictedBytes: 8192 });
    expect(cache.pool.usedBytes).toBe(3 * 4096);
  });

  it('waits for room when every cached file is pinned, and reads once one is released', () => {
    const { sim, cache } = rig({ pageCacheBytes: 4096 });
    const a = cache.acquire(1, 4096, 0, 'a', () => {});
    sim.run();
    let readyAt = -1;
    const b = cache.acquire(2, 4096, 0, 'b', () => (readyAt = sim.now));
    sim.run();
    expect(b.ready).toBe(false);
    expect(cache.stats.roomWaits).toBe(1);
    const t0 = sim.now;
    cache.release(a);
    sim.run();
    expect(readyAt).toBe(t0 + 45_000 + 586);
  });
});

describe('SsdSource: a miss NVMe → page cache → VRAM', () => {
  it('ends at NVMe latency + NVMe data + H2D latency + H2D data; a second fetch is an H2D copy only', () => {
    const { sim, cache, h2d, nvme } = rig();
    const src = new SsdSource(h2d, cache, sim);
    const ends: number[] = [];
    src.submitTransfer(1_048_576, 0, 'expert M0E0', 'expert-demand', () => ends.push(sim.now), 0);
    sim.run();
    // NVMe: 45 000 + 149 797 = 194 797; H2D: 10 000 + ⌈1 048 576 / 25e9 s⌉ (= 41 944) → 246 741.
    expect(ends).toEqual([246_741]);
    const t0 = sim.now;
    src.submitTransfer(1_048_576, 0, 'expert M0E0', 'expert-demand', () => ends.push(sim.now), 0);
    sim.run();
    expect(ends[1]).toBe(t0 + 10_000 + 41_944);
    expect(nvme.completedReads).toBe(1);
    expect(cache.stats).toMatchObject({ accesses: 2, hits: 1, reads: 1 });
    expect(h2d.completedBytes).toBe(2 * 1_048_576);
  });

  it('cancelling while the drive reads withdraws the read: no H2D bytes, the pages are freed', () => {
    const { sim, cache, h2d, nvme } = rig();
    const src = new SsdSource(h2d, cache, sim);
    const t = src.submitTransfer(1_048_576, 1, 'expert M0E1', 'expert-prefetch', () => {}, 1);
    sim.run({ until: 10_000 as never });
    src.cancel(t);
    sim.run();
    expect(h2d.bytesMoved).toBe(0);
    expect(nvme.cancelledReads).toBe(1);
    expect(cache.pool.usedBytes).toBe(0);
  });
});

describe('the SSD tier needs a drive', () => {
  it('a testbed without one is an input error naming it', () => {
    const model = loadModel('qwen3.5-397b-a17b-mlx4-k4');
    const hw = loadHardware('rtx4090');
    expect(() => storagePlanOf({ reservedBytes: 0, parallelReads: 4 }, model, hw)).toThrow(
      'the SSD tier needs a testbed naming a drive; rtx4090 has none',
    );
    expect(storagePlanOf(undefined, model, hw)).toBeUndefined();
  });
});
