/**
 * Trace reader and writer: round trip, header versioning, the shared-real dialect, and every
 * bad-input case → one UserError naming file, line and field.
 */
import { mkdtempSync, readdirSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { UserError } from '../../sim/kernel/errors.ts';
import { readTraceFile, TraceReader } from '../../workloads/trace/reader.ts';
import { TraceWriter } from '../../workloads/trace/writer.ts';
import { MISSING, type TraceRequest } from '../../workloads/trace/format.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'moesim-trace-io-'));
let n = 0;
const file = (name = 'trace.jsonl.gz'): string => path.join(dir, `${n++}-${name}`);

const HEADER = { format: 'moesim-trace', version: 1, model: { id: 'toy', moeLayers: 2, experts: 4, topK: 2 } };
const REQ = {
  id: 'a',
  promptTokens: 2,
  task: 'chat',
  tokens: [
    [
      [0, 1],
      [2, 3],
    ],
    [
      [1, 0],
      [3, 2],
    ],
    [[0, 2], null],
  ],
};

function writeGz(lines: readonly unknown[], name?: string): string {
  const f = file(name);
  writeFileSync(f, gzipSync(lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n') + '\n'));
  return f;
}

async function readError(f: string, opts = {}): Promise<UserError> {
  try {
    await readTraceFile(f, opts);
  } catch (e) {
    if (e instanceof UserError) return e;
    throw e;
  }
  throw new Error('expected a UserError');
}

describe('trace reader', () => {
  it('reads header and requests, packing tokens with MISSING for null', async () => {
    const { info, requests } = await readTraceFile(writeGz([HEADER, REQ]));
    expect(info.dialect).toBe('moesim-trace');
    expect(info.header.model).toEqual(HEADER.model);
    expect(requests).toHaveLength(1);
    const r = requests[0]!;
    expect(r).toMatchObject({
      id: 'a',
      promptTokens: 2,
      prefillRecorded: true,
      tokens: 3,
      outputTokens: 2,
      task: 'chat',
      line: 2,
    });
    expect(Array.from(r.experts)).toEqual([0, 1, 2, 3, 1, 0, 3, 2, 0, 2, MISSING, MISSING]);
  });

  it('reads uncompressed JSONL too, and skips blank lines', async () => {
    const f = file('plain.jsonl');
    writeFileSync(f, `${JSON.stringify(HEADER)}\n\n${JSON.stringify(REQ)}\r\n`);
    const { requests } = await readTraceFile(f);
    expect(requests[0]!.id).toBe('a');
  });

  it('rejects a newer format version with a clear message', async () => {
    const e = await readError(writeGz([{ ...HEADER, version: 2 }, REQ]));
    expect(e.oneLine()).toMatch(
      /line 1: version: trace format version 2 is newer than this moesim reads \(version 1\)/,
    );
  });

  it('rejects a file without a header', async () => {
    const e = await readError(writeGz([{ hello: 1 }]));
    expect(e.field).toBe('line 1');
    expect(e.message).toMatch(/not a moesim trace/);
  });

  it.each([
    ['malformed JSON', ['{"id": "a", "promptTokens": 2,'], 'line 2', /malformed JSON/],
    [
      'expert id ≥ E',
      [
        {
          ...REQ,
          tokens: [
            [
              [0, 4],
              [1, 2],
            ],
          ],
          promptTokens: 1,
        },
      ],
      'line 2: tokens[0][0][1]',
      /expert id 4 is out of range \(experts = 4/,
    ],
    [
      'wrong number of experts for top-k',
      [
        {
          ...REQ,
          tokens: [
            [
              [0, 1, 2],
              [1, 2],
            ],
          ],
          promptTokens: 1,
        },
      ],
      'line 2: tokens[0][0]',
      /lists 3 experts but top-k is 2/,
    ],
    [
      'duplicate expert in a top-k list',
      [
        {
          ...REQ,
          tokens: [
            [
              [1, 1],
              [1, 2],
            ],
          ],
          promptTokens: 1,
        },
      ],
      'line 2: tokens[0][0][1]',
      /appears twice/,
    ],
    [
      'wrong number of layers',
      [{ ...REQ, tokens: [[[0, 1]]], promptTokens: 1 }],
      'line 2: tokens[0]',
      /has 1 layers but the trace's model has 2 MoE layers/,
    ],
    [
      'negative expert id',
      [
        {
          ...REQ,
          tokens: [
            [
              [-1, 1],
              [1, 2],
            ],
          ],
          promptTokens: 1,
        },
      ],
      'line 2: tokens[0][0][0]',
      /non-negative integer/,
    ],
    ['a missing field', [{ id: 'a', tokens: [] }], 'line 2: promptTokens', /./],
    ['an unknown field', [{ ...REQ, colour: 'red' }], 'line 2: colour', /colour/],
    ['promptTokens beyond the tokens listed', [{ ...REQ, promptTokens: 9 }], 'line 2: promptTokens', /exceeds/],
    ['a duplicate request id', [REQ, REQ], 'line 3: id', /duplicate request id/],
  ])('%s → UserError naming file, line and field', async (_name, lines, field, message) => {
    const f = writeGz([HEADER, ...lines]);
    const e = await readError(f);
    expect(e.file).toBe(f);
    expect(e.field).toBe(field);
    expect(e.message).toMatch(message);
    expect(e.oneLine()).not.toContain('\n');
  });

  it('a truncated gzip stream → UserError naming the line where reading stopped', async () => {
    const lines = [HEADER, ...Array.from({ length: 200 }, (_, i) => ({ ...REQ, id: `r${i}` }))];
    const whole = gzipSync(lines.map((l) => JSON.stringify(l)).join('\n'));
    const f = file();
    writeFileSync(f, whole.subarray(0, Math.floor(whole.length * 0.6)));
    const e = await readError(f);
    expect(e.message).toMatch(/truncated gzip stream/);
    expect(e.field).toMatch(/^line \d+$/);
  });

  it('a model shape mismatch against the expected model → UserError on the header field', async () => {
    const f = writeGz([HEADER, REQ]);
    const e = await readError(f, { expect: { modelId: 'mixtral-8x7b', moeLayers: 32, experts: 4, topK: 2 } });
    expect(e.oneLine()).toBe(`${f}: line 1: model.moeLayers: trace has 2 MoE layers but model mixtral-8x7b has 32`);
  });

  it('a missing file → UserError', async () => {
    const e = await readError(path.join(dir, 'nope.jsonl.gz'));
    expect(e.message).toBe('no such file');
  });

  it('reads the shared-real dialect (no header, per-line model, probs, task from id)', async () => {
    const line = (id: string, prefill: boolean, p: number, d: number, tokens: unknown[]) => ({
      id,
      model: 'Mixtral-8x7B-Instruct',
      source: 'x',
      layers: 2,
      experts: 4,
      topk: 2,
      shared_experts: 0,
      moe_layer_ids: [0, 1],
      prompt_tokens: p,
      decode_tokens: d,
      phase_known: true,
      prefill_recorded: prefill,
      tokens,
      probs: tokens.map((t) => (t as unknown[]).map((x) => (x === null ? null : [0.75, 0.25]))),
    });
    const f = writeGz([
      line('gsm8k-0', true, 1, 1, [
        [
          [0, 1],
          [2, 3],
        ],
        [[1, 2], null],
      ]),
      line('gsm8k-1', false, 0, 1, [
        [
          [3, 2],
          [1, 0],
        ],
      ]),
    ]);
    const { info, requests } = await readTraceFile(f);
    expect(info.dialect).toBe('shared-real');
    expect(info.header.model).toMatchObject({ id: 'mixtral-8x7b', moeLayers: 2, experts: 4, topK: 2 });
    expect(requests.map((r) => [r.id, r.task, r.promptTokens, r.prefillRecorded, r.tokens, r.outputTokens])).toEqual([
      ['gsm8k-0', 'gsm8k', 1, true, 2, 2],
      ['gsm8k-1', 'gsm8k', 0, false, 1, 2],
    ]);
    expect(requests[0]!.scores![0]).toBeCloseTo(0.75, 6);
    expect(Number.isNaN(requests[0]!.scores![6]!)).toBe(true);
  });

  it('shared-real: a line whose layers differ from the first line → UserError', async () => {
    const base = {
      id: 'x-1',
      layers: 2,
      experts: 4,
      topk: 2,
      prompt_tokens: 1,
      decode_tokens: 0,
      prefill_recorded: true,
      tokens: [
        [
          [0, 1],
          [2, 3],
        ],
      ],
    };
    const e = await readError(writeGz([base, { ...base, id: 'x-2', layers: 3 }]));
    expect(e.field).toBe('line 2: layers');
  });
});

describe('trace writer', () => {
  const req: TraceRequest = {
    id: 'r0',
    line: 0,
    promptTokens: 1,
    prefillRecorded: true,
    tokens: 2,
    outputTokens: 5,
    task: 'code',
    arrivalS: 1.5,
    experts: Int32Array.from([0, 1, 2, 3, MISSING, MISSING, 3, 0]),
    scores: Float32Array.from([0.5, 0.25, 0.6, 0.4, NaN, NaN, 0.9, 0.1]),
    predictions: { offsets: Int32Array.from([0, 3, 3, 5, 6]), ids: Int32Array.from([1, 0, 2, 3, 0, 2]) },
  };

  it('round-trips a request with every optional field', async () => {
    const f = file();
    const w = await TraceWriter.create(f, { model: HEADER.model, source: 'unit test' });
    await w.write(req);
    await w.close();
    const { info, requests } = await readTraceFile(f);
    expect(info.header).toMatchObject({ format: 'moesim-trace', version: 1, source: 'unit test' });
    const r = requests[0]!;
    expect({ ...r, line: 0 }).toEqual(req);
  });

  it('leaves no file behind on abort, and nothing under the final name before close', async () => {
    const sub = mkdtempSync(path.join(dir, 'abort-'));
    const f = path.join(sub, 'out.jsonl.gz');
    const w = await TraceWriter.create(f, { model: HEADER.model });
    await w.write(req);
    expect(readdirSync(sub)).toEqual([`out.jsonl.gz.tmp-${process.pid}`]);
    await w.abort();
    expect(readdirSync(sub)).toEqual([]);
  });

  it('writes gzip (magic bytes) by default', async () => {
    const f = file();
    const w = await TraceWriter.create(f, { model: HEADER.model });
    await w.close();
    const b = readFileSync(f);
    expect([b[0], b[1]]).toEqual([0x1f, 0x8b]);
    const r = await TraceReader.open(f);
    const all = [];
    for await (const x of r) all.push(x);
    expect(all).toEqual([]);
  });
});

describe('the fast token scanner agrees with JSON.parse', () => {
  it.each([
    ['[[[0,1],[2,3]],[null,[1, 0]]]', [0, 1, 2, 3, -1, -1, 1, 0]],
    ['[ [ [0, 1] , null ] ]', [0, 1, -1, -1]],
    ['[]', []],
  ])('%s', async (tokens, ids) => {
    const { scanTokens } = await import('../../workloads/trace/reader.ts');
    const r = scanTokens(`{"id":"a","promptTokens":1,"tokens":${tokens}}`, 2, 4, 2);
    expect(r && Array.from(r.experts)).toEqual(ids);
  });
  it.each([
    '[[[0,1],[2,3]]',
    '[[[0,01],[2,3]]]',
    '[[[0,1.0],[2,3]]]',
    '[[[0,4],[2,3]]]',
    '[[[1,1],[2,3]]]',
    '[[[0,1]]]',
    '[[[0,1],[2,-3]]]',
  ])('leaves %s to the general path', async (tokens) => {
    const { scanTokens } = await import('../../workloads/trace/reader.ts');
    expect(scanTokens(`{"tokens":${tokens}}`, 2, 4, 2)).toBeNull();
  });
});
