/** `moesim trace …` (stub while the workloads module is being built). */
import type { CommandModule } from 'yargs';
import { UserError } from '../../../sim/kernel/errors.ts';

export const traceCommand: CommandModule = {
  command: 'trace',
  describe: 'routing traces: stats, calibrate, generate',
  handler: () => {
    throw new UserError('trace commands are not implemented yet');
  },
};
