/**
 * MoE-Lens's throughput grid (the paper's Fig. 11 / 12 rows, Mixtral-8x7B): per dataset, KV size and
 * g_max, each system's generation tok/s and what bound MoE-Lightning's batch. The speedups of
 * comparison.ts summarise this grid; here are its rows, generated so that FIDELITY.md's table is
 * what the code produces. The paper shows these rows as figures only (no numbers to compare).
 */
import { fmt, metric, one, rawMetric } from '../cli/reproduce/kit.ts';
import type { Row, Run, Table } from '../cli/reproduce/kit.ts';

const DATASET_LABEL: Record<string, string> = { 'mt-bench': 'MTBench', rag: 'RAG', aime: 'AIME' };

/** What bound MoE-Lightning's batch, from its first policy note ("batch N bounded by host memory (…)"). */
function binding(r: Run | undefined): string {
  const notes = rawMetric(r, 'policyNotes');
  const first = Array.isArray(notes) && typeof notes[0] === 'string' ? notes[0] : '';
  return /bounded by ([\w ]+?) \(/.exec(first)?.[1] ?? '–';
}

const setting = (r: Run | undefined): string => {
  const s = rawMetric(r, 'schedule.memorySetting');
  return typeof s === 'string' ? s : '–';
};

export function throughputGridTable(runs: readonly Run[]): Table {
  const cases = [...new Set(runs.map((r) => String(r.params['case'] ?? '')))];
  const rows: Row[] = [];
  for (const c of cases) {
    const m = /^(.+)-(\d+)GB-g(\d+)$/.exec(c);
    if (!m) continue;
    const inCase = runs.filter((r) => r.params['case'] === c);
    const lens = metric(one(inCase, { policy: 'moe-lens' }), 'throughputTokPerS');
    const light = one(inCase, { policy: 'lens-moe-lightning' });
    const lightTok = metric(light, 'throughputTokPerS');
    const vllm = metric(one(inCase, { policy: 'lens-vllm' }), 'throughputTokPerS');
    const ratio = lens !== undefined && lightTok !== undefined && lightTok > 0 ? fmt(lens / lightTok, 2) : '–';
    const extra = [
      fmt(lens, 1),
      fmt(lightTok, 1),
      fmt(metric(light, 'hostBatchSeqs')),
      setting(light),
      binding(light),
      fmt(vllm, 1),
      ratio,
    ];
    rows.push({ keys: [DATASET_LABEL[m[1]!] ?? m[1]!, `${m[2]} GB`, m[3]!], extra });
  }
  return {
    id: 'throughput-grid',
    title: 'Generation throughput, tok/s, Mixtral-8x7B (throughput.yaml; the paper’s Fig. 11 / 12 rows)',
    note:
      'MoE-Lightning: N is its batch (sequences), the memory setting its planner chose and what bound N. ' +
      'Usable VRAM 16 GB for the baselines as in the paper.',
    keyHeads: ['rows', 'KV', 'g_max'],
    extraHeads: ['MoE-Lens', 'MoE-Lightning', 'N', 'setting', 'N bounded by', 'vLLM', 'MoE-Lens ÷ MoE-Lightning'],
    wordHeads: ['setting', 'N bounded by'],
    grid: true,
    rows,
  };
}
