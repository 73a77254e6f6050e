/**
 * `npm run bench -- reproduce`: how long a paper's whole reproduction takes
 * (`npm run reproduce -- <paper>`, every shipped experiment as one pool of worker threads with
 * the default `--jobs`), one record per paper: `reproduce-<paper>` with wall seconds and CPU
 * seconds (every thread of the process; less sensitive to a loaded machine than wall), the runs'
 * own time and kernel events (from each experiment's timing.json: a run shared with another
 * experiment counts once) and their ratio, µs per event — with the events, what bounds the wall
 * time from below: 60 s on two threads is 120 s of run time, so a paper of E events needs
 * 120 / E s per event whatever else is cut — and `reproduce-all` with their sums. Each paper runs in a fresh process into a fresh temporary
 * folder (nothing kept from an earlier reproduction). Target: each paper under 60 s of wall time
 * on a quiet 2-core machine, all under 4 minutes.
 *
 * `MOESIM_BENCH_REPRODUCE=moe-cap,moe-lens` limits the papers (default: all five).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PAPERS } from '../experiments/cli/reproduce/papers.ts';
import type { BenchRecord } from './serving-bench.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const MAIN = path.resolve(here, '../experiments/cli/main.ts');

/** The figures `moesim reproduce` prints on stderr ("reproduced … in W s wall, C s CPU"). */
const FIGURES = /reproduced .* in ([\d.]+) s wall, ([\d.]+) s CPU/;

interface Figures {
  readonly wallS: number;
  readonly cpuS: number;
  /** Σ run seconds and Σ kernel events over the paper's simulated runs (timing.json). */
  readonly runS: number;
  readonly events: number;
}

/** Σ run time and events of every experiment folder under `dir` (shared runs have zeros). */
function runFigures(dir: string): { runS: number; events: number } {
  let runS = 0;
  let events = 0;
  for (const name of readdirSync(dir)) {
    const f = path.join(dir, name, 'timing.json');
    if (!existsSync(f)) continue;
    const t = JSON.parse(readFileSync(f, 'utf8')) as { runs: { wallS: number; eventsPerS: number }[] };
    for (const r of t.runs) {
      runS += r.wallS;
      events += r.wallS * r.eventsPerS;
    }
  }
  return { runS, events: Math.round(events) };
}

function reproduceOnce(paper: string): Figures {
  const out = mkdtempSync(path.join(tmpdir(), 'moesim-bench-reproduce-'));
  try {
    const args = [
      '--import',
      'tsx',
      '--max-semi-space-size=64',
      MAIN,
      'reproduce',
      paper,
      '--out',
      out,
      '--no-progress',
    ];
    const r = spawnSync(process.execPath, args, { encoding: 'utf8', maxBuffer: 64 << 20 });
    const m = FIGURES.exec(r.stderr ?? '');
    if (r.status !== 0 || !m) {
      throw new Error(`reproduce ${paper} failed (exit ${r.status}): ${(r.stderr ?? '').slice(-2000)}`);
    }
    return { wallS: Number(m[1]), cpuS: Number(m[2]), ...runFigures(path.join(out, paper)) };
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}

export const suite = {
  name: 'reproduce',
  run: async (): Promise<BenchRecord[]> => {
    const only = process.env['MOESIM_BENCH_REPRODUCE']?.split(',').map((s) => s.trim());
    const chosen = only?.filter(Boolean) ?? [...PAPERS];
    const records: BenchRecord[] = [];
    let wallS = 0;
    let cpuS = 0;
    let runS = 0;
    let events = 0;
    const usPerEvent = (s: number, n: number) => (n > 0 ? Number(((s / n) * 1e6).toFixed(3)) : 0);
    for (const paper of chosen) {
      const t = reproduceOnce(paper);
      wallS += t.wallS;
      cpuS += t.cpuS;
      runS += t.runS;
      events += t.events;
      records.push({
        name: `reproduce-${paper}`,
        wallS: t.wallS,
        cpuS: t.cpuS,
        runS: Number(t.runS.toFixed(2)),
        events: t.events,
        usPerEvent: usPerEvent(t.runS, t.events),
      });
      process.stderr.write(
        `bench: reproduce ${paper}: ${t.wallS.toFixed(1)} s wall, ${t.cpuS.toFixed(1)} s CPU, ` +
          `${t.runS.toFixed(1)} s of runs, ${t.events} events (${usPerEvent(t.runS, t.events)} µs each)\n`,
      );
    }
    records.push({
      name: 'reproduce-all',
      papers: chosen.length,
      wallS,
      cpuS,
      runS: Number(runS.toFixed(2)),
      events,
      usPerEvent: usPerEvent(runS, events),
    });
    return records;
  },
};
