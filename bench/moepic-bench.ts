/**
 * MoEpic benchmarks: the MoEpic run of `experiments/moepic/ablation.yaml` (Mixtral-8x7B
 * HQQ, V_e = 96, 96 MMLU requests of 64 output tokens at batch 1: decode-dominated, three
 * reconfigurations):
 * - `moepic-mixtral-decode`: simulated seconds per wall second (target ≥ 1 000), best of three
 *   runs after a warm-up, and per CPU second (the same figure, less sensitive to a loaded machine);
 * - the configurator's share of the run's wall time (target < 10 %), from a separate, timed run
 *   whose policy hooks are wrapped with clocks here: `configuratorShareOfWall` = the
 *   reconfigurations (`onIterationEnd`: Algorithm 1 and the reshape plan) + the statistics it
 *   needs (`SplitStats.observe`, patched here), each also given on its own; `hookShareOfWall` =
 *   every MoEpic hook.
 * - `moepic-mixtral-decode-no-cca`: the same run with `configurator: false`, for comparison.
 * Wall time is measured here only (policy code never reads a clock).
 */
import { performance } from 'node:perf_hooks';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadConfigFile } from '../experiments/config/load.ts';
import { expandRuns, type RunSpec } from '../experiments/config/expand.ts';
import { buildServingWorld } from '../experiments/world.ts';
import { SplitStats } from '../policies/moepic/configurator.ts';
import type { BenchRecord } from './serving-bench.ts';
import { timeMethod, withTimedPolicy } from './clocks.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
export const ABLATION = path.resolve(here, '../experiments/moepic/ablation.yaml');

async function runOnce(
  spec: RunSpec,
  baseDir: string,
): Promise<{ wallS: number; cpuS: number; simulatedS: number; events: number }> {
  const ex = await buildServingWorld(spec, { baseDir });
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const o = ex.run();
  const wallS = (performance.now() - t0) / 1000;
  const cu = process.cpuUsage(c0);
  return { wallS, cpuS: (cu.user + cu.system) / 1e6, simulatedS: o.endNs / 1e9, events: o.events };
}

async function measure(spec: RunSpec, baseDir: string, name: string): Promise<BenchRecord[]> {
  await runOnce(spec, baseDir); // warm-up (JIT)
  let best = { wallS: Infinity, cpuS: Infinity, simulatedS: 0, events: 0 };
  for (let i = 0; i < 3; i++) {
    const r = await runOnce(spec, baseDir);
    if (r.wallS < best.wallS) best = r;
  }
  // The timed run: hooks wrapped, the statistics' observe patched (restored afterwards).
  const clocks = { hooks: 0, iterationEnd: 0, observe: 0 };
  const wrapped = withTimedPolicy(spec, (hook, ms) => {
    clocks.hooks += ms;
    if (hook === 'onIterationEnd') clocks.iterationEnd += ms;
  });
  const restore = timeMethod(SplitStats.prototype, 'observe', (ms) => (clocks.observe += ms));
  let t: Awaited<ReturnType<typeof runOnce>>;
  try {
    t = await runOnce(wrapped, baseDir);
  } finally {
    restore();
  }
  const wallMs = t.wallS * 1000;
  return [
    {
      name,
      requests: spec.workload.requests,
      events: best.events,
      simulatedS: best.simulatedS,
      wallS: best.wallS,
      cpuS: best.cpuS,
      simulatedSPerWallS: best.simulatedS / best.wallS,
      simulatedSPerCpuS: best.simulatedS / best.cpuS,
      eventsPerS: best.events / best.wallS,
      timedRunWallS: t.wallS,
      configuratorShareOfWall: (clocks.iterationEnd + clocks.observe) / wallMs,
      reconfigureShareOfWall: clocks.iterationEnd / wallMs,
      statsShareOfWall: clocks.observe / wallMs,
      hookShareOfWall: clocks.hooks / wallMs,
    },
  ];
}

export async function moepicBenchmarks(): Promise<BenchRecord[]> {
  const loaded = loadConfigFile(ABLATION);
  const specs = await expandRuns(loaded.config, loaded.baseDir, loaded.file);
  const moepic = specs.find((s) => s.policy.label === 'MoEpic')!;
  const noCca = specs.find((s) => s.policy.label === 'w/o CCA')!;
  return [
    ...(await measure(moepic, loaded.baseDir, 'moepic-mixtral-decode')),
    ...(await measure(noCca, loaded.baseDir, 'moepic-mixtral-decode-no-cca')),
  ];
}

export const suite = { name: 'moepic', run: moepicBenchmarks };
