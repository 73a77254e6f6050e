/**
 * A plugin cannot break the run, only fail it: each fault of a plugin loaded by path (it exits
 * the process, returns a Promise or junk, writes to a view, loops in a hook or at import) ends
 * `moesim experiment` with exit 3 and one line naming the plugin and the hook, and leaves no
 * `--out` folder behind. The looping cases use a small `pluginBudgetMs` so the watchdog is fast.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const REPO_ROOT = path.resolve(import.meta.dirname, '../..');
const BIN = path.join(REPO_ROOT, 'bin/moesim.mjs');
/** zod as the repository resolves it (a plugin in a temporary folder has no node_modules). */
const ZOD = import.meta.resolve('zod');
const TYPES = path.join(REPO_ROOT, 'policies/types.ts');

/** A plugin module: `top` runs at import, `create` in the factory, `hooks` are the policy's members. */
export function pluginSource(o: { top?: string; create?: string; hooks: string }): string {
  return `import { z } from ${JSON.stringify(ZOD)};
import { definePolicy } from ${JSON.stringify(TYPES)};
${o.top ?? ''}
export default definePolicy({
  name: 'hostile', family: 'serving', summary: 'a hostile test plugin', params: z.object({}).strict(),
  create: () => { ${o.create ?? ''}; return { name: 'hostile', chooseVictim: (_v, q) => q.candidates[0], ${o.hooks} }; },
});
`;
}

export function configYaml(plugin: string, budgetMs?: number): string {
  return `name: faults
model: olmoe
hardware: rtx4090
seeds: [1]
${budgetMs ? `pluginBudgetMs: ${budgetMs}\n` : ''}workload:
  requests: 4
  arrival: { kind: offline }
  promptTokens: { kind: fixed, tokens: 8 }
  outputTokens: { kind: fixed, tokens: 21 }
  routing: { kind: uniform }
executor: { maxBatchSize: 4, packetMiB: 4 }
policies:
  - { path: ${JSON.stringify(plugin)}, label: hostile }
`;
}

export interface CliRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly out: string;
}

/** At most this many CLIs at once: an import or hook budget is wall time, and the machine is shared. */
const MAX_CLIS = 3;
let running = 0;
const waiting: (() => void)[] = [];
async function limited<T>(f: () => Promise<T>): Promise<T> {
  if (running >= MAX_CLIS) await new Promise<void>((r) => waiting.push(r));
  running++;
  try {
    return await f();
  } finally {
    running--;
    waiting.shift()?.();
  }
}

/** Runs `moesim experiment` on a plugin written from `src`, into a fresh `--out` folder. */
export function runPlugin(src: string, budgetMs?: number, args: readonly string[] = []): Promise<CliRun> {
  return limited(() => runPluginNow(src, budgetMs, args));
}

function runPluginNow(src: string, budgetMs?: number, args: readonly string[] = []): Promise<CliRun> {
  const dir = mkdtempSync(path.join(tmpdir(), 'moesim-faults-'));
  const plugin = path.join(dir, 'hostile.ts');
  writeFileSync(plugin, src);
  writeFileSync(path.join(dir, 'package.json'), '{ "type": "module" }\n');
  const cfg = path.join(dir, 'faults.yaml');
  writeFileSync(cfg, configYaml(plugin, budgetMs));
  const out = path.join(dir, 'out');
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, 'experiment', cfg, '--out', out, ...args], {
      cwd: dir,
      env: { ...process.env, NO_COLOR: '1' },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (code) => resolve({ code, stdout, stderr, out }));
  });
}

const CASES: readonly { name: string; hook: string; src: string; budgetMs?: number; jobs?: string }[] = [
  { name: 'process.exit(0) in create', hook: 'create', src: pluginSource({ create: 'process.exit(0)', hooks: '' }) },
  {
    name: 'process.exit(0) in a hook',
    hook: 'onLayerRouted',
    src: pluginSource({ hooks: 'onLayerRouted() { process.exit(0); },' }),
  },
  {
    name: 'process.exit(0) in a hook, --jobs 2',
    hook: 'onLayerRouted',
    src: pluginSource({ hooks: 'onLayerRouted() { process.exit(0); },' }),
    jobs: '2',
  },
  { name: 'process.exit(0) at import', hook: 'import', src: pluginSource({ top: 'process.exit(0);', hooks: '' }) },
  {
    name: 'an async hook',
    hook: 'onLayerDone',
    src: pluginSource({ hooks: 'async onLayerDone() { return { evict: [] }; },' }),
  },
  {
    name: 'a hook returning 42',
    hook: 'onLayerRouted',
    src: pluginSource({ hooks: 'onLayerRouted() { return 42; },' }),
  },
  {
    name: 'a hook returning a string',
    hook: 'onIterationStart',
    src: pluginSource({ hooks: 'onIterationStart() { return "x"; },' }),
  },
  { name: 'afterUse returning a string', hook: 'afterUse', src: pluginSource({ hooks: 'afterUse: () => "keep",' }) },
  {
    name: 'a write to a request spec',
    hook: 'onIterationStart',
    src: pluginSource({ hooks: 'onIterationStart(view) { for (const r of view.batch) r.spec.outputTokens = 1; },' }),
  },
  {
    name: 'a write to tokensPerExpert',
    hook: 'onLayerRouted',
    src: pluginSource({ hooks: 'onLayerRouted(_v, r) { r.tokensPerExpert[0] = 99; },' }),
  },
  // The budget also bounds the plugin's import, which runs while the other cases (and other test
  // files) load the machine's two cores: 2 s was once exceeded at import in CI, so these cases give 6 s.
  {
    name: 'a looping hook',
    hook: 'onLayerRouted',
    budgetMs: 6000,
    src: pluginSource({ hooks: 'onLayerRouted() { for (;;) {} },' }),
  },
  {
    name: 'a looping hook, --jobs 2',
    hook: 'onLayerRouted',
    budgetMs: 6000,
    jobs: '2',
    src: pluginSource({ hooks: 'onLayerRouted() { for (;;) {} },' }),
  },
  { name: 'a loop at import', hook: 'import', budgetMs: 3000, src: pluginSource({ top: 'for (;;) {}', hooks: '' }) },
];

describe('plugin faults are exit 3, one line naming plugin and hook, no --out left', () => {
  it.concurrent.each(CASES)(
    '$name',
    async (c) => {
      const r = await runPlugin(c.src, c.budgetMs, c.jobs ? ['--jobs', c.jobs] : []);
      // The header line ("moesim: faults: … (1 run)") may come first; the error is one line.
      const lines = r.stderr
        .trim()
        .split('\n')
        .filter((l) => !/\(\d+ runs?\)$/.test(l));
      expect(r.code, r.stderr).toBe(3);
      expect(lines.length, r.stderr).toBe(1);
      expect(lines[0]).toContain("policy 'hostile'");
      expect(lines[0]).toContain('hostile.ts');
      expect(lines[0]).toContain(`'${c.hook}'`);
      expect(existsSync(r.out)).toBe(false);
    },
    300_000,
  );
});
