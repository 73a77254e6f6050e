/**
 * Importers of the routing traces inference engines write (`moesim trace import --format …`).
 * Each returns an `ImportPass` (see `common.ts`); what each format lacks, and what the import
 * assumes in its place, is in `ASSUMPTIONS`, which is written into the trace's header.
 *
 * - vllm / sglang: JSON Lines, one request per line (a dumped `RequestOutput` / generate
 *   response). The routing is `routed_experts` (vLLM: `outputs[0].routed_experts`, SGLang:
 *   `meta_info.routed_experts`) as nested lists [token][layer][slot] or as base64 of the raw
 *   array (vLLM int16, SGLang int32) with the shape from `routed_experts_shape` or the options.
 *   Tokens are the prompt then the generated tokens that were fed back (seq_len − 1 of them).
 * - megatron: `--moe-routing-trace-path` JSONL, one record per (step, block, layer) with
 *   `num_tokens`, `topk` and `top_indices` [token][slot]; MTP records are skipped.
 * - llamacpp: `examples/moe-trace` CSV, one `layer,expert` row per routed activation, one
 *   layer's rows per micro-batch in token order, k rows per token.
 * - imp: `diagnostics.moe_expert_trace` JSON, `[layer, e0 … e_{k-1}]` per (token, layer), or
 *   the same flattened, as a list or under `trace` / `entries` / `data` with `top_k` beside it.
 */
import { UserError } from '../../sim/kernel/errors.ts';
import { readLines } from '../trace/lines.ts';
import { jsonTokens, type JsonToken } from './json-stream.ts';
import { RoutingBuffer, type ImportedRequest, type ImportPass, type ImportShape } from './common.ts';

export const ENGINE_FORMATS = ['vllm', 'sglang', 'megatron', 'llamacpp', 'imp'] as const;
export type EngineFormat = (typeof ENGINE_FORMATS)[number];

/** What each import assumes where its format is silent (goes into the header). */
export const ASSUMPTIONS: Record<EngineFormat | 'parquet', string> = {
  vllm: 'per-request routing; tokens = prompt then generated tokens fed back; phases from the prompt length',
  sglang:
    'per-request routing; tokens = prompt then generated tokens fed back; phases from the prompt length; layers with no routed expert (-1 throughout the first request) dropped',
  megatron:
    'ASSUMED request boundaries and phases: one sequence at a time; a step with more than one token starts a new request (its prompt, prefill), ' +
    'a one-token step is a decode step of the current request; MTP records skipped',
  llamacpp:
    'ASSUMED request boundaries and phases: a micro-batch of more than one token after a one-token micro-batch starts a new request; ' +
    'multi-token micro-batches are prompt (prefill), one-token ones decode; one sequence at a time',
  imp: 'ASSUMED: the whole trace is one decode-only request (prefill not recorded) unless --segment splits it; a record whose layer is not above the previous one starts a new token',
  parquet:
    'per-request routing from the prompt column; token order from the token column; phases from the phase column if any, else all prompt (prefill)',
};

export interface EngineOptions {
  readonly layers?: number;
  readonly topK?: number;
  readonly experts?: number;
  /** Split single-stream formats (imp) into requests of at most this many tokens. */
  readonly segment?: number;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function parseLine(file: string, no: number, text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new UserError(`malformed JSON: ${(e as Error).message}`, file, `line ${no}`);
  }
}

// ---------------------------------------------------------------- vLLM / SGLang

/** vLLM or SGLang JSON Lines with `routed_experts` per request. */
export function vllmPass(file: string, format: 'vllm' | 'sglang', o: EngineOptions): ImportPass {
  let shape: ImportShape | undefined;
  let keep: number[] | undefined;
  let firstL: number | undefined;
  async function* requests(): AsyncGenerator<ImportedRequest> {
    for await (const { no, text } of readLines(file)) {
      if (!text.trim()) continue;
      const obj = parseLine(file, no, text);
      if (!isObj(obj)) throw new UserError('expected a JSON object per line', file, `line ${no}`);
      const meta = isObj(obj['meta_info']) ? obj['meta_info'] : {};
      const out0 = Array.isArray(obj['outputs']) && isObj(obj['outputs'][0]) ? obj['outputs'][0] : {};
      const field =
        'routed_experts' in obj
          ? 'routed_experts'
          : 'routed_experts' in out0
            ? 'outputs[0].routed_experts'
            : 'meta_info.routed_experts';
      const routed = obj['routed_experts'] ?? out0['routed_experts'] ?? meta['routed_experts'];
      if (routed === undefined)
        throw new UserError(
          'no routed_experts (was the engine run with --enable-return-routed-experts?)',
          file,
          `line ${no}: routed_experts`,
        );
      const grid = decodeRouted(
        file,
        no,
        field,
        routed,
        format,
        obj['routed_experts_shape'] ?? meta['routed_experts_shape'],
        o,
      );
      if (!keep) {
        // Layers with no routed expert anywhere in the first request are dense layers (SGLang writes -1 there).
        keep = [];
        for (let l = 0; l < grid.L; l++) {
          let all = grid.T > 0;
          for (let t = 0; t < grid.T && all; t++)
            for (let j = 0; j < grid.k; j++) if (grid.ids[(t * grid.L + l) * grid.k + j] !== -1) all = false;
          if (!all) keep.push(l);
        }
        if (!keep.length) throw new UserError('every layer is -1 in the first request', file, `line ${no}: ${field}`);
        shape = {
          moeLayers: keep.length,
          topK: grid.k,
          ...(o.experts ? { experts: o.experts } : {}),
          ...(keep.length < grid.L ? { moeLayerIds: keep } : {}),
        };
      }
      firstL ??= grid.L;
      if (grid.k !== shape!.topK || grid.L !== firstL) {
        throw new UserError(
          `shape ${grid.T}×${grid.L}×${grid.k} does not match the first request's layers × top-${shape!.topK}`,
          file,
          `line ${no}: ${field}`,
        );
      }
      const L = keep.length;
      const experts = new Int32Array(grid.T * L * grid.k);
      for (let t = 0, i = 0; t < grid.T; t++)
        for (const l of keep) for (let j = 0; j < grid.k; j++) experts[i++] = grid.ids[(t * grid.L + l) * grid.k + j]!;
      const id = String(obj['request_id'] ?? obj['rid'] ?? obj['id'] ?? meta['id'] ?? `line-${no}`);
      const prompt = promptLength(file, no, obj, meta);
      if (prompt > grid.T)
        throw new UserError(
          `prompt has ${prompt} tokens but routing covers ${grid.T}`,
          file,
          `line ${no}: prompt_token_ids`,
        );
      yield { id, where: `line ${no}`, promptTokens: prompt, prefillRecorded: true, tokens: grid.T, experts };
    }
  }
  return { shape: () => shape, requests };
}

function promptLength(file: string, no: number, obj: Record<string, unknown>, meta: Record<string, unknown>): number {
  const ids = obj['prompt_token_ids'];
  if (Array.isArray(ids)) return ids.length;
  for (const [v, name] of [
    [obj['num_prompt_tokens'], 'num_prompt_tokens'],
    [obj['prompt_tokens'], 'prompt_tokens'],
    [meta['prompt_tokens'], 'meta_info.prompt_tokens'],
  ] as const) {
    if (v === undefined) continue;
    if (!Number.isInteger(v) || (v as number) < 0)
      throw new UserError('must be a non-negative integer', file, `line ${no}: ${name}`, v);
    return v as number;
  }
  throw new UserError(
    'no prompt length (prompt_token_ids, num_prompt_tokens or meta_info.prompt_tokens)',
    file,
    `line ${no}: prompt_token_ids`,
  );
}

interface Grid {
  T: number;
  L: number;
  k: number;
  ids: Int32Array;
}

function decodeRouted(
  file: string,
  no: number,
  field: string,
  v: unknown,
  format: 'vllm' | 'sglang',
  shapeField: unknown,
  o: EngineOptions,
): Grid {
  const where = (s: string): string => `line ${no}: ${field}${s}`;
  if (typeof v === 'string') {
    const bytes = Buffer.from(v, 'base64');
    const width = format === 'vllm' ? 2 : 4;
    const shp = Array.isArray(shapeField) ? (shapeField as number[]) : undefined;
    const L = shp?.[1] ?? o.layers;
    const k = shp?.[2] ?? o.topK;
    if (!L || !k)
      throw new UserError(
        'base64 routing needs its shape: routed_experts_shape, or --layers and --top-k',
        file,
        where(''),
      );
    if (bytes.length % (width * L * k) !== 0) {
      throw new UserError(
        `${bytes.length} bytes is not a whole number of tokens of ${L} layers × ${k} × int${8 * width}`,
        file,
        where(''),
      );
    }
    const n = bytes.length / width;
    const ids = new Int32Array(n);
    for (let i = 0; i < n; i++) ids[i] = width === 2 ? bytes.readInt16LE(2 * i) : bytes.readInt32LE(4 * i);
    return { T: n / (L * k), L, k, ids };
  }
  if (!Array.isArray(v)) throw new UserError('expected [token][layer][slot] lists or a base64 string', file, where(''));
  const T = v.length;
  const L = Array.isArray(v[0]) ? v[0].length : 0;
  const k = Array.isArray(v[0]) && Array.isArray(v[0][0]) ? v[0][0].length : 0;
  if (T && (!L || !k)) throw new UserError('expected [token][layer][slot] lists', file, where('[0]'));
  const ids = new Int32Array(T * L * k);
  let i = 0;
  for (let t = 0; t < T; t++) {
    const tok = v[t];
    if (!Array.isArray(tok) || tok.length !== L) throw new UserError(`expected ${L} layers`, file, where(`[${t}]`));
    for (let l = 0; l < L; l++) {
      const s = tok[l];
      if (!Array.isArray(s) || s.length !== k)
        throw new UserError(`expected ${k} expert ids`, file, where(`[${t}][${l}]`));
      for (let j = 0; j < k; j++) {
        const e = s[j];
        if (!Number.isInteger(e))
          throw new UserError('expert id must be an integer', file, where(`[${t}][${l}][${j}]`), e);
        ids[i++] = e as number;
      }
    }
  }
  return { T, L, k, ids };
}

// ---------------------------------------------------------------- request assembly for streams

/** Builds requests from a stream of tokens (each L·k ids), split at prompt starts. */
class StreamRequests {
  private buf = new RoutingBuffer();
  private tokens = 0;
  private prompt = 0;
  private decoding = false;
  private prefillRecorded = true;
  private started = false;
  private count = 0;
  private where = '';
  constructor(private readonly prefix: string) {}

  /** Adds a batch of tokens read together (a step or micro-batch); returns a finished request, if one ended here. */
  addBatch(ids: ArrayLike<number>, tokens: number, where: string): ImportedRequest | undefined {
    let done: ImportedRequest | undefined;
    const multi = tokens > 1;
    if (this.started && multi && this.decoding) done = this.finish();
    if (!this.started) {
      this.started = true;
      this.where = where;
      this.prefillRecorded = multi;
      this.decoding = !multi;
    }
    for (let i = 0; i < ids.length; i++) this.buf.push(ids[i]!);
    this.tokens += tokens;
    if (multi && !this.decoding) this.prompt += tokens;
    if (!multi) this.decoding = true;
    return done;
  }

  finish(): ImportedRequest | undefined {
    if (!this.started) return undefined;
    const r: ImportedRequest = {
      id: `${this.prefix}-${this.count++}`,
      where: this.where,
      promptTokens: this.prefillRecorded ? this.prompt : 0,
      prefillRecorded: this.prefillRecorded,
      tokens: this.tokens,
      experts: this.buf.take(),
    };
    this.tokens = 0;
    this.prompt = 0;
    this.started = false;
    this.decoding = false;
    return r;
  }
}

// ---------------------------------------------------------------- Megatron

/** Megatron-core router trace (JSONL, one record per step, block and layer). */
export function megatronPass(file: string, o: EngineOptions): ImportPass {
  let shape: ImportShape | undefined;
  async function* requests(): AsyncGenerator<ImportedRequest> {
    const stream = new StreamRequests('megatron');
    let step: number | undefined;
    let layers: number[] | undefined;
    let rows = new Map<number, { no: number; ids: number[][] }>();
    let stepLine = 0;
    let firstK: number | undefined;
    const flush = (): ImportedRequest | undefined => {
      if (step === undefined) return undefined;
      if (!layers) {
        layers = [...rows.keys()].sort((a, b) => a - b);
        shape = {
          moeLayers: layers.length,
          topK: firstK!,
          ...(o.experts ? { experts: o.experts } : {}),
          moeLayerIds: layers,
        };
      }
      const k = shape!.topK;
      const n = rows.get(layers[0]!)?.ids.length ?? 0;
      for (const l of layers) {
        const r = rows.get(l);
        if (!r) throw new UserError(`step ${step} has no record for layer ${l}`, file, `line ${stepLine}: layer`);
        if (r.ids.length !== n)
          throw new UserError(
            `layer ${l} has ${r.ids.length} tokens, layer ${layers[0]} has ${n}`,
            file,
            `line ${r.no}: num_tokens`,
          );
      }
      for (const l of rows.keys())
        if (!layers.includes(l))
          throw new UserError(`layer ${l} is not in the first step`, file, `line ${rows.get(l)!.no}: layer`);
      const ids = new Int32Array(n * layers.length * k);
      let i = 0;
      for (let t = 0; t < n; t++) {
        for (const l of layers) {
          const s = rows.get(l)!.ids[t]!;
          for (let j = 0; j < k; j++) ids[i++] = s[j]!;
        }
      }
      rows = new Map();
      return n ? stream.addBatch(ids, n, `line ${stepLine}`) : undefined;
    };
    for await (const { no, text } of readLines(file)) {
      if (!text.trim()) continue;
      const rec = parseLine(file, no, text);
      if (!isObj(rec)) throw new UserError('expected a JSON object per line', file, `line ${no}`);
      if (rec['block'] === 'mtp' || rec['mtp_idx'] !== undefined) continue;
      const s = rec['step'];
      const layer = rec['layer'];
      const top = rec['top_indices'];
      if (!Number.isInteger(s)) throw new UserError('must be an integer', file, `line ${no}: step`, s);
      if (!Number.isInteger(layer) || (layer as number) < 0)
        throw new UserError('must be a non-negative integer', file, `line ${no}: layer`, layer);
      if (!Array.isArray(top))
        throw new UserError('must be a [token][slot] list', file, `line ${no}: top_indices`, top);
      if (s !== step) {
        const done = flush();
        if (done) yield done;
        step = s as number;
        stepLine = no;
      }
      firstK ??= Number.isInteger(rec['topk']) ? (rec['topk'] as number) : Array.isArray(top[0]) ? top[0].length : 0;
      const k = firstK;
      if (rec['num_tokens'] !== undefined && rec['num_tokens'] !== top.length) {
        throw new UserError(
          `num_tokens is ${String(rec['num_tokens'])} but top_indices has ${top.length} rows`,
          file,
          `line ${no}: num_tokens`,
        );
      }
      top.forEach((row, t) => {
        if (!Array.isArray(row) || row.length !== k)
          throw new UserError(`expected ${k} expert ids`, file, `line ${no}: top_indices[${t}]`, row);
        row.forEach((e, j) => {
          if (!Number.isInteger(e))
            throw new UserError('expert id must be an integer', file, `line ${no}: top_indices[${t}][${j}]`, e);
        });
      });
      if (rows.has(layer as number))
        throw new UserError(`layer ${String(layer)} twice in step ${String(s)}`, file, `line ${no}: layer`);
      rows.set(layer as number, { no, ids: top as number[][] });
    }
    const done = flush();
    if (done) yield done;
    const last = stream.finish();
    if (last) yield last;
  }
  return { shape: () => shape, requests };
}

// ---------------------------------------------------------------- llama.cpp

/** llama.cpp `examples/moe-trace` CSV (`layer,expert` rows); top-k must be given. */
export function llamacppPass(file: string, o: EngineOptions): ImportPass {
  const k = o.topK;
  let shape: ImportShape | undefined;
  async function* requests(): AsyncGenerator<ImportedRequest> {
    if (!k) throw new UserError('llama.cpp traces do not record top-k: give --top-k', undefined, '--top-k');
    const stream = new StreamRequests('llamacpp');
    let layers: number[] | undefined;
    let seen: number[] = [];
    let runs = new Map<number, number[]>();
    let runLayer = -1;
    let ubLine = 0;
    const flush = (): ImportedRequest | undefined => {
      if (!runs.size) return undefined;
      if (!layers) {
        layers = [...runs.keys()];
        shape = {
          moeLayers: layers.length,
          topK: k,
          ...(o.experts ? { experts: o.experts } : {}),
          moeLayerIds: layers,
        };
      }
      for (const [l, r] of runs) {
        if (r.length % k)
          throw new UserError(
            `layer ${l} has ${r.length} rows, not a whole number of tokens of top-${k}`,
            file,
            `line ${ubLine}: layer`,
          );
      }
      const n = runs.get(layers[0]!)!.length / k;
      for (const l of layers) {
        const r = runs.get(l);
        if (!r) throw new UserError(`micro-batch has no rows for layer ${l}`, file, `line ${ubLine}: layer`);
        if (r.length !== n * k)
          throw new UserError(
            `layer ${l} has ${r.length} rows, expected ${n * k} (${n} tokens × top-${k})`,
            file,
            `line ${ubLine}: layer`,
          );
      }
      if (runs.size !== layers.length)
        throw new UserError(
          `micro-batch has ${runs.size} layers, the first had ${layers.length}`,
          file,
          `line ${ubLine}: layer`,
        );
      const ids = new Int32Array(n * layers.length * k);
      let i = 0;
      for (let t = 0; t < n; t++)
        for (const l of layers) for (let j = 0; j < k; j++) ids[i++] = runs.get(l)![t * k + j]!;
      runs = new Map();
      seen = [];
      return stream.addBatch(ids, n, `line ${ubLine}`);
    };
    for await (const { no, text } of readLines(file)) {
      const line = text.trim();
      if (!line) continue;
      const parts = line.split(',');
      if (no === 1 && !/^\d/.test(parts[0]!)) {
        if (parts[0]!.trim() !== 'layer' || parts[1]?.trim() !== 'expert')
          throw new UserError('expected the header "layer,expert" or a data row', file, 'line 1');
        continue;
      }
      if (parts.length !== 2)
        throw new UserError(`expected 2 columns (layer,expert), got ${parts.length}`, file, `line ${no}`);
      const layer = Number(parts[0]);
      const e = Number(parts[1]);
      if (!Number.isInteger(layer) || layer < 0)
        throw new UserError('must be a non-negative integer', file, `line ${no}: layer`, parts[0]);
      if (!Number.isInteger(e) || e < 0)
        throw new UserError('must be a non-negative integer', file, `line ${no}: expert`, parts[1]);
      if (layer !== runLayer) {
        if (seen.includes(layer) || (seen.length && layer < runLayer)) {
          const done = flush();
          if (done) yield done;
        }
        if (!seen.length) ubLine = no;
        seen.push(layer);
        runs.set(layer, []);
        runLayer = layer;
      }
      runs.get(layer)!.push(e);
    }
    const done = flush();
    if (done) yield done;
    const last = stream.finish();
    if (last) yield last;
  }
  return { shape: () => shape, requests };
}

// ---------------------------------------------------------------- imp

/** imp `diagnostics.moe_expert_trace` JSON (decode-only, one stream). */
export function impPass(file: string, o: EngineOptions): ImportPass {
  let shape: ImportShape | undefined;
  async function* requests(): AsyncGenerator<ImportedRequest> {
    const toks = jsonTokens(file);
    const next = async (): Promise<JsonToken> => {
      try {
        const r = await toks.next();
        if (r.done) throw new UserError('unexpected end of JSON', file);
        return r.value;
      } catch (e) {
        if (e instanceof UserError && !e.file) throw new UserError(e.message, file, e.field, e.value);
        throw e;
      }
    };
    let topK = o.topK;
    let tok = await next();
    if (tok.t === '{') {
      // Find the trace array; read top_k if it comes first.
      for (;;) {
        const key = await next();
        if (key.t === '}') throw new UserError('no trace array (trace, entries or data)', file);
        if (key.t !== 'str') throw new UserError('expected a key', file, `offset ${key.at}`);
        if ((await next()).t !== ':') throw new UserError('expected ":"', file, `offset ${key.at}`);
        const v = await next();
        if (['trace', 'entries', 'data'].includes(key.v) && v.t === '[') {
          tok = v;
          break;
        }
        if (key.v === 'top_k' && v.t === 'num') topK ??= v.v;
        else await skipValue(v, next);
        const sep = await next();
        if (sep.t === '}') throw new UserError('no trace array (trace, entries or data)', file);
      }
    }
    if (tok.t !== '[')
      throw new UserError('expected a list of records or an object with "trace"', file, `offset ${tok.at}`);
    const stream = new StreamRequests('imp');
    const seg = o.segment ?? Infinity;
    let layers: number[] | undefined;
    let cur: number[] = [];
    let curLayers: number[] = [];
    let tokenStart = 0;
    let inToken = 0;
    let recNo = 0;
    const endToken = (): ImportedRequest | undefined => {
      if (!curLayers.length) return undefined;
      if (!layers) {
        layers = curLayers;
        shape = {
          moeLayers: layers.length,
          topK: topK!,
          ...(o.experts ? { experts: o.experts } : {}),
          moeLayerIds: layers,
        };
      }
      if (curLayers.length !== layers.length || curLayers.some((l, i) => l !== layers![i])) {
        throw new UserError(
          `token has layers ${curLayers.join(',')}, the first token had ${layers.join(',')}`,
          file,
          `record ${tokenStart}: layer`,
        );
      }
      const done = stream.addBatch(cur, 1, `record ${tokenStart}`);
      cur = [];
      curLayers = [];
      if (++inToken >= seg) {
        inToken = 0;
        return done ?? stream.finish();
      }
      return done;
    };
    const addRecord = (layer: number, ids: number[], at: number): ImportedRequest | undefined => {
      recNo++;
      if (!Number.isInteger(layer) || layer < 0)
        throw new UserError('layer must be a non-negative integer', file, `record ${recNo} (offset ${at})`, layer);
      if (ids.length !== topK)
        throw new UserError(`expected ${topK} expert ids`, file, `record ${recNo} (offset ${at})`, ids);
      let done: ImportedRequest | undefined;
      if (curLayers.length && layer <= curLayers.at(-1)!) done = endToken();
      if (!curLayers.length) tokenStart = recNo;
      curLayers.push(layer);
      cur.push(...ids);
      return done;
    };
    let first = await next();
    if (first.t === '[') {
      // list of [layer, e0 … e_{k-1}] records
      for (;;) {
        const rec: number[] = [];
        const at = first.at;
        for (let v = await next(); v.t !== ']'; v = await next()) {
          if (v.t === ',') continue;
          if (v.t !== 'num') throw new UserError('expected a number', file, `record ${recNo + 1} (offset ${v.at})`);
          rec.push(v.v);
        }
        topK ??= rec.length - 1;
        const done = addRecord(rec[0]!, rec.slice(1), at);
        if (done) yield done;
        const sep = await next();
        if (sep.t === ']') break;
        first = await next();
        if (first.t !== '[') throw new UserError('expected a record [layer, e0 … e_{k-1}]', file, `offset ${first.at}`);
      }
    } else if (first.t === 'num') {
      if (!topK)
        throw new UserError('a flat imp trace needs top_k (before the trace, or --top-k)', undefined, '--top-k');
      let rec: number[] = [first.v];
      let at = first.at;
      for (;;) {
        const sep = await next();
        if (sep.t === ']') break;
        const v = await next();
        if (v.t !== 'num') throw new UserError('expected a number', file, `offset ${v.at}`);
        if (!rec.length) at = v.at;
        rec.push(v.v);
        if (rec.length === topK + 1) {
          const done = addRecord(rec[0]!, rec.slice(1), at);
          if (done) yield done;
          rec = [];
        }
      }
      if (rec.length)
        throw new UserError(
          `trailing ${rec.length} numbers: not a whole record of 1 + top_k`,
          file,
          `record ${recNo + 1}`,
        );
    } else if (first.t !== ']') {
      throw new UserError('expected records', file, `offset ${first.at}`);
    }
    await toks.return(undefined);
    const done = endToken();
    if (done) yield done;
    const last = stream.finish();
    if (last) yield last;
  }
  return { shape: () => shape, requests };
}

async function skipValue(v: JsonToken, next: () => Promise<JsonToken>): Promise<void> {
  if (v.t !== '[' && v.t !== '{') return;
  let depth = 1;
  while (depth) {
    const t = await next();
    if (t.t === '[' || t.t === '{') depth++;
    else if (t.t === ']' || t.t === '}') depth--;
  }
}
