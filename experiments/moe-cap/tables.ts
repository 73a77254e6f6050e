/**
 * Tables of the MoE-CAP experiments from a results folder (`results.json`):
 * - every experiment: dense MBU / MFU beside S-MBU / S-MFU (MoE-CAP's observation that the dense
 *   metrics mis-rate sparse models) and the activated parameter share;
 * - with `accuracy.json` (next to this file) naming the run's case: the CAP table (cost,
 *   accuracy, performance).
 * Markdown on stdout. With the CAP table, also `<results-dir>/cap-chart.svg`: a parallel-coordinates
 * chart (Vega-Lite) of the cases over the CAP axes, each axis scaled to its largest value (the
 * paper's Fig. 3 radar gives no scaling or orientation; ours: 1 = the largest of the cases).
 * Usage: npx tsx experiments/moe-cap/tables.ts <results-dir>
 */
import { readFileSync, writeFileSync } from 'node:fs';
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
const accuracy = JSON.parse(readFileSync(path.join(here, 'accuracy.json'), 'utf8')) as {
  metric: string;
  cases: Record<string, { value: number }>;
};

const f = (x: unknown, d = 3): string =>
  typeof x === 'number' ? (Math.abs(x) >= 1000 ? x.toFixed(0) : x.toPrecision(d)) : '—';
const pct = (x: unknown): string => (typeof x === 'number' ? `${(100 * x).toFixed(2)} %` : '—');
const label = (r: Run): string => {
  const p = Object.entries(r.params)
    .filter(([k]) => !['case', 'model', 'hardware', 'workload.routing.profile'].includes(k))
    .map(([k, v]) => `${k.split('.').pop()}=${String(v)}`);
  return [String(r.params.case ?? r.policy), ...p].join(', ');
};
const table = (head: string[], rows: string[][]): string =>
  [
    `| ${head.join(' | ')} |`,
    `| ${head.map(() => '---').join(' | ')} |`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');

console.log(`## ${results.name}: dense vs sparse utilisation\n`);
console.log(
  table(
    ['run', 'S-MBU', 'dense MBU', 'MBU / S-MBU', 'S-MFU', 'dense MFU', 'MFU / S-MFU', 'activated params'],
    results.runs
      .filter((r) => r.metrics.cap)
      .map((r) => {
        const c = r.metrics.cap;
        return [
          label(r),
          pct(c.sMbu),
          pct(c.mbu),
          f(c.mbuOverSMbu),
          pct(c.sMfu),
          pct(c.mfu),
          f(c.mfuOverSMfu),
          pct(c.activatedParamFrac),
        ];
      }),
  ),
);

const withAcc = results.runs.filter(
  (r) => typeof r.params.case === 'string' && accuracy.cases[r.params.case as string],
);
if (withAcc.length > 0) {
  console.log(`\n## ${results.name}: cost, accuracy, performance\n`);
  console.log(
    table(
      [
        'case',
        `accuracy (${accuracy.metric})`,
        'decode s/token (TPOT p50)',
        'tokens/s',
        'purchase USD',
        'power W (TDP)',
        'USD / M tokens',
        'S-MBU',
        'S-MFU',
      ],
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

if (withAcc.length > 0) {
  const axes: [string, (r: Run) => unknown][] = [
    ['accuracy', (r) => accuracy.cases[r.params.case as string]!.value],
    ['decode s/token', (r) => r.metrics.tpotMs?.p50 / 1000],
    ['tokens/s', (r) => r.metrics.throughputTokPerS],
    ['purchase USD', (r) => r.metrics.cost?.hardwareUsd],
    ['power W', (r) => r.metrics.cost?.powerW],
    ['USD / M tokens', (r) => r.metrics.cost?.usdPerMTok],
    ['S-MBU', (r) => r.metrics.cap?.sMbu],
  ];
  const values: { axis: string; case: string; value: number; scaled: number }[] = [];
  for (const [axis, get] of axes) {
    const vs = withAcc.map((r) => Number(get(r)));
    const max = Math.max(...vs.filter(Number.isFinite));
    withAcc.forEach((r, i) => {
      if (Number.isFinite(vs[i]!))
        values.push({ axis, case: String(r.params.case), value: vs[i]!, scaled: max > 0 ? vs[i]! / max : 0 });
    });
  }
  const spec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title: `${results.name}: cost, accuracy, performance (each axis / its largest value)`,
    width: 640,
    height: 320,
    data: { values },
    mark: { type: 'line', point: true },
    encoding: {
      x: { field: 'axis', type: 'ordinal', sort: axes.map(([a]) => a), title: null },
      y: { field: 'scaled', type: 'quantitative', title: 'value / largest', scale: { domain: [0, 1] } },
      color: { field: 'case', type: 'nominal', legend: { labelLimit: 400 } },
      detail: { field: 'case' },
      tooltip: [{ field: 'case' }, { field: 'axis' }, { field: 'value' }],
    },
  };
  const [vega, vegaLite] = await Promise.all([import('vega'), import('vega-lite')]);
  const view = new vega.View(vega.parse(vegaLite.compile(spec as never).spec), { renderer: 'none' });
  const out = path.join(dir, 'cap-chart.svg');
  writeFileSync(out, await view.toSVG());
  view.finalize();
  console.error(`wrote ${out}`);
}
