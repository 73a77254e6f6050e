/**
 * The page cache's edges, worked out by hand over an NVMe link of 4 B/ns, 4 KiB pages and a
 * latency of 1 000 ns at queue depth 1 (a 4 KiB file: 1 000 + 1 024 = 2 024 ns): its pool's
 * name, a file larger than the cache, joining a read in flight (at the more urgent priority),
 * re-prioritising a ticket, an idempotent release, pinned files never evicted, withdrawing an
 * acquisition while it waits for room, while its read is in latency or while its bytes flow,
 * the queue of acquisitions waiting for room, and sinks with and without the page-cache hook.
 * A Stryker run of sim/resources found each of these unguarded.
 */
import { describe, expect, it } from 'vitest';
import { CapacityError } from '../../sim/kernel/errors.ts';
import { Simulation } from '../../sim/kernel/simulation.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import type { TraceSink } from '../../sim/observe/trace-sink.ts';
import type { StorageEvent } from '../../sim/resources/events.ts';
import { NvmeLink } from '../../sim/resources/nvme-link.ts';
import { PageCache, type PageTicket } from '../../sim/resources/page-cache.ts';

const PAGE = 4096;

function rig(o: { pages: number; maxQueueDepth?: number; sink?: TraceSink }) {
  const sim = new Simulation<StorageEvent>();
  const nvme = new NvmeLink({
    bytesPerSec: 4e9,
    latencyNsByQueueDepth: [
      [1, 1_000],
      [3, 3_000],
    ],
    granularityBytes: PAGE,
    maxQueueDepth: o.maxQueueDepth ?? 4,
    sched: sim,
    sink: o.sink,
  });
  sim.setHandlers({
    'nvme.latencyDone': (e) => nvme.onLatencyDone(e.readId),
    'nvme.dataDone': () => nvme.onDataDone(),
  });
  const cache = new PageCache(o.pages * PAGE, nvme, sim, o.sink);
  const readyAt = new Map<string, number>();
  const take = (key: number, priority = 0, name = `f${key}`): PageTicket =>
    cache.acquire(key, PAGE, priority, `f${key}`, () => readyAt.set(name, sim.now));
  const until = (t: number) => void sim.run({ until: t as Ns });
  return { sim, nvme, cache, take, readyAt, until };
}

describe('page cache: sizes and names', () => {
  it('names its pool, rounds a file to pages, and refuses one larger than the cache, unchanged', () => {
    const events: string[] = [];
    const sink: TraceSink = {
      onTransfer: (t) => events.push(`${t.label}/${t.category}`),
    };
    const { cache, sim } = rig({ pages: 1, sink });
    expect(cache.pool.name).toBe('pageCache');
    expect(cache.pageBytes(5000)).toBe(8192);
    let err: unknown;
    try {
      cache.acquire(1, 5000, 0, 'big', () => {});
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(CapacityError);
    expect((err as CapacityError).message).toBe('[t=0ns pageCache] pageCache: a file of 8192 B cannot fit in 4096 B');
    expect([(err as CapacityError).requestedBytes, (err as CapacityError).freeBytes]).toEqual([8192, 4096]);
    expect([cache.has(1), cache.stats.reads, cache.pool.usedBytes]).toEqual([false, 0, 0]);
    cache.acquire(2, 100, 0, 'small', () => {});
    sim.run();
    expect(events).toEqual(['small/expert-read']);
  });
});

describe('page cache: joins and priorities', () => {
  /** Depth 1: file 1 is read first; files 2 (priority 5) and 3 (priority 3) wait in the drive's queue. */
  const scenario = (act: (r: ReturnType<typeof rig>, t2: PageTicket, t3: PageTicket) => void) => {
    const r = rig({ pages: 8, maxQueueDepth: 1 });
    r.take(1);
    const t2 = r.take(2, 5);
    const t3 = r.take(3, 3);
    act(r, t2, t3);
    r.sim.run();
    return [...r.readyAt.entries()].sort((a, b) => a[1] - b[1] || a[0].localeCompare(b[0]));
  };

  it('a join waits for the same read; a more urgent join raises it, a less urgent one does not', () => {
    // Reads in series: 2 024, 4 048, 6 072.
    expect(scenario(({ take }) => take(2, 1, 'f2 joined'))).toEqual([
      ['f1', 2_024],
      ['f2', 4_048],
      ['f2 joined', 4_048],
      ['f3', 6_072],
    ]);
    expect(scenario(({ take }) => take(3, 9, 'f3 joined'))).toEqual([
      ['f1', 2_024],
      ['f3', 4_048],
      ['f3 joined', 4_048],
      ['f2', 6_072],
    ]);
    const r = rig({ pages: 8 });
    r.take(1);
    r.take(1, 0, 'again');
    r.sim.run();
    expect(r.cache.stats).toMatchObject({ accesses: 2, joins: 1, reads: 1, hits: 0 });
  });

  it('re-prioritises a pending ticket only: not a less urgent number, a released ticket or an unknown file', () => {
    const order = (rows: [string, number][]) => rows.map(([k]) => k);
    expect(order(scenario(({ cache }, t2) => cache.reprioritize(t2, 1)))).toEqual(['f1', 'f2', 'f3']);
    expect(order(scenario(({ cache }, _t2, t3) => cache.reprioritize(t3, 9)))).toEqual(['f1', 'f3', 'f2']);
    expect(
      order(
        scenario(({ cache, take }, t2) => {
          take(2, 5, 'f2 second');
          cache.release(t2); // withdrawn: file 2 is still wanted by the second ticket
          cache.reprioritize(t2, 1);
          cache.reprioritize({ key: 99, ready: false, released: false, onReady: () => {} }, 0);
        }),
      ),
    ).toEqual(['f1', 'f3', 'f2 second']);
  });
});

describe('page cache: pins and eviction', () => {
  it('a second release of a ticket is a no-op; pinned files are never evicted; the hook sees each change', () => {
    const seen: [number, boolean][] = [];
    const { cache, take, sim } = rig({ pages: 2, sink: { onPageCache: (k, resident) => seen.push([k, resident]) } });
    const t1 = take(1);
    sim.run();
    const hit = take(1); // pins 2
    cache.release(t1);
    cache.release(t1); // still pinned by `hit`
    const t2 = take(2);
    sim.run();
    cache.release(t2); // recency: 1, 2; file 1 pinned
    take(3);
    sim.run();
    expect([cache.has(1), cache.has(2), cache.has(3)]).toEqual([true, false, true]);
    expect(seen).toEqual([
      [1, true],
      [2, true],
      [2, false],
      [3, true],
    ]);
    cache.release(hit);
    expect(cache.stats).toMatchObject({ evictions: 1, evictedBytes: PAGE, roomWaits: 0 });
  });

  it('works without a sink and with a sink that has no hooks', () => {
    for (const sink of [undefined, {}]) {
      const { cache, take, sim } = rig({ pages: 1, sink });
      const t1 = take(1);
      sim.run();
      cache.release(t1);
      const t2 = take(2); // evicts 1
      sim.run();
      cache.release(t2);
      expect([cache.has(1), cache.has(2), cache.stats.evictions]).toEqual([false, true, 1]);
    }
  });
});

describe('page cache: withdrawn acquisitions and the room queue', () => {
  it('withdrawing the first acquisition waiting for room removes it: never read, a later acquire reads anew', () => {
    const { cache, take, sim, readyAt } = rig({ pages: 1 });
    const a = take(1);
    sim.run();
    const b = take(2);
    take(3);
    expect(cache.stats.roomWaits).toBe(2);
    cache.release(b);
    cache.release(a); // room: file 3 is read (evicting 1)
    sim.run();
    expect([cache.has(2), cache.has(3), readyAt.has('f2'), cache.stats.reads]).toEqual([false, true, false, 2]);
    take(2); // file 3 is still pinned: a new acquisition waiting for room, not a join
    expect([cache.stats.reads, cache.stats.joins, cache.stats.roomWaits]).toEqual([2, 0, 3]);
  });

  it('withdrawn during the latency: the read is cancelled, its pages freed, the next waiter read', () => {
    const { cache, take, sim, nvme, readyAt, until } = rig({ pages: 1 });
    const a = take(1);
    take(2); // waits for room
    until(500);
    cache.release(a);
    expect([nvme.cancelledReads, cache.has(1)]).toEqual([1, false]);
    sim.run();
    expect(readyAt.get('f2')).toBe(500 + 2_024);
    expect([readyAt.has('f1'), cache.pool.usedBytes, nvme.completedReads]).toEqual([false, PAGE, 1]);
  });

  it('withdrawn while its bytes flow: the read completes into the cache, unpinned', () => {
    const { cache, take, sim, nvme, readyAt, until } = rig({ pages: 1 });
    const a = take(1);
    until(1_500); // data phase 1 000 → 2 024
    cache.release(a);
    sim.run();
    expect([cache.has(1), readyAt.has('f1'), nvme.cancelledReads, cache.pool.usedBytes]).toEqual([
      true,
      false,
      0,
      PAGE,
    ]);
    take(2); // file 1 is not pinned: evicted, no wait
    expect([cache.stats.roomWaits, cache.stats.evictions]).toEqual([0, 1]);
  });

  it('one of two waiters withdrawing leaves the read to the other', () => {
    const { cache, take, sim, nvme, readyAt } = rig({ pages: 1 });
    const a = take(1);
    take(1, 0, 'second');
    cache.release(a);
    sim.run();
    expect([readyAt.get('second'), readyAt.has('f1'), nvme.cancelledReads]).toEqual([2_024, false, 0]);
  });

  it('serves waiting acquisitions in order as room frees, each read once', () => {
    const { cache, take, sim, readyAt } = rig({ pages: 2 });
    const t1 = take(1);
    take(2);
    sim.run();
    const t3 = take(3);
    take(4);
    expect(cache.stats.roomWaits).toBe(2);
    cache.release(t1); // room for 3 (evicts 1); 4 still waits (2 pinned, 3 reading)
    sim.run();
    expect([readyAt.has('f3'), readyAt.has('f4'), cache.stats.reads]).toEqual([true, false, 3]);
    const at = sim.now;
    cache.release(t3); // room for 4 (evicts 3)
    sim.run();
    expect([readyAt.get('f4'), cache.stats.reads, cache.stats.evictions, cache.pool.usedBytes]).toEqual([
      at + 2_024,
      4,
      2,
      2 * PAGE,
    ]);
  });

  it('names an unknown file on release', () => {
    const { cache } = rig({ pages: 1 });
    expect(() => cache.release({ key: 99, ready: false, released: false, onReady: () => {} })).toThrow(
      '[t=0ns pageCache] page cache: release of unknown file 99',
    );
  });
});
