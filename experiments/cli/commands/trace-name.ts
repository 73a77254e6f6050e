/**
 * The name and summary of `moesim trace` without its code: the trace tools import ~0.5 s of
 * modules (import formats, calibration, statistics), which every other command would otherwise
 * load at start-up. `program.ts` loads `trace.ts` only when the command line names `trace`, and
 * lists this stub in `moesim --help` otherwise.
 */
import type { CommandModule } from 'yargs';

export const TRACE_COMMAND = {
  command: 'trace <command>',
  describe: 'routing traces: stats, calibrate, generate, compare, import, activation',
} as const;

/** Stands for `trace.ts`'s command where the command line does not name `trace` (never run). */
export const traceStub: CommandModule = { ...TRACE_COMMAND, handler: () => {} };

/** Whether `argv` names the `trace` command (its first word that is not an option). */
export const namesTrace = (argv: readonly string[]): boolean => argv.find((a) => !a.startsWith('-')) === 'trace';
