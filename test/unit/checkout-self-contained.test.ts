/**
 * The checkout stands on its own:
 * - no file of the repository names an absolute path of one machine (a home or work folder);
 * - the traces shipped in `traces/` are the files their license notes describe: the OLMoE
 *   aggregate is byte-identical to its recorded hash, the Apache-2.0 text is beside it, every
 *   data file has a row in `traces/LICENSES.md`, and the trace commands read it on any clone;
 * - `.ci/run` runs the suite a second time from a copy with nothing beside it.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT, runCli } from '../helpers/cli.ts';

/** Folders that are not part of the repository's content. */
const SKIP_DIRS = new Set(['node_modules', '.git', 'results', '.vitest-cache']);
const TEXT = /\.(ts|mjs|js|json|ya?ml|md|txt|csv|sh)$|^run$/;

function* files(dir: string): Generator<string> {
  for (const name of readdirSync(dir)) {
    // Hidden folders other than .ci are tools' or other tests' scratch space, not content.
    if (SKIP_DIRS.has(name) || (name.startsWith('.') && name !== '.ci')) continue;
    const full = path.join(dir, name);
    let st;
    try {
      st = statSync(full);
    } catch {
      continue; // removed while we walk (another test's temporary folder)
    }
    if (st.isDirectory()) yield* files(full);
    else if (TEXT.test(name) && st.size < 2_000_000) yield full;
  }
}

// Built from pieces so that this file does not match itself.
const MACHINE_ROOTS = ['/wo' + 'rk/', '/ho' + 'me/', '/Us' + 'ers/', '/ro' + 'ot/', '/m' + 'nt/'];
const ABSOLUTE = new RegExp(`(^|[\\s'"\`(=:])(${MACHINE_ROOTS.map((r) => r.replace(/\//g, '\\/')).join('|')})`);

describe('a self-contained checkout', () => {
  it('no file names an absolute path of one machine', () => {
    const offenders: string[] = [];
    for (const f of files(REPO_ROOT)) {
      if (f.endsWith('package-lock.json')) continue;
      const lines = readFileSync(f, 'utf8').split('\n');
      lines.forEach((line, i) => {
        if (ABSOLUTE.test(line))
          offenders.push(`${path.relative(REPO_ROOT, f)}:${i + 1}: ${line.trim().slice(0, 100)}`);
      });
    }
    expect(offenders).toEqual([]);
  });

  it('.ci/run runs the suite again from a copy with nothing beside it', () => {
    const ci = readFileSync(path.join(REPO_ROOT, '.ci/run'), 'utf8');
    expect(ci).toMatch(/npm test[\s\S]*mktemp -d[\s\S]*ln -s[^\n]*node_modules[\s\S]*npm test/);
  });
});

describe('shipped traces and their licenses', () => {
  const traces = path.join(REPO_ROOT, 'traces');
  const licenses = readFileSync(path.join(traces, 'LICENSES.md'), 'utf8');

  it('the OLMoE aggregate is byte-identical to the recorded conversion, with the Apache-2.0 text beside it', () => {
    const sha = createHash('sha256')
      .update(readFileSync(path.join(traces, 'olmoe-routing-aggregates.json.gz')))
      .digest('hex');
    expect(sha).toBe('57e76860b077a13fcc5c298123eab9f52f091263e8412929718fe7d70dd501d5');
    expect(licenses).toContain(sha);
    expect(readFileSync(path.join(traces, 'LICENSE-Apache-2.0.txt'), 'utf8')).toMatch(/Apache License\s+Version 2\.0/);
    expect(licenses).toMatch(/allenai\/OLMoE[\s\S]*357454f4f647385839c0ff6b99a688dc7cd9c13f/);
  });

  it('every data file in traces/ has a license row', () => {
    const data = readdirSync(traces).filter((f) => !/\.(md|txt)$/.test(f));
    expect(data.length).toBeGreaterThan(0);
    for (const f of data) expect(licenses, f).toMatch(new RegExp(`\\| \`${f.replace(/\./g, '\\.')}\` \\|`));
  });

  it('`moesim trace stats` reads the shipped aggregate on any clone', () => {
    const r = runCli(['trace', 'stats', 'traces/olmoe-routing-aggregates.json.gz']);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain('OLMoE-1B-7B-0924');
    expect(r.stdout).toContain('Mixtral');
  });
});
