/**
 * `moesim hardware new` as a new user meets it: one command writes a YAML testbed from shipped
 * component ids and the user's DIMMs; `moesim experiment` runs a config naming it, all within a
 * minute; a wrong flag writes nothing and exits 2 naming the flag.
 */
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runCliAsync, tempDir } from '../helpers/cli.ts';
import { parseDram, parseLink } from '../../experiments/cli/commands/hardware.ts';

const dir = tempDir('cli-hardware');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('moesim hardware new', () => {
  it('parses DIMM and link specs', () => {
    expect(parseDram('ddr5-6000x2')).toEqual({ type: 'ddr5', megaTransfersPerSec: 6000, channels: 2 });
    expect(parseLink('pcie4x16', ['gen4-x16'])).toBe('gen4-x16');
    expect(() => parseDram('ddr5-6000')).toThrow(/ddr5-<MT\/s>x<channels>/);
  });

  it('writes a testbed that an experiment runs, in under a minute', async () => {
    const t0 = Date.now();
    const box = path.join(dir, 'my-box.yaml');
    const made = await runCliAsync([
      'hardware',
      'new',
      '--gpu',
      'rtx-4090',
      '--cpu',
      'ryzen-9-7950x',
      '--dram',
      'ddr5-6000x2',
      '--link',
      'pcie4x16',
      '--drive',
      'samsung-990-pro-2tb',
      '--out',
      box,
    ]);
    expect(made.stderr).toBe('');
    expect(made.status).toBe(0);
    expect(readFileSync(box, 'utf8')).toMatch(/megaTransfersPerSec: 6000/);
    const cfg = path.join(dir, 'try.yaml');
    writeFileSync(
      cfg,
      `name: my-box-try
model: qwen3-30b-a3b-q4km
hardware: my-box.yaml
seeds: [1]
workload:
  requests: 1
  arrival: { kind: offline }
  promptTokens: { kind: fixed, tokens: 16 }
  outputTokens: { kind: fixed, tokens: 4 }
executor: { batching: static, maxBatchSize: 1 }
policies:
  - name: lru
    perLayerSlots: 16
`,
    );
    const run = await runCliAsync(['experiment', cfg, '--out', path.join(dir, 'out'), '--jobs', '1']);
    expect(run.stderr).not.toMatch(/error/i);
    expect(run.status).toBe(0);
    expect(run.stdout).toMatch(/lru/);
    expect(Date.now() - t0).toBeLessThan(60_000);
  }, 90_000);

  it('a wrong flag writes nothing and names the flag', async () => {
    const out = path.join(dir, 'bad.yaml');
    const r = await runCliAsync([
      'hardware',
      'new',
      '--gpu',
      'rtx-9999',
      '--cpu',
      'i5-10400f',
      '--dram',
      'ddr4-2667x2',
      '--link',
      'pcie3x16',
      '--out',
      out,
    ]);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/--gpu/);
    expect(existsSync(out)).toBe(false);
  });
});
