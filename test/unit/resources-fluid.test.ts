/**
 * FluidShare (host-DRAM bandwidth), DMA contention with CPU work, and CpuPool durations.
 * Rates are chosen so that times are round numbers of ns (1e9 B/s = 1 B/ns); every expected
 * time is derived by hand in the comment next to it.
 */
import { describe, expect, it } from 'vitest';
import { SimError } from '../../sim/kernel/errors.ts';
import { Simulation } from '../../sim/kernel/simulation.ts';
import type { ResourceEvent } from '../../sim/resources/events.ts';
import { CpuPool } from '../../sim/resources/cpu-pool.ts';
import { FluidShare } from '../../sim/resources/fluid-share.ts';
import { makeRig, nsOf } from './resources-helpers.ts';

/** A rig with only a host-DRAM share; returns a `done` log of `label@time`. */
function fluidRig(capacityBytesPerSec: number) {
  const r = makeRig({ dramBytesPerSec: capacityBytesPerSec });
  const dram = r.dram!;
  const done: Record<string, number> = {};
  const start = (label: string, bytes: number, cap: number) => dram.start(bytes, cap, () => (done[label] = r.sim.now));
  return { ...r, dram, done, start };
}

describe('FluidShare: shares proportional to demand when oversubscribed (DESIGN §4)', () => {
  it('two flows capped above half the capacity each get half', () => {
    const { start, done, dram, runUntil, runAll } = fluidRig(1e9);
    start('a', 1000, 8e8);
    start('b', 1000, 8e8);
    expect(dram.activeFlows).toBe(2);
    runUntil(1000);
    expect(dram.bytesServed()).toBeCloseTo(1000, 6); // 2 × 0.5 B/ns × 1000 ns
    runAll();
    // Demand 1.6 B/ns on 1 B/ns: both × 1/1.6, 0.5 B/ns: 1000 B in 2000 ns (alone 1250 ns).
    expect(done).toEqual({ a: 2000, b: 2000 });
    expect(dram.bytesServed()).toBeCloseTo(2000, 6);
    expect(dram.activeFlows).toBe(0);
  });

  it('a low-demand flow is slowed by the same factor as the others (max-min would leave it at its cap)', () => {
    const { start, done, runAll } = fluidRig(1e9);
    start('low', 400, 2e8);
    start('high', 800, 1e9);
    runAll();
    // Demand 1.2 B/ns on 1: factor 1/1.2. high at 0.8333 B/ns: 800 B → 960 ns. low at 0.1667 has
    // served 160 B by then; its 240 B left alone at its cap 0.2 B/ns take 1200 ns → 2160.
    // (Max-min: low at 0.2 throughout, done at 2000; high at 0.8, done at 1000.)
    expect(done).toEqual({ high: 960, low: 2160 });
  });

  it('three flows: one factor for all, then caps again once demand fits', () => {
    // Caps 0.1, 0.3, 1 B/ns on 1 B/ns: demand 1.4, factor 1/1.4 → 0.0714, 0.2143, 0.7143 B/ns.
    // c (600 B) ends at 840 ns; a has 100 − 60 = 40 B left, b 300 − 180 = 120 B; demand 0.4 fits:
    // a at 0.1 → 400 ns, b at 0.3 → 400 ns: both at 1240.
    const { start, done, runAll } = fluidRig(1e9);
    start('c', 600, 1e9);
    start('a', 100, 1e8);
    start('b', 300, 3e8);
    runAll();
    expect(done).toEqual({ c: 840, a: 1240, b: 1240 });
  });

  it('recomputes completion times when a flow starts and when one finishes', () => {
    const { start, done, dram, runUntil, runAll } = fluidRig(1e9);
    start('a', 3000, 1e9); // alone at 1 B/ns: would end at 3000
    runUntil(1000); // a has 2000 B left
    expect(dram.contendedTimeNs()).toBe(0); // demand = capacity is not contention
    start('b', 1000, 1e9); // both at 0.5 B/ns: b ends at 1000 + 2000 = 3000
    runUntil(2999);
    expect(done).toEqual({});
    runAll();
    // At 3000 a has 2000 − 1000 = 1000 B left, alone again at 1 B/ns: 4000.
    expect(done).toEqual({ b: 3000, a: 4000 });
    expect(dram.contendedTimeNs()).toBe(2000); // 1000 → 3000
    expect(dram.bytesServed()).toBeCloseTo(4000, 6);
  });

  it('rounds a completion up to the next ns once per (re)scheduling', () => {
    const { start, done, runAll } = fluidRig(3e9);
    start('a', 1000, 3e9); // 333.33 ns → 334
    runAll();
    expect(done).toEqual({ a: 334 });
  });

  it('validates its arguments', () => {
    const sim = new Simulation<ResourceEvent>();
    expect(() => new FluidShare('x', 0, sim)).toThrow(RangeError);
    const f = new FluidShare('x', 1e9, sim);
    expect(() => f.start(0, 1e9, () => {})).toThrow(RangeError);
    expect(() => f.start(10, 0, () => {})).toThrow(RangeError);
    expect(() => f.onFlowDone(99)).toThrow(SimError);
  });
});

describe('DMA sharing host DRAM with CPU work', () => {
  // Link 1 GB/s (1 B/ns), no latency, 1000 B packets; host DRAM 1.5 GB/s; a 4-core CPU
  // whose cores draw 0.5 GB/s each (a 4-core task is capped at 2 GB/s).
  const opts = {
    link: { bytesPerSec: 1e9, latencyNs: 0, packetBytes: 1000, dramBytesPerSec: 1.5e9 },
    cpu: { cores: 4, perCoreBytesPerSec: 5e8 },
  };

  it('alone, DMA runs at the link bandwidth (DRAM has room)', () => {
    const { link, runAll } = makeRig(opts);
    const t = link!.submit({ bytes: 4000, priority: 0, label: 'w', category: 'expert' });
    runAll();
    expect(t.doneNs).toBe(4000); // 4 packets × 1000 ns
  });

  it('slows down while a CPU task draws on DRAM, by the hand-computed amount', () => {
    const { link, cpu, sink, dram, sim, runAll } = makeRig(opts);
    const t = link!.submit({ bytes: 4000, priority: 0, label: 'w', category: 'expert' });
    let cpuDone = -1;
    cpu!.submit({
      cores: 4,
      computeNs: nsOf(0),
      bytes: 1500,
      label: 'attn',
      category: 'attention',
      onDone: () => (cpuDone = sim.now),
    });
    runAll();
    // Demands 1 + 2 GB/s > 1.5: proportional shares, factor 0.5: DMA 0.5 B/ns, CPU 1 B/ns.
    //  - the CPU task's 1500 B end at 1500; packet 1 has then served 750 B;
    //  - its last 250 B alone at 1 B/ns: 1750; packets 2–4 at 1 B/ns: 2750, 3750, 4750.
    // (Max-min would give each 0.75 B/ns: CPU done at 2000, DMA at 4501.)
    expect(cpuDone).toBe(1500);
    expect(sink.packets.map((p) => p.endNs)).toEqual([1750, 2750, 3750, 4750]);
    expect(t.doneNs).toBe(4750);
    expect(sink.cpuTasks).toMatchObject([{ label: 'attn', cores: 4, firstCore: 0, startNs: 0, endNs: 1500 }]);
    expect(dram!.bytesServed()).toBeCloseTo(5500, 6);
  });

  it('the CPU task slows down too: alone it would be done at 1000', () => {
    const { cpu, sim, runAll } = makeRig(opts);
    let end = -1;
    cpu!.submit({
      cores: 4,
      computeNs: nsOf(0),
      bytes: 1500,
      label: 'attn',
      category: 'attention',
      onDone: () => (end = sim.now),
    });
    runAll();
    expect(end).toBe(1000); // capped by DRAM at 1.5 B/ns (its cores could draw 2)
  });
});

describe('CpuPool durations', () => {
  // DRAM never binding (100 GB/s); each core draws 1 GB/s.
  const opts = { dramBytesPerSec: 1e11, cpu: { cores: 4, perCoreBytesPerSec: 1e9 } };

  function runOne(cores: number, computeNs: number, bytes: number): number {
    const { cpu, sink, runAll } = makeRig(opts);
    cpu!.submit({ cores, computeNs: nsOf(computeNs), bytes, label: 't', category: 'attention' });
    runAll();
    expect(sink.cpuTasks).toHaveLength(1);
    return sink.cpuTasks[0]!.endNs - sink.cpuTasks[0]!.startNs;
  }

  it('FLOP-bound: takes computeNs when memory would be faster', () => {
    // 4000 B on 2 cores at 2 B/ns = 2000 ns < 5000 ns of FLOPs.
    expect(runOne(2, 5000, 4000)).toBe(5000);
  });

  it('memory-bound: takes bytes / (cores × per-core bandwidth) when that is longer', () => {
    // 4000 B on 2 cores at 2 B/ns = 2000 ns > 1000 ns of FLOPs.
    expect(runOne(2, 1000, 4000)).toBe(2000);
    // Same bytes on 4 cores: 1000 ns, equal to the FLOP time.
    expect(runOne(4, 1000, 4000)).toBe(1000);
  });

  it('no bytes: exactly computeNs (also zero)', () => {
    expect(runOne(1, 777, 0)).toBe(777);
    expect(runOne(1, 0, 0)).toBe(0);
  });

  it('memory-bound tasks share DRAM when it saturates', () => {
    // DRAM 2 GB/s; two 2-core tasks each capped at 2 GB/s get 1 GB/s each: 4000 B → 4000 ns.
    const { cpu, sink, runAll } = makeRig({ dramBytesPerSec: 2e9, cpu: { cores: 4, perCoreBytesPerSec: 1e9 } });
    cpu!.submit({ cores: 2, computeNs: nsOf(100), bytes: 4000, label: 'a', category: 'attention' });
    cpu!.submit({ cores: 2, computeNs: nsOf(100), bytes: 4000, label: 'b', category: 'attention' });
    runAll();
    expect(sink.cpuTasks.map((r) => [r.label, r.firstCore, r.endNs])).toEqual([
      ['a', 0, 4000],
      ['b', 2, 4000],
    ]);
  });

  it('starts tasks FIFO when enough cores are free, with head-of-line blocking', () => {
    const { cpu, sink, runUntil, runAll } = makeRig(opts);
    const task = (label: string, cores: number, computeNs: number) =>
      cpu!.submit({ cores, computeNs: nsOf(computeNs), bytes: 0, label, category: 'attention' });
    task('t1', 3, 1000); // cores 0-2, 0 → 1000
    task('t2', 2, 500); // needs 2, only 1 free: waits until 1000; cores 0-1, → 1500
    task('t3', 1, 100); // 1 core is free, but t2 is ahead: waits; core 2, 1000 → 1100
    expect(cpu!.busyCores).toBe(3);
    expect(cpu!.queued).toBe(2);
    runUntil(500);
    expect(cpu!.busyCoreTimeNs()).toBe(3 * 500);
    runAll();
    expect(sink.cpuTasks.map((r) => [r.label, r.cores, r.firstCore, r.startNs, r.endNs])).toEqual([
      ['t1', 3, 0, 0, 1000],
      ['t3', 1, 2, 1000, 1100],
      ['t2', 2, 0, 1000, 1500],
    ]);
    expect(cpu!.busyCoreNs).toBe(3 * 1000 + 2 * 500 + 1 * 100);
    expect(cpu!.tasks).toBe(3);
    expect(cpu!.busyCores).toBe(0);
  });

  it('rejects tasks it can never run or that make no sense', () => {
    const { cpu } = makeRig(opts);
    const t = { computeNs: nsOf(1), bytes: 0, label: 'x', category: 'attention' };
    expect(() => cpu!.submit({ ...t, cores: 5 })).toThrow(SimError);
    expect(() => cpu!.submit({ ...t, cores: 0 })).toThrow(SimError);
    expect(() => cpu!.submit({ ...t, cores: 1, bytes: -1 })).toThrow(SimError);
    // A fractional time would only fail when scheduled, with the task's cores already taken.
    expect(() => cpu!.submit({ ...t, cores: 1, computeNs: 2.5 as never })).toThrow(SimError);
    expect([cpu!.busyCores, cpu!.queued]).toEqual([0, 0]);
  });

  it('rejects a pool whose cores cannot draw on DRAM', () => {
    // Otherwise the first task with bytes fails inside FluidShare.start, its cores already taken.
    const sim = new Simulation<ResourceEvent>();
    const dram = new FluidShare('hostDram', 1e9, sim);
    for (const bad of [0, -1, Number.NaN]) {
      expect(() => new CpuPool({ cores: 2, perCoreBytesPerSec: bad, sched: sim, dram })).toThrow(RangeError);
    }
  });
});

describe('DMA and CPU tasks in one DRAM share: rates, bytes and shares by hand', () => {
  // Link 1 GB/s (1 B/ns), no latency, 1000 B packets; a 4-core CPU whose cores draw 0.5 GB/s
  // each. Only the DRAM capacity changes between cases. Every packet is its own flow, so a rate
  // change mid-packet shows in that packet's end time.
  const rig = (dramBytesPerSec: number) =>
    makeRig({
      link: { bytesPerSec: 1e9, latencyNs: 0, packetBytes: 1000, dramBytesPerSec },
      cpu: { cores: 4, perCoreBytesPerSec: 5e8 },
    });
  const cpuTask = (cores: number, bytes: number, label: string) =>
    ({ cores, computeNs: nsOf(0), bytes, label, category: 'attention' }) as const;

  it('demand equal to capacity is no contention: nobody slows down', () => {
    // DRAM 2 B/ns; DMA 1 + a 2-core task 1 = 2: each at its cap.
    const { link, cpu, sink, dram, runAll } = rig(2e9);
    const t = link!.submit({ bytes: 4000, priority: 0, label: 'w', category: 'expert' });
    cpu!.submit(cpuTask(2, 2000, 'attn'));
    runAll();
    expect(sink.packets.map((p) => p.endNs)).toEqual([1000, 2000, 3000, 4000]);
    expect(t.doneNs).toBe(4000);
    expect(sink.cpuTasks.map((r) => r.endNs)).toEqual([2000]);
    expect(dram!.contendedTimeNs()).toBe(0);
    expect(dram!.bytesServed()).toBeCloseTo(6000, 6);
  });

  it('one factor for the DMA and the CPU task across several packets, then the DMA alone', () => {
    // DRAM 1.6 B/ns; demand 1 (DMA) + 1 (2 cores × 0.5) = 2: factor 0.8, both at 0.8 B/ns.
    //  - packets 1 and 2: 1000 / 0.8 = 1250 ns each → 1250, 2500;
    //  - the task's 2400 B / 0.8 = 3000 ns → 3000; packet 3 (from 2500) has then moved 400 B;
    //  - its 600 B left alone at 1 B/ns → 3600; packet 4 → 4600 (alone: 4000).
    const { link, cpu, sink, dram, runAll } = rig(1.6e9);
    const t = link!.submit({ bytes: 4000, priority: 0, label: 'w', category: 'expert' });
    cpu!.submit(cpuTask(2, 2400, 'attn'));
    runAll();
    expect(sink.packets.map((p) => p.endNs)).toEqual([1250, 2500, 3600, 4600]);
    expect(t.doneNs).toBe(4600);
    expect(sink.cpuTasks.map((r) => [r.startNs, r.endNs])).toEqual([[0, 3000]]);
    expect(dram!.contendedTimeNs()).toBe(3000);
    expect(dram!.bytesServed()).toBeCloseTo(6400, 6);
  });

  it('three flows scaled by one factor until one ends, then uncontended', () => {
    // DRAM 2 B/ns; demands DMA 1, task a (1 core) 0.5, task b (2 cores) 1: 2.5, factor 0.8:
    // DMA 0.8, a 0.4, b 0.8 B/ns. a's 400 B end at 1000; packet 1 has moved 800 B, b 800 B.
    // Then demand 2 = capacity: packet 1's 200 B → 1200, packets 2–4 → 2200, 3200, 4200;
    // b's 1000 B left at 1 B/ns → 2000. (Max-min would give a its 0.5 B/ns: done at 800.)
    const { link, cpu, sink, dram, runAll } = rig(2e9);
    const t = link!.submit({ bytes: 4000, priority: 0, label: 'w', category: 'expert' });
    cpu!.submit(cpuTask(1, 400, 'a'));
    cpu!.submit(cpuTask(2, 1800, 'b'));
    runAll();
    expect(sink.cpuTasks.map((r) => [r.label, r.cores, r.firstCore, r.endNs])).toEqual([
      ['a', 1, 0, 1000],
      ['b', 2, 1, 2000],
    ]);
    expect(sink.packets.map((p) => p.endNs)).toEqual([1200, 2200, 3200, 4200]);
    expect(t.doneNs).toBe(4200);
    expect(dram!.contendedTimeNs()).toBe(1000);
    expect(dram!.bytesServed()).toBeCloseTo(6200, 6);
  });
});
