/**
 * `moesim worker --queue redis://host:port`: joins a distributed sweep's queue and simulates
 * the runs that `moesim experiment --queue` sends, `--jobs` at a time, until stopped (Ctrl-C or
 * SIGTERM: the runs under way finish first; a second signal exits at once).
 */
import type { CommandModule } from 'yargs';
import { jobsOf } from './core.ts';

export const workerCommand: CommandModule<object, { queue: string; jobs?: string }> = {
  command: 'worker',
  describe: 'join a Redis queue and simulate the runs `moesim experiment --queue` sends (same moesim checkout needed)',
  builder: (y) =>
    y
      .option('queue', { type: 'string', demandOption: true, describe: 'redis://host:port of the queue' })
      .option('jobs', {
        type: 'string',
        describe: 'runs simulated at once, on worker threads (default: the number of cores)',
      }) as never,
  handler: async (args) => {
    const threads = jobsOf(args.jobs);
    const { startWorker } = await import('../../parallel/queue.ts');
    const log = (m: string) => process.stderr.write(`moesim worker: ${m}\n`);
    const worker = await startWorker(args.queue, threads, log);
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
