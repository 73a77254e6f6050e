/**
 * CI's second pass (a copy of the checkout with nothing beside it) leaves out the files listed in
 * `.ci/alone-skip.txt` to save time. That is only sound for a test that behaves the same with and
 * without the reference data beside the checkout: each listed file must exist and neither it nor
 * a test helper it imports may mention the shared folder (`sharedDir`, `sharedData`, `shared/`).
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/cli.ts';

const LIST = readFileSync(path.join(REPO_ROOT, '.ci/alone-skip.txt'), 'utf8')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l !== '' && !l.startsWith('#'));

/** Mentions of the shared reference folder in a test or helper's code (comments included: be strict). */
const SHARED = /sharedDir|sharedData|MOESIM_SHARED|shared\//;

/** The file and the test helpers it imports, transitively. */
function withHelpers(rel: string, seen = new Set<string>()): Set<string> {
  if (seen.has(rel)) return seen;
  seen.add(rel);
  const text = readFileSync(path.join(REPO_ROOT, rel), 'utf8');
  for (const m of text.matchAll(/from '(\.[^']+)'/g)) {
    const dep = path.posix.normalize(path.posix.join(path.posix.dirname(rel), m[1]!));
    if (dep.startsWith('test/helpers/')) withHelpers(dep, seen);
  }
  return seen;
}

describe('.ci/alone-skip.txt', () => {
  it(`lists ${LIST.length} test files that exist and never touch ../shared`, () => {
    expect(LIST.length).toBeGreaterThan(0);
    for (const f of LIST) {
      expect(existsSync(path.join(REPO_ROOT, f)), f).toBe(true);
      expect(f).toMatch(/^test\/.*\.test\.ts$/);
      for (const g of withHelpers(f)) {
        const hit = readFileSync(path.join(REPO_ROOT, g), 'utf8').match(SHARED);
        expect(hit?.[0], `${f} → ${g}`).toBeUndefined();
      }
    }
  });
});
