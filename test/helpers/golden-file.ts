/**
 * The compare-or-update step of the exact golden tests (`test/golden/`): with `UPDATE_GOLDEN=1`
 * the serialised result is written as the expected file; otherwise it must equal that file byte
 * for byte, and a mismatch is shown as the parsed difference (which run and field moved).
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'vitest';

export const UPDATE_GOLDEN = process.env.UPDATE_GOLDEN === '1';

/** Compares `actual` (JSON text) with `expectedFile`, or writes it there under `UPDATE_GOLDEN=1`; `how`: the command that regenerates it. */
export function matchGolden(actual: string, expectedFile: string, how: string): void {
  if (UPDATE_GOLDEN) {
    mkdirSync(path.dirname(expectedFile), { recursive: true });
    writeFileSync(expectedFile, actual);
    return;
  }
  if (!existsSync(expectedFile)) {
    throw new Error(`no expected file ${path.relative(process.cwd(), expectedFile)}: run ${how} and commit it`);
  }
  const expected = readFileSync(expectedFile, 'utf8');
  if (actual !== expected) expect(JSON.parse(actual)).toEqual(JSON.parse(expected));
  expect(actual).toBe(expected);
}
