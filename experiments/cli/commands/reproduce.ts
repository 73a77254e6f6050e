/**
 * `moesim reproduce <paper|all>` (`npm run reproduce -- <paper|all>`): every shipped experiment
 * of a paper as one pool of runs, then its comparison tables (reproduction/<paper>/COMPARISON.md,
 * the generated sections of its FIDELITY.md). `--tables`: only the tables, from the stored results.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { CommandModule } from 'yargs';
import { UserError } from '../../../sim/kernel/errors.ts';
import { jobsOf } from './core.ts';
import { experimentsOf, PAPERS, REPRODUCTION_DIR, type Paper } from '../reproduce/papers.ts';

interface ReproduceArgs {
  paper: string;
  out?: string;
  jobs?: number;
  progress: boolean;
  tables: boolean;
}

export const reproduceCommand: CommandModule<object, ReproduceArgs> = {
  command: 'reproduce <paper>',
  describe: 'run every shipped experiment of a paper (or all) as one pool of runs, then write its comparison tables',
  builder: (y) =>
    y
      .positional('paper', { type: 'string', demandOption: true, describe: `${PAPERS.join(' | ')} | all` })
      .option('out', {
        type: 'string',
        describe: 'folder of the reproductions (default: reproduction/ in the checkout; FIDELITY.md only then)',
      })
      .option('jobs', {
        type: 'number',
        describe: 'worker threads (default: the number of cores; 1: one run at a time in this process)',
      })
      .option('progress', { type: 'boolean', default: true, describe: 'progress bar on stderr when it is a terminal' })
      .option('tables', {
        type: 'boolean',
        default: false,
        describe: 'simulate nothing: rewrite the tables (COMPARISON.md, FIDELITY.md sections) from the stored results',
      }) as never,
  handler: async (args) => {
    const known = (PAPERS as readonly string[]).includes(args.paper);
    const papers: Paper[] = args.paper === 'all' ? [...PAPERS] : known ? [args.paper as Paper] : [];
    if (papers.length === 0) {
      throw new UserError(`must be one of ${PAPERS.join(', ')}, all`, undefined, 'paper', args.paper);
    }
    const jobs = jobsOf(args.jobs);
    const outRoot = path.resolve(args.out ?? REPRODUCTION_DIR);
    const log = (m: string) => process.stderr.write(`moesim: ${m}\n`);
    if (!args.tables) {
      const { reproduce } = await import('../reproduce/run.ts');
      const t = await reproduce(papers, { outRoot, jobs, progress: args.progress, log });
      const lines = t.experiments.map((e) => {
        const what = e.skipped ? 'kept (complete)' : `${e.runS.toFixed(1)} s of run time`;
        return `  ${`${e.paper}/${e.name}`.padEnd(36)} ${what}`;
      });
      const threads = `${jobs} thread${jobs === 1 ? '' : 's'}`;
      const took = `${t.wallS.toFixed(1)} s wall, ${t.cpuS.toFixed(1)} s CPU (${threads})`;
      log(`reproduced ${papers.join(', ')} in ${took}:\n${lines.join('\n')}`);
      // Each experiment's report.html (COMPARISON.html links them; each links back to it).
      const { writeReport } = await import('../../outputs/report.ts');
      for (const p of papers) {
        for (const { name } of experimentsOf(p)) {
          const dir = path.join(outRoot, p, name);
          if (existsSync(path.join(dir, 'results.json'))) await writeReport(dir);
        }
      }
    }
    const { writeTables } = await import('../reproduce/tables.ts');
    for (const p of papers) {
      const written = await writeTables(p, path.join(outRoot, p), { fidelity: args.out === undefined });
      log(`wrote ${written.map((f) => path.relative(process.cwd(), f)).join(', ')}`);
    }
  },
};
