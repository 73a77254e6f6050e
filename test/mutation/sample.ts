/**
 * A seeded random sample of the whole set's mutants, for `npm run mutation -- --sample=N --seed=S`:
 * a whole-set run takes many hours on two cores, a sample of a few hundred mutants an hour or so.
 * Every mutant Stryker would make in every folder of folders.ts is listed (Stryker's own
 * instrumenter, so the list is Stryker's), N are drawn uniformly without replacement, and each
 * folder's drawn mutants are run against that folder's guarding tests through `mutate` ranges that
 * are exactly the mutant's node. A range also takes in the mutants nested inside that node (a
 * block's statements); sample-ignorer.mjs leaves those out (Stryker reports them as ignored), and
 * the few still run (another mutator on the same node, a node between two drawn ones) are not counted. The estimate is the killed share of the drawn
 * mutants (static ones, ignored as in a full run, leave the sample) with its exact binomial
 * (Clopper–Pearson) 95 % interval.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { Instrumenter } from '@stryker-mutator/instrumenter';
import { Rng } from '../../sim/kernel/rng.ts';
import type { MutationFolder } from './folders.ts';

/** A mutant as Stryker's instrumenter and its JSON results describe it (lines 0-based). */
interface Located {
  readonly fileName: string;
  readonly mutatorName: string;
  readonly replacement?: string;
  readonly location: { start: { line: number; column: number }; end: { line: number; column: number } };
}

export interface SampledFolder {
  readonly folder: MutationFolder;
  /** Stryker mutate patterns, one per drawn mutant: `file:startLine:startCol-endLine:endCol` (1-based lines). */
  readonly ranges: string[];
  /** Keys of the drawn mutants (see mutantKey). */
  readonly keys: Set<string>;
  /** The drawn nodes as [startLine, startCol, endLine, endCol] (Babel: 1-based lines), for sample-ignorer.mjs. */
  readonly locs: number[][];
}

/**
 * A mutant's identity across the listing and a run: file, node location, mutator and replacement.
 * `zeroBased`: the instrumenter's lines and columns count from 0, a run's results from 1 (both).
 */
export function mutantKey(m: Located, zeroBased: boolean): string {
  const d = zeroBased ? 1 : 0;
  const { start, end } = m.location;
  const at = `${start.line + d}:${start.column + d}-${end.line + d}:${end.column + d}`;
  return `${relative(process.cwd(), m.fileName)}:${at} ${m.mutatorName} ${m.replacement ?? ''}`;
}

function tsFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...tsFiles(p));
    else if (e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) out.push(p);
  }
  return out.sort();
}

const quietLog = {
  isTraceEnabled: () => false,
  isDebugEnabled: () => false,
  trace() {},
  debug() {},
  info() {},
  warn() {},
  error() {},
  fatal() {},
};

/** Every mutant of the folders (as Stryker instruments them with no mutator excluded), in file order. */
export async function listMutants(folders: readonly MutationFolder[]): Promise<{ folder: number; m: Located }[]> {
  const all: { folder: number; m: Located }[] = [];
  for (const [i, f] of folders.entries()) {
    if (f.mutate.length !== 1 || f.mutate[0] !== `${f.name}/**/*.ts`) {
      throw new Error(`mutation sample: folder ${f.name} mutates ${f.mutate.join(',')}, expected ${f.name}/**/*.ts`);
    }
    const files = tsFiles(f.name).map((name) => ({ name, mutate: true as const, content: readFileSync(name, 'utf8') }));
    const instrumenter = new Instrumenter(quietLog as never);
    const result = await instrumenter.instrument(files, { plugins: null, excludedMutations: [], ignorers: [] });
    for (const m of result.mutants) all.push({ folder: i, m });
  }
  return all;
}

/** Draw n of the folders' mutants uniformly without replacement (partial Fisher–Yates on a seeded stream). */
export async function drawSample(
  folders: readonly MutationFolder[],
  n: number,
  seed: number,
): Promise<SampledFolder[]> {
  const all = await listMutants(folders);
  if (n > all.length) throw new Error(`mutation sample: --sample=${n} exceeds the ${all.length} mutants of the set`);
  const rng = new Rng(`mutation-sample:${seed}`);
  const idx = all.map((_, i) => i);
  for (let i = 0; i < n; i++) {
    const j = i + rng.int(idx.length - i);
    [idx[i], idx[j]] = [idx[j] as number, idx[i] as number];
  }
  const out: SampledFolder[] = folders.map((folder) => ({ folder, ranges: [], keys: new Set(), locs: [] }));
  for (const i of idx.slice(0, n).sort((a, b) => a - b)) {
    const { folder, m } = all[i] as { folder: number; m: Located };
    const { start, end } = m.location;
    const group = out[folder] as SampledFolder;
    group.ranges.push(`${m.fileName}:${start.line + 1}:${start.column}-${end.line + 1}:${end.column}`);
    group.keys.add(mutantKey(m, true));
    group.locs.push([start.line + 1, start.column, end.line + 1, end.column]);
  }
  console.log(`mutation sample: ${n} of ${all.length} mutants, seed ${seed}`);
  return out.filter((g) => g.keys.size > 0);
}

function logBinomPmf(n: number, k: number, p: number): number {
  let lc = 0;
  for (let i = 1; i <= k; i++) lc += Math.log(n - k + i) - Math.log(i);
  return lc + (k === 0 ? 0 : k * Math.log(p)) + (k === n ? 0 : (n - k) * Math.log1p(-p));
}

/** P(X ≤ k) for X ~ Binomial(n, p). */
function binomCdf(n: number, k: number, p: number): number {
  let s = 0;
  for (let i = 0; i <= k; i++) s += Math.exp(logBinomPmf(n, i, p));
  return Math.min(1, s);
}

/** The p in [0, 1] where the decreasing function f crosses target, by bisection. */
function solveDecreasing(f: (p: number) => number, target: number): number {
  let lo = 0;
  let hi = 1;
  for (let it = 0; it < 60; it++) {
    const mid = (lo + hi) / 2;
    if (f(mid) > target) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}

/** Exact (Clopper–Pearson) two-sided interval for k successes in n trials at level 1 − alpha. */
export function clopperPearson(k: number, n: number, alpha = 0.05): [number, number] {
  if (n === 0) return [0, 1];
  // Lower: P(X ≥ k | p) = alpha/2; upper: P(X ≤ k | p) = alpha/2.
  const lower = k === 0 ? 0 : solveDecreasing((p) => binomCdf(n, k - 1, p), 1 - alpha / 2);
  const upper = k === n ? 1 : solveDecreasing((p) => binomCdf(n, k, p), alpha / 2);
  return [lower, upper];
}
