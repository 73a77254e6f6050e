/**
 * `moesim worker --queue redis://host:port`: joins a distributed sweep's queue and simulates
 * the runs that `moesim experiment --queue` sends, `--jobs` at a time, until stopped (Ctrl-C or
 * SIGTERM: the runs under way finish first; a second signal exits at once). A run longer than
 * `--job-timeout` seconds is stopped and fails with one line.
 */
import type { CommandModule } from 'yargs';
import { UserError } from '../../../sim/kernel/errors.ts';
import { DEFAULT_JOB_TIMEOUT_S } from '../../parallel/worker-watchdog.ts';
import { jobsOf } from './core.ts';

/** `--job-timeout` as typed: seconds, positive, at most a year (a longer bound is no bound). */
function timeoutOf(typed: string | undefined): number {
  if (typed === undefined) return DEFAULT_JOB_TIMEOUT_S;
  const s = Number(typed);
  if (typed.trim() === '' || !(s > 0) || s > 365 * 86_400)
    throw new UserError(
      'must be a number of seconds, > 0 and at most 31536000 (a year)',
      undefined,
      '--job-timeout',
      typed,
    );
  return s;
}

export const workerCommand: CommandModule<object, { queue: string; jobs?: string; jobTimeout?: string }> = {
  command: 'worker',
  describe: 'join a Redis queue and simulate the runs `moesim experiment --queue` sends (same moesim checkout needed)',
  builder: (y) =>
    y
      .option('queue', { type: 'string', demandOption: true, describe: 'redis://host:port of the queue' })
      .option('jobs', {
        type: 'string',
        describe: 'runs simulated at once, on worker threads (default: the number of cores)',
      })
      .option('job-timeout', {
        type: 'string',
        describe: `seconds one run may take before it is stopped and fails (default: ${DEFAULT_JOB_TIMEOUT_S})`,
      }) as never,
  handler: async (args) => {
    const threads = jobsOf(args.jobs);
    const timeoutS = timeoutOf(args.jobTimeout);
    const { startWorker } = await import('../../parallel/queue.ts');
    const log = (m: string) => process.stderr.write(`moesim worker: ${m}\n`);
    const worker = await startWorker(args.queue, threads, log, timeoutS);
    await new Promise<void>((resolve) => {
      let stopping = false;
      const stop = (signal: string) => {
        if (stopping) process.exit(130);
        stopping = true;
        log(`${signal}: leaving the queue once the runs under way finish`);
        void worker.close().then(resolve);
      };
      process.on('SIGINT', () => stop('SIGINT'));
      process.on('SIGTERM', () => stop('SIGTERM'));
    });
  },
};
