/**
 * Bad input through the real command line: every case must exit with code 2, print exactly one
 * line on stderr naming the file, the field path and the offending value (as far as the case
 * has them), print nothing on stdout, and create no output folder (errors are found before any
 * output exists).
 */
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pooled, runCli, runCliAsync, tempDir, type CliResult } from '../helpers/cli.ts';

const dir = tempDir('bad-input');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A small valid config; cases derive bad ones from it. */
const GOOD = `name: good
model: olmoe
hardware: rtx4090
workload:
  requests: 2
  promptTokens: { kind: fixed, tokens: 4 }
  outputTokens: { kind: fixed, tokens: 2 }
policies:
  - name: on-demand
`;

const write = (name: string, text: string): string => {
  const file = path.join(dir, name);
  writeFileSync(file, text);
  return file;
};

interface Case {
  readonly name: string;
  /** Config text (written to `<name>.yaml`), or null when `args` say everything. */
  readonly config: string | null;
  /** Arguments; `$CONFIG` is the written config, `$OUT` an output folder that must not appear. */
  readonly args?: readonly string[];
  /** Substrings the single stderr line must contain (beyond the file, which is checked when there is one). */
  readonly mentions: readonly string[];
}

const replace = (from: string | RegExp, to: string) => GOOD.replace(from, to);

const CASES: readonly Case[] = [
  { name: 'malformed YAML', config: 'model: [unclosed\n  - x: {\n', mentions: ['not valid YAML', 'line 1, column 9'] },
  { name: 'config not a mapping', config: '- just\n- a list\n', mentions: ['must be a mapping', '["just","a list"]'] },
  { name: 'missing model', config: replace('model: olmoe\n', ''), mentions: ['model:', '(missing)'] },
  {
    name: 'unknown model id',
    config: replace('model: olmoe', 'model: no-such-model'),
    mentions: ['model:', 'unknown model', '"no-such-model"'],
  },
  {
    name: 'unknown hardware id',
    config: replace('hardware: rtx4090', 'hardware: cray-1'),
    mentions: ['hardware:', 'unknown hardware', '"cray-1"'],
  },
  {
    name: 'unknown policy name',
    config: replace('name: on-demand', 'name: teleport'),
    mentions: ['policies[0].name', 'unknown policy', '"teleport"'],
  },
  {
    name: 'policy with an unknown parameter',
    config: replace('  - name: on-demand', '  - name: lru\n    capacityBananas: 3'),
    mentions: ['policies[0].capacityBananas', 'unknown field', '(got 3)'],
  },
  {
    name: 'negative maxBatchSize',
    config: replace('policies:', 'executor: { maxBatchSize: -4 }\npolicies:'),
    mentions: ['executor.maxBatchSize', '-4'],
  },
  {
    name: 'wrong type (string for requests)',
    config: replace('requests: 2', 'requests: "many"'),
    mentions: ['workload.requests', 'expected number', '"many"'],
  },
  {
    name: 'sweep over a path that is not a config section',
    config: replace('policies:', 'sweep:\n  wrokload.requests: [1, 2]\npolicies:'),
    mentions: ['sweep.wrokload.requests', 'cannot sweep'],
  },
  {
    name: 'sweep over a nonexistent path inside a section',
    config: replace('policies:', 'sweep:\n  workload.arrival.ratePerSecond: [1, 2]\npolicies:'),
    mentions: ['workload.arrival', 'ratePerSecond', 'sweep point'],
  },
  {
    name: 'bufferSlots too large for VRAM (10000 slots of mixtral on an A5000)',
    config: replace('model: olmoe', 'model: mixtral-8x7b')
      .replace('hardware: rtx4090', 'hardware: a5000-pcie4-1tb')
      .replace('policies:', 'executor: { bufferSlots: 10000 }\npolicies:'),
    mentions: ['executor.bufferSlots', 'do not fit', '10000'],
  },
  {
    name: 'plugin path that does not exist',
    config: replace('  - name: on-demand', '  - path: ./nowhere/policy.ts'),
    mentions: ['policies[0].path', 'not found', '"./nowhere/policy.ts"'],
  },
  {
    name: 'duplicate policy labels',
    config: replace('  - name: on-demand', '  - name: lru\n  - name: lru'),
    mentions: ['policies[1].label', 'same name', '"lru"'],
  },
  {
    name: 'unknown CLI option',
    config: GOOD,
    args: ['experiment', '$CONFIG', '--out', '$OUT', '--bogus-flag'],
    mentions: ['arguments', 'bogus-flag'],
  },
  {
    name: '`list` with a bad argument',
    config: null,
    args: ['list', 'gizmos'],
    mentions: ['arguments', 'what', '"gizmos"'],
  },
  {
    name: 'nonexistent config file',
    config: null,
    args: ['experiment', '$MISSING', '--out', '$OUT'],
    mentions: ['no such file'],
  },
  {
    name: '`validate` of a bad config',
    config: replace('requests: 2', 'requests: 0'),
    args: ['validate', '$CONFIG'],
    mentions: ['workload.requests', '(got 0)'],
  },
];

interface Prepared {
  readonly args: string[];
  readonly file: string | undefined;
  readonly out: string;
}

function prepare(c: Case): Prepared {
  const slug = c.name.replace(/[^a-z0-9]+/gi, '-').toLowerCase();
  const config = c.config === null ? undefined : write(`${slug}.yaml`, c.config);
  const missing = path.join(dir, 'does-not-exist.yaml');
  const out = path.join(dir, `out-${slug}`);
  const raw = c.args ?? ['experiment', '$CONFIG', '--out', '$OUT'];
  const args = raw.map((a) => (a === '$CONFIG' ? config! : a === '$OUT' ? out : a === '$MISSING' ? missing : a));
  // The file the error must name: the config, or the missing one; argument errors have none.
  const file = raw.includes('$MISSING')
    ? missing
    : raw[0] === 'list' || raw.includes('--bogus-flag')
      ? undefined
      : config;
  return { args, file, out };
}

describe('CLI: bad input exits 2 with one line naming file, field and value', () => {
  const prepared = CASES.map(prepare);
  let results: CliResult[] = [];
  // The invocations are independent; overlapping them halves the wall time of this file.
  beforeAll(async () => {
    results = await pooled(
      prepared.map((p) => () => runCliAsync(p.args)),
      4,
    );
  }, 300_000);

  it.each(CASES.map((c, i) => [c.name, i] as const))('%s', (_name, i) => {
    const c = CASES[i]!;
    const p = prepared[i]!;
    const r = results[i]!;
    expect(r.status, r.stderr).toBe(2);
    expect(r.stdout).toBe('');
    const lines = r.stderr.split('\n').filter((l) => l.length > 0);
    expect(lines, r.stderr).toHaveLength(1);
    const line = lines[0]!;
    expect(line.startsWith('moesim: ')).toBe(true);
    if (p.file) expect(line).toContain(p.file);
    for (const m of c.mentions) expect(line).toContain(m);
    // No stack trace, no internal error.
    expect(line).not.toMatch(/internal error|\bat .*\.ts:\d+/);
    expect(existsSync(p.out)).toBe(false);
  });
});

describe('CLI: validate', () => {
  it('a good config exits 0 and prints "valid"', () => {
    const file = write('good.yaml', GOOD);
    const r = runCli(['validate', file]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain('valid');
    expect(r.stdout).toContain(file);
    expect(r.stderr).toBe('');
  });
});
