/**
 * Every repository file the documentation and the profiles cite exists. A cited test that does
 * not exist suggests a check nobody runs (two runtime profiles cited such tests), so the
 * citations are checked like code:
 * - a path from a top-level folder of the repository (`test/…`, `sim/…`, `experiments/…`,
 *   `hardware-profiles/…`, …) in any Markdown file, hardware or workload profile, or experiment
 *   note must exist;
 * - a relative path or a bare source file name in backticks (`runtimes/moe-gen.json`,
 *   `executor.ts`) must be the tail of some file of the repository.
 * Paths outside the checkout (`../shared/…`, the shared `reference/…`), run outputs (`results/…`)
 * and the files the plugin tutorial tells the reader to create are not citations of ours.
 * Figures quoted from a calibration are checked where they are computed (runtime-profiles and
 * moepic tests).
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/cli.ts';

/** Folders that are not the repository's content (outputs, dependencies, tools' scratch). */
const SKIP_DIRS = new Set(['node_modules', '.git', 'results', '.vitest-cache']);
/** Top-level folders a citation starts from. */
const ROOTS = [
  'test',
  'sim',
  'experiments',
  'hardware-profiles',
  'policies',
  'workloads',
  'bench',
  'docs',
  'traces',
  'bin',
  'assembly',
  'examples',
  'build',
];
/** Files the plugin tutorial (README.md, docs/PLUGINS.md) has the reader write: not in the repository. */
const TUTORIAL = new Set([
  'experiments/my.yaml',
  'test/plugins/my-cache.test.ts',
  'plugins/my-cache.ts',
  'plugins/my-cache.yaml',
  'src/my-cache.ts',
  'test/my-cache.test.ts',
]);
/**
 * Files of other repositories that profiles and notes cite by their own path (each note names the
 * repository beside it): kekzl/imp, EchoCog/gpt-oss-20b, llama.cpp and gajsanders/moe-trace.
 */
const OTHER_REPOS = new Set([
  'docs/roadmap.md',
  'docs/gpt-oss-20b-architecture.md',
  'examples/moe-trace',
  'docs/findings/007_cache_policy_headroom.md',
]);
/**
 * Files `npm ci` builds (the `prepare` script of package.json), ignored by git: a copy of the
 * checkout without them (CI's second pass) still cites them rightly. Each must be named by that script.
 */
const BUILT = new Set(['build/eamc.wasm']);
/** Prefixes of relative paths that point outside the checkout or at run outputs. */
const ELSEWHERE = ['../', 'reference/', 'results/', 'reports/'];

/** Every file under `dir`, relative to the repository root. */
function walk(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(path.join(REPO_ROOT, dir))) {
    if (SKIP_DIRS.has(name) || (name.startsWith('.') && name !== '.ci')) continue;
    const rel = dir ? `${dir}/${name}` : name;
    let st;
    try {
      st = statSync(path.join(REPO_ROOT, rel));
    } catch {
      continue; // removed while we walk (another test's temporary folder)
    }
    if (st.isDirectory()) walk(rel, out);
    else out.push(rel);
  }
  return out;
}

const ALL = walk('');
/** Documents whose citations are checked: Markdown anywhere, profiles and experiment notes. */
const NOTES = /^(hardware-profiles|workloads\/profiles|experiments)\/.*\.(json|ya?ml|txt)$/;
const DOCS = ALL.filter((f) => f.endsWith('.md') || NOTES.test(f));

/** A path from a top-level folder, at the start of a line or after a space, quote, backtick or bracket. */
const ROOTED = new RegExp(`(?:^|(?<=[\\s\`'"(\\[]))((?:${ROOTS.join('|')})/[\\w./-]*[\\w/])`, 'gm');
/** A relative path or a bare source file name in backticks. */
const QUOTED = /`([\w-][\w.-]*(?:\/[\w.-]+)*\.(?:ts|mjs|ya?ml|json|md))`/g;

function rootedCitations(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(ROOTED)) {
    const next = text[m.index + m[0].length] ?? '';
    if (/[*<{…]/.test(next)) continue; // a pattern (`sim/*.ts`, `experiments/<name>.yaml`), not a file
    out.push(m[1]!);
  }
  return out;
}

function quotedCitations(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(QUOTED)) {
    const p = m[1]!;
    if (!p.includes('/') && !/\.(ts|mjs)$/.test(p)) continue; // `results.json` and the like: outputs
    if (ELSEWHERE.some((e) => p.startsWith(e))) continue;
    out.push(p);
  }
  return out;
}

describe('citations of repository files', () => {
  it('finds the citations it is meant to find (and skips patterns)', () => {
    const text = 'tested by test/unit/runtime-calibration.test.ts); see `sim/serving/` and sim/*.ts';
    expect(rootedCitations(text)).toEqual(['test/unit/runtime-calibration.test.ts', 'sim/serving/']);
    expect(rootedCitations('Mean |sim/T − 1| and experiments/<name>.yaml')).toEqual([]);
    const quoted = '`runtimes/moe-gen.json`, `executor.ts`, `results.json`, `../shared/x.md`';
    expect(quotedCitations(quoted)).toEqual(['runtimes/moe-gen.json', 'executor.ts']);
  });

  it(`every path from a top-level folder exists (${DOCS.length} documents)`, () => {
    const missing: string[] = [];
    let n = 0;
    for (const f of DOCS) {
      for (const p of rootedCitations(readFileSync(path.join(REPO_ROOT, f), 'utf8'))) {
        n++;
        if (BUILT.has(p)) continue;
        if (!TUTORIAL.has(p) && !OTHER_REPOS.has(p) && !existsSync(path.join(REPO_ROOT, p)))
          missing.push(`${f} cites ${p}`);
      }
    }
    expect(n).toBeGreaterThan(200);
    expect(missing).toEqual([]);
  });

  it('every built file cited is written by the prepare script', () => {
    const pkg = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as {
      scripts: Record<string, string>;
    };
    for (const b of BUILT) expect(pkg.scripts.prepare).toContain(b);
  });

  it('every relative path or source file name in backticks is the tail of a file of the repository', () => {
    const missing: string[] = [];
    for (const f of DOCS) {
      for (const p of quotedCitations(readFileSync(path.join(REPO_ROOT, f), 'utf8'))) {
        if (TUTORIAL.has(p) || ALL.some((t) => t === p || t.endsWith(`/${p}`))) continue;
        if (existsSync(path.join(REPO_ROOT, path.dirname(f), p))) continue;
        missing.push(`${f} cites ${p}`);
      }
    }
    expect(missing).toEqual([]);
  });
});
