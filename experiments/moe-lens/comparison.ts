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
 *
 * Also: the performance model's accuracy (§8.1, "94 %": its definition is not stated, card E10;
 * two readings, the band spans both), MoE-Lightning's CPU-memory use (Table 1: its model and KV
 * setting are not stated; the band spans our 70 and 210 GB settings) and the weight-transfer time
 * per pass with and without host-DRAM contention (§8.2, "from approximately 5 seconds to 6").
 * Physical bound of the last: a pass streams the whole model over PCIe 4.0 x16 at most at its
 * theoretical 31.5 GB/s.
 */
import { metric, one, relativeOf, select } from '../cli/reproduce/kit.ts';
import { EVENT_TABLE_IDS, eventTables } from './comparison-events.ts';
import { throughputGridTable } from './comparison-grid.ts';
import type { Bound, PaperComparison, ResultsByExperiment, Row, Run, Table } from '../cli/reproduce/kit.ts';

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

/** §8.1: the performance model predicts throughput "with 94% accuracy" on average (Figs. 11, 12). */
const ACCURACY = 94;
/** Table 1 (§3.1): MoE-Lightning's CPU-memory use, %, by prompt / generation length. */
const TABLE1: readonly { p: number; g: number; use: number; lightningCase?: string }[] = [
  { p: 98, g: 32, use: 52.0, lightningCase: 'g32' },
  { p: 98, g: 64, use: 56.2, lightningCase: 'g64' },
  { p: 926, g: 128, use: 35.0 },
];
/** §8.2: weight transfer per pass, s, Mixtral-8x7B, g 256, 210 GB KV: without, then with CPU-attention traffic. */
const TRANSFER = { alone: 5, shared: 6 };
/** Mixtral-8x7B's BF16 weights, bytes (§7: "94GB"). */
const MIXTRAL_BYTES = 94e9;
/** PCIe 4.0 x16, theoretical: 16 GT/s × 16 lanes × 128/130 encoding / 8 bits, bytes/s. */
const PCIE4_X16_THEORETICAL = (16e9 * 16 * 128) / 130 / 8;

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

/** Accuracy of the model per row under two readings: 1 − |pred − meas| / meas, and min / max of the two. */
function accuracyTable(runs: readonly Run[]): Table {
  const per = runs
    .map((r) => ({ c: String(r.params['case'] ?? ''), x: metric(r, 'analytic.simulatedOverT') }))
    .filter((v): v is { c: string; x: number } => v.x !== undefined && v.x > 0);
  const readingsOf = (x: number) => [100 * (1 - Math.abs(1 / x - 1)), 100 * Math.min(x, 1 / x)];
  const rows: Row[] = per.map(({ c, x }) => {
    const readings = readingsOf(x);
    return { keys: [c], ours: readings[0], readings };
  });
  if (per.length > 0) {
    const means = [0, 1].map((i) => per.reduce((a, { x }) => a + readingsOf(x)[i]!, 0) / per.length);
    rows.push({ keys: ['mean over the rows'], paper: ACCURACY, ours: means[0], readings: means });
  }
  return {
    id: 'accuracy',
    title: 'Performance model accuracy, %: simulated MoE-Lens throughput vs the analytic Stage 2 prediction',
    note:
      'Mixtral-8x7B, model-accuracy.yaml. Ours under reading 1 − |pred − meas| / meas; the band adds min / max ' +
      '(the paper states neither); the paper’s 94 % is over the rows of its Figs. 11–12.',
    keyHeads: ['row'],
    digits: 1,
    band: 'accuracy readings',
    rows,
  };
}

function lightningTable(runs: readonly Run[]): Table {
  const rows: Row[] = TABLE1.map(({ p, g, use, lightningCase }) => {
    const at = (kv: number) =>
      lightningCase === undefined
        ? undefined
        : metric(
            one(runs, { case: `mt-bench-${kv}GB-${lightningCase}`, policy: 'lens-moe-lightning' }),
            'schedule.cpuMemoryUse',
          );
    const readings = [70, 210].map((kv) => {
      const v = at(kv);
      return v === undefined ? undefined : 100 * v;
    });
    return { keys: [`p ${p}, g ${g}`], paper: use, ours: readings[0], readings };
  });
  return {
    id: 'table1',
    title: 'Table 1: MoE-Lightning’s CPU-memory use, % (its own planner, Mixtral-8x7B, MTBench-like prompts)',
    note:
      'Ours: lens-moe-lightning of lightning-settings.yaml at 70 GB of KV (the default: the paper’s 265 GB is below ' +
      'the 334 GB of the 210 GB setting); the band spans 70 / 210 GB. No RAG case is run (–).',
    keyHeads: ['prompt / generation'],
    digits: 1,
    band: 'KV 70 / 210 GB',
    rows,
  };
}

function contentionTable(runs: readonly Run[]): Table {
  const bound: Bound = {
    value: MIXTRAL_BYTES / PCIE4_X16_THEORETICAL,
    sense: 'min',
    what: '94 GB over 31.5 GB/s',
  };
  const perPass = (label: string) => {
    const r = one(select(runs, { case: 'g256' }), { policy: label });
    const t = metric(r, 'makespanS');
    const it = metric(r, 'schedule.iterations');
    return t !== undefined && it !== undefined && it > 0 ? t / it : undefined;
  };
  return {
    id: 'contention',
    title: 'Contention (§8.2): time per pass, s, Mixtral-8x7B, g 256, KV 210 GB',
    note:
      'The paper: weight transfer per pass, ≈ 5 s without and ≈ 6 s with CPU-attention traffic on host DRAM. Ours: ' +
      'the whole pass (makespan / iterations; a pass is bounded by its weight transfer at 19.5 GB/s), contention ' +
      'modelled or not.',
    keyHeads: ['host DRAM'],
    digits: 2,
    rows: [
      { keys: ['no contention'], paper: TRANSFER.alone, ours: perPass('lens-210GB-no-contention'), bound },
      { keys: ['shared with CPU attention'], paper: TRANSFER.shared, ours: perPass('lens-210GB-shared'), bound },
    ],
  };
}

export const comparison: PaperComparison = {
  paper: 'moe-lens',
  title: 'MoE-Lens',
  reads: [
    'throughput',
    'throughput-8x22b',
    'throughput-dbrx',
    'throughput-dsv2lite',
    'model-accuracy',
    'lightning-settings',
    'contention',
    'pipeline-events',
  ],
  sources: {
    speedup: 'throughput',
    'throughput-grid': 'throughput',
    ...Object.fromEntries(EVENT_TABLE_IDS.map((id) => [id, 'pipeline-events'])),
    accuracy: 'model-accuracy',
    table1: 'lightning-settings',
    contention: 'contention',
  },
  tables(results: ResultsByExperiment): Table[] {
    const out = [...speedupTables(results)];
    const tp = results.get('throughput');
    if (tp) out.push(throughputGridTable(tp.runs));
    const pe = results.get('pipeline-events');
    if (pe) out.push(...eventTables(pe.runs));
    const acc = results.get('model-accuracy');
    if (acc) out.push(accuracyTable(acc.runs));
    const ls = results.get('lightning-settings');
    if (ls) out.push(lightningTable(ls.runs));
    const ct = results.get('contention');
    if (ct) out.push(contentionTable(ct.runs));
    return out;
  },
};

/** Fig. 11 / 12: the speedups by model and group of rows. */
function speedupTables(results: ResultsByExperiment): Table[] {
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
}
