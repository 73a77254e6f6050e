/**
 * moe-infinity benchmarks (the EAMC must not dominate a run):
 * 1. `eamc-match-arctic-10k`: incremental EAMC matching on Arctic-sized EAMs (35 MoE layers ×
 *    128 experts, top-2) with 10 000 stored EAMs per phase: ns per row update of one iteration
 *    EAM against all entries (`nsPerUpdate`: a decode row, k non-zero cells; and a prefill
 *    row), and the share of a representative serving run's wall time (Arctic on the A5000
 *    testbed, continuous batching up to 4, 24 requests) spent in matching (`matchLayer`: row
 *    updates, best matches, batch scores), within it in row updates (also per decode row, ≤ 8
 *    non-zero cells, and per prefill row, in the run) and in scores, in the whole
 *    `onLayerRouted` hook, and in EAMC insertions (most-similar replacement when full; split
 *    into those completed from the matchers' dot products, `hintedInsertions`, and the others).
 *    `runCpuS`: the process CPU time of the run (the wall time is noisy on a shared machine).
 *    Target (the scale goal): matching + insertion (`eamcShareOfWall`) < 10 % of the run's wall
 *    time, at `simulatedSPerWallS` simulated s per wall s. `eamc-match-arctic-1k`: the same with
 *    MoE-Infinity's default capacity (1 000). `eamcKernel`: the collections' kernels (`wasm`:
 *    the WebAssembly SIMD ones of `build/eamc.wasm`; `packed`: the JS ones, where the build is
 *    absent or MOESIM_EAMC_KERNEL=js, for a comparison on the same machine).
 * 2. `e2e-mixtral-moe-infinity`: Mixtral-8x7B on the A5000 testbed, continuous batching (16),
 *    64 requests arriving at 4/s, far above capacity (the queue grows for the whole run):
 *    simulated seconds per wall second (target ≥ 1 000) and events per second, best of three
 *    runs after a warm-up.
 * Wall time is measured here only (policy code never reads a clock).
 */
import { performance } from 'node:perf_hooks';
import { loadHardware, loadModel } from '../hardware-profiles/load.ts';
import type { ModelProfile } from '../hardware-profiles/types.ts';
import { createCostModel } from '../sim/cost/cost-model.ts';
import { Rng, RngStreams } from '../sim/kernel/rng.ts';
import { msToNs } from '../sim/kernel/time.ts';
import { ServingExecutor, type ServingConfig } from '../sim/serving/serving-executor.ts';
import { buildWorkload, WorkloadSchema } from '../workloads/config.ts';
import type { Phase } from '../policies/moe-infinity/eam.ts';
import { EamCollection, IncrementalMatcher, type EamcDots } from '../policies/moe-infinity/eam-collection.ts';
import { MoeInfinityParams, MoeInfinityPolicy } from '../policies/moe-infinity/policy.ts';
import { ScoreAccumulator } from '../policies/moe-infinity/prefetcher.ts';
import { timeMethod } from './clocks.ts';

type BenchRecord = Record<string, number | string>;

/**
 * Synthetic request EAMs with structure (a few clusters, each preferring a handful of experts
 * per layer): `tokens` tokens of top-k per EAM.
 */
function syntheticEams(L: number, E: number, k: number, count: number, tokens: () => number, rng: Rng): Float64Array[] {
  const clusters = 16;
  const hot = Array.from({ length: clusters }, () =>
    Array.from({ length: L }, () => Array.from({ length: 6 }, () => rng.int(E))),
  );
  const out: Float64Array[] = [];
  for (let n = 0; n < count; n++) {
    const m = new Float64Array(L * E);
    const c = hot[rng.int(clusters)]!;
    const t = tokens();
    for (let l = 0; l < L; l++) {
      for (let i = 0; i < t * k; i++) {
        const e = rng.next() < 0.8 ? c[l]![rng.int(6)]! : rng.int(E);
        m[l * E + e]! += 1;
      }
    }
    out.push(m);
  }
  return out;
}

interface World {
  readonly executor: ServingExecutor;
  readonly policy: MoeInfinityPolicy;
}

async function buildWorld(
  model: ModelProfile,
  hardwareId: string,
  workloadRaw: unknown,
  config: Partial<ServingConfig>,
  params: Record<string, unknown>,
  seed: number,
): Promise<World> {
  const hardware = loadHardware(hardwareId);
  const streams = new RngStreams(seed);
  const shape = { modelId: model.id, moeLayers: model.moeLayers, experts: model.experts, topK: model.topK };
  const workload = await buildWorkload(WorkloadSchema.parse(workloadRaw), shape, streams);
  const policy = new MoeInfinityPolicy('moe-infinity', MoeInfinityParams.parse(params), model);
  const executor = new ServingExecutor({
    model,
    hardware,
    cost: createCostModel(model, hardware, () => {}),
    workload,
    policy,
    config: {
      batching: 'continuous',
      maxBatchSize: 8,
      maxWaitNs: msToNs(50),
      maxBatchTokens: 8192,
      bufferSlots: 'auto',
      packetBytes: 16 * 1024 * 1024,
      preloadAllExperts: false,
      ...config,
    },
  });
  return { executor, policy };
}

/** ns per `IncrementalMatcher.addRow` over 10 000 entries, for decode rows (k cells) and prefill rows. */
function microMatch(
  coll: EamCollection,
  L: number,
  E: number,
  k: number,
  rng: Rng,
): { decodeNs: number; prefillNs: number } {
  const m = new IncrementalMatcher({ layers: L, experts: E }, 8);
  const row = new Int32Array(E);
  const time = (fill: () => void, iterations: number): number => {
    let ns = 0;
    let n = 0;
    for (let it = 0; it < iterations; it++) {
      m.reset(coll);
      for (let l = 0; l < L; l++) {
        fill();
        const t0 = performance.now();
        m.addRow(l, row);
        ns += (performance.now() - t0) * 1e6;
        n++;
      }
    }
    return ns / n;
  };
  const decode = () => {
    row.fill(0);
    for (let j = 0; j < k; j++) row[rng.int(E)]! += 1;
  };
  const prefill = () => {
    row.fill(0);
    for (let j = 0; j < 200 * k; j++) row[rng.int(E)]! += 1;
  };
  time(decode, 5); // warm-up
  const decodeNs = time(decode, 40);
  time(prefill, 2);
  const prefillNs = time(prefill, 10);
  return { decodeNs, prefillNs };
}

export async function arcticMatching(name: string, capacity: number): Promise<BenchRecord> {
  const model = loadModel('snowflake-arctic');
  const L = model.moeLayers;
  const E = model.experts;
  const k = model.topK;
  const rng = new Rng('bench-moe-infinity-eams');
  const workload = {
    requests: 24,
    arrival: { kind: 'poisson', ratePerS: 0.05 },
    promptTokens: { kind: 'uniform', min: 32, max: 256 },
    outputTokens: { kind: 'uniform', min: 16, max: 64 },
  };
  const build = async () => {
    const w = await buildWorld(model, 'a5000-pcie4-1tb', workload, { maxBatchSize: 4 }, { eamcCapacity: capacity }, 1);
    const fill = (phase: Phase, tokens: () => number) => {
      // Insert in chunks so the synthetic matrices do not all live at once.
      for (let done = 0; done < capacity; done += 500)
        w.policy.preload(phase, syntheticEams(L, E, k, 500, tokens, rng));
    };
    fill('prefill', () => 32 + rng.int(224));
    fill('decode', () => 16 + rng.int(48));
    return w;
  };

  const w = await build();
  const { decodeNs, prefillNs } = microMatch(w.policy.collections.decode, L, E, k, rng);

  // The representative run: time matchLayer (and within it the row updates and the score
  // computation), the whole onLayerRouted hook and EAMC insertions.
  let rowMs = 0;
  let rowCalls = 0;
  let scoreMs = 0;
  let insertMs = 0;
  let insertCalls = 0;
  const restore: (() => void)[] = [];
  const wrap = <T extends object, K extends keyof T>(
    target: T,
    key: K,
    onTime: (ms: number, args: unknown[]) => void,
  ): void => {
    restore.push(timeMethod(target, key, onTime));
  };
  // Row updates split by the row's non-zero cells: ≤ 8 (decode tokens of a batch) or more (prefill).
  let decodeRowMs = 0;
  let decodeRows = 0;
  wrap(IncrementalMatcher.prototype, 'addRow', (ms, args) => {
    rowMs += ms;
    rowCalls++;
    const counts = args[1] as ArrayLike<number>;
    let nnz = 0;
    for (let e = 0; e < counts.length; e++) if (counts[e] !== 0) nnz++;
    if (nnz <= 8) {
      decodeRowMs += ms;
      decodeRows++;
    }
  });
  wrap(ScoreAccumulator.prototype, 'prepare', (ms) => (scoreMs += ms));
  wrap(ScoreAccumulator.prototype, 'fill', (ms) => (scoreMs += ms));
  let hintedInsertMs = 0;
  let hintedInsertCalls = 0;
  wrap(EamCollection.prototype, 'insert', (ms, args) => {
    insertMs += ms;
    insertCalls++;
    // Completed from the dot products its matchers accumulated (`EamcDots`), when valid.
    if ((args[1] as EamcDots | undefined)?.valid) {
      hintedInsertMs += ms;
      hintedInsertCalls++;
    }
  });
  let matchMs = 0;
  let hookMs = 0;
  let matchCalls = 0;
  const p = w.policy;
  wrap(p, 'matchLayer', (ms) => {
    matchMs += ms;
    matchCalls++;
  });
  wrap(p, 'onLayerRouted', (ms) => (hookMs += ms));
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const o = w.executor.run();
  const wallMs = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  for (const r of restore) r();
  return {
    name,
    eamcKernel: p.collections.decode.kernel,
    entriesPerPhase: p.collections.decode.size,
    nsPerUpdate: Math.round(decodeNs),
    nsPerPrefillUpdate: Math.round(prefillNs),
    matchShareOfWall: matchMs / wallMs,
    rowUpdateShareOfWall: rowMs / wallMs,
    // Scores: coefficients (in matchLayer) and the rows the ranking computes (in onLayerRouted).
    scoreShareOfWall: scoreMs / wallMs,
    hookShareOfWall: hookMs / wallMs,
    insertShareOfWall: insertMs / wallMs,
    usPerLayerMatch: (matchMs * 1000) / Math.max(1, matchCalls),
    usPerRowUpdateInRun: (rowMs * 1000) / Math.max(1, rowCalls),
    usPerDecodeRowInRun: (decodeRowMs * 1000) / Math.max(1, decodeRows),
    usPerPrefillRowInRun: ((rowMs - decodeRowMs) * 1000) / Math.max(1, rowCalls - decodeRows),
    msPerInsertion: insertMs / Math.max(1, insertCalls),
    msPerHintedInsertion: hintedInsertMs / Math.max(1, hintedInsertCalls),
    msPerOtherInsertion: (insertMs - hintedInsertMs) / Math.max(1, insertCalls - hintedInsertCalls),
    hintedInsertions: hintedInsertCalls,
    runWallS: wallMs / 1000,
    // Process CPU time of the run (user + system; other processes sharing the cores do not count).
    runCpuS: (cpu.user + cpu.system) / 1e6,
    insertions: insertCalls,
    rowUpdates: rowCalls,
    simulatedS: o.endNs / 1e9,
    simulatedSPerWallS: o.endNs / 1e9 / (wallMs / 1000),
    // Target (the scale goal): matching + insertion < 10 % of the run's wall time.
    eamcShareOfWall: (matchMs + insertMs) / wallMs,
    events: o.events,
    slots: o.slots,
    bufferHitRate: (o.counters.cacheHits + o.counters.prefetchHits) / Math.max(1, o.counters.needs),
  };
}

async function e2eMixtral(): Promise<BenchRecord> {
  const model = loadModel('mixtral-8x7b');
  const workload = {
    requests: 64,
    arrival: { kind: 'poisson', ratePerS: 4 },
    promptTokens: { kind: 'uniform', min: 32, max: 512 },
    outputTokens: { kind: 'uniform', min: 16, max: 128 },
  };
  const run = async () => {
    const w = await buildWorld(model, 'a5000-pcie4-1tb', workload, { maxBatchSize: 16 }, {}, 1);
    const t0 = performance.now();
    const o = w.executor.run();
    return { o, wallS: (performance.now() - t0) / 1000 };
  };
  await run(); // warm-up (JIT)
  // Best of three: wall time on a shared machine only ever overstates the cost.
  let best = await run();
  for (let i = 0; i < 2; i++) {
    const r = await run();
    if (r.wallS < best.wallS) best = r;
  }
  const { o, wallS } = best;
  const simulatedS = o.endNs / 1e9;
  return {
    name: 'e2e-mixtral-moe-infinity',
    requests: o.requests.length,
    simulatedS,
    wallS,
    simulatedSPerWallS: simulatedS / wallS,
    eventsPerS: o.events / wallS,
    events: o.events,
    bufferHitRate: (o.counters.cacheHits + o.counters.prefetchHits) / Math.max(1, o.counters.needs),
  };
}

export async function moeInfinityBenchmarks(): Promise<Array<Record<string, number | string>>> {
  return [
    await arcticMatching('eamc-match-arctic-10k', 10_000),
    await arcticMatching('eamc-match-arctic-1k', 1000),
    await e2eMixtral(),
  ];
}

// Run directly: `npx tsx bench/moe-infinity-bench.ts`.
if (import.meta.url === `file://${process.argv[1]}`) {
  for (const r of await moeInfinityBenchmarks()) process.stdout.write(`${JSON.stringify(r)}\n`);
}

export const suite = { name: 'moe-infinity', run: moeInfinityBenchmarks };
