/**
 * `moesim trace` is loaded only when the command line names it (`experiments/cli/commands/trace-name.ts`):
 * every other command starts without the trace tools' modules. The stub listed in `moesim --help`
 * carries the real command's name and summary, and the real command answers wherever `trace` is
 * the first word that is not an option.
 */
import { describe, expect, it } from 'vitest';
import { namesTrace, TRACE_COMMAND, traceStub } from '../../experiments/cli/commands/trace-name.ts';
import { traceCommand } from '../../experiments/cli/commands/trace.ts';
import { runCli } from '../helpers/cli.ts';

describe('lazy trace command', () => {
  it('names trace only as the first word that is not an option', () => {
    expect(namesTrace(['trace', 'stats', 'a.jsonl'])).toBe(true);
    expect(namesTrace(['--debug', 'trace', 'stats'])).toBe(true);
    expect(namesTrace(['experiment', 'trace.yaml'])).toBe(false);
    expect(namesTrace(['experiment', 'x.yaml', '--out', 'trace'])).toBe(false);
    expect(namesTrace(['--help'])).toBe(false);
    expect(namesTrace([])).toBe(false);
  });

  it('the stub has the real command and summary', () => {
    expect(traceCommand.command).toBe(TRACE_COMMAND.command);
    expect(traceCommand.describe).toBe(TRACE_COMMAND.describe);
    expect(traceStub.command).toBe(traceCommand.command);
    expect(traceStub.describe).toBe(traceCommand.describe);
  });

  it('--help lists trace; trace --help lists its commands; a global option before trace reaches the real command', () => {
    const help = runCli(['--help']);
    expect(help.status).toBe(0);
    expect(help.stdout.replace(/\s+/g, ' ')).toContain(TRACE_COMMAND.describe);
    const sub = runCli(['trace', '--help']);
    expect(sub.status).toBe(0);
    for (const c of ['stats', 'calibrate', 'generate', 'compare', 'import', 'activation'])
      expect(sub.stdout).toContain(c);
    const bad = runCli(['--debug', 'trace', 'stats', 'no-such-trace.jsonl']);
    expect(bad.status).toBe(2);
    expect(bad.stderr.split('\n')[0]).toMatch(/^moesim: .*no-such-trace\.jsonl/);
  });
});
