/**
 * `moesim trace import --format …`: every engine format's small fixture (written here from our
 * reading of the writer) imports with the right shape, phases and ids; a ≥ 100 k-token file of
 * each imports under a 160 MB heap cap; bad files give one line naming the line/row and field,
 * exit 2, and no output file.
 */
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT, runProcess, tempDir } from '../helpers/cli.ts';
import {
  idOf,
  writeImp,
  writeLlamacpp,
  writeMegatron,
  writeParquet,
  writeSglang,
  writeText,
  writeVllm,
  type Shape,
} from '../helpers/engine-traces.ts';
import { TraceReader } from '../../workloads/trace/reader.ts';
import type { TraceRequest } from '../../workloads/trace/format.ts';

const dir = tempDir('trace-import');
const BIN = path.join(REPO_ROOT, 'bin/moesim.mjs');
const cli = (args: string[], heapMb?: number) =>
  runProcess(
    process.execPath,
    [...(heapMb ? [`--max-old-space-size=${heapMb}`] : []), BIN, 'trace', 'import', ...args],
    REPO_ROOT,
    300_000,
  );

async function readAll(file: string): Promise<{ header: TraceReader['header']; requests: TraceRequest[] }> {
  const r = await TraceReader.open(file);
  const requests: TraceRequest[] = [];
  for await (const q of r) requests.push(q);
  return { header: r.header, requests };
}

function expectIds(r: TraceRequest, s: Shape, req: number, tokenOffset = 0): void {
  for (let t = 0; t < r.tokens; t++) {
    for (let l = 0; l < s.L; l++)
      for (let j = 0; j < s.k; j++)
        expect(r.experts[(t * s.L + l) * s.k + j]).toBe(idOf(s.E, req, t + tokenOffset, l, j));
  }
}

const SMALL: Shape = { requests: 3, prompt: 4, decode: 3, L: 3, k: 2, E: 16 };

describe('trace import --format (fixtures)', () => {
  it.each([
    ['vllm', writeVllm, []],
    ['sglang', writeSglang, ['--layers', '4', '--top-k', '2']],
    ['megatron', writeMegatron, []],
    ['llamacpp', writeLlamacpp, ['--top-k', '2']],
  ] as const)('%s: requests, phases and ids', async (format, write, extra) => {
    const input = path.join(dir, `small.${format}`);
    const out = path.join(dir, `small-${format}.jsonl.gz`);
    await write(input, SMALL);
    const r = await cli([input, '--format', format, '--out', out, '--experts', '16', ...extra]);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const { header, requests } = await readAll(out);
    expect(header.model).toMatchObject({ moeLayers: 3, experts: 16, topK: 2 });
    expect(header.description).toContain(format);
    expect(requests).toHaveLength(3);
    requests.forEach((q, i) => {
      expect(q).toMatchObject({ promptTokens: 4, tokens: 7, prefillRecorded: true });
      expectIds(q, SMALL, i);
    });
  });

  it('megatron and llamacpp mark assumed request boundaries; sglang drops the dense layer', async () => {
    const m = await readAll(path.join(dir, 'small-megatron.jsonl.gz'));
    expect(m.header.description).toMatch(/ASSUMED request boundaries/);
    expect(m.header.model.moeLayerIds).toEqual([1, 2, 3]);
    const s = await readAll(path.join(dir, 'small-sglang.jsonl.gz'));
    expect(s.header.model.moeLayerIds).toEqual([1, 2, 3]);
  });

  it.each([false, true])('imp (flat %s): one decode-only stream, split by --segment', async (flat) => {
    const input = path.join(dir, `small-${flat}.imp.json`);
    const out = path.join(dir, `small-imp-${flat}.jsonl.gz`);
    await writeImp(input, SMALL, flat);
    const r = await cli([input, '--format', 'imp', '--out', out, '--segment', '2']);
    expect(r.status).toBe(0);
    const { header, requests } = await readAll(out);
    expect(header.model).toMatchObject({ moeLayers: 3, topK: 2 });
    expect(header.description).toMatch(/ASSUMED/);
    expect(requests.map((q) => q.tokens)).toEqual([2, 1]);
    expect(requests[0]).toMatchObject({ prefillRecorded: false, promptTokens: 0 });
    expectIds(requests[0]!, SMALL, 0);
    expectIds(requests[1]!, SMALL, 0, 2);
  });

  it('parquet: one row per prompt, token and layer, phases from the phase column', async () => {
    const input = path.join(dir, 'small.parquet');
    const out = path.join(dir, 'small-parquet.jsonl.gz');
    writeParquet(input, SMALL);
    const r = await cli([input, '--format', 'parquet', '--out', out]);
    expect(r.stderr).toBe('');
    const { header, requests } = await readAll(out);
    expect(header.model).toMatchObject({ moeLayers: 3, topK: 2 });
    requests.forEach((q, i) => {
      expect(q).toMatchObject({ id: `p${i}`, promptTokens: 4, tokens: 7 });
      expectIds(q, SMALL, i);
    });
  });
});

describe('trace import --format: ≥ 100 k tokens under a 160 MB heap', () => {
  const BIG: Shape = { requests: 1000, prompt: 60, decode: 40, L: 4, k: 2, E: 64 };
  beforeAll(async () => {
    await Promise.all([
      writeVllm(path.join(dir, 'big.vllm'), BIG),
      writeMegatron(path.join(dir, 'big.megatron'), BIG),
      writeLlamacpp(path.join(dir, 'big.llamacpp'), BIG),
      writeImp(path.join(dir, 'big.imp'), { ...BIG, decode: 100_000 }),
    ]);
    writeParquet(path.join(dir, 'big.parquet'), BIG);
  }, 300_000);
  it.each([
    ['vllm', []],
    ['megatron', []],
    ['llamacpp', ['--top-k', '2']],
    ['imp', ['--segment', '1000']],
    ['parquet', []],
  ] as const)(
    '%s',
    async (format, extra) => {
      const out = path.join(dir, `big-${format}.jsonl.gz`);
      const r = await cli(
        [path.join(dir, `big.${format}`), '--format', format, '--out', out, '--experts', '64', ...extra],
        160,
      );
      expect(r.stderr).toBe('');
      expect(r.stdout).toMatch(/100000 tokens/);
    },
    300_000,
  );
});

describe('trace import --format: bad files', () => {
  it.each([
    [
      'vllm',
      '{"request_id":"a","prompt_token_ids":[1],"routed_experts":[[[1,2]],[[3,"x"]]]}\n',
      [],
      /line 1: routed_experts\[1\]\[0\]\[1\]: expert id must be an integer/,
    ],
    [
      'vllm',
      '{"request_id":"a","prompt_token_ids":[1,2,3],"routed_experts":[[[1,2]]]}\n',
      [],
      /line 1: prompt_token_ids: prompt has 3 tokens/,
    ],
    [
      'megatron',
      '{"step":0,"layer":1,"num_tokens":1,"top_indices":[[1,2]]}\n{"step":0,"layer":2,"num_tokens":1,"top_indices":[[1]]}\n',
      [],
      /line 2: top_indices\[0\]: expected 2 expert ids/,
    ],
    ['llamacpp', 'layer,expert\n0,1\n0,x\n', ['--top-k', '1'], /line 3: expert: must be a non-negative integer/],
    [
      'llamacpp',
      'layer,expert\n0,1\n0,2\n0,3\n1,1\n',
      ['--top-k', '2'],
      /line 2: layer: layer 0 has 3 rows, not a whole number of tokens/,
    ],
    ['imp', '{"top_k":2,"trace":[[0,1,2],[1,3]]}', [], /record 2 .*expected 2 expert ids/],
    [
      'vllm',
      '{"request_id":"a","prompt_token_ids":[1],"routed_experts":[[[1,1]]]}\n',
      [],
      /token 0, layer 0, slot 1: expert id repeated/,
    ],
    [
      'vllm',
      '{"request_id":"a","prompt_token_ids":[1],"routed_experts":[[[1,9]]]}\n',
      ['--experts', '8'],
      /slot 1: expert id must be in 0…7/,
    ],
  ] as const)('%s: %s', async (format, text, extra, message) => {
    const input = path.join(dir, `bad-${format}-${Math.random().toString(36).slice(2)}`);
    writeText(input, text);
    const out = path.join(dir, `bad-out-${path.basename(input)}.jsonl.gz`);
    const r = await cli([input, '--format', format, '--out', out, ...extra]);
    expect(r.status).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(message);
    expect(existsSync(out)).toBe(false);
    expect(readdirSync(dir).filter((f) => f.includes(path.basename(out)))).toEqual([]);
  });
});
