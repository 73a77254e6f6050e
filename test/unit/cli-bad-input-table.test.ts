/**
 * The bad-input sweep: a table of bad configs, traces, plugins and flags, each run through the
 * real command line in this process (`program.ts`'s `main`, stdout and stderr captured), so a
 * few hundred cases take seconds; a case that depends on how the process loads TypeScript (a
 * plugin's syntax error, reported by tsx's compiler) runs as a real `moesim` process. Every case must: exit 2, print exactly one line on stderr
 * naming the field (when it has one) and the value, and leave nothing behind (no output folder,
 * no temporary file in its folder). The count of clean cases is printed; every case must be clean.
 */
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { main } from '../../experiments/cli/program.ts';
import { REPO_ROOT, runCliAsync, tempDir } from '../helpers/cli.ts';

const dir = tempDir('bad-table');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const GOOD: Record<string, string> = {
  name: 'good',
  model: 'olmoe',
  hardware: 'rtx4090',
  seeds: '[1]',
  workload:
    '{ requests: 2, arrival: { kind: poisson, ratePerS: 2 }, promptTokens: { kind: fixed, tokens: 4 }, outputTokens: { kind: fixed, tokens: 2 } }',
  executor: '{ maxBatchSize: 2 }',
  policies: '[{ name: on-demand }]',
};
const yaml = (over: Record<string, string | undefined>): string =>
  Object.entries({ ...GOOD, ...over })
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${k}: ${v}`)
    .join('\n') + '\n';

interface Case {
  readonly name: string;
  /** Files to write in the case's folder (name → text). */
  readonly files?: Readonly<Record<string, string>>;
  /** Arguments; `$D` is the case's folder, `$OUT` an output folder that must not appear. */
  readonly args: readonly string[];
  /** Substrings the one stderr line must contain. */
  readonly mentions: readonly string[];
  /** Substrings the stderr line must not contain. */
  readonly forbids?: readonly string[];
  /** Run as a real `moesim` process (the case depends on how the process loads TypeScript). */
  readonly spawn?: boolean;
}

const cfgCase = (name: string, over: Record<string, string | undefined>, mentions: readonly string[]): Case => ({
  name,
  files: { 'c.yaml': yaml(over) },
  args: ['experiment', '$D/c.yaml', '--out', '$OUT'],
  mentions,
});

/** A shipped profile file (`hardware-profiles/<folder>/<id>.json`), parsed. */
const shipped = (folder: string, id: string): Record<string, unknown> =>
  JSON.parse(readFileSync(path.join(REPO_ROOT, 'hardware-profiles', folder, `${id}.json`), 'utf8'));

/** A config on a testbed of the rtx4090's parts, one field of one part set to `value`. */
function absurdTestbed(part: 'gpu' | 'cpu' | 'pcie', field: string, value: number): Record<string, string> {
  const tb = shipped('testbeds', 'rtx4090');
  const parts = { gpu: tb.gpu as string, cpu: tb.cpu as string, pcie: tb.pcie as string };
  const folder = { gpu: 'gpus', cpu: 'cpus', pcie: 'pcie' }[part];
  // JSON cannot write 1e308 × 1e12 (Infinity) but can write 1e308: the resolved rate overflows.
  const changed = { ...shipped(folder, parts[part]), id: `absurd-${part}`, [field]: value };
  return {
    'c.yaml': yaml({ hardware: 'tb.json' }),
    'tb.json': JSON.stringify({ ...tb, id: 'tb', [part]: `${part}.json` }),
    [`${part}.json`]: JSON.stringify(changed),
  };
}

function cases(): Case[] {
  const out: Case[] = [];
  // Numeric fields of the workload and executor, each with values of the wrong kind or range.
  const numeric: [string, (v: string) => Record<string, string>, string][] = [
    [
      'workload.requests',
      (v) => ({ workload: GOOD.workload!.replace('requests: 2', `requests: ${v}`) }),
      'workload.requests',
    ],
    [
      'workload.arrival.ratePerS',
      (v) => ({ workload: GOOD.workload!.replace('ratePerS: 2', `ratePerS: ${v}`) }),
      'workload.arrival.ratePerS',
    ],
    [
      'workload.promptTokens.tokens',
      (v) => ({ workload: GOOD.workload!.replace('tokens: 4', `tokens: ${v}`) }),
      'workload.promptTokens.tokens',
    ],
    [
      'workload.outputTokens.tokens',
      (v) => ({ workload: GOOD.workload!.replace('tokens: 2 }', `tokens: ${v} }`) }),
      'workload.outputTokens.tokens',
    ],
    ['executor.maxBatchSize', (v) => ({ executor: `{ maxBatchSize: ${v} }` }), 'executor.maxBatchSize'],
    ['executor.maxWaitMs', (v) => ({ executor: `{ maxWaitMs: ${v} }` }), 'executor.maxWaitMs'],
    ['executor.maxBatchTokens', (v) => ({ executor: `{ maxBatchTokens: ${v} }` }), 'executor.maxBatchTokens'],
    ['executor.packetMiB', (v) => ({ executor: `{ packetMiB: ${v} }` }), 'executor.packetMiB'],
    ['executor.bufferSlots', (v) => ({ executor: `{ bufferSlots: ${v} }` }), 'executor.bufferSlots'],
    ['seeds[0]', (v) => ({ seeds: `[${v}]` }), 'seeds[0]'],
  ];
  const values: [string, string][] = [
    ['-1', '-1'],
    ['"abc"', '"abc"'],
    ['.nan', 'NaN'],
    ['.inf', 'Infinity'],
    ['-.inf', '-Infinity'],
    ['null', 'null'],
    ['[1]', '[1]'],
    ['{ a: 1 }', '{"a":1}'],
    ['true', 'true'],
    ['-0.5', '-0.5'],
  ];
  for (const [field, set, path] of numeric)
    for (const [v, shown] of values) out.push(cfgCase(`${field} = ${v}`, set(v), [path, shown]));
  // Top-level fields.
  for (const [field, v, shown] of [
    ['model', '""', '""'],
    ['model', 'no-such-model', 'no-such-model'],
    ['model', '[a]', '["a"]'],
    ['hardware', 'cray-1', 'cray-1'],
    ['hardware', '7', '7'],
    ['name', '""', '""'],
    ['name', '[x]', '["x"]'],
    ['runtime', 'no-such-runtime', 'no-such-runtime'],
    ['seeds', '[]', '[]'],
    ['seeds', 'seven', 'seven'],
    ['policies', '[]', '[]'],
    ['policies', '[{ name: teleport }]', 'teleport'],
    ['policies', '[{ name: lru, capacitySlots: -3 }]', '-3'],
    ['policies', '[{ name: lru, capacitySlots: .nan }]', 'NaN'],
    ['policies', '[{ path: ./nowhere.ts }]', './nowhere.ts'],
    ['policies', '[{ path: "" }]', '""'],
    ['executor', '{ kind: quantum }', 'quantum'],
    ['executor', '{ batching: sometimes }', 'sometimes'],
    ['workload', '{ requests: 2, arrival: { kind: bursty } }', 'bursty'],
    ['bogus', '1', 'bogus'],
  ] as const)
    out.push(cfgCase(`${field}: ${v}`, { [field]: v }, [field === 'bogus' ? 'bogus' : field, shown]));
  // Sweeps and cases.
  for (const [key, vals, mentions] of [
    ['workload.__proto__.maxBatchSize', '[8]', ['sweep.workload.__proto__.maxBatchSize', '__proto__']],
    ['executor.constructor.x', '[1]', ['sweep.executor.constructor.x', 'constructor']],
    ['workload.prototype', '[1]', ['sweep.workload.prototype', 'prototype']],
    ['wrokload.requests', '[1]', ['sweep.wrokload.requests', 'cannot sweep']],
    ['seeds', '[1]', ['sweep.seeds']],
    ['executor.kind', '[throughput]', ['sweep.executor.kind']],
    ['policy.noSuchParam', '[1]', ['sweep.policy.noSuchParam']],
    ['workload.requests', '[]', ['sweep.workload.requests']],
    ['workload.requests', '[-1]', ['workload.requests', '-1']],
    ['workload.requests', '["x"]', ['workload.requests', '"x"']],
    ['executor.maxBatchSize', '[0]', ['executor.maxBatchSize', '0']],
    ['model', '[nope]', ['nope']],
  ] as const)
    out.push(cfgCase(`sweep ${key}: ${vals}`, { sweep: `{ ${JSON.stringify(key)}: ${vals} }` }, mentions));
  // Malformed files.
  for (const [name, text, mention] of [
    ['unclosed YAML', 'model: [unclosed\n', 'not valid YAML'],
    ['a list', '- a\n- b\n', 'must be a mapping'],
    ['a scalar', '42\n', 'must be a mapping'],
    ['empty file', '', 'must be a mapping'],
    ['tab indentation', 'model:\n\t- x\n', 'not valid YAML'],
    ['duplicate key', 'model: a\nmodel: b\n', 'not valid YAML'],
  ] as const)
    out.push({
      name: `config: ${name}`,
      files: { 'c.yaml': text },
      args: ['experiment', '$D/c.yaml', '--out', '$OUT'],
      mentions: [mention],
    });
  out.push({
    name: 'config JSON malformed',
    files: { 'c.json': '{"model": ' },
    args: ['experiment', '$D/c.json', '--out', '$OUT'],
    mentions: ['not valid JSON'],
  });
  out.push({
    name: 'config file missing',
    args: ['experiment', '$D/none.yaml', '--out', '$OUT'],
    mentions: ['no such file'],
  });
  out.push({
    name: 'config path is a folder',
    files: { 'sub/x': '' },
    args: ['experiment', '$D/sub', '--out', '$OUT'],
    mentions: ['sub'],
  });
  // Plugins.
  for (const [name, code, mention] of [
    ['syntax error', 'export default {\n  name: "x",,\n};\n', 'plugin.ts:2'],
    ['no default export', 'export const x = 1;\n', 'must default-export'],
    ['default export a number', 'export default 42;\n', 'must default-export'],
    ['throws at import', 'throw new Error("nope at import");\n', 'nope at import'],
  ] as const) {
    out.push({
      name: `plugin: ${name}`,
      spawn: name === 'syntax error',
      files: {
        'c.yaml': yaml({ policies: '[{ path: ./plugin.ts }]' }),
        'plugin.ts': code,
        'package.json': '{"type":"module"}',
      },
      args: ['experiment', '$D/c.yaml', '--out', '$OUT'],
      mentions: ['policies[0].path', mention],
    });
  }
  // Traces.
  out.push({
    name: 'trace stats of a folder',
    files: { 'tr/x': '' },
    args: ['trace', 'stats', '$D/tr'],
    mentions: ['tr'],
  });
  out.push({
    name: 'trace stats of a missing file',
    args: ['trace', 'stats', '$D/none.jsonl'],
    mentions: ['none.jsonl'],
  });
  out.push({
    name: 'trace stats of garbage',
    files: { 't.jsonl': 'not json\n' },
    args: ['trace', 'stats', '$D/t.jsonl'],
    mentions: ['t.jsonl'],
  });
  // Sizes and values the schema accepts but a run cannot: bounded, or checked before the run.
  const wl = (s: string) => ({ workload: GOOD.workload!.replace('requests: 2', s) });
  out.push(cfgCase('workload.requests = 1e12', wl('requests: 1e12'), ['workload.requests', '1000000000000']));
  out.push(cfgCase('workload.requests = 10000001', wl('requests: 10000001'), ['workload.requests', '10000001']));
  out.push(
    cfgCase('ratePerS = 1e-300', { workload: GOOD.workload!.replace('ratePerS: 2', 'ratePerS: 1e-300') }, [
      'workload.arrival.ratePerS',
      '1e-300',
    ]),
  );
  out.push(
    cfgCase('sweep ratePerS: [1e-300]', { sweep: '{ workload.arrival.ratePerS: [1e-300] }' }, [
      'workload.arrival.ratePerS',
      '1e-300',
    ]),
  );
  out.push(
    cfgCase('sweep requests: [1e12]', { sweep: '{ workload.requests: [1e12] }' }, [
      'workload.requests',
      '1000000000000',
    ]),
  );
  const ten = `[${Array.from({ length: 10 }, (_, i) => i + 1).join(', ')}]`;
  const huge = [
    'workload.requests',
    'executor.maxBatchSize',
    'executor.packetMiB',
    'executor.bufferSlots',
    'executor.maxWaitMs',
    'executor.maxBatchTokens',
  ]
    .map((k) => `${k}: ${ten}`)
    .join(', ');
  out.push(cfgCase('sweep of 10^6 points', { sweep: `{ ${huge} }` }, ['too many sweep points', '100000']));
  out.push({
    name: 'routing trace path is a folder',
    files: { 'c.yaml': yaml(wl('requests: 2, routing: { kind: trace, path: ./tr }')), 'tr/x': '' },
    args: ['experiment', '$D/c.yaml', '--out', '$OUT'],
    mentions: ['workload.routing.path', './tr'],
  });
  // Profiles whose values the schema accepts but whose derived durations are absurd: checked by
  // the world builder before the run (a testbed of the shipped rtx4090 parts with one field changed).
  for (const [part, field, value, mentions] of [
    ['pcie', 'h2dGBPerSec', 1e-9, ['pcie.h2dGBPerSec', '1e-9']],
    ['pcie', 'd2hGBPerSec', 1e-9, ['pcie.d2hGBPerSec', '1e-9']],
    ['pcie', 'latencyUs', 1e300, ['pcie.latencyUs', '1e+300']],
    ['pcie', 'h2dGBPerSec', 1e308, ['pcie.h2dGBPerSec', 'Infinity']],
    ['cpu', 'sustainedClockGHz', 1e-300, ['sustainedClockGHz', '3.2e-299']],
    ['cpu', 'perCoreDramGBPerSec', 1e-300, ['cpu.perCoreDramGBPerSec', '1e-300']],
    ['cpu', 'memoryMegaTransfersPerSec', 1e-300, ['cpu DRAM GB/s', 'e-']],
    ['cpu', 'vectorEfficiency', 1e-300, ['cpu.vectorEfficiency', '1e-300']],
    ['gpu', 'bf16DenseTflops', 1e-300, ['gpu.bf16DenseTflops', '1e-300']],
    ['gpu', 'bf16DenseTflops', 1e308, ['gpu.bf16DenseTflops', 'Infinity']],
    ['gpu', 'hbmGBPerSec', 1e-300, ['gpu.hbmGBPerSec', '1e-300']],
    ['gpu', 'kernelLaunchUs', 1e300, ['gpu.kernelLaunchUs', '1e+300']],
  ] as const)
    out.push({
      name: `profile ${part}.${field} = ${value}`,
      files: absurdTestbed(part, field, value),
      args: ['experiment', '$D/c.yaml', '--out', '$OUT'],
      mentions,
    });
  out.push(
    cfgCase('executor.maxWaitMs = 1e300', { executor: '{ maxWaitMs: 1e300 }' }, ['executor.maxWaitMs', '1e+300']),
  );
  out.push({
    name: 'runtime dispatchUs = 1e300',
    files: {
      'c.yaml': yaml({ runtime: 'rt.json' }),
      'rt.json': JSON.stringify({ ...shipped('runtimes', 'hf-eager'), id: 'rt', dispatchUs: 1e300 }),
    },
    args: ['experiment', '$D/c.yaml', '--out', '$OUT'],
    mentions: ['runtime "rt" dispatchUs', '1e+300'],
  });
  // trace generate: flags checked before anything is written.
  const profile = path.join(REPO_ROOT, 'workloads/profiles/arctic-128.json');
  const gen = (...flags: string[]): string[] => [
    'trace',
    'generate',
    '--profile',
    profile,
    '--requests',
    '3',
    ...flags,
  ];
  for (const [name, args, mentions] of [
    ['--gzip-level 99', gen('--gzip-level', '99', '--out', '$D/t.jsonl.gz'), ['--gzip-level', '99']],
    ['--rate -1', gen('--rate', '-1', '--out', '$D/t.jsonl.gz'), ['--rate', '-1']],
    ['--requests 1e12', gen('--out', '$D/t.jsonl.gz', '--requests', '1e12'), ['--requests']],
    ['--out a folder', gen('--out', '$D/sub'), ['--out', 'sub']],
    ['--out /proc/x', gen('--out', '/proc/x'), ['--out', '/proc']],
    ['--out empty', gen('--out', ''), ['--out', '""']],
  ] as const)
    out.push({ name: `trace generate ${name}`, files: { 'sub/x': '' }, args, mentions });
  // The scaffold names the flag that named the folder (--dir or --project), never --out.
  for (const [flag, where] of [
    ['--dir', '/proc'],
    ['--dir', '/proc/x'],
    ['--dir', '$D/c.yaml'],
    ['--dir', ''],
    ['--project', '/proc/x'],
    ['--project', '$D/c.yaml'],
    ['--project', ''],
  ] as const)
    out.push({
      name: `new policy ${flag} ${where || '""'}`,
      files: { 'c.yaml': '' },
      args: ['new', 'policy', 'x', flag, where],
      mentions: [`${flag}:`, where === '' ? '""' : where.replace('$D/', '')],
      forbids: ['--out'],
    });
  // CLI flags.
  const exp = (...flags: string[]): string[] => ['experiment', '$D/c.yaml', '--out', '$OUT', ...flags];
  for (const [name, args, mentions] of [
    ['unknown flag', exp('--bogus'), ['bogus']],
    ['--out empty', ['experiment', '$D/c.yaml', '--out', ''], ['--out', '""']],
    ['--jobs 0', exp('--jobs', '0'), ['--jobs', '0']],
    ['--jobs -2', exp('--jobs', '-2'), ['--jobs', '-2']],
    ['--jobs abc', exp('--jobs', 'abc'), ['--jobs', 'abc']],
    ['--jobs 1.5', exp('--jobs', '1.5'), ['--jobs', '1.5']],
    ['--queue not a url', exp('--queue', 'nope'), ['--queue', 'nope']],
    ['--queue http url', exp('--queue', 'http://x:1'), ['--queue', 'http://x:1']],
    ['--queue bad db', exp('--queue', 'redis://127.0.0.1:1/x'), ['--queue']],
    ['--queue nothing listens', exp('--queue', 'redis://127.0.0.1:1'), ['--queue', 'redis://127.0.0.1:1']],
    ['list gizmos', ['list', 'gizmos'], ['gizmos']],
    ['no command', [], ['command']],
    ['unknown command', ['frobnicate'], ['frobnicate']],
    ['report of a missing folder', ['report', '$D/none'], ['none']],
    ['report of a file', ['report', '$D/c.yaml'], ['c.yaml']],
    ['validate missing', ['validate', '$D/none.yaml'], ['no such file']],
  ] as const)
    out.push({ name: `flag: ${name}`, files: { 'c.yaml': yaml({}) }, args, mentions });
  return out;
}

const CASES = cases();

/** Runs the CLI in this process; returns its exit code and what it wrote. */
async function runInProcess(args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const [ow, ew] = [process.stdout.write, process.stderr.write];
  process.stdout.write = ((c: string | Uint8Array) => ((stdout += String(c)), true)) as typeof process.stdout.write;
  process.stderr.write = ((c: string | Uint8Array) => ((stderr += String(c)), true)) as typeof process.stderr.write;
  try {
    const code = await main([...args]);
    return { code, stdout, stderr };
  } finally {
    process.stdout.write = ow;
    process.stderr.write = ew;
  }
}

describe(`bad input table (${CASES.length} cases, in process)`, () => {
  const clean: string[] = [];
  const dirty: string[] = [];
  afterAll(() => {
    process.stderr.write(
      `cli-bad-input-table: ${clean.length} of ${CASES.length} cases clean (exit 2, one line naming field and value, nothing left)\n`,
    );
    if (dirty.length) process.stderr.write(`  not clean:\n${dirty.map((d) => `  - ${d}`).join('\n')}\n`);
  });

  it.each(CASES.map((c, i) => [c.name, i] as const))('%s', async (_n, i) => {
    const c = CASES[i]!;
    const d = path.join(dir, `case-${i}`);
    mkdirSync(d);
    for (const [f, text] of Object.entries(c.files ?? {})) {
      mkdirSync(path.dirname(path.join(d, f)), { recursive: true });
      writeFileSync(path.join(d, f), text);
    }
    const before = readdirSync(d).sort();
    const outDir = path.join(d, 'out');
    const args = c.args.map((a) => a.replace('$D', d).replace('$OUT', outDir));
    const r = c.spawn
      ? await runCliAsync(args).then((x) => ({ code: x.status ?? -1, stdout: x.stdout, stderr: x.stderr }))
      : await runInProcess(args);
    const lines = r.stderr.split('\n').filter((l) => l.length > 0);
    const problems: string[] = [];
    if (r.code !== 2) problems.push(`exit ${r.code}`);
    if (lines.length !== 1) problems.push(`${lines.length} stderr lines`);
    for (const m of c.mentions) if (!lines.join(' ').includes(m)) problems.push(`does not mention ${m}`);
    for (const m of c.forbids ?? []) if (lines.join(' ').includes(m)) problems.push(`mentions ${m}`);
    if (/internal error|\bat .*\.ts:\d+:\d+/.test(r.stderr)) problems.push('stack');
    if (existsSync(outDir)) problems.push('left the output folder');
    const after = readdirSync(d).sort();
    if (after.join('/') !== before.join('/'))
      problems.push(`left ${after.filter((f) => !before.includes(f)).join(', ')}`);
    (problems.length ? dirty : clean).push(
      problems.length ? `${c.name}: ${problems.join('; ')} — ${lines[0] ?? ''}` : c.name,
    );
    expect(problems, r.stderr).toEqual([]);
  });
});
