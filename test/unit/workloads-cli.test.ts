/**
 * `moesim trace …` end to end through the real command line: stats (table and JSON keys),
 * generate, calibrate, compare, import, aggregate files, and bad input → one line, exit 2,
 * nothing written.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT, runCliAsync } from '../helpers/cli.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'moesim-trace-cli-'));
const SHIPPED = path.join(REPO_ROOT, 'traces/synthetic-mixtral-8x7b.jsonl.gz');
const AGG = path.join(REPO_ROOT, 'traces/olmoe-routing-aggregates.json.gz');

describe('moesim trace (CLI)', () => {
  it('stats --json prints exactly the documented keys; the table names every statistic', async () => {
    const [json, table] = await Promise.all([
      runCliAsync(['trace', 'stats', SHIPPED, '--json']),
      runCliAsync(['trace', 'stats', SHIPPED]),
    ]);
    expect(json.status).toBe(0);
    const s = JSON.parse(json.stdout) as Record<string, unknown>;
    expect(Object.keys(s)).toEqual([
      'requests',
      'tokens',
      'layers',
      'experts',
      'topk',
      'popularityEntropy',
      'requestSkew',
      'crossLayerPredictability',
      'temporalLocality',
      'activationRatioByBatch',
      'taskClusterSimilarity',
    ]);
    expect(s).toMatchObject({ requests: 24, tokens: 1512, layers: 32, experts: 8, topk: 2 });
    expect(Object.keys(s['requestSkew'] as object)).toEqual(['2', '4']);
    expect(Object.keys(s['activationRatioByBatch'] as object)).toHaveLength(32);
    expect(table.status).toBe(0);
    for (const row of [
      'popularity entropy',
      'request skew top-2',
      'cross-layer predictability',
      'temporal locality',
      'activation ratio',
      'task similarity',
    ]) {
      expect(table.stdout).toContain(row);
    }
  });

  it('generate → stats, compare with the profile, import, calibrate', async () => {
    const out = path.join(dir, 'gen.jsonl.gz');
    const g = await runCliAsync([
      'trace',
      'generate',
      '--profile',
      'mixtral-8x7b',
      '--requests',
      '6',
      '--prompt-tokens',
      '8',
      '--output-tokens',
      '4',
      '--tasks',
      'a=1,b=1',
      '--out',
      out,
    ]);
    expect(g.stderr).toBe('');
    expect(g.stdout).toMatch(/wrote .*gen\.jsonl\.gz: 6 requests, 66 tokens, profile mixtral-8x7b/);
    const prof = path.join(dir, 'fit.json');
    const [stats, compare, imported, calibrated] = await Promise.all([
      runCliAsync(['trace', 'stats', out, '--json', '--extended']),
      runCliAsync(['trace', 'compare', out, '--profile', 'mixtral-8x7b']),
      runCliAsync(['trace', 'import', SHIPPED, '--out', path.join(dir, 'imported.jsonl.gz')]),
      runCliAsync(['trace', 'calibrate', SHIPPED, '--out', prof, '--evaluations', '8']),
    ]);
    expect(JSON.parse(stats.stdout)).toMatchObject({ requests: 6, tokens: 66, tasks: { a: expect.any(Number) } });
    expect(compare.stdout).toMatch(/twin \(mixtral-8x7b\)/);
    expect(imported.stdout).toMatch(/24 requests, 1512 tokens/);
    expect(calibrated.status).toBe(0);
    const p = JSON.parse(readFileSync(prof, 'utf8')) as { fittedTo: string; model: { id: string } };
    expect(p.model.id).toBe('mixtral-8x7b');
    expect(p.fittedTo).toMatch(/synthetic-mixtral-8x7b\.jsonl\.gz: 24 requests, 1512 tokens/);
  });

  it('aggregate files: stats and the OLMoE twin', async () => {
    const [stats, compare] = await Promise.all([
      runCliAsync(['trace', 'stats', AGG]),
      runCliAsync(['trace', 'compare', AGG, '--profile', 'olmoe', '--aggregate-model', 'OLMoE-1B-7B-0924']),
    ]);
    expect(stats.status).toBe(0);
    expect(stats.stdout).toMatch(/OLMoE-1B-7B-0924[\s\S]*arxiv: entropy L0\/7\/15 +0\.943 \/ 0\.866 \/ 0\.864/);
    expect(compare.stdout).toMatch(/twin \(olmoe\)/);
  });

  it('bad input: one line naming file, line and field; exit 2; nothing written', async () => {
    const bad = path.join(dir, 'bad.jsonl');
    writeFileSync(
      bad,
      `${JSON.stringify({ format: 'moesim-trace', version: 1, model: { moeLayers: 2, experts: 4, topK: 2 } })}\n` +
        `${JSON.stringify({
          id: 'a',
          promptTokens: 1,
          tokens: [
            [
              [0, 1],
              [2, 4],
            ],
          ],
        })}\n`,
    );
    const truncated = path.join(dir, 'truncated.jsonl.gz');
    const whole = readFileSync(SHIPPED);
    writeFileSync(truncated, whole.subarray(0, whole.length >> 1));
    const outDir = mkdtempSync(path.join(dir, 'out-'));
    const [a, b, c, d] = await Promise.all([
      runCliAsync(['trace', 'stats', bad]),
      runCliAsync(['trace', 'stats', truncated]),
      runCliAsync([
        'trace',
        'generate',
        '--profile',
        'mixtral-8x7b',
        '--like',
        truncated,
        '--out',
        path.join(outDir, 'x.jsonl.gz'),
      ]),
      runCliAsync(['trace', 'calibrate', truncated, '--out', path.join(outDir, 'p.json')]),
    ]);
    expect(a.status).toBe(2);
    expect(a.stderr.trim()).toBe(
      `moesim: ${bad}: line 2: tokens[0][1][1]: expert id 4 is out of range (experts = 4, ids 0…3)`,
    );
    for (const r of [b, c, d]) {
      expect(r.status).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(/truncated\.jsonl\.gz: line \d+: truncated gzip stream/);
    }
    expect(readdirSync(outDir)).toEqual([]);
    expect(existsSync(path.join(outDir, 'x.jsonl.gz'))).toBe(false);
  });
});
