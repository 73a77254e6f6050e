/**
 * Paper vs ours for MoE-Lens, read from the results of the shipped throughput grids
 * (`npm run reproduce -- moe-lens`): MoE-Lens's generation-throughput speedup over MoE-Lightning
 * (the `relative` value each run stores against its config's baseline), averaged per KV capacity
 * and dataset, as Fig. 11 (MTBench, all three models) and Fig. 12 (RAG, AIME) report it.
 *
 * The paper's averaging is not stated (card §6): arithmetic and geometric means are both shown,
 * the paper's values beside the arithmetic one. The paper's per-row
 * throughputs are figures only (no numbers to compare). No competing reading is swept in these
 * configs (the host-DRAM band is in FIDELITY.md's audit), so the table has no band column.
 */
import { relativeOf } from '../cli/reproduce/kit.ts';
import type { PaperComparison, ResultsByExperiment, Row, Run, Table } from '../cli/reproduce/kit.ts';

/** Fig. 11 / 12: mean (max) speedup of MoE-Lens over MoE-Lightning. */
const PAPER: Record<string, { mean: number; max?: number }> = {
  'MTBench, KV 70 GB': { mean: 3.2 },
  'MTBench, KV 210 GB': { mean: 6.4 },
  MTBench: { mean: 4.6, max: 12.4 },
  RAG: { mean: 19.4, max: 25.5 },
  AIME: { mean: 4.7, max: 9.9 },
};
/** The throughput grids, by experiment, and the model each runs. */
const GRIDS: Record<string, string> = {
  throughput: 'Mixtral-8x7B',
  'throughput-8x22b': 'Mixtral-8x22B',
  'throughput-dbrx': 'DBRX',
  'throughput-dsv2lite': 'DeepSeek-V2-Lite (extension)',
};
const DATASETS: Record<string, string> = { 'mt-bench': 'MTBench', rag: 'RAG', aime: 'AIME' };

/** MoE-Lens's speedups of a grid, by group (dataset, dataset + KV, all). */
function groups(runs: readonly Run[]): Map<string, number[]> {
  const out = new Map<string, number[]>();
  const add = (k: string, v: number) => out.set(k, [...(out.get(k) ?? []), v]);
  for (const r of runs) {
    if (r.policy !== 'moe-lens') continue;
    const v = relativeOf(r, 'throughputTokPerS');
    if (v === undefined) continue;
    const c = String(r.params['case'] ?? '');
    const kv = /-(\d+)GB-/.exec(c)?.[1];
    const ds = DATASETS[c.split(`-${kv}GB`)[0] ?? ''];
    if (!kv || !ds) continue;
    add(ds, v);
    add(`${ds}, KV ${kv} GB`, v);
    add('all rows', v);
  }
  return out;
}

const mean = (vs: readonly number[]): number => vs.reduce((a, b) => a + b, 0) / vs.length;
const geomean = (vs: readonly number[]): number => Math.exp(vs.reduce((a, b) => a + Math.log(b), 0) / vs.length);

export const comparison: PaperComparison = {
  paper: 'moe-lens',
  title: 'MoE-Lens',
  reads: ['throughput', 'throughput-8x22b', 'throughput-dbrx', 'throughput-dsv2lite'],
  sources: { speedup: 'throughput' },
  tables(results: ResultsByExperiment): Table[] {
    const rows: Row[] = [];
    const pooled = new Map<string, number[]>();
    for (const [exp, model] of Object.entries(GRIDS)) {
      const res = results.get(exp);
      if (!res) continue;
      const g = groups(res.runs);
      const order = [...Object.keys(PAPER), ...[...g.keys()].filter((k) => !(k in PAPER)).sort()];
      for (const k of order) {
        const vs = g.get(k);
        if (!vs) continue;
        rows.push({ keys: [model, k, 'mean'], paper: PAPER[k]?.mean, ours: mean(vs) });
        rows.push({ keys: [model, k, 'geomean'], ours: geomean(vs) });
        rows.push({ keys: [model, k, 'max'], paper: PAPER[k]?.max, ours: Math.max(...vs) });
        if (exp !== 'throughput-dsv2lite' && k.startsWith('MTBench')) pooled.set(k, [...(pooled.get(k) ?? []), ...vs]);
      }
    }
    for (const [k, vs] of pooled) {
      rows.push({ keys: ['the paper’s three models', k, 'mean'], paper: PAPER[k]?.mean, ours: mean(vs) });
      rows.push({ keys: ['the paper’s three models', k, 'max'], paper: PAPER[k]?.max, ours: Math.max(...vs) });
    }
    if (rows.length === 0) return [];
    return [
      {
        id: 'speedup',
        title:
          'Fig. 11 / 12: generation throughput, MoE-Lens ÷ MoE-Lightning (arithmetic, geometric mean; max over rows)',
        note: 'The paper pools Fig. 11 (MTBench) over its three models; RAG and AIME (Fig. 12) are Mixtral-8x7B.',
        keyHeads: ['model', 'rows', 'statistic'],
        digits: 2,
        rows,
      },
    ];
  },
};
