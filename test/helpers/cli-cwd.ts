/**
 * Runs the real `moesim` command line from a chosen working directory (the helpers of
 * `cli.ts` always run from the repository root), and writes plugin modules that import the
 * repository's own code from a temporary folder. For CLI tests; not a test file.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { REPO_ROOT, runProcess, type CliResult } from './cli.ts';

const BIN = path.join(REPO_ROOT, 'bin/moesim.mjs');

/** `moesim <args>` with `cwd` as the working directory. */
export function runCliIn(cwd: string, args: readonly string[], o: { timeoutMs?: number } = {}): Promise<CliResult> {
  return runProcess(process.execPath, [BIN, ...args], cwd, o.timeoutMs);
}

/**
 * Makes `dir` an ES-module folder (a `package.json` with `"type": "module"`, as a user's
 * plugin folder needs outside this repository) and writes `<name>.ts` there: a plugin module
 * whose body is `body`, with `base` bound to the repository's example plugin
 * (`examples/fifo-cache-policy.ts`, for its parameter schema). Returns the file's path.
 */
export function writePlugin(dir: string, name: string, body: string): string {
  writeFileSync(path.join(dir, 'package.json'), '{ "type": "module" }\n');
  const example = pathToFileURL(path.join(REPO_ROOT, 'examples/fifo-cache-policy.ts')).href;
  const file = path.join(dir, `${name}.ts`);
  writeFileSync(file, `import base from ${JSON.stringify(example)};\n${body}\n`);
  return file;
}
