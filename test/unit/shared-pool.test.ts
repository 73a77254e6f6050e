/**
 * One pool of worker threads shared by two experiments at once (experiments/parallel/shared-pool.ts,
 * what `moesim reproduce` runs on) gives each experiment's results.json and runs.csv
 * byte-identical to a serial run of it alone, with a plugin policy imported in the workers;
 * and runs of the lower-ranked experiment are dispatched first.
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfigFile } from '../../experiments/config/load.ts';
import { PluginError, runExperiment } from '../../experiments/runner.ts';
import { sharedThreadPool } from '../../experiments/parallel/shared-pool.ts';
import { REPO_ROOT, tempDir } from '../helpers/cli.ts';
import { sweepConfig } from '../helpers/sweep-config.ts';

const dir = tempDir('shared-pool');
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const plugin = path.relative(dir, path.join(REPO_ROOT, 'examples/fifo-cache-policy.ts'));
const read = (p: string) => readFileSync(p, 'utf8');

describe('a shared pool gives the outputs of serial runs', () => {
  it('two experiments at once on one pool: byte-identical results.json and runs.csv', async () => {
    const files = ['a', 'b'].map((n, i) => {
      const f = path.join(dir, `${n}.yaml`);
      writeFileSync(f, sweepConfig(`shared-${n}`, plugin, 4 + i));
      return f;
    });
    for (const [i, f] of files.entries()) {
      await runExperiment(loadConfigFile(f), { outDir: path.join(dir, `serial-${i}`), jobs: 1, progress: false });
    }
    let done = 0;
    const pool = sharedThreadPool(2, PluginError.make, () => done++);
    try {
      await Promise.all(
        files.map((f, rank) => {
          const loaded = loadConfigFile(f);
          const base = { config: loaded.config, file: loaded.file, baseDir: loaded.baseDir, timeline: false };
          const backend = pool.backendFor(base, rank);
          return runExperiment(loaded, { outDir: path.join(dir, `shared-${rank}`), progress: false, backend });
        }),
      );
    } finally {
      await pool.close();
    }
    expect(done).toBe(24);
    for (const i of [0, 1]) {
      for (const out of ['results.json', 'runs.csv']) {
        expect(read(path.join(dir, `shared-${i}`, out)), `${i}/${out}`).toBe(read(path.join(dir, `serial-${i}`, out)));
      }
    }
  }, 600_000);
});
