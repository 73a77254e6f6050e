/**
 * `npm run bench -- --vs <rev> [--rounds N] [--figures <pattern>] [--table markdown] [--out F] [suite…]`:
 * the bench's figures before and after a change, on one machine in one sitting.
 *
 * The base revision is checked out into a temporary git worktree (its dependencies: this
 * checkout's `node_modules` linked when both `package-lock.json` are identical, else `npm ci`
 * there; its WebAssembly kernel built by its own `prepare` script). Then, `rounds` times
 * (default 3: on a shared machine one run in a few is slowed by up to a third, and with two
 * rounds both runs of one side can be), the base and the working tree (head: this checkout as
 * it is, uncommitted changes included) each run their own `npm run bench -- <suites>` in a
 * fresh process, alternating, so that a drift in the machine's load falls on both sides; each
 * run's records are read back. The runs' output goes to stderr. The table (`compare.ts`:
 * medians per side, head/base, which way is better and whether the rounds' ranges are apart)
 * goes to stdout, every round's values to `bench-vs.json` (or `--out`; written atomically).
 * The worktree is removed at the end, on a failure and on Ctrl-C / SIGTERM.
 *
 * Bad input (not a git checkout, a revision that is not a commit, a bad option value) is a
 * one-line error and exit code 2, before anything runs; a bench run that fails stops the
 * comparison with exit code 1.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, lstatSync, mkdtempSync, readFileSync, rmSync, symlinkSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { layout, type TableStyle } from '../experiments/outputs/table.ts';
import { toJson, writeFileAtomic } from '../experiments/outputs/atomic.ts';
import { compareRounds, formatValue, type ComparedFigure } from './compare.ts';
import type { BenchRecord } from './serving-bench.ts';

/** A usage error of `--vs` (exit code 2). */
export class VsUsageError extends Error {}

/** The comparison was stopped by a signal (exit code 128 + its number), after cleaning up. */
export class VsInterrupted extends Error {
  constructor(readonly exitCode: number) {
    super('interrupted');
  }
}

export interface VsOptions {
  /** The base revision (anything `git rev-parse` takes). */
  readonly rev: string;
  /** Suites to run (all when empty). */
  readonly suites: readonly string[];
  readonly rounds: number;
  /** Keep only the figures whose name matches. */
  readonly figures?: RegExp;
  readonly table: TableStyle;
  /** The checkout (head side). */
  readonly repoDir: string;
  /** Where every round's values go (JSON). */
  readonly out: string;
}

function git(repoDir: string, args: string[]): { ok: boolean; out: string; err: string } {
  const r = spawnSync('git', ['-C', repoDir, ...args], { encoding: 'utf8' });
  return { ok: r.status === 0, out: (r.stdout ?? '').trim(), err: (r.stderr ?? '').trim() };
}

/** The full commit id of `rev` in `repoDir` (a usage error if it is not a commit there). */
export function resolveCommit(repoDir: string, rev: string): string {
  if (!git(repoDir, ['rev-parse', '--is-inside-work-tree']).ok)
    throw new VsUsageError(
      `--vs: ${repoDir} is not a git checkout (the base revision is checked out from its history)`,
    );
  const r = git(repoDir, ['rev-parse', '--verify', '--quiet', `${rev}^{commit}`]);
  if (!r.ok || !/^[0-9a-f]{40}$/.test(r.out))
    throw new VsUsageError(`--vs: '${rev}' is not a commit of this repository`);
  return r.out;
}

/**
 * Removes the worktree `tree` (inside the temporary folder `tmp`) of `repoDir`: a linked
 * node_modules is unlinked first (never followed: it is the checkout's own), one that npm ci
 * installed goes with the tree; then the folder, and git's record of the worktree.
 */
export function removeWorktree(repoDir: string, tmp: string, tree: string): void {
  const nm = path.join(tree, 'node_modules');
  if (existsSync(nm) && lstatSync(nm).isSymbolicLink()) unlinkSync(nm);
  git(repoDir, ['worktree', 'remove', '--force', tree]);
  rmSync(tmp, { recursive: true, force: true });
  git(repoDir, ['worktree', 'prune']);
}

/** A child process's exit code, as a promise (a signal counts as failure); `started` gets the child. */
function run(cmd: string, args: string[], cwd: string, started: (c: ChildProcess) => void): Promise<number> {
  return new Promise((resolve, reject) => {
    // stdout to our stderr: the table on stdout is the comparison's only result. A process
    // group of its own, so that a signal to this process stops npm and everything it started.
    const child = spawn(cmd, args, { cwd, stdio: ['ignore', 2, 2], detached: true });
    started(child);
    child.on('error', reject);
    child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  });
}

function readRecords(file: string): BenchRecord[] {
  const v = JSON.parse(readFileSync(file, 'utf8')) as unknown;
  if (!Array.isArray(v)) throw new Error(`${file} is not a list of bench records`);
  return v as BenchRecord[];
}

/** The table of `rows` (cells as text). */
export function vsTable(rows: readonly ComparedFigure[], style: TableStyle): string {
  const head = ['benchmark', 'figure', 'base', 'head', 'head/base', 'better', 'verdict'];
  const body = rows.map((r) => [
    r.name,
    r.figure,
    formatValue(r.baseMedian),
    formatValue(r.headMedian),
    Number.isFinite(r.ratio) ? r.ratio.toFixed(3) : '—',
    r.better ?? '—',
    r.verdict,
  ]);
  return layout(head, body, style);
}

export async function runVs(o: VsOptions): Promise<void> {
  if (!(Number.isInteger(o.rounds) && o.rounds >= 1))
    throw new VsUsageError(`--rounds: expected a whole number ≥ 1, got ${o.rounds}`);
  const sha = resolveCommit(o.repoDir, o.rev);
  const headSha = git(o.repoDir, ['rev-parse', 'HEAD']).out;
  const dirty = git(o.repoDir, ['status', '--porcelain', '--untracked-files=no']).out !== '';
  const tmp = mkdtempSync(path.join(tmpdir(), `moesim-vs-${sha.slice(0, 8)}-`));
  const tree = path.join(tmp, 'tree');
  let child: ChildProcess | null = null;
  let cleaned = false;
  const cleanup = (): void => {
    if (cleaned) return;
    cleaned = true;
    try {
      removeWorktree(o.repoDir, tmp, tree);
    } catch (err) {
      process.stderr.write(
        `bench --vs: could not remove ${tmp} (${(err as Error).message}); \`git worktree prune\` after deleting it\n`,
      );
    }
  };
  // A signal stops the running child's process group; the loop below sees `stopped` once the
  // child has exited and leaves through `finally` (cleanup). Between children (only while the
  // table is written), clean up and exit at once.
  let stopped = 0;
  const onSignal = (sig: NodeJS.Signals): void => {
    process.stderr.write(`bench --vs: ${sig}, stopping and removing the worktree\n`);
    stopped = sig === 'SIGINT' ? 130 : 143;
    if (child?.pid !== undefined && child.exitCode === null) {
      try {
        process.kill(-child.pid, 'SIGTERM');
      } catch {
        // Already gone.
      }
      return;
    }
    cleanup();
    process.exit(stopped);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const say = (s: string): void => void process.stderr.write(`bench --vs: ${s}\n`);
  /** Runs a child (the one a signal stops); throws once a signal stopped the comparison. */
  const step = async (cmd: string, args: string[], cwd: string): Promise<number> => {
    const code = await run(cmd, args, cwd, (c) => (child = c));
    if (stopped) throw new VsInterrupted(stopped);
    return code;
  };
  try {
    say(`checking out ${sha.slice(0, 12)} into ${tree}`);
    const add = git(o.repoDir, ['worktree', 'add', '--detach', '--quiet', tree, sha]);
    if (!add.ok) throw new Error(`git worktree add failed: ${add.err.split('\n')[0]}`);
    const lock = (dir: string) =>
      existsSync(path.join(dir, 'package-lock.json'))
        ? readFileSync(path.join(dir, 'package-lock.json'), 'utf8')
        : null;
    const headLock = lock(o.repoDir);
    if (headLock !== null && headLock === lock(tree) && existsSync(path.join(o.repoDir, 'node_modules'))) {
      symlinkSync(path.join(o.repoDir, 'node_modules'), path.join(tree, 'node_modules'), 'dir');
      const pkg = JSON.parse(readFileSync(path.join(tree, 'package.json'), 'utf8')) as {
        scripts?: Record<string, string>;
      };
      if (pkg.scripts?.prepare) {
        say('building the base revision (npm run prepare)');
        if ((await step('npm', ['run', '-s', 'prepare'], tree)) !== 0)
          throw new Error('npm run prepare failed in the base revision');
      }
    } else {
      say('the base revision locks other dependencies: npm ci there');
      if ((await step('npm', ['ci', '--no-fund', '--no-audit'], tree)) !== 0)
        throw new Error('npm ci failed in the base revision');
    }
    const sides = [
      { label: `base ${sha.slice(0, 8)}`, dir: tree, rounds: [] as BenchRecord[][] },
      { label: `head ${headSha.slice(0, 8)}${dirty ? '+changes' : ''}`, dir: o.repoDir, rounds: [] as BenchRecord[][] },
    ];
    for (let r = 1; r <= o.rounds; r++) {
      for (const side of sides) {
        say(`round ${r}/${o.rounds}: ${side.label}${o.suites.length > 0 ? ` (${o.suites.join(' ')})` : ''}`);
        // The base revision's bench writes bench.json in its worktree (an older bench has no
        // --out); head's records go to the temporary folder, not over this checkout's bench.json.
        const head = side.dir === o.repoDir;
        const records = head ? path.join(tmp, `head-${r}.json`) : path.join(tree, 'bench.json');
        const code = await step(
          'npm',
          ['run', '-s', 'bench', '--', ...(head ? ['--out', records] : []), ...o.suites],
          side.dir,
        );
        if (code !== 0) throw new Error(`npm run bench failed at ${side.label} (exit ${code})`);
        side.rounds.push(readRecords(records));
      }
    }
    const rows = compareRounds(sides[0]!.rounds, sides[1]!.rounds, o.figures);
    const heading = `bench --vs: ${sides[0]!.label} → ${sides[1]!.label}, ${o.rounds} round${o.rounds > 1 ? 's' : ''} each, medians`;
    process.stdout.write(`${heading}\n${vsTable(rows, o.table)}\n`);
    await writeFileAtomic(
      o.out,
      toJson({
        base: { rev: o.rev, commit: sha },
        head: { commit: headSha, uncommittedChanges: dirty },
        rounds: o.rounds,
        suites: o.suites,
        figures: rows,
      }),
    );
    say(`wrote ${o.out}`);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    cleanup();
  }
}
