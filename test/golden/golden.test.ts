/**
 * Golden tests: every experiment config in `configs/` (discovered automatically) is run through
 * `runExperiment` (no output folder), and a summary of each run — policy, params, seed and a
 * few metrics rounded to 4 significant digits — is compared with `expected/<config>.json`.
 *
 * The expected files were produced by running the code: a golden test pins behaviour against
 * unintended change, it does not prove the numbers right (the unit and property tests do that).
 * When a change is intended, regenerate with
 *
 *     UPDATE_GOLDEN=1 npx vitest run test/golden
 *
 * and review the diff of `expected/` before committing it.
 */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { matchGolden } from '../helpers/golden-file.ts';
import { loadConfigFile } from '../../experiments/config/load.ts';
import { runExperiment, type RunRecord } from '../../experiments/runner.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const CONFIGS = path.join(here, 'configs');
const EXPECTED = path.join(here, 'expected');

/** 4 significant digits: enough to catch a behaviour change, not float noise. */
export const sig4 = (x: number): number => (Number.isFinite(x) && x !== 0 ? Number(x.toPrecision(4)) : x);

export interface GoldenRun {
  readonly policy: string;
  readonly params: Readonly<Record<string, unknown>>;
  readonly seed: number;
  readonly ttftMsMean: number;
  readonly tpotMsMean: number;
  readonly bufferHitRate: number;
  readonly h2dBytes: number;
  readonly makespanS: number;
  readonly events: number;
}

export function summarise(runs: readonly RunRecord[]): GoldenRun[] {
  return runs.map((r) => ({
    policy: r.policy,
    params: r.params,
    seed: r.seed,
    ttftMsMean: sig4(r.metrics.ttftMs.mean),
    tpotMsMean: sig4(r.metrics.tpotMs.mean),
    bufferHitRate: sig4(r.metrics.bufferHitRate),
    h2dBytes: sig4(r.metrics.h2dBytes),
    makespanS: sig4(r.metrics.makespanS),
    events: sig4(r.sim.events),
  }));
}

const configs = readdirSync(CONFIGS)
  .filter((f) => /\.(ya?ml|json)$/.test(f))
  .sort();

describe('golden experiment summaries', () => {
  it('finds the golden configs', () => {
    expect(configs.length).toBeGreaterThan(0);
  });

  it.each(configs)('%s', async (file) => {
    const loaded = loadConfigFile(path.join(CONFIGS, file));
    const result = await runExperiment(loaded, { progress: false });
    const summary = { config: file, runs: summarise(result.runs) };
    const expectedFile = path.join(EXPECTED, `${file.replace(/\.(ya?ml|json)$/, '')}.json`);
    matchGolden(`${JSON.stringify(summary, null, 2)}\n`, expectedFile, 'UPDATE_GOLDEN=1 npx vitest run test/golden');
  });
});
