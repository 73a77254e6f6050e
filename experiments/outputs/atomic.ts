/**
 * Atomic file output: write to a temporary file in the same folder, then rename over the
 * target (rename is atomic on POSIX), so a reader — or a killed run — never sees a partial file.
 */
import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export function writeFileAtomic(file: string, data: string): void {
  mkdirSync(path.dirname(file), { recursive: true });
  const tmp = `${file}.tmp-${process.pid}`;
  try {
    writeFileSync(tmp, data);
    renameSync(tmp, file);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
}

/** Stable JSON: 2-space indentation and a final newline. */
export const toJson = (v: unknown): string => `${JSON.stringify(v, null, 2)}\n`;
