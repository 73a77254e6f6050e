#!/usr/bin/env node
/**
 * The `moesim` command line. Results go to stdout, diagnostics to stderr. Bad input (config,
 * profile, trace, argument) prints one line naming the file, field and value, and exits 2;
 * internal errors print their stack and exit 1.
 */
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { UserError } from '../../sim/kernel/errors.ts';
import { experimentCommand, listCommand, validateCommand } from './commands/core.ts';
import { traceCommand } from './commands/trace.ts';

export function reportError(err: unknown): number {
  if (err instanceof UserError) {
    process.stderr.write(`moesim: ${err.oneLine()}\n`);
    return 2;
  }
  process.stderr.write(`moesim: internal error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  return 1;
}

export async function main(argv: string[]): Promise<number> {
  try {
    await yargs(argv)
      .scriptName('moesim')
      .command(experimentCommand)
      .command(validateCommand)
      .command(listCommand)
      .command(traceCommand)
      .demandCommand(1, 'name a command (experiment, validate, list, trace)')
      .strict()
      .fail((msg, err) => {
        if (err) throw err;
        // The whole message (oneLine() joins its lines): yargs puts the argument and value on the second line.
        throw new UserError(msg, undefined, 'arguments');
      })
      .help()
      .version(false)
      .parseAsync();
    return 0;
  } catch (err) {
    return reportError(err);
  }
}

const code = await main(hideBin(process.argv));
process.exitCode = code;
