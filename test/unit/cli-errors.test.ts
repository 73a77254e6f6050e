/**
 * Errors that arrive early and say the right thing, through the real CLI:
 * - `--out` is checked before anything is simulated: a special filesystem, a file in the way,
 *   a read-only folder are one line and exit 2, and nothing is created;
 * - `validate` runs the same feasibility preflight as `experiment` and fails with the same
 *   line (DeepSeek-R1 does not fit an L4), sizes in human units;
 * - paths inside a config resolve against the config's folder, paths on the command line
 *   against the current directory: one config run from two working directories gives
 *   byte-identical results;
 * - a plugin that throws is reported as the plugin's error (exit 3, no stack unless --debug);
 *   a plugin that breaks the hook contract gets the rule it broke.
 */
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pooled, REPO_ROOT, tempDir, type CliResult } from '../helpers/cli.ts';
import { runCliIn, writePlugin } from '../helpers/cli-cwd.ts';
import { formatBytes, humanizeSizes } from '../../experiments/runner.ts';

const dir = tempDir('cli-errors');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const TINY = (policies: string, extra = '') => `name: tiny
model: olmoe
hardware: rtx4090
workload:
  requests: 3
  arrival: { kind: offline }
  promptTokens: { kind: fixed, tokens: 8 }
  outputTokens: { kind: fixed, tokens: 6 }
${extra}policies:
${policies}
`;

const write = (name: string, text: string): string => {
  const file = path.join(dir, name);
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, text);
  return file;
};

const lines = (r: CliResult): string[] => r.stderr.split('\n').filter((l) => l.length > 0);
const NO_STACK = /\bat .*\.(ts|js|mjs):\d+|internal error/;

describe('sizes in messages are human-readable', () => {
  it('formats multiples of 1024', () => {
    expect(formatBytes(25_769_803_776)).toBe('24.0 GiB');
    expect(formatBytes(34_235_267_072)).toBe('31.9 GiB');
    expect(formatBytes(88_080_384)).toBe('84.0 MiB');
    expect(formatBytes(512)).toBe('512 B');
    expect(humanizeSizes('25769803776 B of VRAM cannot hold dense weights (34235267072 B), 12 B')).toBe(
      '24.0 GiB of VRAM cannot hold dense weights (31.9 GiB), 12 B',
    );
  });
});

describe('--out is checked before the first run', () => {
  const good = write('out/good.yaml', TINY('  - name: on-demand'));
  const aFile = write('out/a-file', 'not a folder\n');
  const readOnly = path.join(dir, 'out/read-only');
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const cases: { name: string; out: string; mentions: string[]; skip?: boolean }[] = [
    {
      name: 'a special filesystem (/proc)',
      out: '/proc/moesim-out',
      mentions: ['--out', '/proc'],
      skip: !existsSync('/proc/self'),
    },
    {
      name: 'a file in the way of a parent',
      out: path.join(aFile, 'sub'),
      mentions: ['--out', 'is a file, not a folder'],
    },
    { name: 'a file where the folder should be', out: aFile, mentions: ['--out', 'is a file, not a folder'] },
    // Root may write anywhere, so the permission case only means something for other users.
    {
      name: 'a read-only folder',
      out: path.join(readOnly, 'results'),
      mentions: ['--out', 'permission denied'],
      skip: isRoot,
    },
  ];
  let results: CliResult[] = [];
  beforeAll(async () => {
    mkdirSync(readOnly, { mode: 0o555, recursive: true });
    results = await pooled(
      cases.map(
        (c) => () =>
          c.skip
            ? Promise.resolve({ status: null, stdout: '', stderr: '' })
            : runCliIn(REPO_ROOT, ['experiment', good, '--out', c.out]),
      ),
      2,
    );
  }, 120_000);

  it.each(cases.map((c, i) => [c.name, i] as const))('%s: one line, exit 2, nothing created', (_n, i) => {
    const c = cases[i]!;
    if (c.skip) return;
    const r = results[i]!;
    expect(r.status, r.stderr).toBe(2);
    expect(r.stdout).toBe('');
    const l = lines(r);
    expect(l, r.stderr).toHaveLength(1);
    for (const m of c.mentions) expect(l[0]).toContain(m);
    expect(l[0]).not.toMatch(NO_STACK);
    // Checked before the banner: nothing was simulated.
    expect(r.stderr).not.toContain('run)');
    if (c.out !== aFile) expect(existsSync(c.out)).toBe(false);
  });
});

describe('validate runs the feasibility preflight of experiment', () => {
  const r1 = write(
    'r1/r1-on-l4.yaml',
    `name: r1-on-l4
model: deepseek-r1
hardware: l4
workload:
  requests: 2
  arrival: { kind: offline }
  promptTokens: { kind: fixed, tokens: 16 }
  outputTokens: { kind: fixed, tokens: 4 }
policies:
  - name: on-demand
`,
  );
  const out = path.join(dir, 'r1/out');
  let v: CliResult;
  let e: CliResult;
  beforeAll(async () => {
    const r = await pooled(
      [() => runCliIn(REPO_ROOT, ['validate', r1]), () => runCliIn(REPO_ROOT, ['experiment', r1, '--out', out])],
      2,
    );
    [v, e] = [r[0]!, r[1]!];
  }, 120_000);

  it('DeepSeek-R1 on an L4 fails validate with exit 2 and the line experiment gives', () => {
    expect(v.status, v.stderr).toBe(2);
    expect(e.status, e.stderr).toBe(2);
    expect(v.stdout).toBe('');
    expect(lines(v)).toHaveLength(1);
    expect(lines(v)).toEqual(lines(e));
    const line = lines(v)[0]!;
    expect(line).toContain(r1);
    expect(line).toContain('does not fit');
    expect(line).toMatch(/\d+\.\d GiB of VRAM/);
    expect(line).not.toMatch(/\d{5,} B\b/);
    expect(existsSync(out)).toBe(false);
  });
});

describe('one rule for relative paths', () => {
  // <root>/exp/paths.yaml names a model file, a testbed file, a routing profile, a request log
  // and a plugin, each relative to the config's folder.
  const root = path.join(dir, 'paths');
  const cfg = path.join(root, 'exp/paths.yaml');
  beforeAll(() => {
    mkdirSync(path.join(root, 'exp'), { recursive: true });
    mkdirSync(path.join(root, 'profiles'), { recursive: true });
    mkdirSync(path.join(root, 'plugins'), { recursive: true });
    copyFileSync(
      path.join(REPO_ROOT, 'hardware-profiles/models/olmoe.json'),
      path.join(root, 'profiles/my-olmoe.json'),
    );
    copyFileSync(
      path.join(REPO_ROOT, 'hardware-profiles/testbeds/rtx4090.json'),
      path.join(root, 'profiles/my-box.json'),
    );
    copyFileSync(path.join(REPO_ROOT, 'workloads/profiles/olmoe.json'), path.join(root, 'profiles/routing.json'));
    writeFileSync(
      path.join(root, 'profiles/arrivals.csv'),
      'arrivalS,promptTokens,outputTokens\n0,8,4\n0.05,12,3\n0.2,6,5\n',
    );
    writePlugin(path.join(root, 'plugins'), 'fifo', 'export default { ...base, name: "fifo-copy" };');
    writeFileSync(
      cfg,
      `name: paths
model: ../profiles/my-olmoe.json
hardware: ../profiles/my-box.json
workload:
  requests: 3
  arrival: { kind: replay, path: ../profiles/arrivals.csv }
  routing: { kind: synthetic, profile: ../profiles/routing.json }
policies:
  - path: ../plugins/fifo.ts
    params: { capacitySlots: 64 }
  - name: lru
    capacitySlots: 64
`,
    );
  });

  it('the same config from two working directories gives byte-identical results', async () => {
    const outA = path.join(dir, 'paths-out-a');
    const outB = path.join(dir, 'paths-out-b');
    // From the repository root, and from the config's grandparent folder, each naming the config
    // (a command-line path) relative to its own working directory.
    const [a, b] = (await pooled(
      [
        () => runCliIn(REPO_ROOT, ['experiment', path.relative(REPO_ROOT, cfg), '--out', outA]),
        () => runCliIn(root, ['experiment', 'exp/paths.yaml', '--out', outB]),
      ],
      2,
    )) as [CliResult, CliResult];
    expect(a.status, a.stderr).toBe(0);
    expect(b.status, b.stderr).toBe(0);
    const ra = readFileSync(path.join(outA, 'results.json'), 'utf8');
    expect(readFileSync(path.join(outB, 'results.json'), 'utf8')).toBe(ra);
    const runs = (JSON.parse(ra) as { runs: { policy: string; params: { model: string } }[] }).runs;
    expect(runs.map((r) => r.policy)).toEqual(['fifo-copy', 'lru']);
    expect(runs[0]!.params.model).toBe('../profiles/my-olmoe.json');
  }, 120_000);
});

describe('plugin failures are the plugin’s errors', () => {
  const pdir = path.join(dir, 'plugins');
  mkdirSync(pdir, { recursive: true });
  const plugin = (name: string, create: string) =>
    writePlugin(pdir, name, `export default { ...base, name: ${JSON.stringify(name)}, create: ${create} };`);
  const cases = [
    {
      name: 'thrower',
      create: `() => ({ name: 'thrower', onLayerRouted(view) { if (view.iteration === 2 && view.layer === 3) throw new Error('my index is out of sync'); } })`,
      line: /^moesim: policy 'thrower' \(.*thrower\.ts\) threw in hook 'onLayerRouted' at t=\d+\.\d{3} s: my index is out of sync$/,
    },
    {
      name: 'evicts-in-use',
      create: `() => ({ name: 'evicts-in-use', onLayerRouted: (view, routing) => ({ evict: [view.keyOf(routing.layer, routing.activated[0])] }) })`,
      line: /^moesim: policy 'evicts-in-use' \(.*\) broke a rule in hook 'onLayerRouted' at t=\d+\.\d{3} s: a policy may not evict an expert in use .*: asked to evict expert \d+ of MoE layer 0/,
    },
    {
      name: 'ghost-expert',
      create: `() => ({ name: 'ghost-expert', onIterationStart: () => ({ prefetch: [{ key: 5000, priority: 1 }] }) })`,
      line: /^moesim: policy 'ghost-expert' \(.*\) broke a rule in hook 'onIterationStart' at t=0\.000 s: expert keys must name existing experts .*: asked to prefetch expert key 5000, but this model has keys 0…1023/,
    },
    {
      name: 'over-budget',
      create: `() => ({ name: 'over-budget', onIterationStart: (view) => ({ prefetch: Array.from({ length: view.slots + 1 }, (_, i) => ({ key: i, priority: 1 })) }) })`,
      line: /broke a rule in hook 'onIterationStart' .*: one decision may prefetch at most as many experts as the buffer has slots: asked to prefetch 17 experts into a buffer of 16 slots/,
    },
    {
      name: 'wrong-victim',
      create: `() => ({ name: 'wrong-victim', chooseVictim: (_view, q) => q.forKey })`,
      line: /broke a rule in hook 'chooseVictim' .*: chooseVictim must return one of query\.candidates/,
    },
    {
      name: 'throws-in-create',
      create: `() => { throw new Error('no settings for this model'); }`,
      line: /^moesim: policy 'throws-in-create' \(.*\) threw in hook 'create': no settings for this model$/,
    },
  ];
  const configs = cases.map((c) => {
    plugin(c.name, c.create);
    return write(`plugins/${c.name}.yaml`, TINY(`  - path: ./${c.name}.ts\n    params: { capacitySlots: 16 }`));
  });
  let results: CliResult[] = [];
  let debug: CliResult;
  beforeAll(async () => {
    results = await pooled(
      [
        ...configs.map(
          (f, i) => () => runCliIn(REPO_ROOT, ['experiment', f, '--out', path.join(dir, `plugin-out-${i}`)]),
        ),
        () => runCliIn(REPO_ROOT, ['experiment', configs[0]!, '--out', path.join(dir, 'plugin-debug'), '--debug']),
      ],
      2,
    );
    debug = results.pop()!;
  }, 300_000);

  it.each(cases.map((c, i) => [c.name, i] as const))(
    '%s: one line naming policy, file, hook and time; exit 3; no stack',
    (_n, i) => {
      const r = results[i]!;
      expect(r.status, r.stderr).toBe(3);
      const errorLines = lines(r).filter((l) => !/^moesim: tiny: .*\(1 run\)$/.test(l));
      expect(errorLines, r.stderr).toHaveLength(1);
      expect(errorLines[0]).toMatch(cases[i]!.line);
      expect(r.stderr).not.toMatch(NO_STACK);
    },
  );

  it('--debug adds the plugin’s own stack', () => {
    expect(debug.status).toBe(3);
    expect(debug.stderr).toMatch(/threw in hook 'onLayerRouted'/);
    expect(debug.stderr).toMatch(/thrower\.ts:\d+/);
  });
});
