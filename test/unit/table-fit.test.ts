/**
 * The printed table: the default table of either family fits 120 columns, even
 * with long swept parameters and extra columns (least important columns are left out, with a
 * note saying which); `--columns` picks catalogue ids or metric paths and rejects anything
 * else; `--wide` shows the whole catalogue; an infeasible run's reason is on its own line under
 * the table, marked in its row.
 */
import { describe, expect, it } from 'vitest';
import { chooseColumns, columnIds, metricColumn, renderTable, type TableRow } from '../../experiments/outputs/table.ts';

const dist = (x: number) => ({ mean: x, p50: x, p90: x * 1.5, p99: x * 2 });

function servingRow(policy: string, params: Record<string, unknown>, k: number): TableRow {
  return {
    policy,
    params,
    seed: 1,
    wallS: 0.4,
    eventsPerS: 2.5e6,
    simulatedS: 812.345 * k,
    metrics: {
      ttftMs: dist(123456.7 * k),
      ttftQueueMs: dist(100000 * k),
      ttftServiceMs: dist(23456.7 * k),
      tpotMs: dist(926.31 * k),
      e2eMs: dist(150000 * k),
      throughputTokPerS: 0.915 * k,
      prefillTokPerS: 5.7,
      bufferHitRate: 0.281,
      prefetchHitRate: 0.1,
      prefetchPrecision: 0.5,
      gpuBlockedFrac: 0.925,
      gpuBusyFrac: 0.07,
      pcieGBps: 23.69,
      h2dBytes: 1.2e13,
      d2hBytes: 0,
      h2dUtil: 0.97,
      bufferSlots: 61,
      peakBytes: { vram: { total: 24.76e9 }, host: { total: 50.1e9 } },
    },
  };
}

const throughputRow = (policy: string, params: Record<string, unknown>, feasible: boolean): TableRow => ({
  policy,
  params,
  seed: 1,
  wallS: 2,
  eventsPerS: 3e4,
  simulatedS: 3600,
  metrics: feasible
    ? {
        feasible: true,
        prefillTokPerS: 1234.5,
        decodeTokPerS: 833.8,
        passes: { prefill: 0, decode: 120 },
        search: {
          B: 4533,
          ba: 64,
          be: 512,
          omega: 1,
          sExpertBytes: 2 ** 32,
          sParamsBytes: 2 ** 33,
          predictedPassS: 1.2,
          simulatedPassS: 1.3,
        },
        gpuBusyFrac: 0.295,
        h2dUtil: 0.918,
        cpuUtil: 0.5,
        peakBytes: { vram: { total: 23.5e9 }, host: { total: 512.3e9 } },
      }
    : { feasible: false, infeasibleReason: 'model weights 672.9 GB exceed host DRAM 549.8 GB', requests: 100 },
});

const width = (text: string) => Math.max(...text.split('\n').map((l) => [...l].length));

describe('the default table fits 120 columns', () => {
  it('serving: key columns, long swept parameters, extra config columns', () => {
    const params = (i: number) => ({
      model: 'mixtral-8x7b',
      'workload.arrival.ratePerS': 0.05 * (i + 1),
      'policy.capacitySlots': 32 * (i + 1),
      'executor.maxBatchSize': i + 1,
    });
    const rows = ['on-demand', 'lru-with-a-long-label', 'moe-infinity'].map((p, i) => servingRow(p, params(i), i + 1));
    const { columns, fit } = chooseColumns('serving', {}, [
      metricColumn('prefetchPrecision'),
      metricColumn('ttftQueueMs.p99'),
    ]);
    expect(fit).toBe(true);
    const t = renderTable(rows, columns, 'box', { maxWidth: 120, hideEmpty: true });
    expect(width(t)).toBeLessThanOrEqual(120);
    // Swept parameters are headed by their last path segment; the policy and the key metrics stay.
    expect(t).toMatch(/ratePerS/);
    expect(t).toMatch(/TTFT\s/);
    expect(t).toMatch(/TPOT/);
    expect(t).toMatch(/tok\/s/);
    expect(t).toMatch(/left out to fit 120 columns: .*--wide/);
  });

  it('serving, no sweep: every default column fits without leaving any out', () => {
    const rows = ['on-demand', 'lru', 'moe-infinity'].map((p, i) => servingRow(p, { model: 'mixtral-8x7b' }, i + 1));
    const { columns } = chooseColumns('serving', {});
    const t = renderTable(rows, columns, 'box', { maxWidth: 120, hideEmpty: true });
    expect(width(t)).toBeLessThanOrEqual(120);
    expect(t).not.toMatch(/left out/);
    for (const h of ['TTFT', 'p99 ms', 'TPOT', 'tok/s', 'hit', 'blocked', 'GB/s', 'VRAM', 'sim s'])
      expect(t).toContain(h);
  });

  it('throughput: an infeasible run is marked and its reason is on its own line under the table', () => {
    const rows = [
      throughputRow('moe-gen-h', { case: 'Mixtral-8x7B' }, true),
      throughputRow('moe-gen-h', { case: 'DeepSeek-R1' }, false),
      throughputRow('deepspeed-like', { case: 'DeepSeek-R1' }, false),
    ];
    const { columns } = chooseColumns('throughput', {});
    const t = renderTable(rows, columns, 'box', { maxWidth: 120, hideEmpty: true });
    expect(width(t)).toBeLessThanOrEqual(120);
    const lines = t.split('\n');
    expect(lines.filter((l) => /│ moe-gen-h \[1\]\s/.test(l))).toHaveLength(1);
    expect(lines.filter((l) => /│ deepspeed-like \[1\]\s/.test(l))).toHaveLength(1);
    // One footnote for the one distinct reason, after the table's last border.
    const last = lines.findIndex((l) => l.startsWith('└'));
    expect(lines.slice(last + 1)).toContain('[1] infeasible: model weights 672.9 GB exceed host DRAM 549.8 GB');
    // Prefill tok/s is empty in every row (decode only): the default table hides it.
    expect(t).not.toMatch(/prefill/);
    expect(t).toMatch(/decode/);
  });
});

describe('--columns and --wide', () => {
  it('--columns takes catalogue ids and metric paths, in order', () => {
    const { columns, fit } = chooseColumns('serving', { columns: ['queue.p50', 'ttftServiceMs.p99', 'tok/s'] });
    expect(fit).toBe(false);
    expect(columns.map((c) => c.id)).toEqual(['queue.p50', 'ttftServiceMs.p99', 'tok/s']);
    const t = renderTable([servingRow('lru', {}, 1)], columns, 'markdown');
    expect(t.split('\n')[0]).toBe('| policy | queue p50 ms | ttftServiceMs.p99 | tok/s |');
    expect(t.split('\n')[2]).toBe('| lru | 100000 | 46913 | 0.915 |');
  });

  it('an unknown column is an error listing the ids', () => {
    expect(() => chooseColumns('serving', { columns: ['tok/s', 'TTFT p50'] })).toThrow(
      /unknown column 'TTFT p50' \(columns of the serving family: ttft\.p50, .*tok\/s/,
    );
    expect(() => chooseColumns('throughput', { columns: ['a b'] })).toThrow(/unknown column/);
  });

  it('--wide shows every column of the family, and is not fitted', () => {
    const { columns, fit } = chooseColumns('serving', { wide: true });
    expect(fit).toBe(false);
    expect(columns.map((c) => c.id)).toEqual(columnIds('serving'));
    expect(columnIds('serving')).toEqual(
      expect.arrayContaining(['queue.p50', 'service.p50', 'pcie', 'sim', 'wall', 'events/s']),
    );
    expect(columnIds('throughput')).toEqual(
      expect.arrayContaining(['batch', 'omega', 'gpu', 'pcie', 'vram', 'host', 'sim']),
    );
  });

  it('MoE-CAP columns (s-mbu, s-mfu, dense mbu/mfu, usd/Mtok) in both families, as percentages of the metrics', () => {
    const row = servingRow('lru', {}, 1);
    const withCap: TableRow = {
      ...row,
      metrics: {
        ...row.metrics,
        cap: { sMbu: 0.0351, sMfu: 0.0018, mbu: 0.1141, mfu: 0.0067 },
        cost: { usdPerMTok: 144.857 },
      },
    };
    const { columns } = chooseColumns('serving', { columns: ['s-mbu', 's-mfu', 'mbu', 'mfu', 'usd/Mtok'] });
    const t = renderTable([withCap], columns, 'markdown');
    expect(t.split('\n')[2]).toBe('| lru | 3.51 | 0.18 | 11.41 | 0.67 | 144.86 |');
    expect(columnIds('throughput')).toEqual(expect.arrayContaining(['s-mbu', 's-mfu', 'mbu', 'mfu', 'usd/Mtok']));
  });
});
