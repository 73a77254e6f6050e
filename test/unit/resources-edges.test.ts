/**
 * Edges of MemoryPool, BlockAllocator and CpuPool that the main resource tests left open: the
 * exact text of every input check (a user reads it), checks that another layer used to catch by
 * accident (a fractional block size whose total is whole), the accounting invariant of a pool
 * (an allocation freed in the wrong pool), sinks that implement only some hooks, and the busy
 * core time of a task that started after time 0, and createResources' names and run wiring.
 * Expected values are worked out by hand.
 */
import { describe, expect, it } from 'vitest';
import { CapacityError, InvariantError } from '../../sim/kernel/errors.ts';
import { Simulation } from '../../sim/kernel/simulation.ts';
import { ns, type Ns } from '../../sim/kernel/time.ts';
import type { TraceSink } from '../../sim/observe/trace-sink.ts';
import { BlockAllocator } from '../../sim/resources/block-allocator.ts';
import { CpuPool } from '../../sim/resources/cpu-pool.ts';
import type { ResourceEvent } from '../../sim/resources/events.ts';
import { FluidShare } from '../../sim/resources/fluid-share.ts';
import { createResources, resourceHandlers } from '../../sim/resources/index.ts';
import { MemoryPool } from '../../sim/resources/memory-pool.ts';
import type { HardwareProfile } from '../../hardware-profiles/types.ts';
import { makeRig, nsOf } from './resources-helpers.ts';

const clock = (): { now: Ns } => ({ now: ns(0) });

describe('MemoryPool edges', () => {
  it('names the pool and the bad value in its input checks', () => {
    expect(() => new MemoryPool('vram', -1, clock())).toThrow(
      'vram: capacity must be a non-negative integer of bytes, got -1',
    );
    const p = new MemoryPool('dram', 100, clock());
    expect(() => p.tryAllocate(2.5, 'workspace')).toThrow(
      'dram: allocation must be a non-negative integer of bytes, got 2.5',
    );
  });

  it('an unknown category (untyped caller) throws and changes nothing', () => {
    const p = new MemoryPool('vram', 100, clock());
    expect(() => p.tryAllocate(10, 'scratch' as never)).toThrow('vram: unknown memory category scratch');
    expect([p.usedBytes, p.peakBytes, p.liveAllocations]).toEqual([0, 0, 0]);
  });

  it('tryAllocate labels an allocation "" unless told', () => {
    const p = new MemoryPool('vram', 100, clock());
    expect(p.tryAllocate(5, 'workspace')!.label).toBe('');
  });

  it('freeing another pool’s allocation breaks the accounting invariant and says so', () => {
    // a holds 60 B of pool A; freed in pool B (20 B used) it would leave B at −40 B.
    const a = new MemoryPool('A', 100, clock()).allocate(60, 'workspace');
    const b = new MemoryPool('B', 100, clock());
    b.allocate(20, 'workspace');
    expect(() => b.free(a)).toThrow(InvariantError);
    const c = new MemoryPool('C', 100, clock());
    expect(() => c.free({ ...a, freed: false })).toThrow('[t=0ns C] used -60 B outside [0, 100]');
  });

  it('a sink without an onMemory hook is fine', () => {
    const sink: TraceSink = {};
    const p = new MemoryPool('vram', 100, clock(), sink);
    p.free(p.allocate(10, 'kvCache'));
    expect(p.usedBytes).toBe(0);
  });
});

describe('BlockAllocator edges', () => {
  const pool = () => new MemoryPool('vram', 1000, clock());

  it('checks each geometry field itself, not through the pool', () => {
    // Totals that the pool would accept (whole and ≥ 0), so only the allocator's own checks catch these.
    expect(() => new BlockAllocator(pool(), 0, 100, 1)).toThrow('blockTokens must be an integer ≥ 1, got 0');
    expect(() => new BlockAllocator(pool(), 16, 0.5, 2)).toThrow('blockBytes must be a non-negative integer, got 0.5');
    expect(() => new BlockAllocator(pool(), 16, -100, 0)).toThrow(
      'blockBytes must be a non-negative integer, got -100',
    );
    expect(() => new BlockAllocator(pool(), 16, 0, -1)).toThrow('totalBlocks must be a non-negative integer, got -1');
    expect(() => new BlockAllocator(pool(), 16, 2, 1.5)).toThrow('totalBlocks must be a non-negative integer, got 1.5');
    // Zero-byte blocks are allowed (a model without a KV cache): nothing is reserved.
    const p = pool();
    const b = new BlockAllocator(p, 16, 0, 4);
    expect([b.freeBlocks, p.usedBytes]).toEqual([4, 0]);
  });

  it('a reservation too big for the pool is named in the pool’s CapacityError', () => {
    expect(() => new BlockAllocator(pool(), 16, 100, 11)).toThrow(
      'vram: cannot allocate 1100 B for kvCache (block allocator): 1000 B free of 1000',
    );
    expect(() => new BlockAllocator(pool(), 16, 100, 11)).toThrow(CapacityError);
  });

  it('a bad token count is named', () => {
    const b = new BlockAllocator(pool(), 16, 100, 4);
    expect(() => b.ensure(1, -2)).toThrow('token count must be finite and ≥ 0, got -2');
  });
});

describe('CpuPool edges', () => {
  const sim = () => new Simulation<ResourceEvent>();

  it('checks its geometry and names the bad value', () => {
    const s = sim();
    const dram = new FluidShare('hostDram', 1e9, s);
    const make = (cores: number, perCoreBytesPerSec = 1e9) =>
      new CpuPool({ cores, perCoreBytesPerSec, sched: s, dram });
    expect(() => make(0)).toThrow('cpu cores must be an integer ≥ 1, got 0');
    expect(() => make(2.5)).toThrow('cpu cores must be an integer ≥ 1, got 2.5');
    expect(() => make(2, 0)).toThrow('cpu per-core bandwidth must be > 0 B/s, got 0');
    const one = make(1);
    expect([one.cores, one.name]).toEqual([1, 'cpu']); // one core is a pool; the default name is 'cpu'
  });

  it('names a task it cannot run, including a negative computeNs', () => {
    const { cpu } = makeRig({ dramBytesPerSec: 1e11, cpu: { cores: 4, perCoreBytesPerSec: 1e9 } });
    const t = { cores: 1, computeNs: nsOf(1), bytes: 0, label: 'x', category: 'attention' };
    expect(() => cpu!.submit({ ...t, cores: 5 })).toThrow('[t=0ns cpu] cpu task needs 5 cores (pool has 4)');
    expect(() => cpu!.submit({ ...t, computeNs: -3 as Ns })).toThrow(
      '[t=0ns cpu] cpu task needs bytes ≥ 0 and an integer computeNs ≥ 0 (got 0, -3)',
    );
    expect(() => cpu!.onTaskDone(99)).toThrow('[t=0ns cpu] unknown cpu task 99');
    expect([cpu!.busyCores, cpu!.queued]).toEqual([0, 0]);
  });

  it('busy core time counts a running task from its own start', () => {
    // t1: 3 cores 0 → 1000; t2: 2 cores, waits for t1, 1000 → 1500; t3: 1 core 1000 → 1100.
    // At 1200: done t1 3·1000 + t3 1·100, running t2 2·(1200 − 1000) = 3500.
    const { cpu, runUntil } = makeRig({ dramBytesPerSec: 1e11, cpu: { cores: 4, perCoreBytesPerSec: 1e9 } });
    for (const [cores, computeNs] of [
      [3, 1000],
      [2, 500],
      [1, 100],
    ] as const) {
      cpu!.submit({ cores, computeNs: nsOf(computeNs), bytes: 0, label: 't', category: 'attention' });
    }
    runUntil(1200);
    expect(cpu!.busyCoreNs).toBe(3100);
    expect(cpu!.busyCoreTimeNs()).toBe(3500);
  });

  it('a sink without an onCpuTask hook is fine', () => {
    const s = sim();
    const dram = new FluidShare('hostDram', 1e9, s);
    const cpu = new CpuPool({ cores: 1, perCoreBytesPerSec: 1e9, sched: s, dram, sink: {} });
    s.setHandlers({
      'cpu.taskDone': (e: { taskId: number }) => cpu.onTaskDone(e.taskId),
      'fluid.flowDone': (e: { flowId: number }) => dram.onFlowDone(e.flowId),
    } as never);
    let done = -1;
    cpu.submit({
      cores: 1,
      computeNs: nsOf(40),
      bytes: 0,
      label: 'a',
      category: 'attention',
      onDone: () => (done = s.now),
    });
    s.run();
    expect([done, cpu.tasks]).toEqual([40, 1]);
  });
});

describe('createResources edges', () => {
  // Only the fields createResources reads: links 1 GB/s (1 B/ns), 100 ns latency.
  const hw = {
    gpu: { vramBytes: 1000 },
    cpu: { cores: 4, dramBytesPerSec: 1e10, perCoreDramBytesPerSec: 1e9 },
    pcie: { h2dBytesPerSec: 1e9, d2hBytesPerSec: 1e9, latencyNs: 100, pageableFactor: 1 },
    hostDramBytes: 5000,
    pinnedHostMemory: true,
  } as unknown as HardwareProfile;

  it('names the pools and the DRAM share as traces show them', () => {
    const r = createResources(hw, new Simulation<ResourceEvent>(), undefined, { streamNames: ['compute'] });
    expect([r.vram.name, r.host.name, r.hostDram.name]).toEqual(['vram', 'host', 'hostDram']);
  });

  it('routes a run’s end to its link: latency and four 64 B packets as one run end at 100 + 4·64 = 356', () => {
    const sim = new Simulation<ResourceEvent>();
    const r = createResources(hw, sim, undefined, { streamNames: ['compute'], packetBytes: 64 });
    sim.setHandlers(resourceHandlers(r));
    const t = r.h2d.submit({ bytes: 256, priority: 0, label: 'w', category: 'expert' });
    sim.run();
    expect([t.state, t.doneNs, r.h2d.completedTransfers, r.h2d.bytesMoved]).toEqual(['done', 356, 1, 256]);
  });
});
