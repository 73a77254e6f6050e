/**
 * FluidShare's exclusive claim (what lets a PCIe run skip a flow per packet) on hand-built cases:
 * who may claim it, who ends it, and a run whose link is faster than the share must not get one
 * (it would run at its cap instead of the capacity). Written to kill the mutants a hand sweep of
 * fluid-share.ts left (docs/mutation/sim-resources-survivors.txt).
 */
import { describe, expect, it } from 'vitest';
import { Simulation } from '../../sim/kernel/simulation.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import type { ResourceEvent } from '../../sim/resources/events.ts';
import { FluidShare } from '../../sim/resources/fluid-share.ts';
import { PcieLink } from '../../sim/resources/pcie-link.ts';

/** A holder that counts how often it was asked to materialize. */
function holder() {
  const h = { calls: 0, materialize: () => void h.calls++ };
  return h;
}

describe('FluidShare exclusive claim', () => {
  it('is granted once, only while no flow runs and only for a cap within the capacity', () => {
    const share = new FluidShare('dram', 1e9, new Simulation<ResourceEvent>());
    const a = holder();
    const b = holder();
    expect(share.tryExclusive(a, 1e9 * 1.5)).toBe(false);
    expect(share.tryExclusive(a, 1e9)).toBe(true);
    expect(share.tryExclusive(b, 1e9)).toBe(false);
    share.releaseExclusive(b); // not the holder: no effect
    expect(share.tryExclusive(b, 1e9)).toBe(false);
    share.releaseExclusive(a);
    expect(share.tryExclusive(b, 5e8)).toBe(true);
  });

  it('ends when another user acts, never when its holder does', () => {
    const share = new FluidShare('dram', 1e9, new Simulation<ResourceEvent>());
    const a = holder();
    const b = holder();
    expect(share.tryExclusive(a, 1e9)).toBe(true);
    share.interrupt(a);
    expect(a.calls).toBe(0);
    expect(share.tryExclusive(b, 1e9)).toBe(false); // still a's
    share.interrupt(b);
    expect(a.calls).toBe(1);
    expect(share.tryExclusive(b, 1e9)).toBe(true);
    share.interrupt(b);
    expect([a.calls, b.calls]).toEqual([1, 0]);
  });

  it('a link faster than the share sends at the capacity, runs or not', () => {
    for (const packetRuns of [true, false]) {
      const sim = new Simulation<ResourceEvent>();
      const dram = new FluidShare('dram', 1e9, sim);
      // 2 B/ns link, 1 B/ns share: 400 B in 100 B packets take 4 × 100 ns, not 4 × 50 ns.
      const link = new PcieLink({
        name: 'h2d',
        bytesPerSec: 2e9,
        latencyNs: 0,
        packetBytes: 100,
        sched: sim,
        dram,
        packetRuns,
      });
      sim.setHandlers({
        'gpu.kernelDone': () => {},
        'link.latencyDone': () => link.onLatencyDone(),
        'link.packetDone': () => link.onPacketDone(),
        'link.runDone': () => link.onRunDone(),
        'fluid.flowDone': (e) => dram.onFlowDone(e.flowId),
        'cpu.taskDone': () => {},
      });
      const t = link.submit({ bytes: 400, priority: 0, label: 'a', category: 'x' });
      sim.run();
      expect([t.doneNs, dram.bytesServed(), dram.contendedTimeNs()]).toEqual([400, 400, 400]);
    }
  });

  it('a run over the share counts the bytes its packets moved, not rate × rounded-up time', () => {
    for (const packetRuns of [true, false]) {
      const sim = new Simulation<ResourceEvent>();
      const dram = new FluidShare('dram', 1e12, sim);
      // 3 B/ns: a 100 B packet takes ⌈33.3⌉ = 34 ns, in which 3 B/ns would move 102 B.
      const link = new PcieLink({
        name: 'h2d',
        bytesPerSec: 3e9,
        latencyNs: 0,
        packetBytes: 100,
        sched: sim,
        dram,
        packetRuns,
      });
      sim.setHandlers({
        'gpu.kernelDone': () => {},
        'link.latencyDone': () => link.onLatencyDone(),
        'link.packetDone': () => link.onPacketDone(),
        'link.runDone': () => link.onRunDone(),
        'fluid.flowDone': (e) => dram.onFlowDone(e.flowId),
        'cpu.taskDone': () => {},
      });
      const t = link.submit({ bytes: 400, priority: 0, label: 'a', category: 'x' });
      sim.run();
      expect([t.doneNs, dram.bytesServed()]).toEqual([136, 400]);
    }
  });

  it('contention ends with the last flow: idle time after it is not contended', () => {
    const sim = new Simulation<ResourceEvent>();
    const dram = new FluidShare('dram', 1e9, sim);
    sim.setHandlers({
      'gpu.kernelDone': () => {},
      'link.latencyDone': () => {},
      'link.packetDone': () => {},
      'link.runDone': () => {},
      'fluid.flowDone': (e) => dram.onFlowDone(e.flowId),
      'cpu.taskDone': () => {},
    });
    // Two flows of 100 B capped at 1 B/ns in a 1 B/ns share: 0.5 B/ns each, both end at 200.
    dram.start(100, 1e9, () => {});
    dram.start(100, 1e9, () => {});
    sim.run();
    expect([sim.now, dram.contendedTimeNs()]).toEqual([200, 200]);
    sim.run({ until: 1000 as Ns });
    expect(dram.contendedTimeNs()).toBe(200);
    dram.start(50, 5e8, () => {});
    sim.run();
    expect([sim.now, dram.contendedTimeNs(), dram.bytesServed()]).toEqual([1100, 200, 250]);
    // One flow demanding twice the capacity is contended alone (100 B at 1 B/ns: 100 ns), then idle.
    dram.start(100, 2e9, () => {});
    sim.run();
    sim.run({ until: 2000 as Ns });
    expect([dram.contendedTimeNs(), dram.bytesServed()]).toEqual([300, 350]);
  });

  it('a flow cannot be injected beside a running one, nor a finished flow end twice', () => {
    const sim = new Simulation<ResourceEvent>();
    const dram = new FluidShare('dram', 1e9, sim);
    sim.setHandlers({
      'gpu.kernelDone': () => {},
      'link.latencyDone': () => {},
      'link.packetDone': () => {},
      'link.runDone': () => {},
      'fluid.flowDone': (e) => dram.onFlowDone(e.flowId),
      'cpu.taskDone': () => {},
    });
    const id = dram.start(100, 1e9, () => {});
    sim.run();
    expect(() => dram.onFlowDone(id)).toThrow(`[t=100ns dram] unknown flow ${id}`);
    expect(() => dram.onFlowDone(7)).toThrow('[t=100ns dram] unknown flow 7');
    dram.start(100, 1e9, () => {});
    expect(() => dram.injectFlow(10, 1e9, () => {}, 100 as Ns, 0)).toThrow(
      '[t=100ns dram] flow injected into a busy share',
    );
  });
});
