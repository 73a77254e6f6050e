/**
 * Host-resident experts (policy host-experts; parts host-residency.ts, host-compute.ts) on the
 * tiny hand-made world of serving-executor.test.ts: 2 MoE layers, 4 experts, top-1, 1 MB
 * experts, H2D 1 GB/s zero latency (1 MB = 1 ms); stub kernels attention 10 µs, router 1 µs,
 * GPU expert 100 µs, LM head 5 µs. The CPU: 4 cores, host DRAM 10 GB/s (each core may draw all
 * of it), no kernel rates (DRAM term only): one CPU expert = 1 MB / 10 GB/s = 100 µs.
 * Every token routes to expert 1 at layer 0 and expert 2 at layer 1; one request, 1 prompt token.
 *
 * A pass with both experts on the CPU: (10 + 1 + 100) × 2 + 5 = 227 µs, as with both resident.
 */
import { describe, expect, it } from 'vitest';
import type { HardwareProfile, ModelProfile, RuntimeProfile } from '../../hardware-profiles/types.ts';
import { loadRuntime } from '../../hardware-profiles/load.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import { fanout } from '../../sim/observe/trace-sink.ts';
import type { HostExpertsSpec } from '../../sim/serving/policy.ts';
import { ServingExecutor, type ServingConfig, type ServingOutcome } from '../../sim/serving/serving-executor.ts';
import type { RoutingSource, Workload } from '../../sim/workload.ts';
import { builtinPolicy } from '../../policies/registry.ts';
import { InvariantChecker } from '../helpers/invariant-checker.ts';
import { MB, fixedRouting, stubKernelCost, tinyHardware, tinyModel } from '../helpers/tiny-world.ts';

const E = 4;
const model: ModelProfile = { ...tinyModel(2, E, 1), id: 'tiny' };

function hardware(dramBytesPerSec = 10e9, perCoreDramBytesPerSec = dramBytesPerSec): HardwareProfile {
  const h = tinyHardware();
  return { ...h, cpu: { ...h.cpu, cores: 4, dramBytesPerSec, perCoreDramBytesPerSec } };
}

const routing: RoutingSource = fixedRouting(2, E, (layer) => [layer === 0 ? 1 : 2]);

function workload(outputTokens: number): Workload {
  return { requests: [{ id: 0, arrivalNs: 0 as Ns, promptTokens: 1, outputTokens }], routing, describe: 'hand-made' };
}

const config: ServingConfig = {
  batching: 'continuous',
  maxBatchSize: 1,
  maxWaitNs: 0 as Ns,
  maxBatchTokens: 8192,
  bufferSlots: 8,
  packetBytes: 16 * 1024 * 1024,
  preloadAllExperts: false,
};

function runtime(layerSyncNs: number, overlap: 'concurrent' | 'serial' = 'concurrent', eff = 1): RuntimeProfile {
  const base = loadRuntime('fused');
  return { ...base, hostExperts: { kernels: null, layerSyncNs, overlap, zeroCopyEfficiency: eff, source: 'test' } };
}

function run(
  params: Partial<HostExpertsSpec>,
  o: { tokens?: number; rt?: RuntimeProfile; dram?: number; perCoreDram?: number } = {},
) {
  const def = builtinPolicy('host-experts')!;
  const p = def.params.parse({ threads: 1, ...params });
  const policy = def.create(p, { model } as never);
  const slots = def.bufferSlots!(p, model)!;
  const checker = new InvariantChecker({ experts: E, bytesPerExpert: MB, allowPreload: true });
  const ex = new ServingExecutor({
    model,
    hardware: hardware(o.dram, o.perCoreDram),
    cost: stubKernelCost(),
    workload: workload(o.tokens ?? 1),
    policy,
    config: { ...config, bufferSlots: slots },
    runtime: o.rt,
    sink: fanout([checker]),
  });
  const out: ServingOutcome = ex.run();
  return { out, violations: checker.finish(out), h2d: out.resources.h2d.completedBytes };
}

describe('host-experts', () => {
  it('-ot exps=CPU: both experts on the CPU, 227 µs a pass, nothing on the link', () => {
    const r = run({});
    expect(r.violations).toEqual([]);
    expect(r.out.endNs).toBe(227_000);
    expect(r.h2d).toBe(0);
  });

  it('a per-layer host sync of 50 µs adds 50 µs to each layer with CPU experts', () => {
    expect(run({}, { rt: runtime(50_000) }).out.endNs).toBe(327_000);
  });

  it('--n-cpu-moe 1: layer 0 on the CPU (200 µs at 5 GB/s), layer 1 resident on the GPU', () => {
    const r = run({ cpuLayers: 1 }, { dram: 5e9 });
    expect(r.violations).toEqual([]);
    // 10 + 1 + 200 (CPU) + 10 + 1 + 100 (GPU) + 5
    expect(r.out.endNs).toBe(327_000);
    expect(r.h2d).toBe(0);
  });

  it('zero-copy: the kernel is bound by the 1 ms read; 1 MB per expert on the link, no slot', () => {
    const r = run({ miss: 'zero-copy' });
    expect(r.violations).toEqual([]);
    expect(r.out.endNs).toBe(2 * (11_000 + 1_000_000) + 5_000);
    expect(r.h2d).toBe(2 * MB);
  });

  it('zero-copy at 50 % small-read efficiency holds the stream for twice the read', () => {
    const r = run({ miss: 'zero-copy' }, { rt: runtime(0, 'concurrent', 0.5) });
    expect(r.out.endNs).toBe(2 * (11_000 + 2_000_000) + 5_000);
  });

  it('a GPU cache with uploads: decode misses upload once each (capped), later passes hit', () => {
    const r = run({ cacheSlotsPerLayer: 1, uploadsPerLayer: 1 }, { tokens: 12 });
    expect(r.violations).toEqual([]);
    expect(r.h2d).toBe(2 * MB); // one upload per layer, then hits
    expect(r.out.counters.cacheHits + r.out.counters.prefetchHits).toBeGreaterThan(0);
  });

  it('the admission gate: no upload before the 20th use in a window', () => {
    const r = run({ cacheSlotsPerLayer: 1, admitAfterUses: 20, admitWindow: 100 }, { tokens: 12 });
    expect(r.h2d).toBe(0);
    expect(r.out.counters.cacheHits).toBe(0);
  });

  it('miss: fetch with cpuShare 0.5 sends every other miss to the CPU (FreeToken hybrid)', () => {
    const r = run({ cacheSlotsPerLayer: 1, miss: 'fetch', cpuShare: 0.5 });
    expect(r.violations).toEqual([]);
    // Layer 0's miss: accumulator 0.5, fetched (1 ms); layer 1's: 1.0, on the CPU.
    expect(r.h2d).toBe(MB);
    expect(r.out.endNs).toBe(11_000 + 1_000_000 + 100_000 + 111_000 + 5_000);
  });

  it('miss: cost (Fiddler) picks the CPU when 100 µs on the CPU beats a 1.1 ms fetch', () => {
    const r = run({ cacheSlotsPerLayer: 1, miss: 'cost' });
    expect(r.h2d).toBe(0);
    expect(r.out.endNs).toBe(227_000);
  });

  it('miss: cost picks the fetch when the CPU is slower (DRAM 0.5 GB/s: 2 ms)', () => {
    const r = run({ cacheSlotsPerLayer: 1, miss: 'cost' }, { dram: 0.5e9 });
    expect(r.violations).toEqual([]);
    expect(r.h2d).toBe(2 * MB);
  });

  it("miss: cost counts the threads' own DRAM reach: one thread at 0.5 GB/s (2 ms) loses to the fetch", () => {
    // The machine's DRAM (10 GB/s: 100 µs) would pick the CPU; one thread reaches only 0.5 GB/s.
    const r = run({ cacheSlotsPerLayer: 1, miss: 'cost' }, { perCoreDram: 0.5e9 });
    expect(r.violations).toEqual([]);
    expect(r.h2d).toBe(2 * MB);
  });

  it('serial overlap: a GPU expert that lands while a CPU expert computes waits for it; concurrent runs it at once', () => {
    // Top-2 at every layer: experts 1 and 2. miss: fetch with cpuShare 0.5 fetches expert 1 (1 ms on the link)
    // and computes expert 2 on the CPU: 1 MB at 0.5 GB/s = 2 ms. The fetch lands 1 ms into the CPU's 2 ms.
    const top2: ModelProfile = { ...tinyModel(2, E, 2), id: 'tiny-top2' };
    const both = fixedRouting(2, E, () => [1, 2]);
    const endOf = (overlap: 'concurrent' | 'serial') => {
      const def = builtinPolicy('host-experts')!;
      const p = def.params.parse({ threads: 1, miss: 'fetch', cpuShare: 0.5, cacheSlotsPerLayer: 1 });
      const checker = new InvariantChecker({ experts: E, bytesPerExpert: MB, allowPreload: true });
      const ex = new ServingExecutor({
        model: top2,
        hardware: hardware(0.5e9),
        cost: stubKernelCost(),
        workload: {
          requests: [{ id: 0, arrivalNs: 0 as Ns, promptTokens: 1, outputTokens: 1 }],
          routing: both,
          describe: 'top-2',
        },
        policy: def.create(p, { model: top2 } as never),
        config: { ...config, bufferSlots: def.bufferSlots!(p, top2)! },
        runtime: runtime(0, overlap),
        sink: fanout([checker]),
      });
      const out = ex.run();
      expect(checker.finish(out)).toEqual([]);
      return out.endNs;
    };
    // Concurrent: the GPU expert (100 µs) runs inside the CPU's 2 ms. Serial: it runs after, 100 µs later,
    // in each of the two layers.
    expect(endOf('serial') - endOf('concurrent')).toBe(2 * 100_000);
  });

  it('index order (a Python loop over the experts) waits for its CPU experts before the next layer', () => {
    // Both experts on the CPU with overlap concurrent: the loop hands each to the CPU and runs out
    // of experts at once; the layer still ends when its CPU expert does (100 µs), so a pass takes
    // 227 µs as in ready-first order. It finished the layer at once before (the next layer's walk
    // then ran past the model when the CPU expert came back: a crash, exit 1).
    const rt: RuntimeProfile = { ...runtime(0), expertOrder: 'index' };
    const r = run({}, { rt });
    expect(r.violations).toEqual([]);
    expect(r.out.endNs).toBe(227_000);
    expect(r.out.endNs).toBe(run({}).out.endNs);
    // Two output tokens: two passes, the second waiting for its CPU experts as well.
    expect(run({}, { rt, tokens: 2 }).out.endNs).toBe(run({}, { tokens: 2 }).out.endNs);
  });

  it('the GPU is blocked exactly while it waits for its CPU experts, in either expert order', () => {
    // Two passes × two layers, each waiting 100 µs (the CPU expert) after its attention and
    // router: 400 µs. Ready-first order left the wait open when the layer finished, so it ran on
    // through the next layer's attention and router (11 µs) and swallowed that layer's own wait:
    // 222 µs in two spans that overlapped kernels.
    for (const rt of [runtime(0), { ...runtime(0), expertOrder: 'index' as const }]) {
      expect(run({}, { rt, tokens: 2 }).out.counters.blockedNs).toBe(400_000);
    }
  });
});
