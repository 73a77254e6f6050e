/**
 * Streaming reader of routing traces: one request in memory at a time.
 *
 * Reads two dialects:
 * - `moesim-trace` (native, see `format.ts`): a header line, then one request per line.
 * - `shared-real`: the converted real traces of `../shared/traces/real/*.jsonl.gz` (no header;
 *   every line carries `layers`, `experts`, `topk`, `prompt_tokens`, `tokens`, `probs` ...).
 *   Those files have no task field; the task label is taken from the request id without its
 *   trailing number (`gsm8k-1` → `gsm8k`, `puffin-0042` → `puffin`), so task-cluster statistics
 *   can be computed on them.
 *
 * Every bad input is a `UserError` naming the file, the line and the field
 * (`line 17: tokens[3][5][1]`): malformed JSON, a truncated gzip stream, an expert id ≥ E, a
 * duplicate id, a wrong number of experts for top-k, a wrong number of layers, a model that
 * does not match the expected one.
 */
import { z } from 'zod';
import { UserError } from '../../sim/kernel/errors.ts';
import { readLines, type NumberedLine } from './lines.ts';
import {
  MISSING,
  TRACE_FORMAT,
  TRACE_VERSION,
  TraceHeaderSchema,
  TraceRequestEnvelopeSchema,
  guessModelId,
  type PackedPredictions,
  type TraceHeader,
  type TraceInfo,
  type TraceRequest,
} from './format.ts';

/** The model a trace must match. */
export interface ExpectedShape {
  readonly modelId?: string;
  readonly moeLayers: number;
  readonly experts: number;
  readonly topK: number;
}

export interface ReadTraceOptions {
  /** Mismatching layers / experts / top-k → UserError (a different model id alone is only noted in `warnings`). */
  readonly expect?: ExpectedShape;
  /** Parse router scores (default true). */
  readonly scores?: boolean;
  /** Parse carried predictions (default true). */
  readonly predictions?: boolean;
}

/**
 * An open trace. `info` is known after `open`; iterate it (once) with `for await` to get the
 * requests. Stopping early closes the file.
 */
export class TraceReader implements AsyncIterable<TraceRequest> {
  private used = false;
  /** Notes that do not stop reading (e.g. a model id that differs from the expected one). */
  readonly warnings: string[] = [];

  private constructor(
    readonly path: string,
    readonly info: TraceInfo,
    private readonly lines: AsyncGenerator<NumberedLine>,
    private readonly pending: NumberedLine | undefined,
    private readonly opts: ReadTraceOptions,
  ) {}

  get header(): TraceHeader {
    return this.info.header;
  }

  /**
   * Opens `path` and reads its header (native) or first line (shared-real).
   * @throws UserError on a missing/empty file, a bad header, an unsupported version, or a model mismatch
   */
  static async open(path: string, opts: ReadTraceOptions = {}): Promise<TraceReader> {
    const lines = readLines(path);
    let first: NumberedLine | undefined;
    for (;;) {
      const r = await lines.next();
      if (r.done) throw new UserError('empty trace file (no header line)', path, 'line 1');
      if (r.value.text.trim() !== '') {
        first = r.value;
        break;
      }
    }
    const obj = parseJson(first.text, path, first.no);
    let info: TraceInfo;
    let pending: NumberedLine | undefined;
    if (isRecord(obj) && obj['format'] === TRACE_FORMAT) {
      if (typeof obj['version'] === 'number' && obj['version'] > TRACE_VERSION) {
        await lines.return(undefined);
        throw new UserError(
          `trace format version ${obj['version']} is newer than this moesim reads (version ${TRACE_VERSION}); upgrade moesim`,
          path,
          `line ${first.no}: version`,
        );
      }
      const h = TraceHeaderSchema.safeParse(obj);
      if (!h.success) {
        await lines.return(undefined);
        throw zodError(h.error, path, first.no, 'header: ');
      }
      info = { header: h.data, dialect: 'moesim-trace' };
    } else if (isRecord(obj) && 'tokens' in obj && 'layers' in obj && 'topk' in obj) {
      const r = SharedLineSchema.safeParse(obj);
      if (!r.success) {
        await lines.return(undefined);
        throw zodError(r.error, path, first.no, '');
      }
      info = { header: sharedHeader(r.data), dialect: 'shared-real' };
      pending = first;
    } else {
      await lines.return(undefined);
      throw new UserError(
        `not a moesim trace: expected a header line {"format":"${TRACE_FORMAT}","version":${TRACE_VERSION},"model":{…}}`,
        path,
        `line ${first.no}`,
      );
    }
    const reader = new TraceReader(path, info, lines, pending, opts);
    if (opts.expect) {
      try {
        reader.checkShape(opts.expect, first.no);
      } catch (e) {
        await lines.return(undefined);
        throw e;
      }
    }
    return reader;
  }

  private checkShape(expect: ExpectedShape, lineNo: number): void {
    const m = this.header.model;
    const native = this.info.dialect === 'moesim-trace';
    const who = expect.modelId ? `model ${expect.modelId}` : 'the model';
    const check = (got: number, want: number, nativeField: string, sharedField: string, what: string): void => {
      if (got !== want) {
        throw new UserError(
          `trace has ${got} ${what} but ${who} has ${want}`,
          this.path,
          `line ${lineNo}: ${native ? nativeField : sharedField}`,
        );
      }
    };
    check(m.moeLayers, expect.moeLayers, 'model.moeLayers', 'layers', 'MoE layers');
    check(m.experts, expect.experts, 'model.experts', 'experts', 'experts per layer');
    check(m.topK, expect.topK, 'model.topK', 'topk', 'top-k');
    if (expect.modelId && m.id && m.id !== expect.modelId) {
      this.warnings.push(`${this.path}: trace was recorded on ${m.id}, used for ${expect.modelId} (same shape)`);
    }
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<TraceRequest> {
    if (this.used) throw new Error(`trace ${this.path} can be iterated only once; open it again`);
    this.used = true;
    const decode =
      this.info.dialect === 'moesim-trace'
        ? (l: NumberedLine) => this.decodeNative(l)
        : (l: NumberedLine) => this.decodeShared(l);
    const ids = new Set<string>();
    try {
      if (this.pending) yield this.remember(ids, decode(this.pending));
      for (;;) {
        const r = await this.lines.next();
        if (r.done) break;
        if (r.value.text.trim() === '') continue;
        yield this.remember(ids, decode(r.value));
      }
    } finally {
      await this.lines.return(undefined);
    }
  }

  /** Closes the file without reading further (needed only if the reader is never iterated). */
  async close(): Promise<void> {
    await this.lines.return(undefined);
  }

  private remember(ids: Set<string>, r: TraceRequest): TraceRequest {
    if (ids.has(r.id))
      throw new UserError(`duplicate request id ${JSON.stringify(r.id)}`, this.path, `line ${r.line}: id`);
    ids.add(r.id);
    return r;
  }

  /**
   * Fast path shared by both line formats: scan the `tokens` array straight into an Int32Array
   * and JSON.parse the rest with an empty array in its place. Anything unusual (or a bad line)
   * falls back to parsing the whole line, which produces the precise error.
   */
  private scanLine(
    l: NumberedLine,
  ):
    | { viaFast: true; fast: NonNullable<ReturnType<typeof scanTokens>>; obj: unknown }
    | { viaFast: false; fast: null; obj: unknown } {
    const { moeLayers, experts, topK } = this.header.model;
    const fast = scanTokens(l.text, moeLayers, experts, topK);
    let obj: unknown;
    if (fast) {
      try {
        obj = JSON.parse(`${l.text.slice(0, fast.start)}[]${l.text.slice(fast.end)}`);
      } catch {
        obj = undefined;
      }
    }
    if (fast !== null && obj !== undefined) return { viaFast: true, fast, obj };
    return { viaFast: false, fast: null, obj: parseJson(l.text, this.path, l.no) };
  }

  private decodeNative(l: NumberedLine): TraceRequest {
    // Fast path: scan the `tokens` array straight into an Int32Array and JSON.parse the rest.
    // Anything unusual in it (or a bad line) falls back to the general path, which produces
    // the precise error.
    const { fast, viaFast, obj } = this.scanLine(l);
    const env = TraceRequestEnvelopeSchema.safeParse(obj);
    if (!env.success) throw zodError(env.error, this.path, l.no, '');
    const d = env.data;
    const prefillRecorded = d.prefillRecorded ?? true;
    const T = viaFast ? fast.tokens : d.tokens.length;
    if (prefillRecorded && d.promptTokens > T) {
      throw new UserError(
        `promptTokens ${d.promptTokens} exceeds the ${T} tokens listed`,
        this.path,
        `line ${l.no}: promptTokens`,
      );
    }
    if (prefillRecorded && d.promptTokens === 0 && T > 0) {
      throw new UserError(
        'promptTokens must be ≥ 1 when the prefill is recorded',
        this.path,
        `line ${l.no}: promptTokens`,
      );
    }
    const decodeListed = T - (prefillRecorded ? d.promptTokens : 0);
    if (d.outputTokens !== undefined && d.outputTokens < decodeListed + 1) {
      throw new UserError(
        `outputTokens ${d.outputTokens} is less than the decode tokens listed + 1 (${decodeListed + 1})`,
        this.path,
        `line ${l.no}: outputTokens`,
      );
    }
    const experts = viaFast ? fast.experts : this.packExperts(d.tokens, l.no, 'tokens');
    const scores = d.scores && this.opts.scores !== false ? this.packScores(d.scores, T, l.no, 'scores') : undefined;
    const predictions =
      d.predictions && this.opts.predictions !== false ? this.packPredictions(d.predictions, T, l.no) : undefined;
    return {
      id: d.id,
      line: l.no,
      promptTokens: d.promptTokens,
      prefillRecorded,
      tokens: T,
      outputTokens: d.outputTokens ?? decodeListed + 1,
      ...(d.task !== undefined ? { task: d.task } : {}),
      ...(d.arrivalS !== undefined ? { arrivalS: d.arrivalS } : {}),
      experts,
      ...(scores ? { scores } : {}),
      ...(predictions ? { predictions } : {}),
    };
  }

  private decodeShared(l: NumberedLine): TraceRequest {
    const { fast, viaFast, obj } = this.scanLine(l);
    const r = SharedLineSchema.safeParse(obj);
    if (!r.success) throw zodError(r.error, this.path, l.no, '');
    const d = r.data;
    const m = this.header.model;
    const same = (got: number, want: number, field: string): void => {
      if (got !== want) {
        throw new UserError(
          `${field} is ${got} but earlier lines of this file say ${want}`,
          this.path,
          `line ${l.no}: ${field}`,
        );
      }
    };
    same(d.layers, m.moeLayers, 'layers');
    same(d.experts, m.experts, 'experts');
    same(d.topk, m.topK, 'topk');
    const T = viaFast ? fast.tokens : d.tokens.length;
    const listedPrompt = d.prefill_recorded ? d.prompt_tokens : 0;
    if (listedPrompt + d.decode_tokens !== T) {
      throw new UserError(
        `lists ${T} tokens but prompt_tokens + decode_tokens = ${listedPrompt + d.decode_tokens}`,
        this.path,
        `line ${l.no}: tokens`,
      );
    }
    const experts = viaFast ? fast.experts : this.packExperts(d.tokens, l.no, 'tokens');
    const scores = d.probs && this.opts.scores !== false ? this.packScores(d.probs, T, l.no, 'probs') : undefined;
    const task = d.id.replace(/[-_]?\d+$/, '');
    return {
      id: d.id,
      line: l.no,
      promptTokens: d.prompt_tokens,
      prefillRecorded: d.prefill_recorded,
      tokens: T,
      outputTokens: d.decode_tokens + 1,
      ...(task && task !== d.id ? { task } : {}),
      experts,
      ...(scores ? { scores } : {}),
    };
  }

  private packExperts(tokens: readonly unknown[], lineNo: number, field: string): Int32Array {
    const { moeLayers: L, experts: E, topK: k } = this.header.model;
    const T = tokens.length;
    const out = new Int32Array(T * L * k);
    const fail = (path: string, msg: string, value?: unknown): never => {
      throw new UserError(msg, this.path, `line ${lineNo}: ${path}`, value);
    };
    let o = 0;
    for (let t = 0; t < T; t++) {
      const tok = tokens[t];
      if (!Array.isArray(tok)) fail(`${field}[${t}]`, 'must be a list with one entry per MoE layer', tok);
      const layers = tok as unknown[];
      if (layers.length !== L)
        fail(`${field}[${t}]`, `has ${layers.length} layers but the trace's model has ${L} MoE layers`);
      for (let l = 0; l < L; l++) {
        const ent = layers[l];
        if (ent === null) {
          for (let j = 0; j < k; j++) out[o++] = MISSING;
          continue;
        }
        if (!Array.isArray(ent)) fail(`${field}[${t}][${l}]`, 'must be a list of expert ids or null', ent);
        const ids = ent as unknown[];
        if (ids.length !== k) fail(`${field}[${t}][${l}]`, `lists ${ids.length} experts but top-k is ${k}`, ids);
        const start = o;
        for (let j = 0; j < k; j++) {
          const e = ids[j];
          if (typeof e !== 'number' || !Number.isInteger(e) || e < 0) {
            fail(`${field}[${t}][${l}][${j}]`, 'expert id must be a non-negative integer', e);
          }
          const id = e as number;
          if (id >= E)
            fail(`${field}[${t}][${l}][${j}]`, `expert id ${id} is out of range (experts = ${E}, ids 0…${E - 1})`);
          for (let p = start; p < o; p++) {
            if (out[p] === id) fail(`${field}[${t}][${l}][${j}]`, `expert id ${id} appears twice in one top-k list`);
          }
          out[o++] = id;
        }
      }
    }
    return out;
  }

  private packScores(scores: readonly unknown[], T: number, lineNo: number, field: string): Float32Array {
    const { moeLayers: L, topK: k } = this.header.model;
    if (scores.length !== T) {
      throw new UserError(`has ${scores.length} tokens but tokens has ${T}`, this.path, `line ${lineNo}: ${field}`);
    }
    const out = new Float32Array(T * L * k);
    let o = 0;
    for (let t = 0; t < T; t++) {
      const tok = scores[t];
      if (!Array.isArray(tok) || tok.length !== L) {
        throw new UserError(`must list ${L} layers like tokens[${t}]`, this.path, `line ${lineNo}: ${field}[${t}]`);
      }
      for (let l = 0; l < L; l++) {
        const ent = tok[l] as unknown;
        if (ent === null) {
          for (let j = 0; j < k; j++) out[o++] = NaN;
          continue;
        }
        if (!Array.isArray(ent) || ent.length !== k) {
          throw new UserError(
            `must list ${k} scores or be null`,
            this.path,
            `line ${lineNo}: ${field}[${t}][${l}]`,
            ent,
          );
        }
        for (let j = 0; j < k; j++) {
          const v = ent[j] as unknown;
          if (typeof v !== 'number' || !Number.isFinite(v)) {
            throw new UserError(
              'score must be a finite number',
              this.path,
              `line ${lineNo}: ${field}[${t}][${l}][${j}]`,
              v,
            );
          }
          out[o++] = v;
        }
      }
    }
    return out;
  }

  private packPredictions(preds: readonly unknown[], T: number, lineNo: number): PackedPredictions {
    const { moeLayers: L, experts: E } = this.header.model;
    if (preds.length !== T) {
      throw new UserError(`has ${preds.length} tokens but tokens has ${T}`, this.path, `line ${lineNo}: predictions`);
    }
    const offsets = new Int32Array(T * L + 1);
    const ids: number[] = [];
    for (let t = 0; t < T; t++) {
      const tok = preds[t];
      if (!Array.isArray(tok) || tok.length !== L) {
        throw new UserError(`must list ${L} layers`, this.path, `line ${lineNo}: predictions[${t}]`);
      }
      for (let l = 0; l < L; l++) {
        offsets[t * L + l] = ids.length;
        const ent = tok[l] as unknown;
        if (ent === null) continue;
        if (!Array.isArray(ent) || ent.length === 0) {
          throw new UserError(
            'must be a non-empty ranked list of expert ids or null',
            this.path,
            `line ${lineNo}: predictions[${t}][${l}]`,
            ent,
          );
        }
        const start = ids.length;
        for (let j = 0; j < ent.length; j++) {
          const e = ent[j] as unknown;
          if (typeof e !== 'number' || !Number.isInteger(e) || e < 0 || e >= E) {
            throw new UserError(
              `predicted expert id must be an integer in 0…${E - 1}`,
              this.path,
              `line ${lineNo}: predictions[${t}][${l}][${j}]`,
              e,
            );
          }
          for (let p = start; p < ids.length; p++) {
            if (ids[p] === e)
              throw new UserError(
                `expert id ${e} appears twice`,
                this.path,
                `line ${lineNo}: predictions[${t}][${l}][${j}]`,
              );
          }
          ids.push(e);
        }
      }
    }
    offsets[T * L] = ids.length;
    return { offsets, ids: Int32Array.from(ids) };
  }
}

/** Opens a trace, checks its model, and returns its header without reading the requests. */
export async function readTraceInfo(path: string, opts: ReadTraceOptions = {}): Promise<TraceInfo> {
  const r = await TraceReader.open(path, opts);
  await r.close();
  return r.info;
}

/** Reads a whole (small) trace into memory. For tests and small shipped traces only. */
export async function readTraceFile(
  path: string,
  opts: ReadTraceOptions = {},
): Promise<{ info: TraceInfo; requests: TraceRequest[] }> {
  const r = await TraceReader.open(path, opts);
  const requests: TraceRequest[] = [];
  for await (const q of r) requests.push(q);
  return { info: r.info, requests };
}

// ---------------------------------------------------------------------------------------------

/**
 * Scans the `"tokens":[…]` array of a request line (strict layout: arrays of L entries, each
 * `null` or k distinct non-negative integers below E, optional spaces; charCodeAt beyond the end
 * is NaN, which fails every check) into an Int32Array.
 * Returns null on anything else, so the caller can fall back to JSON.parse and report the
 * exact error. `start`/`end` delimit the array in the line.
 */
export function scanTokens(
  text: string,
  L: number,
  E: number,
  k: number,
): { experts: Int32Array; tokens: number; start: number; end: number } | null {
  const key = text.indexOf('"tokens":');
  if (key < 0 || text.indexOf('"tokens":', key + 9) >= 0) return null;
  const n = text.length;
  let i = key + 9;
  let c = text.charCodeAt(i);
  while (c === 32) c = text.charCodeAt(++i);
  if (c !== 91) return null; // [
  const start = i;
  // Each expert id takes at least 2 characters ("7,"), so this bounds the ids in the array.
  let out = new Int32Array(Math.max(16, (n - i) >> 1));
  let o = 0;
  let T = 0;
  c = text.charCodeAt(++i);
  while (c === 32) c = text.charCodeAt(++i);
  if (c === 93) return { experts: new Int32Array(0), tokens: 0, start, end: i + 1 };
  for (;;) {
    // c is the first character of a token: '['
    if (c !== 91) return null;
    if (o + L * k > out.length) {
      const bigger = new Int32Array(out.length * 2);
      bigger.set(out);
      out = bigger;
    }
    c = text.charCodeAt(++i);
    for (let l = 0; l < L; l++) {
      while (c === 32) c = text.charCodeAt(++i);
      if (c === 91) {
        const base = o;
        c = text.charCodeAt(++i);
        for (let j = 0; j < k; j++) {
          while (c === 32) c = text.charCodeAt(++i);
          let v = c - 48;
          if (v < 0 || v > 9) return null;
          c = text.charCodeAt(++i);
          if (v === 0 && c >= 48 && c <= 57) return null; // a leading zero is not JSON
          while (c >= 48 && c <= 57) {
            v = v * 10 + (c - 48);
            if (v >= E) return null;
            c = text.charCodeAt(++i);
          }
          if (v >= E) return null;
          for (let q = base; q < o; q++) if (out[q] === v) return null;
          out[o++] = v;
          while (c === 32) c = text.charCodeAt(++i);
          if (c !== (j + 1 < k ? 44 : 93)) return null;
          c = text.charCodeAt(++i);
        }
      } else if (c === 110 && text.startsWith('null', i)) {
        i += 4;
        c = text.charCodeAt(i);
        for (let j = 0; j < k; j++) out[o++] = MISSING;
      } else return null;
      while (c === 32) c = text.charCodeAt(++i);
      if (c !== (l + 1 < L ? 44 : 93)) return null;
      c = text.charCodeAt(++i);
    }
    T++;
    while (c === 32) c = text.charCodeAt(++i);
    if (c === 93) break;
    if (c !== 44) return null;
    c = text.charCodeAt(++i);
    while (c === 32) c = text.charCodeAt(++i);
  }
  return { experts: out.slice(0, o), tokens: T, start, end: i + 1 };
}

/** One line of the converted real traces in `../shared/traces/real` (see its README). */
const SharedLineSchema = z.object({
  id: z.string().min(1),
  model: z.string().optional(),
  source: z.string().optional(),
  layers: z.number().int().positive(),
  experts: z.number().int().positive().max(65535),
  topk: z.number().int().positive(),
  shared_experts: z.number().int().nonnegative().optional(),
  moe_layer_ids: z.array(z.number().int().nonnegative()).optional(),
  prompt_tokens: z.number().int().nonnegative(),
  decode_tokens: z.number().int().nonnegative(),
  prefill_recorded: z.boolean().default(true),
  phase_known: z.boolean().optional(),
  tokens: z.array(z.unknown()),
  probs: z.array(z.unknown()).optional(),
  missing: z.unknown().optional(),
});
type SharedLine = z.infer<typeof SharedLineSchema>;

function sharedHeader(d: SharedLine): TraceHeader {
  const id = guessModelId(d.model);
  return {
    format: TRACE_FORMAT,
    version: TRACE_VERSION,
    model: {
      ...(id ? { id } : {}),
      ...(d.model ? { name: d.model } : {}),
      moeLayers: d.layers,
      experts: d.experts,
      topK: d.topk,
      ...(d.shared_experts !== undefined ? { sharedExperts: d.shared_experts } : {}),
      ...(d.moe_layer_ids && d.moe_layer_ids.length === d.layers ? { moeLayerIds: d.moe_layer_ids } : {}),
    },
    ...(d.source ? { source: d.source } : {}),
    license: 'see the README next to the file (the converted real traces of ../shared/traces/real)',
  };
}

function parseJson(text: string, path: string, lineNo: number): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    const msg = (err as Error).message.replace(/\s+/g, ' ');
    throw new UserError(`malformed JSON (${msg})`, path, `line ${lineNo}`);
  }
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A zod failure as a UserError whose field is `line N: <path of the first issue>`. */
export function zodError(err: z.ZodError, path: string, lineNo: number, prefix: string): UserError {
  const issue = err.issues[0];
  let p = issue ? formatPath(issue.path) : '';
  if (issue?.code === 'unrecognized_keys') p = [p, issue.keys.join(', ')].filter(Boolean).join('.');
  const field = p || prefix ? `line ${lineNo}: ${prefix}${p}`.replace(/: $/, '') : `line ${lineNo}`;
  return new UserError(issue?.message ?? 'invalid', path, field);
}

export function formatPath(path: readonly PropertyKey[]): string {
  let s = '';
  for (const k of path) {
    if (typeof k === 'number') s += `[${k}]`;
    else s += s ? `.${String(k)}` : String(k);
  }
  return s;
}
