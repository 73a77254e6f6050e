/**
 * Event-level VSLPipe (sim/throughput/pipelines/vslpipe-events.ts) against its closed form (vslpipe.ts):
 * - no contention, no activation bytes: every iteration equals transfer_0 + Σ_l max(max(CPU α, GPU β)
 *   + max(CPU β, GPU α), transfer_{l+1}) + LM head — to the ns when a full packet takes an integer
 *   number of ns, else longer by at most (packets − 1) ns per transfer (each packet rounded up
 *   once by the link, the whole transfer once by the cost model);
 * - with host-DRAM contention the iteration is never shorter;
 * - by hand: an activation copy overtakes a weight transfer at the next 100 MB packet boundary;
 *   a CPU flow in the DRAM share slows the weight packet it overlaps;
 * - runLens in `events` mode: the same schedule and bytes as the closed form, its mode reported.
 */
import { describe, expect, it } from 'vitest';
import { ceilNs } from '../../sim/kernel/time.ts';
import {
  DataMover,
  EventPipe,
  PAPER_PACKET_BYTES,
  type PipeIteration,
} from '../../sim/throughput/pipelines/vslpipe-events.ts';
import { Simulation } from '../../sim/kernel/simulation.ts';
import { FluidShare } from '../../sim/resources/fluid-share.ts';
import type { ResourceEvent } from '../../sim/resources/events.ts';
import { loadHardware, loadModel, loadRuntime } from '../../hardware-profiles/load.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import { runLens, type LensSettings } from '../../policies/moe-lens/execution.ts';

/** Deterministic LCG (no Math.random). */
function rng(seed: number): (lo: number, hi: number) => number {
  let s = seed >>> 0;
  return (lo, hi) => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return lo + (s % (hi - lo + 1));
  };
}

const LAT = 10_000;
const transferNs = (bytes: number, bps: number) => ceilNs(LAT + (bytes / bps) * 1e9);

function closedForm(x: PipeIteration, bps: number): number {
  const L = x.layerBytes.length;
  let t: number = transferNs(x.layerBytes[0]!, bps);
  for (let l = 0; l < L; l++) {
    const next = l + 1 < L ? transferNs(x.layerBytes[l + 1]!, bps) : 0;
    t += Math.max(Math.max(x.ca, x.gb[l]!) + Math.max(x.cb, x.ga[l]!), next);
  }
  return t + x.lmHeadNs;
}

function randomShape(r: (lo: number, hi: number) => number, act: boolean): PipeIteration {
  const L = r(1, 6);
  // Layer bytes 50 MB – 1.2 GB (1–12 packets); GPU and CPU times 0 – 80 ms, so either side may bind.
  const layerBytes = Array.from({ length: L }, () => r(50, 1200) * 1_000_000 + r(0, 999_999));
  const ga = Array.from({ length: L }, () => (r(0, 4) === 0 ? 0 : r(1, 80_000_000)));
  const gb = Array.from({ length: L }, () => (r(0, 4) === 0 ? 0 : r(1, 80_000_000)));
  const ca = r(0, 3) === 0 ? 0 : r(1, 80_000_000);
  const cb = r(0, 3) === 0 ? 0 : r(1, 80_000_000);
  // KV bytes read: demand up to ~150 GB/s over the CPU time.
  const ka = ca > 0 ? Math.floor((ca / 1e9) * r(1, 150) * 1e9) : 0;
  const kb = cb > 0 ? Math.floor((cb / 1e9) * r(1, 150) * 1e9) : 0;
  return {
    layerBytes,
    ga,
    gb,
    ca,
    cb,
    ka,
    kb,
    actA: act && ca > 0 ? r(1, 40) * 1_000_000 : 0,
    actB: act && cb > 0 ? r(1, 40) * 1_000_000 : 0,
    lmHeadNs: r(0, 5_000_000),
  };
}

const pipeOf = (bps: number, contention: boolean) =>
  new EventPipe({
    linkBytesPerSec: bps,
    linkLatencyNs: LAT,
    packetBytes: PAPER_PACKET_BYTES,
    dramBytesPerSec: 164e9,
    contention,
    cores: 40,
  });

describe('event-level VSLPipe vs the closed form', () => {
  it('no contention, no activations: equal to the ns when a 100 MB packet takes whole ns (20 GB/s)', () => {
    const r = rng(1);
    const pipe = pipeOf(20e9, false); // 100 MB / 20 GB/s = 5 000 000 ns exactly
    for (let i = 0; i < 200; i++) {
      const x = randomShape(r, false);
      expect(pipe.runIteration(x)).toBe(closedForm(x, 20e9));
    }
    expect(pipe.stats().weightSlowedNs).toBe(0);
  });

  it('no contention, no activations, 19.5 GB/s: longer by at most (packets − 1) ns per transfer', () => {
    const r = rng(2);
    const bps = 19.5e9;
    const pipe = pipeOf(bps, false);
    let exact = 0;
    for (let i = 0; i < 200; i++) {
      const x = randomShape(r, false);
      const slack = x.layerBytes.reduce((a, b) => a + Math.ceil(b / PAPER_PACKET_BYTES) - 1, 0);
      const d = pipe.runIteration(x) - closedForm(x, bps);
      expect(d).toBeGreaterThanOrEqual(0);
      expect(d).toBeLessThanOrEqual(slack);
      if (d === 0) exact++;
    }
    expect(exact).toBeGreaterThan(0); // compute-bound stages are equal to the ns
  });

  it('with host-DRAM contention the iteration is never shorter (with and without activations)', () => {
    for (const act of [false, true]) {
      const r = rng(act ? 4 : 3);
      const free = pipeOf(19.5e9, false);
      const shared = pipeOf(19.5e9, true);
      let slower = 0;
      for (let i = 0; i < 150; i++) {
        const x = randomShape(r, act);
        const a = free.runIteration(x);
        const b = shared.runIteration(x);
        expect(b).toBeGreaterThanOrEqual(a);
        if (b > a) slower++;
      }
      expect(slower).toBeGreaterThan(0);
      const s = shared.stats();
      expect(s.weightSlowedNs).toBeGreaterThan(0);
      expect(s.dramContendedNs).toBeGreaterThan(0);
      expect(s.dramBoundStages).toBeGreaterThan(0);
    }
  });

  it('the D2H leg (Q/K/V copies the next CPU attention waits for) never shortens an iteration', () => {
    for (const contention of [false, true]) {
      const r = rng(contention ? 7 : 6);
      const without = pipeOf(19.5e9, contention);
      const withD2h = pipeOf(19.5e9, contention);
      let longer = 0;
      for (let i = 0; i < 150; i++) {
        const x = randomShape(r, true);
        const y = { ...x, d2hA: x.actA > 0 ? 3 * x.actA : 0, d2hB: x.actB > 0 ? 3 * x.actB : 0 };
        const a = without.runIteration(x);
        const b = withD2h.runIteration(y);
        expect(b).toBeGreaterThanOrEqual(a);
        if (b > a) longer++;
      }
      expect(longer).toBeGreaterThan(0);
      expect(withD2h.stats().d2hBytes).toBeGreaterThan(0);
      expect(without.stats().d2hBytes).toBe(0);
    }
  });

  it('contention with DRAM capacity far above demand changes nothing', () => {
    const r = rng(5);
    const free = pipeOf(19.5e9, false);
    const wide = new EventPipe({
      linkBytesPerSec: 19.5e9,
      linkLatencyNs: LAT,
      packetBytes: PAPER_PACKET_BYTES,
      dramBytesPerSec: 1e15,
      contention: true,
      cores: 40,
    });
    for (let i = 0; i < 100; i++) {
      const x = randomShape(r, true);
      expect(wide.runIteration(x)).toBe(free.runIteration(x));
    }
    expect(wide.stats().weightSlowedNs).toBe(0);
  });
});

describe('data mover: an activation copy overtakes weights at a packet boundary (by hand)', () => {
  it('300 MB of weights at 20 GB/s, 1 MB activation submitted at 7 ms', () => {
    const sim = new Simulation<ResourceEvent>();
    const mover = new DataMover(sim, { bytesPerSec: 20e9, latencyNs: LAT, packetBytes: PAPER_PACKET_BYTES });
    const link = mover.link;
    sim.setHandlers({
      'gpu.kernelDone': () => {},
      'link.latencyDone': () => link.onLatencyDone(),
      'link.packetDone': () => link.onPacketDone(),
      'link.runDone': () => link.onRunDone(),
      'fluid.flowDone': () => {},
      'cpu.taskDone': () => {},
    });
    let wDone = -1;
    let aDone = -1;
    mover.weights(300_000_000, () => (wDone = sim.now));
    sim.run({ until: 7_000_000 as never });
    mover.activation(1_000_000, () => (aDone = sim.now));
    sim.run();
    // Weights: 10 µs latency, then packets of 5 ms: boundaries at 5 010 000 and 10 010 000 ns.
    // The activation waits for the packet on the wire (7 ms → 10.01 ms: 3 010 000 ns of queueing),
    // pays its own 10 µs latency and 1 MB / 20 GB/s = 50 µs: lands at 10 070 000.
    expect(aDone).toBe(10_070_000);
    expect(mover.activationQueueNs).toBe(3_010_000);
    // The third weight packet follows it: 10 070 000 + 5 000 000.
    expect(wDone).toBe(15_070_000);
    expect(mover.weightSlowedNs).toBe(0);
  });
});

describe('data mover in the host-DRAM fluid share (by hand)', () => {
  it('a CPU flow slows the first weight packet; the second runs alone', () => {
    const sim = new Simulation<ResourceEvent>();
    const dram = new FluidShare('hostDram', 30e9, sim);
    const mover = new DataMover(sim, { bytesPerSec: 20e9, latencyNs: 0, packetBytes: PAPER_PACKET_BYTES, dram });
    const link = mover.link;
    sim.setHandlers({
      'gpu.kernelDone': () => {},
      'link.latencyDone': () => link.onLatencyDone(),
      'link.packetDone': () => link.onPacketDone(),
      'link.runDone': () => link.onRunDone(),
      'fluid.flowDone': (e) => dram.onFlowDone(e.flowId),
      'cpu.taskDone': () => {},
    });
    let wDone = -1;
    let cDone = -1;
    // 200 MB of weights (two 100 MB packets at 20 GB/s, 5 ms each alone), then a CPU flow of 50 MB
    // capped at 20 GB/s, both at t = 0, in 30 GB/s of DRAM: demand 40 > 30, both at 15 GB/s.
    mover.weights(200_000_000, () => (wDone = sim.now));
    dram.start(50_000_000, 20e9, () => (cDone = sim.now));
    sim.run();
    // CPU: 50 MB / 15 GB/s = 3 333 333.3 → 3 333 334 ns. The packet moved 15 GB/s × 3 333 334 ns =
    // 50 000 010 B; the other 49 999 990 B alone at 20 GB/s: 2 499 999.5 → 2 500 000 ns, so
    // packet 1 ends at 5 833 334 (833 334 ns late), packet 2 at 10 833 334.
    expect(cDone).toBe(3_333_334);
    expect(wDone).toBe(10_833_334);
    expect(mover.weightSlowedNs).toBe(833_334);
    expect(dram.contendedTimeNs()).toBe(3_333_334);
  });
});

describe('runLens pipeline: events', () => {
  const model = loadModel('mixtral-8x7b');
  const hw = loadHardware('a40-xeon8380-750gb');
  const cost = createCostModel(model, hw, { runtime: loadRuntime('moe-lightning') });
  const reqs = Array.from({ length: 300 }, (_, id) => ({
    id,
    promptTokens: 50 + ((id * 37) % 100),
    outputTokens: 16 + ((id * 13) % 17),
  }));
  const run = (s: Partial<LensSettings> = {}) =>
    runLens({
      model,
      hardware: hw,
      cost,
      requests: reqs,
      settings: { kvCapacityBytes: 1e9, pageTokens: 16, contention: false, ...s },
    });

  it('same schedule and tokens as the closed form; reports its mode; contention never faster; deterministic', () => {
    const cf = run();
    const ev = run({ pipeline: 'events' });
    expect(cf.pipeline).toBe('closed-form');
    expect(cf.eventStats).toBeUndefined();
    expect(ev.pipeline).toBe('events');
    expect(ev.iterations).toBe(cf.iterations);
    expect(ev.generatedTokens).toBe(cf.generatedTokens);
    expect(ev.preemptions).toBe(cf.preemptions);
    expect(ev.h2dBytes).toBe(cf.h2dBytes);
    expect(ev.eventStats!.activationTransfers).toBeGreaterThan(0);
    const d2h = run({ pipeline: 'events', qkvD2H: true });
    expect(d2h.eventStats!.d2hBytes).toBeGreaterThan(0);
    expect(d2h.endNs).toBeGreaterThanOrEqual(ev.endNs);
    expect(() => run({ qkvD2H: true })).toThrow(/events/);
    const evc = run({ pipeline: 'events', contention: true });
    expect(evc.endNs).toBeGreaterThanOrEqual(ev.endNs);
    expect(run({ pipeline: 'events' })).toEqual(ev);
  });
});
