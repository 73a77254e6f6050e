/**
 * `npm run bench -- --vs <rev>` as a user runs it: bad input is a one-line error with exit code
 * 2 before anything runs; a real comparison (this checkout's HEAD against the working tree, the
 * `throughput` suite, one round) prints the table, writes the rounds' values and removes its
 * worktree. The comparison needs git history: skipped in a copy of the checkout without it.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { removeWorktree } from '../../bench/vs.ts';
import { REPO_ROOT, runProcess } from '../helpers/cli.ts';

const RUN = path.join(REPO_ROOT, 'bench/run.ts');
const TSX = path.join(REPO_ROOT, 'node_modules/.bin/tsx');
const bench = (args: string[], timeoutMs?: number) => runProcess(TSX, [RUN, ...args], REPO_ROOT, timeoutMs);

const inGit =
  spawnSync('git', ['-C', REPO_ROOT, 'rev-parse', '--verify', '--quiet', 'HEAD^{commit}'], { encoding: 'utf8' })
    .status === 0;

describe('bench --vs', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'moesim-bench-vs-test-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('rejects bad input with one line and exit code 2, writing nothing', async () => {
    const out = path.join(dir, 'bad.json');
    const cases: [string[], RegExp][] = [
      [
        ['--vs', 'no-such-revision-xyz', '--out', out],
        inGit ? /'no-such-revision-xyz' is not a commit/ : /is not a git checkout/,
      ],
      [['--vs', 'HEAD', '--rounds', '0', '--out', out], /--rounds: expected a whole number ≥ 1, got '0'/],
      [['--vs', 'HEAD', '--table', 'html', '--out', out], /--table: expected box or markdown, got 'html'/],
      [['--vs', 'HEAD', '--figures', '(', '--out', out], /--figures: '\(' is not a regular expression/],
      [['--rounds', '2'], /--rounds goes with --vs/],
      [['--vs', 'HEAD', '--profile'], /--profile and --vs do not go together/],
      [['--vs', 'HEAD', 'no-such-suite'], /unknown suite 'no-such-suite'/],
    ];
    const results = await Promise.all(cases.map(([args]) => bench(args)));
    results.forEach((r, i) => {
      const [args, message] = cases[i]!;
      expect(r.status, args.join(' ')).toBe(2);
      expect(r.stderr.trim().split('\n'), args.join(' ')).toHaveLength(1);
      expect(r.stderr, args.join(' ')).toMatch(message);
      expect(r.stdout).toBe('');
    });
    expect(existsSync(out)).toBe(false);
  });

  it.skipIf(!inGit)(
    'compares HEAD with the working tree: a table on stdout, every round in --out, the worktree removed',
    async () => {
      const out = path.join(dir, 'vs.json');
      const r = await bench(
        ['--vs', 'HEAD', '--rounds', '1', '--table', 'markdown', '--out', out, 'throughput'],
        300_000,
      );
      expect(r.status, r.stderr).toBe(0);
      const lines = r.stdout.trim().split('\n');
      expect(lines[0]).toMatch(/^bench --vs: base [0-9a-f]{8} → head [0-9a-f]{8}(\+changes)?, 1 round each, medians$/);
      expect(lines[1]).toBe('| benchmark | figure | base | head | head/base | better | verdict |');
      const saved = JSON.parse(readFileSync(out, 'utf8')) as {
        base: { commit: string };
        rounds: number;
        suites: string[];
        figures: { name: string; figure: string; base: number[]; head: number[] }[];
      };
      expect(saved.base.commit).toMatch(/^[0-9a-f]{40}$/);
      expect(saved.rounds).toBe(1);
      expect(saved.suites).toEqual(['throughput']);
      // The throughput suite's timing figures differ from run to run, so some rows exist; each has one value per side.
      expect(saved.figures.some((f) => f.figure === 'simulatedSPerWallS')).toBe(true);
      for (const f of saved.figures) {
        expect(f.base.length, `${f.name} ${f.figure}`).toBeLessThanOrEqual(1);
        expect(f.head.length, `${f.name} ${f.figure}`).toBeLessThanOrEqual(1);
        // A row's table line is there.
        expect(r.stdout).toContain(`| ${f.name} | ${f.figure} |`);
      }
      // The worktree it named is gone, and git no longer lists it.
      const tree = /checking out [0-9a-f]+ into (\S+)/.exec(r.stderr)?.[1];
      expect(tree).toBeDefined();
      expect(existsSync(tree!)).toBe(false);
      const listed = spawnSync('git', ['-C', REPO_ROOT, 'worktree', 'list', '--porcelain'], {
        encoding: 'utf8',
      }).stdout;
      expect(listed).not.toContain(tree!);
    },
    320_000,
  );
});

describe('bench --vs worktree removal', () => {
  const hasGit = spawnSync('git', ['--version']).status === 0;
  it.skipIf(!hasGit)(
    'removes the tree and its record, an installed node_modules with it, and never follows a linked one',
    () => {
      const root = mkdtempSync(path.join(tmpdir(), 'moesim-vs-remove-'));
      try {
        const repo = path.join(root, 'repo');
        const g = (...args: string[]) => {
          const r = spawnSync('git', ['-C', repo, ...args], { encoding: 'utf8' });
          expect(r.status, `git ${args.join(' ')}: ${r.stderr}`).toBe(0);
          return r.stdout;
        };
        mkdirSync(repo);
        g('init', '-q');
        writeFileSync(path.join(repo, 'a.txt'), 'a\n');
        g('add', 'a.txt');
        g('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '-m', 'a');
        // The checkout's own node_modules, which a linked one points at.
        const own = path.join(repo, 'node_modules');
        mkdirSync(own);
        writeFileSync(path.join(own, 'keep.txt'), 'keep\n');
        for (const linked of [true, false]) {
          const tmp = mkdtempSync(path.join(root, 'vs-'));
          const tree = path.join(tmp, 'tree');
          g('worktree', 'add', '--detach', '--quiet', tree, 'HEAD');
          if (linked) symlinkSync(own, path.join(tree, 'node_modules'), 'dir');
          else {
            mkdirSync(path.join(tree, 'node_modules', 'pkg'), { recursive: true });
            writeFileSync(path.join(tree, 'node_modules', 'pkg', 'index.js'), '\n');
          }
          removeWorktree(repo, tmp, tree);
          expect(existsSync(tmp), `linked ${linked}`).toBe(false);
          expect(g('worktree', 'list', '--porcelain')).not.toContain(tree);
          expect(readFileSync(path.join(own, 'keep.txt'), 'utf8')).toBe('keep\n');
        }
      } finally {
        rmSync(root, { recursive: true, force: true });
      }
    },
  );
});
