/**
 * Every shipped experiment config with one or two of its values changed at random — a number
 * set to 0, −1, ½, 10¹² or 2⁵³, a value of the wrong type, a key deleted or unknown one added,
 * an array emptied, shortened or lengthened — goes through exactly what `moesim validate` does
 * (`validateConfig`, then `preflight`: every run's world built), in this process and with no
 * file written (relative paths resolve against the shipped file's folder). It either passes or
 * fails with a `UserError` (one line, exit 2) naming its file: never a crash of another kind
 * (which the CLI reports as an internal error, exit 1). The generator reaches every config, both
 * outcomes and every kind of change (asserted).
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import * as fc from 'fast-check';
import YAML from 'yaml';
import { describe, expect, it } from 'vitest';
import { validateConfig } from '../../experiments/config/load.ts';
import { preflight } from '../../experiments/runner.ts';
import { UserError } from '../../sim/kernel/errors.ts';
import { REPO_ROOT } from '../helpers/cli.ts';
import { applyChange, CHANGE_KINDS, type ChangeKind, changeArb } from '../helpers/mutate-values.ts';

/** The shipped configs: every YAML file under experiments/. */
function shippedConfigs(): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const f of readdirSync(d).sort()) {
      const p = path.join(d, f);
      if (statSync(p).isDirectory()) walk(p);
      else if (f.endsWith('.yaml')) out.push(p);
    }
  };
  walk(path.join(REPO_ROOT, 'experiments'));
  return out;
}

const FILES = shippedConfigs();
const DOCS = FILES.map((f) => YAML.parse(readFileSync(f, 'utf8')) as unknown);

describe('shipped configs with values changed', () => {
  it('validate to runs or fail with one user error naming the file, never another crash', async () => {
    const seen = { files: new Set<number>(), passed: 0, refused: 0, kinds: new Set<ChangeKind>() };
    await fc.assert(
      fc.asyncProperty(
        fc.nat({ max: FILES.length - 1 }),
        fc.array(changeArb, { minLength: 1, maxLength: 2 }),
        async (fi, changes) => {
          const file = FILES[fi]!;
          const doc = structuredClone(DOCS[fi]);
          for (const c of changes) seen.kinds.add(applyChange(doc, c).kind);
          seen.files.add(fi);
          try {
            const config = validateConfig(doc, file);
            await preflight({ config, file, baseDir: path.dirname(file) }, { onWarning: () => {} });
            seen.passed++;
          } catch (err) {
            if (!(err instanceof UserError)) throw err;
            expect(err.oneLine()).not.toMatch(/\n/);
            expect(err.file ?? err.oneLine()).toContain(path.basename(file));
            seen.refused++;
          }
        },
      ),
      { numRuns: 250 },
    );
    process.stderr.write(
      `config-mutation: ${seen.passed} passed, ${seen.refused} refused with a user error, ${seen.files.size} of ${FILES.length} configs\n`,
    );
    expect(seen.files.size).toBeGreaterThan(FILES.length * 0.8);
    expect(seen.passed).toBeGreaterThan(10);
    expect(seen.refused).toBeGreaterThan(50);
    expect([...seen.kinds].sort()).toEqual([...CHANGE_KINDS].sort());
  }, 120_000);
});
