/**
 * Runs the real `moesim` command line (`node bin/moesim.mjs ...`, cwd = repository root) and
 * returns its exit code and output. For CLI tests; not a test file.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export interface CliResult {
  readonly status: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

const BIN = path.join(REPO_ROOT, 'bin/moesim.mjs');
// No colours (the output is not a terminal anyway, so no progress bar): plain text to assert on.
const ENV = { ...process.env, FORCE_COLOR: '0', NO_COLOR: '1' };

export function runCli(args: readonly string[], o: { timeoutMs?: number } = {}): CliResult {
  const r = spawnSync(process.execPath, [BIN, ...args], {
    cwd: REPO_ROOT,
    encoding: 'utf8',
    timeout: o.timeoutMs ?? 120_000,
    env: ENV,
  });
  if (r.error) throw r.error;
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** `runCli` without blocking, so independent invocations can overlap (each one is ~1 s of CPU, mostly start-up). */
export function runCliAsync(args: readonly string[], o: { timeoutMs?: number } = {}): Promise<CliResult> {
  return runProcess(process.execPath, [BIN, ...args], REPO_ROOT, o.timeoutMs);
}

/** Any command, without blocking: its exit code and output (no colours). */
export function runProcess(cmd: string, args: readonly string[], cwd: string, timeoutMs = 120_000): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, env: ENV, timeout: timeoutMs });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('error', reject);
    child.on('close', (status) => resolve({ status, stdout, stderr }));
  });
}

/** Runs `tasks` with at most `limit` at a time; results in task order. */
export async function pooled<T>(tasks: readonly (() => Promise<T>)[], limit: number): Promise<T[]> {
  const out: T[] = new Array(tasks.length);
  let next = 0;
  const worker = async () => {
    while (next < tasks.length) {
      const i = next++;
      out[i] = await tasks[i]!();
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, tasks.length) }, worker));
  return out;
}

/** A fresh temporary folder for one test file. */
export const tempDir = (prefix: string): string => mkdtempSync(path.join(tmpdir(), `moesim-${prefix}-`));
