/**
 * createResources + resourceHandlers: wiring from a (minimal) hardware profile, full-duplex
 * links, pageable memory, DMA optionally sharing host DRAM, capacity overrides.
 */
import { describe, expect, it } from 'vitest';
import { Simulation } from '../../sim/kernel/simulation.ts';
import { ns } from '../../sim/kernel/time.ts';
import type { ResourceEvent } from '../../sim/resources/events.ts';
import {
  DEFAULT_PACKET_BYTES,
  createResources,
  resourceHandlers,
  type ResourceOptions,
} from '../../sim/resources/index.ts';
import type { HardwareProfile } from '../../hardware-profiles/types.ts';

/** Only the fields createResources reads. */
function profile(pinnedHostMemory: boolean): HardwareProfile {
  return {
    gpu: { vramBytes: 1000 },
    cpu: { cores: 4, dramBytesPerSec: 1e9, perCoreDramBytesPerSec: 1e9 },
    pcie: { h2dBytesPerSec: 1e9, d2hBytesPerSec: 5e8, latencyNs: 100, pageableFactor: 0.5 },
    hostDramBytes: 5000,
    pinnedHostMemory,
  } as unknown as HardwareProfile;
}

function world(pinned: boolean, o: Partial<ResourceOptions> = {}) {
  const sim = new Simulation<ResourceEvent>();
  const r = createResources(profile(pinned), sim, undefined, { streamNames: ['compute', 'copy'], ...o });
  sim.setHandlers(resourceHandlers(r));
  return { sim, r };
}

describe('createResources', () => {
  it('builds every resource from the profile', () => {
    const { r } = world(true);
    expect([r.h2d.name, r.h2d.bytesPerSec, r.h2d.latencyNs, r.h2d.packetBytes]).toEqual([
      'h2d',
      1e9,
      100,
      DEFAULT_PACKET_BYTES,
    ]);
    expect([r.d2h.name, r.d2h.bytesPerSec]).toEqual(['d2h', 5e8]);
    expect(DEFAULT_PACKET_BYTES).toBe(16 * 1024 * 1024);
    expect([r.gpu.streams, r.gpu.streamName(1), r.gpu.concurrentStreams]).toEqual([2, 'copy', false]);
    expect(r.cpu.cores).toBe(4);
    expect(r.hostDram.capacityBytesPerSec).toBe(1e9);
    expect([r.vram.capacityBytes, r.host.capacityBytes]).toEqual([1000, 5000]);
  });

  it('applies the pageable factor when host memory is not pinned, and capacity overrides', () => {
    const { r } = world(false, { vramBytes: 7, hostBytes: 9, packetBytes: 64, concurrentStreams: true });
    expect([r.h2d.bytesPerSec, r.d2h.bytesPerSec]).toEqual([5e8, 2.5e8]);
    expect([r.vram.capacityBytes, r.host.capacityBytes, r.h2d.packetBytes, r.gpu.concurrentStreams]).toEqual([
      7,
      9,
      64,
      true,
    ]);
  });

  it('dispatches every resource event to its resource; H2D and D2H run in parallel', () => {
    const { sim, r } = world(true, { dmaSharesHostDram: false });
    const done: string[] = [];
    // h2d: 100 + 1000 B at 1 B/ns = 1100; d2h: 100 + 1000 B at 0.5 B/ns = 2100 (not 1100 + 2100).
    r.h2d.submit({ bytes: 1000, priority: 0, label: 'up', category: 'x', onDone: () => done.push(`h2d@${sim.now}`) });
    r.d2h.submit({ bytes: 1000, priority: 0, label: 'down', category: 'x', onDone: () => done.push(`d2h@${sim.now}`) });
    r.gpu.submit({
      stream: 1,
      durationNs: ns(300),
      label: 'k',
      category: 'expert',
      onDone: () => done.push(`gpu@${sim.now}`),
    });
    r.cpu.submit({
      cores: 1,
      computeNs: ns(400),
      bytes: 0,
      label: 'c',
      category: 'attention',
      onDone: () => done.push(`cpu@${sim.now}`),
    });
    r.cpu.submit({
      cores: 1,
      computeNs: ns(0),
      bytes: 500,
      label: 'm',
      category: 'attention',
      onDone: () => done.push(`cpuMem@${sim.now}`),
    });
    sim.run();
    // The memory task draws 1 B/ns alone (cap = min(core 1 B/ns, DRAM 1 B/ns)): 500.
    expect(done).toEqual(['gpu@300', 'cpu@400', 'cpuMem@500', 'h2d@1100', 'd2h@2100']);
  });

  it('by default DMA shares host DRAM: two directions together exceed it and both slow down', () => {
    const { sim, r } = world(true);
    const done: string[] = [];
    r.h2d.submit({ bytes: 1000, priority: 0, label: 'up', category: 'x', onDone: () => done.push(`h2d@${sim.now}`) });
    r.d2h.submit({ bytes: 1000, priority: 0, label: 'down', category: 'x', onDone: () => done.push(`d2h@${sim.now}`) });
    sim.run();
    // From 100: caps 1 and 0.5 B/ns on 1 B/ns of DRAM → shares in proportion to demand (DESIGN §4),
    // factor 1/1.5: h2d 0.667, d2h 0.333 B/ns. h2d's 1000 B end at 100 + 1500 = 1600 (alone: 1100);
    // d2h has then 500 B left, alone at its cap 0.5 B/ns: 2600.
    expect(done.sort()).toEqual(['d2h@2600', 'h2d@1600']);
  });
});
