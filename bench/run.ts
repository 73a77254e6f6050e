/**
 * `npm run bench`: speed and memory figures, printed and written to `bench.json` (one object
 * per benchmark: `name` and figures with units in their keys). Targets (issue #2): ratio of
 * simulator events/s to bare heap-js push/pop ≥ 0.25; ≥ 1 000 simulated s per wall s on the
 * serving workload; (issue #3) RSS < 300 MB while streaming a ≥ 1 GB trace; (issue #4) the e2e
 * Mixtral workload with moe-infinity ≥ 1 000 simulated s per wall s and EAMC matching at
 * capacity 10 000 on Arctic-sized matrices < 10 % of the run's wall time; (issue #5) the
 * 36 K-sequence ChatBot Arena run of the throughput executor in < 30 s wall.
 * `npm run bench -- <suite>` runs one suite (serving, throughput, workloads, moe-infinity).
 * Timing never appears in tests.
 */
import { writeFileSync } from 'node:fs';
import { servingBenchmarks, type BenchRecord } from './serving-bench.ts';
import { throughputBenchmarks } from './throughput-bench.ts';
import { workloadBenchmarks } from './workloads-bench.ts';
import { moeInfinityBenchmarks } from './moe-infinity-bench.ts';

const only = process.argv[2];
const records: BenchRecord[] = [];
const suites: [string, () => Promise<BenchRecord[]>][] = [
  ['serving', servingBenchmarks],
  ['throughput', throughputBenchmarks],
  ['workloads', workloadBenchmarks],
  ['moe-infinity', moeInfinityBenchmarks],
];

for (const [name, suite] of suites) {
  if (only && only !== name) continue;
  process.stderr.write(`bench: ${name}...\n`);
  for (const r of await suite()) {
    records.push(r);
    process.stdout.write(`${format(r)}\n`);
  }
}
const peakRssBytes = process.resourceUsage().maxRSS * 1024;
records.push({ name: 'process', peakRssBytes });
process.stdout.write(`${format({ name: 'process', peakRssBytes })}\n`);
writeFileSync('bench.json', `${JSON.stringify(records, null, 2)}\n`);
process.stderr.write('bench: wrote bench.json\n');

function format(r: BenchRecord): string {
  const parts = Object.entries(r)
    .filter(([k]) => k !== 'name')
    .map(([k, v]) => `${k}=${typeof v === 'number' ? (Number.isInteger(v) ? v : v.toPrecision(4)) : v}`);
  return `${String(r.name).padEnd(40)} ${parts.join('  ')}`;
}
