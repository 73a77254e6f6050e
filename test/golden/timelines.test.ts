/**
 * Exact goldens with timelines, serving and throughput families: every config in
 * `configs/timelines/` (small: each run takes well under a second) is run through `runOne` with a
 * timeline, and each run's record (policy, params, seed, every metric, the simulator's counts) plus
 * the SHA-256 and size of its Chrome-trace timeline must be byte-equal to
 * `expected/timelines/<config>.json`.
 *
 * The metrics pin what a run reports; the timeline pins how it got there — every kernel, copy and
 * CPU slice with its name, track, start and length — so a change to a task's label, a dependency or
 * a stream shows here even when the totals happen not to move. A regression pin produced by running
 * the code, not a comparison with a paper. When a change is intended, regenerate with
 *
 *     UPDATE_GOLDEN=1 npx vitest run test/golden/timelines.test.ts
 *
 * and say why in the commit (write the timelines out with `experiment --timeline` to see the change).
 */
import { createHash } from 'node:crypto';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { matchGolden } from '../helpers/golden-file.ts';
import { loadConfigFile } from '../../experiments/config/load.ts';
import { prepareRuns, runOne } from '../../experiments/runner.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const CONFIGS = path.join(here, 'configs', 'timelines');
const EXPECTED = path.join(here, 'expected', 'timelines');

const configs = readdirSync(CONFIGS)
  .filter((f) => /\.(ya?ml|json)$/.test(f))
  .sort();

/** Every run of one config, serialised: its record and a digest of its timeline. */
async function runsOf(file: string): Promise<string> {
  const loaded = loadConfigFile(path.join(CONFIGS, file));
  const specs = await prepareRuns(loaded.config, loaded.baseDir, loaded.file);
  const runs = [];
  for (const spec of specs) {
    const out = await runOne(spec, { baseDir: loaded.baseDir, file: loaded.file, timeline: true });
    const timeline = out.timeline ?? '';
    runs.push({
      ...out.record,
      timeline: { sha256: createHash('sha256').update(timeline).digest('hex'), bytes: timeline.length },
    });
  }
  return `${JSON.stringify({ config: file, runs }, null, 2)}\n`;
}

describe('exact goldens with timelines', () => {
  it('finds the configs', () => {
    expect(configs).toEqual([
      'serving-cache.yaml',
      'serving-encdec.yaml',
      'serving-engines.yaml',
      'serving-ssd.yaml',
      'throughput-lens.yaml',
      'throughput-offload.yaml',
    ]);
  });

  it.each(configs)(
    '%s',
    async (file) => {
      const actual = await runsOf(file);
      const expectedFile = path.join(EXPECTED, `${file.replace(/\.(ya?ml|json)$/, '')}.json`);
      matchGolden(actual, expectedFile, 'UPDATE_GOLDEN=1 npx vitest run test/golden/timelines.test.ts');
    },
    120_000,
  );
});
