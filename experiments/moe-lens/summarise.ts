/**
 * Summary of a MoE-Lens throughput grid (`throughput*.yaml`): one markdown row per case with the
 * generation throughput of every policy and the ratios to `lens-moe-lightning` (the
 * `relative` values the runner stored), then the average (arithmetic, the paper's averaging is
 * NOT STATED — card §6) and maximum of MoE-Lens's ratio per KV capacity, per dataset and overall.
 *
 *   npx tsx experiments/moe-lens/summarise.ts results/moe-lens-throughput/results.json [...more]
 */
import { readFileSync } from 'node:fs';

interface Run {
  policy: string;
  params: Record<string, unknown>;
  metrics: { throughputTokPerS?: number; feasible?: boolean };
  relative?: Record<string, number>;
}

const files = process.argv.slice(2);
if (files.length === 0) {
  process.stderr.write('usage: summarise.ts <results.json> [...]\n');
  process.exit(2);
}
const rows = new Map<string, { model: string; case: string; tput: Record<string, number | undefined>; rel: Record<string, number | undefined> }>();
const policies: string[] = [];
for (const f of files) {
  const j = JSON.parse(readFileSync(f, 'utf8')) as { runs: Run[] };
  for (const r of j.runs) {
    const c = String(r.params.case ?? '');
    const model = String(r.params.model ?? '');
    const key = `${model}|${c}`;
    if (!rows.has(key)) rows.set(key, { model, case: c, tput: {}, rel: {} });
    const row = rows.get(key)!;
    if (!policies.includes(r.policy)) policies.push(r.policy);
    row.tput[r.policy] = r.metrics.feasible === false ? undefined : r.metrics.throughputTokPerS;
    row.rel[r.policy] = r.relative?.throughputTokPerS;
  }
}
const fmt = (x: number | undefined, d = 1) => (x === undefined || !Number.isFinite(x) ? 'n/a' : x.toFixed(d));
const others = policies.filter((p) => p !== 'lens-moe-lightning');
process.stdout.write(`| model | case | ${policies.map((p) => `${p} tok/s`).join(' | ')} | ${others.map((p) => `${p} ÷ lightning`).join(' | ')} |\n`);
process.stdout.write(`| --- | --- | ${policies.map(() => '---').join(' | ')} | ${others.map(() => '---').join(' | ')} |\n`);
for (const r of rows.values()) {
  process.stdout.write(`| ${r.model} | ${r.case} | ${policies.map((p) => fmt(r.tput[p])).join(' | ')} | ${others.map((p) => fmt(r.rel[p], 2)).join(' | ')} |\n`);
}
const groups = new Map<string, number[]>();
const add = (k: string, v: number) => {
  if (!groups.has(k)) groups.set(k, []);
  groups.get(k)!.push(v);
};
for (const r of rows.values()) {
  const v = r.rel['moe-lens'];
  if (v === undefined || !Number.isFinite(v)) continue;
  const kv = /-(\d+)GB-/.exec(r.case)?.[1] ?? '?';
  const ds = r.case.split(`-${kv}GB`)[0] ?? '?';
  add('all', v);
  add(`KV ${kv} GB`, v);
  add(`${ds}`, v);
  add(`${ds}, KV ${kv} GB`, v);
  add(`${r.model}`, v);
}
process.stdout.write('\n| moe-lens ÷ lens-moe-lightning | rows | mean | geomean | max |\n| --- | --- | --- | --- | --- |\n');
for (const [k, vs] of groups) {
  const mean = vs.reduce((a, b) => a + b, 0) / vs.length;
  const geo = Math.exp(vs.reduce((a, b) => a + Math.log(b), 0) / vs.length);
  process.stdout.write(`| ${k} | ${vs.length} | ${mean.toFixed(2)} | ${geo.toFixed(2)} | ${Math.max(...vs).toFixed(2)} |\n`);
}
