/**
 * The one way tests reach the reference data that lies *beside* the checkout (`../shared`):
 * the unlicensed recorded traces (`traces/real/`) and the reference tables (`reference/`).
 * That folder is not part of the repository and is absent on a plain clone, so every test that
 * reads it goes through `sharedData(...)` and is skipped, with a one-line reason, when a file
 * it needs is missing. `npm ci && npm test` on a clone with nothing beside it then passes.
 *
 * The folder is `<repository>/../shared`, or `$MOESIM_SHARED` when that is set (an empty value
 * means "absent": `.ci/run` uses that to prove the skips).
 *
 * ```ts
 * const ref = sharedData('reference/models.json');
 * describe.skipIf(!ref.present)(ref.title('derived sizes agree with reference/models.json'), () => { ... });
 * ```
 *
 * Not a test file (no `.test.ts`).
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** The shared reference folder (may not exist). */
export function sharedDir(): string {
  const env = process.env.MOESIM_SHARED;
  if (env !== undefined) return env === '' ? path.join(REPO_ROOT, '.no-shared-folder') : path.resolve(env);
  return path.resolve(REPO_ROOT, '../shared');
}

export interface SharedData {
  /** Every requested file exists. */
  readonly present: boolean;
  /** Why the tests are skipped (one line), or undefined when present. */
  readonly reason: string | undefined;
  /** Absolute path of a file (or folder) inside the shared folder. */
  path(relative: string): string;
  /** Reads a JSON file of the shared folder (only call it when `present`). */
  json<T>(relative: string): T;
  /** A describe/it title that carries the skip reason when the data is absent. */
  title(name: string): string;
}

const warned = new Set<string>();

/**
 * Looks up files of the shared folder (paths relative to it, e.g. `traces/real/x.jsonl.gz`).
 * When one is missing, prints the reason once (one line on stderr) and reports `present: false`.
 */
export function sharedData(...relatives: string[]): SharedData {
  const dir = sharedDir();
  const at = (rel: string) => path.join(dir, rel);
  const missing = relatives.filter((r) => !existsSync(at(r)));
  const reason =
    missing.length === 0
      ? undefined
      : `skipped: needs ${missing.map((m) => `../shared/${m}`).join(', ')} beside the checkout (reference data, not in the repository)`;
  if (reason && !warned.has(reason)) {
    warned.add(reason);
    console.warn(`moesim tests: ${reason}`);
  }
  return {
    present: missing.length === 0,
    reason,
    path: at,
    json: <T>(rel: string) => JSON.parse(readFileSync(at(rel), 'utf8')) as T,
    title: (name: string) => (reason ? `${name} (${reason})` : name),
  };
}
