/**
 * A tiny experiment for the report tests (not a test file): OLMoE on an RTX 4090, 3 requests,
 * two policies, a bar plot and timelines, run through the runner in this process (about a
 * second). Its name, description and one policy label are hostile HTML, so every test of the
 * report also tests its escaping.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { loadConfigFile } from '../../experiments/config/load.ts';
import { runExperiment } from '../../experiments/runner.ts';

/** Strings a report must show as text, never as markup. */
export const HOSTILE_NAME = `x<script>alert(1)</script>"&'`;
export const HOSTILE_LABEL = `<script>alert(3)</script>"&'`;
/** An element that must not exist in the rendered page (it would if the description were not escaped). */
export const HOSTILE_DESCRIPTION = `desc <img id="injected" src="x" onerror="document.title='pwned'"> & <script>document.title='pwned'</script>`;

/** Escaped as the report writes text (`&`, `<`, `>`, `"`, `'`). */
export const escaped = (s: string): string =>
  s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;');

const CONFIG = `name: ${JSON.stringify(HOSTILE_NAME)}
description: ${JSON.stringify(HOSTILE_DESCRIPTION)}
model: olmoe
hardware: rtx4090
seeds: [2]
workload:
  requests: 3
  arrival: { kind: offline }
  promptTokens: { kind: fixed, tokens: 8 }
  outputTokens: { kind: fixed, tokens: 3 }
executor: { batching: static, maxBatchSize: 2, packetMiB: 4 }
policies:
  - name: lru
    label: ${JSON.stringify(HOSTILE_LABEL)}
    capacitySlots: 128
  - name: on-demand
output:
  plots:
    - { name: tpot, title: "TPOT <script>alert(4)</script>", x: policy, y: metrics.tpotMs.p50, kind: bar }
`;

/** Writes the config into `dir` and runs it with results (and timelines) in `dir/out`; returns that folder. */
export async function runTinyExperiment(dir: string): Promise<string> {
  const outDir = path.join(dir, 'out');
  await runExperiment(loadConfigFile(writeTinyConfig(dir)), { outDir, timeline: true, progress: false });
  return outDir;
}

/** The config, for CLI tests that run it themselves. */
export function writeTinyConfig(dir: string): string {
  const file = path.join(dir, 'tiny.yaml');
  writeFileSync(file, CONFIG);
  return file;
}
