/**
 * Tables of the MoE-CAP experiments from a results folder (`results.json`):
 * - every experiment: dense MBU / MFU beside S-MBU / S-MFU (MoE-CAP's observation that the dense
 *   metrics mis-rate sparse models) and the activated parameter share;
 * - with `accuracy.json` (next to this file) naming the run's case: the CAP table (cost,
 *   accuracy, performance).
 * Markdown on stdout. Usage: npx tsx experiments/moe-cap/tables.ts <results-dir>
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

interface Run {
  policy: string;
  params: Record<string, unknown>;
  metrics: Record<string, any>;
}

const dir = process.argv[2];
if (!dir) {
  console.error('usage: tsx experiments/moe-cap/tables.ts <results-dir>');
  process.exit(2);
}
const results = JSON.parse(readFileSync(path.join(dir, 'results.json'), 'utf8')) as { name: string; runs: Run[] };
const here = path.dirname(fileURLToPath(import.meta.url));
const accuracy = JSON.parse(readFileSync(path.join(here, 'accuracy.json'), 'utf8')) as { metric: string; cases: Record<string, { value: number }> };

const f = (x: unknown, d = 3): string => (typeof x === 'number' ? (Math.abs(x) >= 1000 ? x.toFixed(0) : x.toPrecision(d)) : '—');
const pct = (x: unknown): string => (typeof x === 'number' ? `${(100 * x).toFixed(2)} %` : '—');
const label = (r: Run): string => {
  const p = Object.entries(r.params).filter(([k]) => !['case', 'model', 'hardware', 'workload.routing.profile'].includes(k)).map(([k, v]) => `${k.split('.').pop()}=${String(v)}`);
  return [String(r.params.case ?? r.policy), ...p].join(', ');
};
const table = (head: string[], rows: string[][]): string =>
  [`| ${head.join(' | ')} |`, `| ${head.map(() => '---').join(' | ')} |`, ...rows.map((r) => `| ${r.join(' | ')} |`)].join('\n');

console.log(`## ${results.name}: dense vs sparse utilisation\n`);
console.log(
  table(
    ['run', 'S-MBU', 'dense MBU', 'MBU / S-MBU', 'S-MFU', 'dense MFU', 'MFU / S-MFU', 'activated params'],
    results.runs.filter((r) => r.metrics.cap).map((r) => {
      const c = r.metrics.cap;
      return [label(r), pct(c.sMbu), pct(c.mbu), f(c.mbuOverSMbu), pct(c.sMfu), pct(c.mfu), f(c.mfuOverSMfu), pct(c.activatedParamFrac)];
    }),
  ),
);

const withAcc = results.runs.filter((r) => typeof r.params.case === 'string' && accuracy.cases[r.params.case as string]);
if (withAcc.length > 0) {
  console.log(`\n## ${results.name}: cost, accuracy, performance\n`);
  console.log(
    table(
      ['case', `accuracy (${accuracy.metric})`, 'decode s/token (TPOT p50)', 'tokens/s', 'purchase USD', 'power W (TDP)', 'USD / M tokens', 'S-MBU', 'S-MFU'],
      withAcc.map((r) => {
        const m = r.metrics;
        return [
          String(r.params.case),
          f(accuracy.cases[r.params.case as string]!.value),
          f(m.tpotMs?.p50 / 1000),
          f(m.throughputTokPerS),
          f(m.cost?.hardwareUsd),
          f(m.cost?.powerW),
          f(m.cost?.usdPerMTok),
          pct(m.cap?.sMbu),
          pct(m.cap?.sMfu),
        ];
      }),
    ),
  );
}
