/**
 * The `moesim` command line as a function (`main(argv)` → exit code), so that tests can run it in
 * this process; `main.ts` is the executable entry. Results go to stdout, diagnostics to stderr. Exit codes:
 * - 2: bad input (config, profile, trace, argument, output folder): one line naming the file,
 *   field and value;
 * - 3: a policy plugin failed (threw, or broke a rule of the hook contract): one line naming
 *   the policy, its file, the hook and the simulated time;
 * - 1: a fault inside moesim itself: the stack, and how to report it.
 * `--debug` adds the stack to every error.
 */
import yargs from 'yargs';
import { UserError } from '../../sim/kernel/errors.ts';
import { printable } from '../outputs/out-dir.ts';
import type { PluginError } from '../runner.ts';
import { experimentCommand, listCommand, validateCommand } from './commands/core.ts';
import { hardwareCommand } from './commands/hardware.ts';
import { newCommand } from './commands/new.ts';
import { reportCommand } from './commands/report.ts';
import { reproduceCommand } from './commands/reproduce.ts';
import { namesTrace, traceStub } from './commands/trace-name.ts';
import { workerCommand } from './commands/worker.ts';

/** A `PluginError` of the runner (checked by name: the runner is loaded only when a command needs it). */
const isPluginError = (err: unknown): err is PluginError =>
  err instanceof Error && err.name === 'PluginError' && typeof (err as Partial<PluginError>).oneLine === 'function';

const stackOf = (err: unknown): string => (err instanceof Error ? (err.stack ?? err.message) : String(err));

export function reportError(err: unknown, debug = false): number {
  if (err instanceof UserError) {
    process.stderr.write(`moesim: ${printable(err.oneLine())}\n`);
    if (debug) process.stderr.write(`${stackOf(err)}\n`);
    return 2;
  }
  if (isPluginError(err)) {
    process.stderr.write(`moesim: ${printable(err.oneLine())}\n`);
    if (debug) process.stderr.write(`${stackOf(err.original)}\n`);
    return 3;
  }
  process.stderr.write(
    `moesim: internal error: this is a bug in moesim, not in your input.\n` +
      `Please report it to the moesim maintainers (an issue in the project's tracker) with the config file, the command line and everything below.\n` +
      `${stackOf(err)}\n`,
  );
  return 1;
}

export async function main(argv: string[]): Promise<number> {
  try {
    // The trace tools are loaded only for `moesim trace …` (`trace-name.ts`).
    const traceCommand = namesTrace(argv) ? (await import('./commands/trace.ts')).traceCommand : traceStub;
    await yargs(argv)
      .scriptName('moesim')
      .command(experimentCommand)
      .command(validateCommand)
      .command(listCommand)
      .command(traceCommand)
      .command(newCommand)
      .command(workerCommand)
      .command(reportCommand)
      .command(hardwareCommand)
      .command(reproduceCommand)
      .option('debug', { type: 'boolean', default: false, global: true, describe: 'print the stack of every error' })
      .demandCommand(1, 'name a command (experiment, validate, list, trace, new, report, hardware, reproduce)')
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
    return reportError(err, argv.includes('--debug'));
  }
}
