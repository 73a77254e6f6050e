/**
 * MoE-Lens benchmark: simulated seconds per wall second of a 10 000-sequence
 * MT-Bench-like run on Mixtral-8x7B (the `mt-bench-70GB-g<g>` cases of
 * `experiments/moe-lens/throughput.yaml`, 70 GB of host KV, with their requests cut to 10 000),
 * at g_max 32, 128 and 256 — goal ≥ 10 000 — and the process's peak RSS. Each case runs 5 times
 * in the process: the first (cold: JIT compilation included) is reported as `coldWallS`, the
 * figures are the medians of the 4 warm runs. The world (workload, cost model) is built outside the timing.
 * On a shared machine wall time varies with the load, so the process's CPU time (user + system)
 * over the same run, and the ratio against it, are reported beside it. The same cases run again
 * with the event-level VSLPipe (`pipeline: events`, `moe-lens-events-*`).
 */
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { expandRuns } from '../experiments/config/expand.ts';
import { loadConfigFile } from '../experiments/config/load.ts';
import { buildThroughputWorld } from '../experiments/world.ts';
import type { BenchRecord } from './serving-bench.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
export const LENS_THROUGHPUT = path.resolve(here, '../experiments/moe-lens/throughput.yaml');
const SEQUENCES = 10_000;
const GOAL = 10_000;
const RUNS = 5;
const median = (xs: readonly number[]): number => {
  const a = [...xs].sort((x, y) => x - y);
  const m = a.length >> 1;
  return a.length % 2 === 1 ? a[m]! : (a[m - 1]! + a[m]!) / 2;
};

export async function lensBenchmarks(): Promise<BenchRecord[]> {
  const loaded = loadConfigFile(LENS_THROUGHPUT);
  const specs = await expandRuns(loaded.config, loaded.baseDir, loaded.file);
  const out: BenchRecord[] = [];
  const cases = (['closed-form', 'events'] as const).flatMap((mode) => [32, 128, 256].map((g) => [mode, g] as const));
  for (const [mode, g] of cases) {
    const spec1 = specs.find((s) => s.params.case === `mt-bench-70GB-g${g}` && s.policy.label === 'moe-lens');
    if (!spec1) throw new Error(`throughput.yaml has no mt-bench-70GB-g${g} run of moe-lens`);
    const spec0 =
      mode === 'events'
        ? { ...spec1, policy: { ...spec1.policy, params: { ...(spec1.policy.params as object), pipeline: 'events' } } }
        : spec1;
    // A profile path in a config is relative to the config's folder (as the runner resolves it).
    const hardware = spec0.hardware.endsWith('.json') ? path.resolve(loaded.baseDir, spec0.hardware) : spec0.hardware;
    const spec = { ...spec0, hardware, workload: { ...spec0.workload, requests: SEQUENCES } };
    const walls: number[] = [];
    const cpus: number[] = [];
    let simulatedS = 0;
    let iterations = 0;
    for (let i = 0; i < RUNS; i++) {
      const executor = await buildThroughputWorld(spec, { baseDir: loaded.baseDir });
      const c0 = process.cpuUsage();
      const t0 = performance.now();
      const o = executor.run();
      walls.push((performance.now() - t0) / 1000);
      const c = process.cpuUsage(c0);
      cpus.push((c.user + c.system) / 1e6);
      simulatedS = o.endNs / 1e9;
      iterations = o.simulatedPasses;
    }
    const wallS = median(walls.slice(1));
    const cpuS = median(cpus.slice(1));
    out.push({
      name: `moe-lens${mode === 'events' ? '-events' : ''}-mtbench-10k-g${g}`,
      sequences: SEQUENCES,
      iterations,
      simulatedS,
      wallS,
      coldWallS: walls[0]!,
      simulatedSPerWallS: simulatedS / wallS,
      cpuS,
      simulatedSPerCpuS: simulatedS / cpuS,
      goalSimulatedSPerWallS: GOAL,
      meetsGoal: simulatedS / wallS >= GOAL ? 'yes' : 'no',
      peakRssBytes: process.resourceUsage().maxRSS * 1024,
    });
  }
  return out;
}

export const suite = { name: 'moe-lens', run: lensBenchmarks };
