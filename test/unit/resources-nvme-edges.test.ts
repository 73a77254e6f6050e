/**
 * The NVMe link's edges, worked out by hand on a drive of 4 B/ns, 4 KiB pages and a latency of
 * 1 000 ns at queue depth 1 rising to 3 000 ns at depth 3: every input check's text, the
 * latency table below its first point, a read's fields through its life (queued → latency →
 * ready → active → done, the −1 defaults), a cancel at each stage (queue depth, bytes, busy time,
 * the packet and transfer records), cancels and re-prioritisations of finished reads, the most
 * urgent waiting read when the unordered list's swap puts a newer one first, the handler errors,
 * and sinks without hooks. A Stryker run of sim/resources found each of these unguarded.
 */
import { describe, expect, it } from 'vitest';
import { Simulation } from '../../sim/kernel/simulation.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import type { TraceSink } from '../../sim/observe/trace-sink.ts';
import type { StorageEvent } from '../../sim/resources/events.ts';
import { latencyAtDepth, NvmeLink, type NvmeLinkOptions, type NvmeRead } from '../../sim/resources/nvme-link.ts';
import { RecordingSink } from './resources-helpers.ts';

/** Depth 1: 1 000 ns, depth 2: 2 000 ns, depth ≥ 3: 3 000 ns. */
const TABLE = [
  [1, 1_000],
  [3, 3_000],
] as const;

function rig(o: { maxQueueDepth?: number; sink?: TraceSink | null } = {}) {
  const sim = new Simulation<StorageEvent>();
  const sink = new RecordingSink();
  const nvme = new NvmeLink({
    bytesPerSec: 4e9, // 4 B/ns: 4 096 B in 1 024 ns
    latencyNsByQueueDepth: TABLE,
    granularityBytes: 4096,
    maxQueueDepth: o.maxQueueDepth ?? 4,
    sched: sim,
    sink: o.sink === null ? undefined : (o.sink ?? sink),
  });
  sim.setHandlers({
    'nvme.latencyDone': (e) => nvme.onLatencyDone(e.readId),
    'nvme.dataDone': () => nvme.onDataDone(),
  });
  const until = (t: number) => void sim.run({ until: t as Ns });
  return { sim, sink, nvme, until };
}

const opts = (o: Partial<NvmeLinkOptions>): NvmeLinkOptions => ({
  bytesPerSec: 4e9,
  latencyNsByQueueDepth: TABLE,
  granularityBytes: 4096,
  maxQueueDepth: 4,
  sched: new Simulation<StorageEvent>(),
  ...o,
});

describe('NVMe link: input checks', () => {
  it('names the field and the value, and accepts the smallest valid values', () => {
    expect(() => new NvmeLink(opts({ bytesPerSec: 0 }))).toThrow('nvme: read bandwidth must be > 0 B/s, got 0');
    expect(() => new NvmeLink(opts({ granularityBytes: 0.5 }))).toThrow('nvme: granularity must be ≥ 1 B, got 0.5');
    expect(() => new NvmeLink(opts({ maxQueueDepth: 0.5 }))).toThrow('nvme: maxQueueDepth must be ≥ 1, got 0.5');
    expect(() => new NvmeLink(opts({ latencyNsByQueueDepth: [] }))).toThrow('nvme: empty latency table');
    expect(() => latencyAtDepth([], 1)).toThrow('nvme: empty latency table');
    const smallest = new NvmeLink(opts({ bytesPerSec: 1, granularityBytes: 1, maxQueueDepth: 1 }));
    expect([smallest.granularityBytes, smallest.maxQueueDepth]).toEqual([1, 1]);
  });

  it('refuses a read of 0 B or of a fractional size, naming the size', () => {
    const { nvme } = rig();
    expect(() => nvme.submitRead(0, 0, 'x', 'r')).toThrow('nvme: read of 0 B');
    expect(() => nvme.submitRead(1.5, 0, 'x', 'r')).toThrow('nvme: read of 1.5 B');
    expect(nvme.submitRead(1, 0, 'x', 'r').bytes).toBe(4096);
  });

  it('the handlers name the unknown read and the idle channel', () => {
    const { nvme } = rig();
    expect(() => nvme.onLatencyDone(42)).toThrow('[t=0ns nvme] latency done for unknown read 42');
    expect(() => nvme.onDataDone()).toThrow('[t=0ns nvme] data done while idle');
  });
});

describe('NVMe link: latency table', () => {
  it('below its first point a read takes the first latency, never an extrapolation', () => {
    const t = [
      [2, 100],
      [4, 50],
    ] as const;
    expect([1, 2, 3, 4, 5].map((q) => latencyAtDepth(t, q))).toEqual([100, 100, 75, 50, 50]);
    // 100 − 50 · 1/3 = 83.33 → 84 (rounded up).
    expect(
      latencyAtDepth(
        [
          [1, 100],
          [4, 50],
        ] as const,
        2,
      ),
    ).toBe(84);
  });
});

describe('NVMe link: a read through its life', () => {
  it('ids, the −1 defaults before issue, states, records, busy time and the idle flag', () => {
    const { sim, sink, nvme, until } = rig({ maxQueueDepth: 1 });
    const a = nvme.submitRead(4096, 0, 'a', 'cat-a');
    const b = nvme.submitRead(8000, 0, 'b', 'cat-b', undefined, 7);
    expect([a.id, a.tag, a.state, a.queueDepth, a.issueNs, a.latencyNs, a.startNs, a.doneNs]).toEqual([
      0,
      -1,
      'latency',
      1,
      0,
      1_000,
      -1,
      -1,
    ]);
    expect([b.id, b.tag, b.bytes, b.state, b.queueDepth, b.issueNs, b.startNs, b.doneNs]).toEqual([
      1,
      7,
      8192,
      'queued',
      -1,
      -1,
      -1,
      -1,
    ]);
    expect([nvme.queueDepth, nvme.idle]).toEqual([1, false]);
    until(1_500); // a's data phase: 1 000 → 2 024
    expect([a.state, a.startNs, nvme.busyTimeNs()]).toEqual(['active', 1_000, 500]);
    sim.run(); // no onDone on either read
    // a done at 2 024; b issued then at depth 1, data 3 024 → 3 024 + 2 048 = 5 072.
    expect([a.state, a.doneNs, a.sentBytes]).toEqual(['done', 2_024, 4096]);
    expect([b.state, b.issueNs, b.queueDepth, b.startNs, b.doneNs]).toEqual(['done', 2_024, 1, 3_024, 5_072]);
    expect([nvme.queueDepth, nvme.idle, nvme.busyTimeNs(), nvme.completedReads]).toEqual([0, true, 3_072, 2]);
    expect(sink.transfers).toEqual([
      {
        link: 'nvme',
        id: 0,
        label: 'a',
        category: 'cat-a',
        bytes: 4096,
        priority: 0,
        submitNs: 0,
        startNs: 1_000,
        endNs: 2_024,
        outcome: 'done',
        sentBytes: 4096,
      },
      {
        link: 'nvme',
        id: 1,
        label: 'b',
        category: 'cat-b',
        bytes: 8192,
        priority: 0,
        submitNs: 0,
        startNs: 3_024,
        endNs: 5_072,
        outcome: 'done',
        sentBytes: 8192,
      },
    ]);
  });

  it('a cancel at each stage: ready, latency, active (bytes read so far), at the data start, after done', () => {
    const { sink, nvme, until, sim } = rig();
    const x = nvme.submitRead(40_960, 0, 'x', 'r'); // depth 1: ready at 1 000, data 1 000 → 11 240
    const y = nvme.submitRead(4096, 0, 'y', 'r'); // depth 2: ready at 2 000, channel busy
    const z = nvme.submitRead(4096, 0, 'z', 'r'); // depth 3: in latency until 3 000
    until(2_500);
    expect([x.state, y.state, z.state, nvme.queueDepth, nvme.peakQueueDepth]).toEqual([
      'active',
      'ready',
      'latency',
      3,
      3,
    ]);
    nvme.cancel(y);
    expect([y.state, y.sentBytes, nvme.queueDepth]).toEqual(['cancelled', 0, 2]);
    nvme.cancel(z);
    expect([z.state, nvme.queueDepth]).toEqual(['cancelled', 1]);
    until(3_500); // z's latency event was withdrawn
    expect([z.state, nvme.queueDepth]).toEqual(['cancelled', 1]);
    const w = nvme.submitRead(4096, 0, 'w', 'r'); // depth 2: ready at 5 500
    until(6_000);
    nvme.cancel(x); // 5 000 ns of data at 4 B/ns
    expect([x.sentBytes, nvme.cancelledSentBytes, nvme.bytesMoved, nvme.queueDepth]).toEqual([
      20_000, 20_000, 20_000, 1,
    ]);
    expect(nvme.busyTimeNs()).toBe(5_000); // w starts now: 0 ns of it so far
    sim.run(); // w: 6 000 → 7 024
    nvme.cancel(x);
    nvme.cancel(w);
    expect([x.state, w.state, nvme.cancelledReads, nvme.completedReads]).toEqual(['cancelled', 'done', 3, 1]);
    expect([nvme.bytesMoved, nvme.busyTimeNs(), nvme.peakQueueDepth, nvme.queueDepth]).toEqual([24_096, 6_024, 3, 0]);
    expect(sink.packets.map((p) => [p.transferId, p.bytes, p.startNs, p.endNs])).toEqual([
      [0, 20_000, 1_000, 6_000],
      [3, 4096, 6_000, 7_024],
    ]);
    expect(sink.transfers.map((t) => [t.id, t.outcome, t.startNs, t.endNs, t.sentBytes])).toEqual([
      [1, 'cancelled', 2_500, 2_500, 0],
      [2, 'cancelled', 2_500, 2_500, 0],
      [0, 'cancelled', 1_000, 6_000, 20_000],
      [3, 'done', 6_000, 7_024, 4096],
    ]);
    // Cancelled the instant its data starts: nothing read, no packet, its start in the record.
    const v = nvme.submitRead(4096, 0, 'v', 'r');
    until(8_024); // issued at 7 024, depth 1
    expect(v.state).toBe('active');
    nvme.cancel(v);
    expect([v.sentBytes, sink.packets.length, sink.transfers.at(-1)?.startNs]).toEqual([0, 2, 8_024]);
  });
});

describe('NVMe link: urgency', () => {
  const order = (setup: (read: (label: string, priority: number) => NvmeRead, link: NvmeLink) => void): string[] => {
    const { sim, nvme } = rig({ maxQueueDepth: 1 });
    const done: string[] = [];
    const read = (label: string, priority: number) =>
      nvme.submitRead(4096, priority, label, 'r', (r) => done.push(r.label));
    read('blocker', 0);
    setup(read, nvme);
    sim.run();
    return done;
  };

  it('equal priorities leave oldest first; the list swap never lets a newer, less urgent read jump', () => {
    expect(order((read) => (read('x', 1), read('y', 1)))).toEqual(['blocker', 'x', 'y']);
    // After 'a' is taken the list is [d, b, c]; after 'c', [d, b]: d (3) before b (5).
    expect(order((read) => (read('a', 1), read('b', 5), read('c', 3), read('d', 3)))).toEqual([
      'blocker',
      'a',
      'c',
      'd',
      'b',
    ]);
  });

  it('a cancelled waiting read leaves the list whole (the last one takes its place)', () => {
    expect(
      order((read, link) => {
        const x = read('x', 0);
        read('y', 0);
        read('z', 0);
        link.cancel(x); // waiting list [x, y, z] → [z, y]
      }),
    ).toEqual(['blocker', 'y', 'z']);
  });

  it('re-prioritises a waiting read; a done or cancelled read keeps its priority', () => {
    const { sim, nvme } = rig({ maxQueueDepth: 1 });
    const done: string[] = [];
    const read = (label: string, priority: number) =>
      nvme.submitRead(4096, priority, label, 'r', (r) => done.push(r.label));
    const blocker = read('blocker', 0);
    read('p', 5);
    const q = read('q', 5);
    const c = read('c', 3);
    nvme.reprioritize(q, 1);
    nvme.cancel(c);
    nvme.reprioritize(c, 0);
    sim.run();
    nvme.reprioritize(blocker, 9);
    expect(done).toEqual(['blocker', 'q', 'p']);
    expect([blocker.priority, c.priority, q.priority]).toEqual([0, 3, 1]);
  });
});

describe('NVMe link: sinks', () => {
  it('runs without a sink and with a sink that has no hooks, with the same counters', () => {
    const counters = (sink: TraceSink | null) => {
      const { sim, nvme, until } = rig({ sink });
      nvme.submitRead(4096, 0, 'a', 'r');
      const b = nvme.submitRead(40_960, 0, 'b', 'r');
      until(3_000); // b (depth 2) active from 2 024
      nvme.cancel(b);
      sim.run();
      return [nvme.bytesMoved, nvme.completedBytes, nvme.cancelledSentBytes, nvme.busyTimeNs()];
    };
    // b: 976 ns of data at 4 B/ns = 3 904 B.
    expect(counters(null)).toEqual([8_000, 4096, 3_904, 2_000]);
    expect(counters({})).toEqual([8_000, 4096, 3_904, 2_000]);
  });
});
