/**
 * moesim as a dependency, end to end: packs this checkout (`npm pack`), scaffolds a plugin
 * project in a temporary folder with `moesim new policy --project --moesim <tarball>`, installs
 * it from the registry (npm's cache first), runs the project's experiment with `npx moesim`
 * and its own tests with `npm test`, and checks the experiment's results.
 *
 * It installs packages, so it runs only where asked: MOESIM_PACK_TEST=1 (.ci/run sets it for
 * its first pass), and skips with a one-line reason when npm cannot reach the registry.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT, runCli, runProcess, tempDir } from '../helpers/cli.ts';

const NPM = process.platform === 'win32' ? 'npm.cmd' : 'npm';

function skipReason(): string | undefined {
  if (process.env['MOESIM_PACK_TEST'] !== '1')
    return 'set MOESIM_PACK_TEST=1 to pack moesim and install it into a new project';
  const ping = spawnSync(NPM, ['ping', '--fetch-timeout=8000', '--fetch-retries=0'], {
    encoding: 'utf8',
    timeout: 20_000,
  });
  if (ping.status !== 0)
    return `npm cannot reach the registry (npm ping: ${(ping.stderr || ping.stdout || 'no answer').trim().split('\n').pop()})`;
  return undefined;
}

const reason = skipReason();
if (reason) process.stderr.write(`package.test: skipped: ${reason}\n`);

describe.skipIf(reason !== undefined)('a plugin project with moesim installed from an npm pack tarball', () => {
  it('scaffolds, installs, runs its experiment and passes its own tests', async () => {
    const tmp = tempDir('package');
    // --ignore-scripts: `prepare` (the wasm build) has run in this checkout already; build/eamc.wasm is packed.
    const pack = await runProcess(NPM, ['pack', '--ignore-scripts', '--pack-destination', tmp], REPO_ROOT, 60_000);
    expect(pack.status, pack.stderr).toBe(0);
    const tarball = path.join(tmp, readdirSync(tmp).find((f) => f.endsWith('.tgz'))!);

    const proj = path.join(tmp, 'proj');
    const scaffold = runCli(['new', 'policy', 'pack-probe', '--project', proj, '--moesim', tarball]);
    expect(scaffold.status, scaffold.stderr).toBe(0);
    // The generated quickstart has 8 requests; 2 keep this test fast and still run every policy.
    const cfg = path.join(proj, 'pack-probe.yaml');
    writeFileSync(cfg, readFileSync(cfg, 'utf8').replace('requests: 8', 'requests: 2'));

    const install = await runProcess(NPM, ['install', '--prefer-offline', '--no-audit', '--no-fund'], proj, 150_000);
    expect(install.status, install.stderr).toBe(0);

    const [exp, test] = await Promise.all([
      runProcess(
        'npx',
        ['--no-install', 'moesim', 'experiment', 'pack-probe.yaml', '--out', 'out', '--jobs', '1', '--no-progress'],
        proj,
        120_000,
      ),
      runProcess(NPM, ['test'], proj, 120_000),
    ]);
    expect(exp.status, exp.stderr).toBe(0);
    expect(test.status, test.stdout + test.stderr).toBe(0);
    expect(test.stdout).toMatch(/3 passed/);

    const results = JSON.parse(readFileSync(path.join(proj, 'out/results.json'), 'utf8')) as {
      complete: boolean;
      runs: { policy: string; metrics: { requests?: number } }[];
    };
    expect(results.complete).toBe(true);
    expect(results.runs.map((r) => r.policy)).toEqual(['on-demand', 'lru', 'pack-probe']);
    for (const r of results.runs) expect(r.metrics.requests).toBe(2);
  }, 300_000);
});
