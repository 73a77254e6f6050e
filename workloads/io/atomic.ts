/**
 * Atomic output files: write `<out>.tmp-<pid>`, then rename it over `<out>`; on any failure
 * delete the temporary file, so a command that fails leaves nothing partial behind.
 */
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';

export const tempPathFor = (out: string): string => `${out}.tmp-${process.pid}`;

/**
 * Runs `fn` with a temporary path next to `out` and renames it to `out` if `fn` succeeds.
 * The parent directory of `out` is created if needed. Rethrows `fn`'s error after cleaning up.
 */
export async function withAtomicOutput<T>(out: string, fn: (tmpPath: string) => Promise<T>): Promise<T> {
  await mkdir(dirname(out), { recursive: true });
  const tmp = tempPathFor(out);
  try {
    const result = await fn(tmp);
    await rename(tmp, out);
    return result;
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}

/** Writes a whole text file atomically. */
export async function writeFileAtomic(out: string, text: string): Promise<void> {
  await withAtomicOutput(out, (tmp) => writeFile(tmp, text, 'utf8'));
}
