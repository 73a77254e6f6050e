/**
 * Paper vs ours for MoE-Infinity (arXiv 2401.14361), read from the results of the shipped
 * experiments (`npm run reproduce -- moe-infinity`): Table 2 (GPU blocking, % of on-demand),
 * Table 3 (PCIe bytes, % of on-demand), Table 4 (ablation), Table 5 (buffer hit rate) and
 * Fig. 9 (lowest mean TPOT), each at batch 1 on the paper's runtime (hf-eager) and on the fused
 * one; Table 7 (requests to recover after a workload shift) and Fig. 13 (EAMC capacity) on
 * hf-eager, as shipped. The paper's numbers are the constants below, each with its table. Not
 * run here (no config): Table 6 (server sharing), Fig. 10 (tail CDF), Fig. 11 (GPU count),
 * Fig. 12 (prefill throughput).
 *
 * Bounds we compute, on the paper's runtime only (hf-eager): blocking cannot fall below the oracle
 * prefetcher's (it knows every future route and has the same link); PCIe bytes without a cache
 * cannot fall below on-demand's (every activated expert crosses the link once). Fig. 9 has none:
 * our all-resident TPOT is a calibration with stated residuals (FIDELITY.md, "Runtime"), not a
 * bound on the paper's system. No competing link reading is swept in these configs (the 19.5 GB/s
 * band is in FIDELITY.md's audit), so the tables have no band column.
 */
import { distinct, metric, one, pct, select } from '../cli/reproduce/kit.ts';
import type { PaperComparison, ResultsByExperiment, Row, Run, Table } from '../cli/reproduce/kit.ts';

/** Table 2 (normalised GPU blocking time, %) and Table 3 (normalised bandwidth, %). */
const TABLE2: Record<string, Record<string, number>> = {
  'Switch-128': { 'dependency-prefetch': 230, 'model-tracing': 51, 'on-demand': 100, 'moe-infinity': 12 },
  'NLLB-MoE-128': { 'dependency-prefetch': 147, 'model-tracing': 71, 'on-demand': 100, 'moe-infinity': 31 },
  'Arctic-128': { 'dependency-prefetch': 195, 'model-tracing': 63, 'on-demand': 100, 'moe-infinity': 43 },
  'Mixtral-8x7B': { 'dependency-prefetch': 147, 'model-tracing': 91, 'on-demand': 100, 'moe-infinity': 37 },
};
const TABLE3: Record<string, Record<string, number>> = {
  'Switch-128': { 'dependency-prefetch': 239, 'model-tracing': 204, 'on-demand': 100, 'moe-infinity': 168 },
  'NLLB-MoE-128': { 'dependency-prefetch': 148, 'model-tracing': 127, 'on-demand': 100, 'moe-infinity': 126 },
  'Arctic-128': { 'dependency-prefetch': 183, 'model-tracing': 186, 'on-demand': 100, 'moe-infinity': 187 },
  'Mixtral-8x7B': { 'dependency-prefetch': 143, 'model-tracing': 101, 'on-demand': 100, 'moe-infinity': 143 },
};
/** Table 4: bandwidth %, blocking % of the vanilla row (one row per design, all models together). */
const TABLE4: Record<string, [number, number]> = {
  'vanilla-dependency-prefetch': [100, 100],
  '+request-tracing': [56, 55],
  '+multi-layer-prefetch': [73, 39],
  '+layer-proximity': [68, 32],
};
/** Table 5: buffer hit rate % (LRU, model-tracing, ours, ideal) at the paper's slot counts. */
const TABLE5: Record<string, Record<string, number>> = {
  Switch: { lru: 31, 'model-tracing': 39, 'moe-infinity': 52, belady: 63 },
  NLLB: { lru: 18, 'model-tracing': 25, 'moe-infinity': 46, belady: 51 },
  Arctic: { lru: 9, 'model-tracing': 12, 'moe-infinity': 28, belady: 32 },
  Mixtral: { lru: 2, 'model-tracing': 5, 'moe-infinity': 17, belady: 21 },
};
/** Fig. 9 / §7.4: lowest TPOT (ms) of MoE-Infinity, and GPU-rich where stated. */
const FIG9: Record<string, Record<string, number>> = {
  'Switch-128': { 'moe-infinity': 223 },
  'NLLB-MoE-128': { 'moe-infinity': 313 },
  'Mixtral-8x7B': { 'moe-infinity': 336, 'gpu-rich': 175 },
};

/** Table 7: requests to recover low latency after a workload change, min / mean / max. */
const TABLE7: Record<string, Record<string, [number, number, number]>> = {
  'MMLU tasks': { NLLB: [0, 14, 43], Mixtral: [0, 9, 49], Arctic: [28, 43, 45] },
  'BIGBench tasks': { NLLB: [1, 15, 49], Mixtral: [0, 11, 49], Arctic: [0, 29, 42] },
  'MMLU → BIGBench': { NLLB: [0, 6, 17], Mixtral: [0, 27, 42], Arctic: [2, 28, 41] },
  'BIGBench → MMLU': { NLLB: [3, 11, 24], Mixtral: [0, 35, 46], Arctic: [5, 27, 45] },
};
/**
 * §7.5 / Fig. 13: "increasing the capacity from 1 to 120 allows all MoE models to achieve their lowest
 * average latency".
 */
const FIG13_CAPACITY = 120;
/** Fig. 13 reading: the smallest capacity whose mean TPOT is within this fraction of the lowest (ours; 1 %). */
const LOWEST_WITHIN = 0.01;

const RUNTIMES = ['hf-eager', 'fused'] as const;
/** The runtime the paper ran (HuggingFace eager, §5.3): the one whose bounds judge its numbers. */
const PAPER_RUNTIME = 'hf-eager';
const BATCH = 1;

/** The runs of one runtime at batch 1 (`executor.maxBatchSize` unswept counts as batch 1). */
const setting = (runs: readonly Run[], runtime: string): Run[] =>
  runs.filter(
    (r) => (r.params['runtime'] ?? 'fused') === runtime && (r.params['executor.maxBatchSize'] ?? BATCH) === BATCH,
  );

/** 100 × policy's metric / baseline's, in one case. */
const relative = (runs: readonly Run[], c: string, policy: string, baseline: string, m: string): number | undefined =>
  pct(metric(one(runs, { case: c, policy }), m), metric(one(runs, { case: c, policy: baseline }), m));

function prefetchTables(runs: readonly Run[], rt: string): Table[] {
  const specs = [
    ['table2', 'Table 2: GPU blocking time, % of on-demand', TABLE2, 'gpuBlockedS', 'oracle prefetch, ours'],
    ['table3', 'Table 3: PCIe bytes, % of on-demand (no cache)', TABLE3, 'h2dBytes', 'every activated expert once'],
  ] as const;
  return specs.map(([id, title, paperTable, m, boundWhat]) => {
    const rows: Row[] = [];
    for (const [c, row] of Object.entries(paperTable)) {
      const oracle = relative(runs, c, 'oracle-prefetch', 'on-demand', m);
      for (const [p, paper] of Object.entries(row)) {
        // Only on the paper's runtime: a bound computed on another runtime says nothing of its numbers.
        const bounded = rt === PAPER_RUNTIME && oracle !== undefined && p !== 'on-demand';
        const bound = bounded ? { value: oracle, sense: 'min' as const, what: boundWhat } : undefined;
        rows.push({ keys: [c, p], paper, ours: relative(runs, c, p, 'on-demand', m), bound });
      }
    }
    return { id: `${id}-${rt}`, title: `${title} (${rt}, batch ${BATCH})`, keyHeads: ['model', 'policy'], rows };
  });
}

function ablationTable(runs: readonly Run[], rt: string): Table {
  const rows: Row[] = [];
  for (const c of distinct(runs, 'case') as string[]) {
    for (const [p, [bw, bl]] of Object.entries(TABLE4)) {
      const vanilla = 'vanilla-dependency-prefetch';
      rows.push({ keys: [c, p, 'PCIe bytes'], paper: bw, ours: relative(runs, c, p, vanilla, 'h2dBytes') });
      rows.push({ keys: [c, p, 'blocking'], paper: bl, ours: relative(runs, c, p, vanilla, 'gpuBlockedS') });
    }
  }
  const title =
    `Table 4: ablation, % of vanilla dependency prefetch (${rt}, batch ${BATCH}; ` +
    'the paper gives one row over all models)';
  return { id: `table4-${rt}`, title, keyHeads: ['model', 'design', 'quantity'], rows };
}

function cacheTable(runs: readonly Run[], rt: string): Table {
  const rows: Row[] = [];
  for (const c of distinct(runs, 'case') as string[]) {
    const key = Object.keys(TABLE5).find((k) => c.startsWith(k));
    for (const p of ['lru', 'model-tracing', 'moe-infinity', 'belady', 'oracle-prefetch']) {
      const v = metric(one(runs, { case: c, policy: p }), 'bufferHitRate');
      const ours = v === undefined ? undefined : 100 * v;
      rows.push({ keys: [c, p], paper: key ? TABLE5[key]![p] : undefined, ours });
    }
  }
  const title = `Table 5: buffer hit rate, % (${rt}, batch ${BATCH})`;
  return { id: `table5-${rt}`, title, keyHeads: ['case', 'policy'], digits: 1, rows };
}

function e2eTable(runs: readonly Run[], rt: string): Table {
  const e2e = runs.filter((r) => (r.params['runtime'] ?? 'fused') === rt);
  const lowest = (c: string, p: string): number | undefined => {
    const vs = select(e2e, { case: c, policy: p })
      .map((r) => metric(r, 'tpotMs.mean'))
      .filter((v): v is number => v !== undefined);
    return vs.length > 0 ? Math.min(...vs) : undefined;
  };
  const rows: Row[] = [];
  for (const c of distinct(e2e, 'case') as string[]) {
    for (const p of distinct(e2e, 'policy') as string[]) {
      rows.push({ keys: [c, p], paper: FIG9[c]?.[p], ours: lowest(c, p) });
    }
  }
  const title = `Fig. 9: lowest mean TPOT over the request rates, ms (${rt}, batch ≤ 8)`;
  return { id: `fig9-${rt}`, title, keyHeads: ['model', 'system'], digits: 1, rows };
}

const STATS = ['min', 'mean', 'max'] as const;

function shiftTable(runs: readonly Run[]): Table {
  const rows: Row[] = [];
  for (const [setup, row] of Object.entries(TABLE7)) {
    for (const [model, vs] of Object.entries(row)) {
      STATS.forEach((s, i) => rows.push({ keys: [setup, model, s], paper: vs[i] }));
    }
  }
  // Ours: the shipped shift (FLAN + BIG-bench → MMLU, Switch); statistics over seeds, per policy.
  for (const p of distinct(runs, 'policy') as string[]) {
    const vs = select(runs, { policy: p })
      .map((r) => metric(r, 'shiftRecoveryRequests'))
      .filter((v): v is number => v !== undefined);
    if (vs.length === 0) continue;
    const stat = [Math.min(...vs), vs.reduce((a, b) => a + b, 0) / vs.length, Math.max(...vs)];
    STATS.forEach((s, i) => rows.push({ keys: ['FLAN + BIG-bench → MMLU (ours)', `Switch, ${p}`, s], ours: stat[i] }));
  }
  return {
    id: 'table7',
    title: 'Table 7: requests to recover low latency after a workload change (hf-eager, batch 4)',
    note:
      'The paper’s models and shifts are not run here (workload-shift.yaml runs Switch, FLAN + BIG-bench → MMLU, ' +
      'over seeds): the rows are side by side, not paired.',
    keyHeads: ['workload setup', 'model', 'statistic'],
    digits: 1,
    rows,
  };
}

function eamcTable(runs: readonly Run[]): Table {
  const rows: Row[] = [];
  for (const c of distinct(runs, 'case') as string[]) {
    const pts = select(runs, { case: c })
      .map((r) => ({ cap: r.params['policy.eamcCapacity'], tpot: metric(r, 'tpotMs.mean') }))
      .filter((x): x is { cap: number; tpot: number } => typeof x.cap === 'number' && x.tpot !== undefined)
      .sort((a, b) => a.cap - b.cap);
    for (const x of pts) rows.push({ keys: [c, `mean TPOT at capacity ${x.cap}, ms`], ours: x.tpot });
    const low = pts.length > 0 ? Math.min(...pts.map((x) => x.tpot)) : undefined;
    const reach = low === undefined ? undefined : pts.find((x) => x.tpot <= low * (1 + LOWEST_WITHIN))?.cap;
    rows.push({ keys: [c, 'capacity reaching the lowest mean TPOT (≤)'], paper: FIG13_CAPACITY, ours: reach });
  }
  return {
    id: 'fig13',
    title: 'Fig. 13: EAMC capacity (hf-eager, batch 4)',
    note:
      'Ours: the smallest capacity of the sweep whose mean TPOT is within 1 % of the lowest; the paper: every model ' +
      'reaches its lowest average latency by capacity 120 (§7.5).',
    keyHeads: ['model', 'quantity'],
    digits: 1,
    rows,
  };
}

export const comparison: PaperComparison = {
  paper: 'moe-infinity',
  title: 'MoE-Infinity',
  reads: ['prefetch', 'ablation', 'cache', 'e2e', 'workload-shift', 'eamc-capacity'],
  sources: {
    ...Object.fromEntries(
      RUNTIMES.flatMap((rt) => [
        [`table2-${rt}`, 'prefetch'],
        [`table3-${rt}`, 'prefetch'],
        [`table4-${rt}`, 'ablation'],
        [`table5-${rt}`, 'cache'],
        [`fig9-${rt}`, 'e2e'],
      ]),
    ),
    table7: 'workload-shift',
    fig13: 'eamc-capacity',
  },
  tables(results: ResultsByExperiment): Table[] {
    const out: Table[] = [];
    for (const rt of RUNTIMES) {
      const pf = results.get('prefetch');
      if (pf) out.push(...prefetchTables(setting(pf.runs, rt), rt));
      const ab = results.get('ablation');
      if (ab) out.push(ablationTable(setting(ab.runs, rt), rt));
      const ca = results.get('cache');
      if (ca) out.push(cacheTable(setting(ca.runs, rt), rt));
      const e2e = results.get('e2e');
      if (e2e) out.push(e2eTable(e2e.runs, rt));
    }
    const ws = results.get('workload-shift');
    if (ws) out.push(shiftTable(ws.runs));
    const ec = results.get('eamc-capacity');
    if (ec) out.push(eamcTable(ec.runs));
    return out;
  },
};
