/**
 * `moesim new policy`: the scaffold of each family, written into a scratch root
 * inside this checkout (so its relative imports reach the sources and node_modules, as in
 * `plugins/` and `test/plugins/`), type-checks, its generated tests pass under vitest as
 * generated, and its config runs with `moesim experiment`. Bad names and existing files are
 * refused with one line and exit 2, writing nothing.
 *
 * The scratch root is a hidden folder at the top of the checkout: outside `test/`, so a
 * concurrent `npm test` does not pick the generated tests up, and outside the tsconfig's folders.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pooled, REPO_ROOT, runProcess, type CliResult } from '../helpers/cli.ts';
import { runCliIn } from '../helpers/cli-cwd.ts';

const root = mkdtempSync(path.join(REPO_ROOT, '.new-policy-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

// tsc over the generated files and moesim's sources they import takes ~70 s alone on a loaded
// 2-core machine, and runs beside vitest here: 120 s (runProcess's default) was too tight.
function run(cmd: string, args: readonly string[], cwd: string): Promise<CliResult> {
  return runProcess(cmd, args, cwd, 300_000);
}

const node = (script: string, args: readonly string[], cwd: string) =>
  run(process.execPath, [path.join(REPO_ROOT, 'node_modules', script), ...args], cwd);

describe('moesim new policy', () => {
  let serving: CliResult;
  let throughput: CliResult;
  let tsc: CliResult;
  let vitest: CliResult;
  let runServing: CliResult;
  let runThroughput: CliResult;
  beforeAll(async () => {
    serving = await runCliIn(root, ['new', 'policy', 'my-cache']);
    throughput = await runCliIn(root, ['new', 'policy', 'my-batcher', '--family', 'throughput']);
    writeFileSync(
      path.join(root, 'tsconfig.json'),
      JSON.stringify({ extends: '../tsconfig.json', include: ['plugins', 'test'] }),
    );
    writeFileSync(
      path.join(root, 'vitest.config.ts'),
      "import { defineConfig } from 'vitest/config';\nexport default defineConfig({ test: { include: ['test/**/*.test.ts'], testTimeout: 120_000, pool: 'forks' } });\n",
    );
    // Independent: two at a time.
    [tsc, vitest, runServing, runThroughput] = (await pooled(
      [
        () => node('typescript/bin/tsc', ['--noEmit', '-p', 'tsconfig.json'], root),
        () => node('vitest/vitest.mjs', ['run'], root),
        () => runCliIn(root, ['experiment', 'plugins/my-cache.yaml', '--out', path.join(root, 'out-serving')]),
        () => runCliIn(root, ['experiment', 'plugins/my-batcher.yaml', '--out', path.join(root, 'out-throughput')]),
      ],
      2,
    )) as [CliResult, CliResult, CliResult, CliResult];
  }, 600_000);

  it('writes the plugin, a config and a test for each family', () => {
    expect(serving.status, serving.stderr).toBe(0);
    expect(throughput.status, throughput.stderr).toBe(0);
    for (const f of [
      'plugins/my-cache.ts',
      'plugins/my-cache.yaml',
      'test/plugins/my-cache.test.ts',
      'plugins/my-batcher.ts',
      'plugins/my-batcher.yaml',
      'test/plugins/my-batcher.test.ts',
    ]) {
      expect(existsSync(path.join(root, f)), f).toBe(true);
    }
    expect(serving.stdout).toContain('npm run experiment -- plugins/my-cache.yaml');
    // Every serving hook is stubbed and documented.
    const plugin = readFileSync(path.join(root, 'plugins/my-cache.ts'), 'utf8');
    for (const hook of [
      'init',
      'onIterationStart',
      'onLayerRouted',
      'onLayerDone',
      'afterUse',
      'onPrefetchDone',
      'chooseVictim',
      'onIterationEnd',
      'onRequestFinished',
    ]) {
      expect(plugin, hook).toMatch(new RegExp(`/\\*\\*[^]*?\\*/\\s*\\n\\s*${hook}\\(`));
    }
    expect(plugin).toContain('docs/PLUGINS.md');
    // docs/PLUGINS.md shows this very plugin: its code lines (other than the shortened stubs) are the generated ones.
    const doc = readFileSync(path.join(REPO_ROOT, 'docs/PLUGINS.md'), 'utf8');
    const example = doc.slice(doc.indexOf('## The generated serving example')).split('```ts')[1]!.split('```')[0]!;
    const generated = new Set(plugin.split('\n').map((l) => l.trim()));
    const shown = example
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !/\{\},?$/.test(l) && !l.startsWith('//') && !l.startsWith('import '));
    expect(shown.filter((l) => !generated.has(l))).toEqual([]);
  });

  it('the generated files type-check', () => {
    expect(tsc.status, tsc.stdout + tsc.stderr).toBe(0);
  });

  it('the generated tests pass as generated', () => {
    expect(vitest.status, vitest.stdout + vitest.stderr).toBe(0);
    expect(vitest.stdout).toMatch(/Tests\s+6 passed/);
  });

  it('the generated configs run with moesim experiment', () => {
    expect(runServing.status, runServing.stderr).toBe(0);
    expect(runServing.stdout).toMatch(/│ my-cache\s+│/);
    expect(runThroughput.status, runThroughput.stderr).toBe(0);
    expect(runThroughput.stdout).toMatch(/│ my-batcher\s+│/);
  });

  it('refuses a bad name and an existing file, writing nothing', async () => {
    const [bad, again] = (await pooled(
      [() => runCliIn(root, ['new', 'policy', 'My Cache']), () => runCliIn(root, ['new', 'policy', 'my-cache'])],
      2,
    )) as [CliResult, CliResult];
    expect(bad.status).toBe(2);
    expect(bad.stderr.trim().split('\n')).toHaveLength(1);
    expect(bad.stderr).toMatch(/^moesim: name: a policy name is lower case/);
    expect(again.status).toBe(2);
    expect(again.stderr).toMatch(/would overwrite plugins\/my-cache\.ts/);
    expect(readFileSync(path.join(root, 'plugins/my-cache.ts'), 'utf8')).toContain("name: 'my-cache'");
  }, 120_000);
});
