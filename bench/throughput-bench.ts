/**
 * Throughput-executor benchmark: the ChatBot Arena run of
 * `experiments/moe-gen/datasets.yaml` (36 K sequences, 256 → 512 tokens, Mixtral-8x22B on C2)
 * with `moe-gen-h` — target: the simulated 36 K sequences complete in under 30 s of wall time.
 * Reports wall time (cold: first run in the process, search and JIT included; warm: a second
 * run, the search memoised), simulated seconds, the simulated-to-wall ratio, passes run vs
 * simulated (memoisation), kernel events simulated, and events/s.
 */
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { expandRuns } from '../experiments/config/expand.ts';
import { loadConfigFile } from '../experiments/config/load.ts';
import { buildThroughputWorld } from '../experiments/world.ts';
import type { BenchRecord } from './serving-bench.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
export const DATASETS = path.resolve(here, '../experiments/moe-gen/datasets.yaml');

export async function throughputBenchmarks(): Promise<BenchRecord[]> {
  const loaded = loadConfigFile(DATASETS);
  const specs = await expandRuns(loaded.config, loaded.baseDir, loaded.file);
  const spec = specs.find((s) => s.params.case === 'ChatBot-Arena' && s.policy.label === 'moe-gen-h');
  if (!spec) throw new Error('datasets.yaml has no ChatBot-Arena run of moe-gen-h');
  const out: BenchRecord[] = [];
  for (const label of ['cold', 'warm']) {
    const t0 = performance.now();
    const executor = await buildThroughputWorld(spec, { baseDir: loaded.baseDir });
    const t1 = performance.now();
    const o = executor.run();
    const t2 = performance.now();
    const wallS = (t2 - t0) / 1000;
    const simulatedS = o.endNs / 1e9;
    out.push({
      name: `throughput-arena-moe-gen-h-${label}`,
      sequences: o.requests,
      wallS,
      workloadBuildS: (t1 - t0) / 1000,
      runS: (t2 - t1) / 1000,
      simulatedS,
      simulatedSPerWallS: simulatedS / wallS,
      passes: o.prefill.passes + o.decode.passes,
      simulatedPasses: o.simulatedPasses,
      memoHits: o.memoHits,
      events: o.events,
      eventsPerS: o.events / ((t2 - t1) / 1000),
      targetWallS: 30,
      meetsTarget: wallS < 30 ? 'yes' : 'no',
    });
  }
  return out;
}

export const suite = { name: 'throughput', run: throughputBenchmarks };
