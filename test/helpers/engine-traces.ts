/**
 * Writers of small and large routing traces in the formats engines write (vLLM/SGLang JSONL,
 * Megatron router-trace JSONL, llama.cpp moe-trace CSV, imp JSON, Parquet rows), written from
 * our reading of each writer's code or docs, for the importer tests. Routing is a pure
 * function of (request, token, layer, slot) so tests can check every id after import.
 */
import { createWriteStream, writeFileSync } from 'node:fs';
import { once } from 'node:events';
import { parquetWriteFile } from 'hyparquet-writer';

/** The id of slot j at (request r, token t, layer l): k distinct ids in 0…E-1. */
export const idOf = (E: number, r: number, t: number, l: number, j: number): number =>
  (r * 7 + t * 3 + l * 5 + j * Math.floor(E / 4) + j) % E;

export interface Shape {
  readonly requests: number;
  readonly prompt: number;
  readonly decode: number;
  readonly L: number;
  readonly k: number;
  readonly E: number;
}

const slots = (s: Shape, r: number, t: number, l: number): number[] =>
  Array.from({ length: s.k }, (_, j) => idOf(s.E, r, t, l, j));

async function lines(path: string, gen: () => Generator<string>): Promise<void> {
  const f = createWriteStream(path);
  for (const s of gen()) if (!f.write(s)) await once(f, 'drain');
  f.end();
  await once(f, 'close');
}

/** vLLM: one RequestOutput per line, routed_experts [seq_len−1][L][k] (nested lists). */
export const writeVllm = (path: string, s: Shape): Promise<void> =>
  lines(path, function* () {
    for (let r = 0; r < s.requests; r++) {
      const T = s.prompt + s.decode;
      const routed = Array.from({ length: T }, (_, t) => Array.from({ length: s.L }, (_, l) => slots(s, r, t, l)));
      yield `${JSON.stringify({ request_id: `req-${r}`, prompt_token_ids: Array.from({ length: s.prompt }, (_, i) => 100 + i), outputs: [{ routed_experts: routed }] })}\n`;
    }
  });

/** SGLang: generate responses, meta_info.routed_experts base64 int32 [T][L+dense][k], dense layer 0 all −1. */
export const writeSglang = (path: string, s: Shape): Promise<void> =>
  lines(path, function* () {
    for (let r = 0; r < s.requests; r++) {
      const T = s.prompt + s.decode;
      const buf = Buffer.alloc(T * (s.L + 1) * s.k * 4);
      let o = 0;
      for (let t = 0; t < T; t++) {
        for (let l = -1; l < s.L; l++)
          for (let j = 0; j < s.k; j++, o += 4) buf.writeInt32LE(l < 0 ? -1 : idOf(s.E, r, t, l, j), o);
      }
      yield `${JSON.stringify({ text: 'x', meta_info: { id: `sg-${r}`, prompt_tokens: s.prompt, completion_tokens: s.decode + 1, routed_experts: buf.toString('base64') } })}\n`;
    }
  });

/** Megatron: one record per (step, layer); a prefill step of `prompt` tokens, then one-token decode steps. */
export const writeMegatron = (path: string, s: Shape): Promise<void> =>
  lines(path, function* () {
    let step = 0;
    for (let r = 0; r < s.requests; r++) {
      const batches: number[][] = [
        Array.from({ length: s.prompt }, (_, i) => i),
        ...Array.from({ length: s.decode }, (_, i) => [s.prompt + i]),
      ];
      for (const toks of batches) {
        for (let l = 0; l < s.L; l++) {
          const top = toks.map((t) => slots(s, r, t, l));
          yield `${JSON.stringify({ step, stage: 'pre_dispatch', block: 'decoder', layer: l + 1, rank: 0, num_tokens: toks.length, topk: s.k, top_indices: top })}\n`;
        }
        if (r === 0 && step === 0)
          yield `${JSON.stringify({ step, stage: 'pre_dispatch', block: 'mtp', mtp_idx: 0, layer: 1, rank: 0, num_tokens: toks.length, topk: s.k, top_indices: toks.map(() => slots(s, 0, 0, 0)) })}\n`;
        step++;
      }
    }
  });

/** llama.cpp moe-trace: `layer,expert` rows; per micro-batch, each layer's rows token by token. */
export const writeLlamacpp = (path: string, s: Shape): Promise<void> =>
  lines(path, function* () {
    yield 'layer,expert\n';
    for (let r = 0; r < s.requests; r++) {
      const batches: number[][] = [
        Array.from({ length: s.prompt }, (_, i) => i),
        ...Array.from({ length: s.decode }, (_, i) => [s.prompt + i]),
      ];
      for (const toks of batches) {
        for (let l = 0; l < s.L; l++) {
          let out = '';
          for (const t of toks) for (const e of slots(s, r, t, l)) out += `${l + 1},${e}\n`;
          yield out;
        }
      }
    }
  });

/** imp: {"top_k": k, "trace": [[layer, e0 … e_{k-1}], …]} (or flat), decode tokens of request 0 only. */
export const writeImp = (path: string, s: Shape, flat = false): Promise<void> =>
  lines(path, function* () {
    yield `{"model":"x","top_k":${s.k},"trace":[`;
    let first = true;
    for (let t = 0; t < s.decode; t++) {
      let out = '';
      for (let l = 0; l < s.L; l++) {
        const rec = [l, ...slots(s, 0, t, l)];
        out += `${first ? '' : ','}${flat ? rec.join(',') : JSON.stringify(rec)}`;
        first = false;
      }
      yield out;
    }
    yield ']}\n';
  });

/** Parquet: one row per (prompt, token, layer), experts as a list column, a phase column. */
export function writeParquet(path: string, s: Shape): void {
  const n = s.requests * (s.prompt + s.decode) * s.L;
  const prompt: string[] = new Array(n);
  const token = new Int32Array(n);
  const layer = new Int32Array(n);
  const phase: string[] = new Array(n);
  const experts: number[][] = new Array(n);
  let i = 0;
  for (let r = 0; r < s.requests; r++) {
    for (let t = 0; t < s.prompt + s.decode; t++) {
      for (let l = 0; l < s.L; l++, i++) {
        prompt[i] = `p${r}`;
        token[i] = t;
        layer[i] = l;
        phase[i] = t < s.prompt ? 'prefill' : 'decode';
        experts[i] = slots(s, r, t, l);
      }
    }
  }
  parquetWriteFile({
    filename: path,
    rowGroupSize: 20_000,
    columnData: [
      { name: 'prompt_id', data: prompt, type: 'STRING' },
      { name: 'token_idx', data: Array.from(token), type: 'INT32' },
      { name: 'layer', data: Array.from(layer), type: 'INT32' },
      { name: 'phase', data: phase, type: 'STRING' },
      { name: 'experts', data: experts },
    ],
  });
}

export const writeText = (path: string, text: string): void => writeFileSync(path, text);
