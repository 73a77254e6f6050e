/**
 * Serving-executor benchmarks: simulator events/s on the quickstart workload and on one 10×
 * larger, the bare heap-js push/pop rate at the same queue depth, their ratio, and simulated
 * seconds per wall second (best of at least five timed runs, as many as fit in 1.5 s, after a
 * warm-up: on a shared 2-core machine a 30 ms run varies by ±30 % from one run to the next).
 *
 * Per MoE layer step (one MoE layer of one iteration: the unit of the serving executor's work,
 * the same count for every policy of a workload at batch 1) each variant reports its wall ns
 * (`nsPerLayerStep`), the wall ns the scale goal of 20 000 simulated s per wall s allows
 * (`goalBudgetNsPerLayerStep`: a policy that serves the same tokens in less simulated time has
 * less), and the share of the wall time spent inside the policy's hooks
 * (`policyHookShareOfWall`, from a separate instrumented run, the timer's own cost measured and
 * taken out) with what is left per step (`nsPerLayerStepOutsidePolicy`: executor, resources,
 * router, kernel).
 *
 * `ratio` divides a whole run's events/s — kernel plus every handler's work (executor, policy,
 * resources) — by bare heap push/pops: since PCIe runs made most events carry real work (a
 * transfer, a kernel), it measures the simulator's work per event, not the kernel. `engine-*`
 * measures the kernel alone: `Simulation` events/s (post + dispatch to a handler that
 * schedules the next event) against the bare heap-js rate at the same depth.
 */
import { performance } from 'node:perf_hooks';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Heap } from 'heap-js';
import { loadConfigFile, validateConfig } from '../experiments/config/load.ts';
import { expandRuns, type RunSpec } from '../experiments/config/expand.ts';
import { buildServingWorld } from '../experiments/world.ts';
import { fanout } from '../sim/observe/trace-sink.ts';
import { loadModel } from '../hardware-profiles/load.ts';
import type { ServingOutcome } from '../sim/serving/serving-executor.ts';
import { timerCost, withTimedPolicy } from './clocks.ts';
import { Rng } from '../sim/kernel/rng.ts';
import { EventPriority, Simulation } from '../sim/kernel/simulation.ts';
import type { Ns } from '../sim/kernel/time.ts';

export type BenchRecord = Record<string, number | string>;

/**
 * The sink an experiment's run attaches (`runOne` in experiments/runner.ts: `fanout` of its
 * sinks, none on a worker thread): timed runs attach the same, so the bench times the paths
 * experiments take (a PCIe link with a sink reports packet by packet; without one it would
 * account a run's packets at once).
 */
const experimentSink = () => fanout([]);

const here = path.dirname(fileURLToPath(import.meta.url));
export const QUICKSTART = path.resolve(here, '../experiments/quickstart.yaml');

interface Entry {
  time: number;
  priority: number;
  seq: number;
}

/** Pop/push pairs per second on a heap-js heap holding `depth` entries, with the kernel's comparator. */
export function bareHeapRate(depth: number, ops: number): number {
  const rng = new Rng('bench-heap');
  const heap = new Heap<Entry>((a, b) => a.time - b.time || a.priority - b.priority || a.seq - b.seq);
  let seq = 0;
  for (let i = 0; i < depth; i++) heap.push({ time: Math.floor(rng.next() * 1e6), priority: 10, seq: seq++ });
  const t0 = performance.now();
  for (let i = 0; i < ops; i++) {
    const e = heap.pop()!;
    heap.push({ time: e.time + 1 + Math.floor(rng.next() * 1e6), priority: 10, seq: seq++ });
  }
  return ops / ((performance.now() - t0) / 1000);
}

/** Events/s of the kernel alone at `depth` pending events: each handler schedules the next event, as the heap benchmark pushes after a pop. */
export function engineRate(depth: number, ops: number): number {
  const sim = new Simulation<{ readonly kind: 'tick' }>();
  const rng = new Rng('bench-heap');
  const tick = { kind: 'tick' } as const;
  let n = 0;
  sim.setHandlers({
    tick: () => {
      if (n++ < ops) sim.post((sim.now + 1 + Math.floor(rng.next() * 1e6)) as Ns, tick, EventPriority.completion);
    },
  });
  for (let i = 0; i < depth; i++) sim.schedule(Math.floor(rng.next() * 1e6) as Ns, tick, EventPriority.completion);
  const t0 = performance.now();
  const r = sim.run();
  return r.events / ((performance.now() - t0) / 1000);
}

/** Kernel vs bare heap, interleaved (A B A B …) and the median ratio, so machine drift cancels. */
function engineBenchmarks(): BenchRecord[] {
  const out: BenchRecord[] = [];
  for (const depth of [1, 16, 256]) {
    const ops = 1_000_000;
    engineRate(depth, ops);
    bareHeapRate(depth, ops); // warm-up
    const ratios: number[] = [];
    let engine = 0;
    let bare = 0;
    for (let i = 0; i < 5; i++) {
      const e = engineRate(depth, ops);
      const b = bareHeapRate(depth, ops);
      ratios.push(e / b);
      engine = Math.max(engine, e);
      bare = Math.max(bare, b);
    }
    ratios.sort((a, b) => a - b);
    out.push({
      name: `engine-depth-${depth}`,
      depth,
      engineEventsPerS: engine,
      bareHeapEventsPerS: bare,
      medianRatio: ratios[2]!,
    });
  }
  return out;
}

/** The scale goal for serving runs: simulated seconds per wall second. */
const SERVING_GOAL = 20_000;

/** Wall seconds of timed runs per variant (at least five runs). */
const MIN_TIMED_S = 1.5;

/**
 * Share of a run's wall time inside the policy's hooks, from a run of `spec` with every hook
 * timed (`withTimedPolicy`); the clock's own cost per call (`timerCost`) is taken out of the
 * hook time and of the run's wall time.
 */
export async function policyHookShare(
  spec: RunSpec,
  baseDir: string,
  cost: { insideMs: number; totalMs: number },
): Promise<{ share: number; calls: number; outcome: ServingOutcome }> {
  let hookMs = 0;
  let calls = 0;
  const ex = await buildServingWorld(
    withTimedPolicy(spec, (_hook, ms) => {
      hookMs += ms;
      calls++;
    }),
    { baseDir, sink: experimentSink() },
  );
  const t0 = performance.now();
  const outcome = ex.run();
  const wallMs = performance.now() - t0 - calls * cost.totalMs;
  return { share: Math.max(0, hookMs - calls * cost.insideMs) / wallMs, calls, outcome };
}

async function timeRun(
  spec: RunSpec,
  baseDir: string,
): Promise<{ events: number; wallS: number; cpuS: number; simulatedS: number; meanDepth: number; iterations: number }> {
  // Depth-measuring pass (observer costs time, so it is not the timed pass).
  const probe = await buildServingWorld(spec, { baseDir, sink: experimentSink() });
  let samples = 0;
  let depthSum = 0;
  probe.simulation.observe({
    onEvent: () => {
      samples++;
      depthSum += probe.simulation.pending;
    },
  });
  probe.run();
  // Best of at least five timed runs, and of as many as fit in MIN_TIMED_S (a quickstart run
  // takes ~30 ms, so about 50 of them): wall and CPU each; on a shared machine a slower run only
  // ever overstates the cost.
  let wallS = Infinity;
  let cpuS = Infinity;
  let o: ReturnType<typeof probe.run> | undefined;
  const start = performance.now();
  for (let i = 0; i < 5 || performance.now() - start < MIN_TIMED_S * 1000; i++) {
    const ex = await buildServingWorld(spec, { baseDir, sink: experimentSink() });
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    o = ex.run();
    wallS = Math.min(wallS, (performance.now() - t0) / 1000);
    const cpu = process.cpuUsage(c0);
    cpuS = Math.min(cpuS, (cpu.user + cpu.system) / 1e6);
  }
  return {
    events: o!.events,
    wallS,
    cpuS,
    simulatedS: o!.endNs / 1e9,
    meanDepth: samples ? depthSum / samples : 1,
    iterations: o!.counters.iterations,
  };
}

export async function servingBenchmarks(): Promise<BenchRecord[]> {
  const loaded = loadConfigFile(QUICKSTART);
  const out: BenchRecord[] = engineBenchmarks();
  const timer = timerCost();
  const variants: [string, number][] = [
    ['quickstart', 1],
    ['quickstart-10x', 10],
  ];
  for (const [name, scale] of variants) {
    const raw = JSON.parse(JSON.stringify(loaded.config)) as { workload: { requests: number } };
    raw.workload.requests *= scale;
    const config = validateConfig(raw, loaded.file);
    const specs = await expandRuns(config, loaded.baseDir, loaded.file);
    for (const spec of specs) {
      await timeRun(spec, loaded.baseDir); // warm-up (JIT)
      const r = await timeRun(spec, loaded.baseDir);
      const eventsPerS = r.events / r.wallS;
      const depth = Math.max(1, Math.round(r.meanDepth));
      const bare = bareHeapRate(depth, Math.max(200_000, r.events));
      // Best of three instrumented runs (the least disturbed by other load).
      let hookShare = Infinity;
      for (let i = 0; i < 3; i++)
        hookShare = Math.min(hookShare, (await policyHookShare(spec, loaded.baseDir, timer)).share);
      const layerSteps = r.iterations * loadModel(spec.model).moeLayers;
      const nsPerLayerStep = (r.wallS * 1e9) / layerSteps;
      out.push({
        name: `serving-${name}-${spec.policy.label}`,
        requests: spec.workload.requests,
        events: r.events,
        wallS: r.wallS,
        eventsPerS,
        meanQueueDepth: depth,
        bareHeapEventsPerS: bare,
        ratio: eventsPerS / bare,
        simulatedS: r.simulatedS,
        simulatedSPerWallS: r.simulatedS / r.wallS,
        // CPU time of this process: less sensitive than wall time to other load on the machine.
        simulatedSPerCpuS: r.simulatedS / r.cpuS,
        layerSteps,
        nsPerLayerStep,
        goalBudgetNsPerLayerStep: ((r.simulatedS / SERVING_GOAL) * 1e9) / layerSteps,
        policyHookShareOfWall: hookShare,
        nsPerLayerStepOutsidePolicy: nsPerLayerStep * (1 - hookShare),
      });
    }
  }
  return out;
}

export const suite = { name: 'serving', run: servingBenchmarks };
