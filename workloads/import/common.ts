/**
 * Shared machinery of `moesim trace import --format …`: the importers of engine trace formats
 * (`engines.ts`, `parquet.ts`) yield requests one at a time; this file checks them, finds the
 * model shape, and writes a moesim trace atomically (a bad input deletes the partial file).
 *
 * When the number of experts is not given (and the format does not carry it), a first pass
 * over the input finds the largest id; the file is then read again to write. Memory is bounded
 * by the largest request (its routing, token × layer × top-k int32), not by the file.
 */
import { UserError } from '../../sim/kernel/errors.ts';
import { TraceWriter } from '../trace/writer.ts';
import { MISSING, type TraceRequest } from '../trace/format.ts';

/** What an importer knows of the model once it has read the start of a file. */
export interface ImportShape {
  readonly moeLayers: number;
  readonly topK: number;
  /** Experts per layer, when the format or an option says it. */
  readonly experts?: number;
  readonly moeLayerIds?: readonly number[];
  readonly modelName?: string;
}

/** A request as importers produce it: routing token-major, then layer, then slot; -1 = not recorded. */
export interface ImportedRequest {
  readonly id: string;
  /** Where it starts in the input (`line 12`, `row 40`, `record 3`), for errors. */
  readonly where: string;
  readonly promptTokens: number;
  readonly prefillRecorded: boolean;
  readonly tokens: number;
  readonly experts: Int32Array;
}

/** One pass over an input: the shape (known after the first request) and the requests. */
export interface ImportPass {
  shape(): ImportShape | undefined;
  requests(): AsyncGenerator<ImportedRequest>;
}

export interface ImportOptions {
  readonly experts?: number;
  readonly modelId?: string;
  readonly gzipLevel?: number;
}

/** Grows an Int32Array of routing as tokens arrive (doubling), for streams of unknown length. */
export class RoutingBuffer {
  private buf: Int32Array;
  private n = 0;
  constructor(initial = 1024) {
    this.buf = new Int32Array(initial);
  }
  get length(): number {
    return this.n;
  }
  push(v: number): void {
    if (this.n === this.buf.length) {
      const next = new Int32Array(this.buf.length * 2);
      next.set(this.buf);
      this.buf = next;
    }
    this.buf[this.n++] = v;
  }
  /** A copy of the values so far; the buffer is emptied (its storage is kept). */
  take(): Int32Array {
    const out = this.buf.slice(0, this.n);
    this.n = 0;
    return out;
  }
}

/** Checks one request's ids against the shape; returns the largest id seen. */
export function checkRequest(file: string, r: ImportedRequest, s: ImportShape, experts: number | undefined): number {
  const { moeLayers: L, topK: k } = s;
  if (r.experts.length !== r.tokens * L * k) {
    throw new UserError(
      `request ${r.id} has ${r.experts.length} expert ids, expected ${r.tokens} tokens × ${L} layers × ${k}`,
      file,
      r.where,
    );
  }
  let max = -1;
  for (let t = 0, i = 0; t < r.tokens; t++) {
    for (let l = 0; l < L; l++, i += k) {
      const first = r.experts[i]!;
      for (let j = 0; j < k; j++) {
        const e = r.experts[i + j]!;
        if (e === MISSING && first === MISSING) continue;
        const field = `${r.where}: token ${t}, layer ${l}, slot ${j}`;
        if (!Number.isInteger(e) || e < 0 || (experts !== undefined && e >= experts)) {
          throw new UserError(`expert id must be in 0…${experts === undefined ? 'E-1' : experts - 1}`, file, field, e);
        }
        for (let q = 0; q < j; q++)
          if (r.experts[i + q] === e) throw new UserError('expert id repeated in one top-k list', file, field, e);
        if (e > max) max = e;
      }
    }
  }
  return max;
}

/**
 * Runs an importer into a moesim trace. `open` is called once per pass (twice when the
 * expert count must be found first). `describe` names the format and what the import assumed;
 * it goes to the header's `description`.
 */
export async function writeImport(
  input: string,
  out: string,
  open: () => ImportPass,
  meta: { format: string; describe: string; source?: string },
  opts: ImportOptions = {},
): Promise<{ requests: number; tokens: number; shape: ImportShape & { experts: number } }> {
  let experts = opts.experts;
  if (experts === undefined) {
    const scan = open();
    let max = -1;
    let any = false;
    for await (const r of scan.requests()) {
      max = Math.max(max, checkRequest(input, r, scan.shape()!, scan.shape()!.experts));
      any = true;
    }
    if (!any) throw new UserError('no routing records found', input);
    experts = scan.shape()!.experts ?? max + 1;
  }
  const pass = open();
  const it = pass.requests();
  const first = await it.next();
  if (first.done) throw new UserError('no routing records found', input);
  const s = pass.shape()!;
  if (s.topK > experts) throw new UserError(`top-k ${s.topK} exceeds the expert count ${experts}`, input, 'experts');
  const writer = await TraceWriter.create(
    out,
    {
      model: {
        ...(opts.modelId ? { id: opts.modelId } : {}),
        ...(s.modelName ? { name: s.modelName } : {}),
        moeLayers: s.moeLayers,
        experts,
        topK: s.topK,
        ...(s.moeLayerIds ? { moeLayerIds: [...s.moeLayerIds] } : {}),
      },
      source: meta.source ?? `${input.replace(/^.*[\\/]/, '')} (${meta.format}, imported by moesim trace import)`,
      description: meta.describe,
    },
    opts.gzipLevel !== undefined ? { gzipLevel: opts.gzipLevel } : {},
  );
  let requests = 0;
  let tokens = 0;
  const ids = new Set<string>();
  try {
    let cur: IteratorResult<ImportedRequest> = first;
    while (!cur.done) {
      const r = cur.value;
      checkRequest(input, r, s, experts);
      if (ids.has(r.id)) throw new UserError(`duplicate request id ${JSON.stringify(r.id)}`, input, r.where);
      ids.add(r.id);
      await writer.write(toTraceRequest(r));
      requests++;
      tokens += r.tokens;
      cur = await it.next();
    }
    await writer.close();
  } catch (err) {
    await writer.abort();
    await it.return(undefined);
    throw err;
  }
  return { requests, tokens, shape: { ...s, experts } };
}

function toTraceRequest(r: ImportedRequest): TraceRequest {
  const decode = r.tokens - (r.prefillRecorded ? r.promptTokens : 0);
  return {
    id: r.id,
    line: 0,
    promptTokens: r.promptTokens,
    prefillRecorded: r.prefillRecorded,
    tokens: r.tokens,
    outputTokens: Math.max(1, decode + 1),
    experts: r.experts,
  };
}

/** A positive integer option, or a UserError naming it. */
export function positiveInt(v: unknown, option: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new UserError('must be a positive integer', undefined, option, v);
  return n;
}
