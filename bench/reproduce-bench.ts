/**
 * `npm run bench -- reproduce`: how long a paper's whole reproduction takes
 * (`npm run reproduce -- <paper>`, every shipped experiment as one pool of worker threads with
 * the default `--jobs`), one record per paper: `reproduce-<paper>` with wall seconds and CPU
 * seconds (every thread of the process; less sensitive to a loaded machine than wall), and
 * `reproduce-all` with their sums. Each paper runs in a fresh process into a fresh temporary
 * folder (nothing kept from an earlier reproduction). Target: each paper under 60 s of wall time
 * on a quiet 2-core machine, all under 4 minutes.
 *
 * `MOESIM_BENCH_REPRODUCE=moe-cap,moe-lens` limits the papers (default: all five).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PAPERS } from '../experiments/cli/reproduce/papers.ts';
import type { BenchRecord } from './serving-bench.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const MAIN = path.resolve(here, '../experiments/cli/main.ts');

/** The figures `moesim reproduce` prints on stderr ("reproduced … in W s wall, C s CPU"). */
const FIGURES = /reproduced .* in ([\d.]+) s wall, ([\d.]+) s CPU/;

function reproduceOnce(paper: string): { wallS: number; cpuS: number } {
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
    return { wallS: Number(m[1]), cpuS: Number(m[2]) };
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
    for (const paper of chosen) {
      const t = reproduceOnce(paper);
      wallS += t.wallS;
      cpuS += t.cpuS;
      records.push({ name: `reproduce-${paper}`, wallS: t.wallS, cpuS: t.cpuS });
      process.stderr.write(`bench: reproduce ${paper}: ${t.wallS.toFixed(1)} s wall, ${t.cpuS.toFixed(1)} s CPU\n`);
    }
    records.push({ name: 'reproduce-all', papers: chosen.length, wallS, cpuS });
    return records;
  },
};
