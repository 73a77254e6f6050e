/**
 * Exact goldens of the four reproduced systems (MoE-Infinity, MoEpic, MoE-Gen (H), MoE-Lens):
 * every config in `configs/systems/` (discovered automatically; each a small config that runs in
 * a few seconds) is run through `runExperiment` (no output folder) and the serialized summary of
 * its runs — policy, params, seed, every metric the run reports and the simulator's counts — must
 * be byte-equal to `expected/systems/<config>.json`. No rounding: any change of behaviour, however
 * small, shows here (the 4-significant-digit goldens in `golden.test.ts` tolerate float noise).
 *
 * A golden is a regression pin produced by running the code, not a comparison with a paper.
 * When a change is intended, regenerate with
 *
 *     UPDATE_GOLDEN=1 npx vitest run test/golden/systems.test.ts
 *
 * and review the diff of `expected/systems/` before committing it (say why in the commit).
 */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { matchGolden } from '../helpers/golden-file.ts';
import { loadConfigFile } from '../../experiments/config/load.ts';
import { runExperiment, type RunRecord } from '../../experiments/runner.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const CONFIGS = path.join(here, 'configs', 'systems');
const EXPECTED = path.join(here, 'expected', 'systems');

/** The serialized summary: everything a run reports except wall-clock timing (not part of a RunRecord). */
export function serialiseRuns(config: string, runs: readonly RunRecord[]): string {
  const summary = {
    config,
    runs: runs.map((r) => ({
      policy: r.policy,
      params: r.params,
      seed: r.seed,
      metrics: r.metrics,
      relative: r.relative,
      sim: r.sim,
    })),
  };
  return `${JSON.stringify(summary, null, 2)}\n`;
}

const configs = readdirSync(CONFIGS)
  .filter((f) => /\.(ya?ml|json)$/.test(f))
  .sort();

describe('exact goldens of the reproduced systems', () => {
  it('finds the four systems', () => {
    expect(configs).toEqual(['moe-gen-h.yaml', 'moe-infinity.yaml', 'moe-lens.yaml', 'moepic.yaml']);
  });

  it.each(configs)(
    '%s',
    async (file) => {
      const result = await runExperiment(loadConfigFile(path.join(CONFIGS, file)), { progress: false });
      const actual = serialiseRuns(file, result.runs);
      const expectedFile = path.join(EXPECTED, `${file.replace(/\.(ya?ml|json)$/, '')}.json`);
      matchGolden(actual, expectedFile, 'UPDATE_GOLDEN=1 npx vitest run test/golden/systems.test.ts');
    },
    120_000,
  );
});
