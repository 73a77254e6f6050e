/**
 * Resuming an interrupted experiment. Results are written atomically after every run, so an
 * experiment killed at any point (even SIGKILL) leaves a valid `results.json` with
 * `complete: false` and the runs finished so far. Run again with the same `--out`, it keeps
 * those runs and simulates only the others.
 *
 * A previous run is reused only when its key matches: the whole resolved config (the `config`
 * object results.json holds: a changed value anywhere in it makes a different config, while
 * comments and formatting of the file are not part of it) and the run's index, policy label,
 * swept params and seed. Otherwise the experiment starts afresh and says why on stderr. A
 * `complete: true` file is never resumed: rerunning a finished experiment simulates it again.
 * What resume cannot see: a change of moesim's code, or of a file the config names (a profile,
 * a trace, a plugin), between the two invocations.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { RunSpec } from '../config/expand.ts';
import type { ExperimentConfig } from '../config/schema.ts';
import { toJson } from '../outputs/atomic.ts';
import type { RunRecord, TimingRecord } from '../runner.ts';
import { runKey } from './wire.ts';

export interface Resumed {
  readonly runs: RunRecord[];
  readonly timing: TimingRecord[];
}

const EMPTY: Resumed = { runs: [], timing: [] };

/**
 * The runs of `outDir/results.json` that belong to this experiment (`specs` of `config`), with
 * their timing; none when there is nothing to resume. `note` says why an existing file is not
 * resumed.
 */
export function readResumable(
  outDir: string,
  config: ExperimentConfig,
  specs: readonly RunSpec[],
  schemaVersion: number,
  note: (m: string) => void,
): Resumed {
  const file = path.join(outDir, 'results.json');
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return EMPTY;
  }
  let prev: { schemaVersion?: unknown; complete?: unknown; config?: unknown; runs?: unknown };
  try {
    prev = JSON.parse(text) as typeof prev;
  } catch {
    note(`${file} is not valid JSON: starting afresh`);
    return EMPTY;
  }
  if (prev.complete !== false) return EMPTY;
  if (prev.schemaVersion !== schemaVersion || !Array.isArray(prev.runs)) {
    note(`${file} is from another version of moesim: starting afresh`);
    return EMPTY;
  }
  if (toJson(prev.config) !== toJson(config)) {
    note(`${file} is an interrupted run of a different config: starting afresh (its runs are not reused)`);
    return EMPTY;
  }
  const runs = prev.runs as RunRecord[];
  for (const r of runs) {
    const spec = specs[r.index];
    if (!spec || runKey(spec, spec.policy.label) !== runKey(r, r.policy)) {
      note(`${file}: run ${r.index} (${r.policy}) does not match this experiment's run ${r.index}: starting afresh`);
      return EMPTY;
    }
  }
  let timing: TimingRecord[] = [];
  try {
    const t = JSON.parse(readFileSync(path.join(outDir, 'timing.json'), 'utf8')) as { runs?: TimingRecord[] };
    const done = new Set(runs.map((r) => r.index));
    timing = (t.runs ?? []).filter((x) => done.has(x.index));
  } catch {
    // Wall times of the earlier runs are lost; their results are not.
  }
  return { runs, timing };
}
