/**
 * The event-level VSLPipe against its closed form (pipeline-events.yaml): the four tables of
 * FIDELITY.md's section on it, generated from the results. Runs are named by mode and setting:
 * `cf-` (closed form) / `ev-` (event level), `<KV>GB`, `shared` (DRAM sharing on) or
 * `no-contention`, and the event-level variants `-d2h` (the D2H leg) and `-no-packets` (each
 * layer's weights as one transfer). No paper figure is compared here: these check our own model.
 */
import { fmt, metric, one } from '../cli/reproduce/kit.ts';
import type { Row, Run, Table } from '../cli/reproduce/kit.ts';

const G_ORDER = ['g256', 'g64', 'g128'];
const KVS = ['210', '70'];

const cases = (runs: readonly Run[]): string[] => {
  const have = new Set(runs.map((r) => String(r.params['case'] ?? '')));
  return G_ORDER.filter((g) => have.has(g));
};
const run = (runs: readonly Run[], g: string, policy: string): Run | undefined => one(runs, { case: g, policy });
const gOf = (g: string): string => g.slice(1);
const pctOf = (a: number | undefined, b: number | undefined): string =>
  a !== undefined && b !== undefined && b !== 0
    ? `${a >= b ? '+' : '−'}${Math.abs(100 * (a / b - 1)).toFixed(3)} %`
    : '–';
const tokAndTime = (r: Run | undefined): string =>
  `${fmt(metric(r, 'throughputTokPerS'), 3)} (${fmt(metric(r, 'makespanS'), 2)})`;

/** Generation tok/s (makespan s) in both modes, with and without DRAM sharing. */
function modesTable(runs: readonly Run[]): Table {
  const rows: Row[] = [];
  for (const g of cases(runs)) {
    for (const kv of KVS) {
      for (const [sharing, tag] of [
        ['on', 'shared'],
        ['off', 'no-contention'],
      ] as const) {
        const cf = run(runs, g, `cf-${kv}GB-${tag}`);
        const ev = run(runs, g, `ev-${kv}GB-${tag}`);
        const extra = [tokAndTime(cf), tokAndTime(ev), pctOf(metric(ev, 'makespanS'), metric(cf, 'makespanS'))];
        rows.push({ keys: [gOf(g), `${kv} GB`, sharing], extra });
      }
    }
  }
  return {
    id: 'events-modes',
    title: 'Closed form vs event level: generation tok/s (makespan s)',
    keyHeads: ['g', 'KV', 'DRAM sharing'],
    extraHeads: ['closed form', 'event level', 'event ÷ closed − 1, time'],
    grid: true,
    rows,
  };
}

/** What the event level measures, rows with sharing on (per iteration = ÷ iterations). */
function measuresTable(runs: readonly Run[]): Table {
  const rows: Row[] = [];
  for (const g of cases(runs)) {
    for (const kv of KVS) {
      const ev = run(runs, g, `ev-${kv}GB-shared`);
      const cf = run(runs, g, `cf-${kv}GB-shared`);
      const it = metric(ev, 'schedule.iterations');
      const slowed = metric(ev, 'schedule.dmaDramSlowedS');
      const perPass = slowed !== undefined && it ? `${fmt((1000 * slowed) / it)} ms per pass` : '–';
      const queue = [
        `${fmt(metric(ev, 'schedule.activationQueueS'), 1)} s`,
        `${fmt((metric(ev, 'schedule.activationQueueMeanUs') ?? Number.NaN) / 1000, 2)} ms`,
        `${fmt((metric(ev, 'schedule.activationQueueMaxUs') ?? Number.NaN) / 1000, 2)} ms`,
      ].join(', ');
      const extra = [
        fmt(it),
        `${fmt(slowed, 1)} s (${perPass})`,
        `${fmt(metric(ev, 'schedule.dramContendedS'), 1)} s`,
        `${fmt(metric(ev, 'schedule.dramBoundStages'))} / ${fmt(metric(cf, 'schedule.dramBoundStages'))}`,
        fmt(metric(ev, 'schedule.activationTransfers')),
        queue,
      ];
      rows.push({ keys: [gOf(g), `${kv} GB`], extra });
    }
  }
  return {
    id: 'events-measures',
    title: 'What the event level measures (DRAM sharing on)',
    keyHeads: ['g', 'KV'],
    extraHeads: [
      'iterations',
      'DMA slowed by DRAM (dmaDramSlowedS)',
      'DRAM oversubscribed',
      'stages with oversubscription (event / closed)',
      'activation copies',
      'queueing: total, mean, max',
    ],
    wordHeads: ['DMA slowed by DRAM (dmaDramSlowedS)', 'queueing: total, mean, max'],
    grid: true,
    rows,
  };
}

/** 100 MB packets against whole-layer transfers (210 GB, sharing on). */
function packetsTable(runs: readonly Run[]): Table {
  const rows: Row[] = cases(runs).map((g) => {
    const pk = run(runs, g, 'ev-210GB-shared');
    const whole = run(runs, g, 'ev-210GB-shared-no-packets');
    const us = (p: string) => (metric(whole, p) ?? Number.NaN) / 1000;
    const extra = [
      fmt(metric(pk, 'throughputTokPerS'), 2),
      fmt(metric(whole, 'throughputTokPerS'), 2),
      pctOf(metric(whole, 'makespanS'), metric(pk, 'makespanS')),
      `${fmt(us('schedule.activationQueueMeanUs'), 1)} / ${fmt(us('schedule.activationQueueMaxUs'), 1)} ms`,
    ];
    return { keys: [gOf(g)], extra };
  });
  return {
    id: 'events-packets',
    title: 'Weights in 100 MB packets vs whole layers (event level, 210 GB, DRAM sharing on)',
    keyHeads: ['g'],
    extraHeads: ['100 MB packets tok/s', 'whole layers tok/s', 'makespan', 'activation wait mean / max'],
    wordHeads: ['activation wait mean / max'],
    grid: true,
    rows,
  };
}

/** The D2H leg (event level, sharing on): without → with. */
function d2hTable(runs: readonly Run[]): Table {
  const rows: Row[] = [];
  for (const g of cases(runs)) {
    for (const kv of KVS) {
      const without = run(runs, g, `ev-${kv}GB-shared`);
      const withD2h = run(runs, g, `ev-${kv}GB-shared-d2h`);
      if (!withD2h) continue;
      const tok = (r: Run | undefined) => fmt(metric(r, 'throughputTokPerS'), 3);
      const extra = [
        `${tok(without)} → ${tok(withD2h)} (${pctOf(metric(withD2h, 'makespanS'), metric(without, 'makespanS'))} time)`,
        `${fmt((metric(withD2h, 'd2hBytes') ?? Number.NaN) / 1e9)} GB`,
        `${fmt(metric(withD2h, 'schedule.cpuWaitD2hS'), 1)} s`,
        `${fmt(metric(without, 'schedule.dmaDramSlowedS'), 2)} → ${fmt(metric(withD2h, 'schedule.dmaDramSlowedS'), 2)} s`,
      ];
      rows.push({ keys: [gOf(g), `${kv} GB`], extra });
    }
  }
  return {
    id: 'events-d2h',
    title: 'The D2H leg (event level, DRAM sharing on): without → with',
    keyHeads: ['g', 'KV'],
    extraHeads: ['event tok/s without → with D2H', 'D2H bytes', 'CPU attention waiting for D2H', 'DMA slowed'],
    wordHeads: ['event tok/s without → with D2H', 'DMA slowed'],
    grid: true,
    rows,
  };
}

export const EVENT_TABLE_IDS = ['events-modes', 'events-measures', 'events-packets', 'events-d2h'] as const;

export function eventTables(runs: readonly Run[]): Table[] {
  return [modesTable(runs), measuresTable(runs), packetsTable(runs), d2hTable(runs)];
}
