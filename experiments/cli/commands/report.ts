/** `moesim report <results-dir>`: writes report.html into an experiment's results folder. */
import path from 'node:path';
import type { CommandModule } from 'yargs';

export const reportCommand: CommandModule<object, { dir: string }> = {
  command: 'report <dir>',
  describe:
    'write report.html into an experiment results folder: the config, the table, the plots, the analytic bounds, metric definitions, links to the timelines',
  builder: (y) =>
    y.positional('dir', {
      type: 'string',
      demandOption: true,
      describe: 'the folder of an experiment’s results.json (e.g. results/quickstart)',
    }) as never,
  handler: async (args) => {
    // Loaded only now: vega takes about a second to load, and the other commands need not wait for it.
    const { writeReport } = await import('../../outputs/report.ts');
    const file = await writeReport(args.dir);
    process.stderr.write(`moesim: wrote ${file}\n`);
    process.stdout.write(`${path.resolve(file)}\n`);
  },
};
