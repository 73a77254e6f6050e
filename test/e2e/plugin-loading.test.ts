/**
 * Plugins loaded by the real CLI from a folder outside the checkout with no package.json: a
 * `.ts` and a `.js` plugin in ES-module syntax. Before the loader used tsx's tsImport for such
 * files, both failed with "Cannot require() ES Module … in a cycle" (only under the real tsx
 * CLI, not under vitest's own loader, hence a spawned CLI here). Also the load-time errors for
 * plugin authors: an incompatible apiVersion, a hook that is not a function, params the
 * plugin's schema rejects — each one line naming the plugin and the field, exit 2.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT, runCliAsync, tempDir } from '../helpers/cli.ts';

const API = path.join(REPO_ROOT, 'api/policy.ts');

const plugin = (name: string, extra = '', hooks = ''): string => `
import { definePolicy, z } from ${JSON.stringify(API)};
export default definePolicy({
  name: '${name}', family: 'serving', summary: 'test plugin', ${extra}
  params: z.object({ slots: z.number().int().positive().default(4) }).strict(),
  create: () => ({ name: '${name}', ${hooks} chooseVictim: (_v, q) => q.candidates[0] }),
});
`;

const config = (entries: string[]): string => `name: plugin-loading
model: olmoe
hardware: rtx4090
seeds: [1]
workload:
  requests: 2
  arrival: { kind: offline }
  promptTokens: { kind: fixed, tokens: 8 }
  outputTokens: { kind: fixed, tokens: 2 }
executor: { batching: static, maxBatchSize: 2, bufferSlots: auto }
policies:
${entries.map((e) => `  - ${e}`).join('\n')}
`;

function world(files: Record<string, string>): string {
  const dir = tempDir('plugin-anywhere');
  for (const [f, text] of Object.entries(files)) writeFileSync(path.join(dir, f), text);
  return dir;
}

describe('plugins from a folder with no package.json', () => {
  it('loads a .ts and a .js plugin in ESM syntax (no require(esm) cycle) and runs them', async () => {
    const dir = world({
      'a.ts': plugin('ts-plugin'),
      'b.js': plugin('js-plugin'),
      'cfg.yaml': config(['path: ./a.ts', 'path: ./b.js']),
    });
    const r = await runCliAsync(['experiment', path.join(dir, 'cfg.yaml'), '--out', path.join(dir, 'out')], {
      timeoutMs: 90_000,
    });
    expect(r.stderr).not.toMatch(/cycle/);
    expect(r.status, r.stderr).toBe(0);
    const results = readFileSync(path.join(dir, 'out/results.json'), 'utf8');
    expect(results).toContain('ts-plugin');
    expect(results).toContain('js-plugin');
  }, 120_000);

  const cases: [string, string, RegExp][] = [
    [
      'incompatible apiVersion',
      plugin('old-api', 'apiVersion: 99,'),
      /plugin 'old-api'.*apiVersion.*99.*expects apiVersion 1/,
    ],
    [
      'hook that is not a function',
      plugin('bad-hook', '', 'onLayerDone: 5,'),
      /plugin 'bad-hook'.*hook 'onLayerDone' must be a function/,
    ],
    [
      'params the schema rejects',
      plugin('strict-params'),
      /policies\[0\]\.slots: plugin 'strict-params' params: .*expected number/,
    ],
  ];
  for (const [what, text, expected] of cases) {
    it(`an error for plugin authors, one line, exit 2: ${what}`, async () => {
      const entry = what.startsWith('params') ? 'path: ./p.ts\n    params: { slots: -1 }' : 'path: ./p.ts';
      const dir = world({ 'p.ts': text, 'cfg.yaml': config([entry]) });
      const r = await runCliAsync(['experiment', path.join(dir, 'cfg.yaml'), '--out', path.join(dir, 'out')], {
        timeoutMs: 90_000,
      });
      expect(r.status, r.stderr).toBe(2);
      const lines = r.stderr
        .trim()
        .split('\n')
        .filter((l) => l.startsWith('moesim:'));
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(expected);
    }, 120_000);
  }
});
