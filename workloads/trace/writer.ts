/**
 * Streaming writer of moesim traces (format version 1, see `format.ts`).
 *
 * Requests are serialised one line at a time into a gzip stream with back-pressure, so a
 * writer never holds more than one request. The file appears under its final name only when
 * `close()` succeeds (it is written as `<path>.tmp-<pid>` and renamed); `abort()` deletes it.
 */
import { createWriteStream, type WriteStream } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import { once } from 'node:events';
import { createGzip, type Gzip } from 'node:zlib';
import { tempPathFor } from '../io/atomic.ts';
import {
  MISSING,
  TRACE_FORMAT,
  TRACE_VERSION,
  TraceHeaderSchema,
  type TraceHeader,
  type TraceRequest,
} from './format.ts';

export type TraceHeaderInput = Omit<TraceHeader, 'format' | 'version'>;

export interface TraceWriterOptions {
  /** gzip level 1 (fast) … 9 (small); default 6. 0 writes plain text (no gzip). */
  readonly gzipLevel?: number;
}

export class TraceWriter {
  private closed = false;
  private written = 0;

  private constructor(
    readonly path: string,
    private readonly tmp: string,
    private readonly header: TraceHeader,
    private readonly sink: Gzip | WriteStream,
    private readonly file: WriteStream,
  ) {}

  /** Creates the temporary file and writes the header line. */
  static async create(path: string, header: TraceHeaderInput, opts: TraceWriterOptions = {}): Promise<TraceWriter> {
    const full = TraceHeaderSchema.parse({ format: TRACE_FORMAT, version: TRACE_VERSION, ...header });
    await mkdir(dirname(path), { recursive: true });
    const tmp = tempPathFor(path);
    const file = createWriteStream(tmp);
    await once(file, 'open');
    const level = opts.gzipLevel ?? 6;
    let sink: Gzip | WriteStream = file;
    if (level > 0) {
      const gz = createGzip({ level, chunkSize: 1 << 18 });
      gz.pipe(file);
      sink = gz;
    }
    const w = new TraceWriter(path, tmp, full, sink, file);
    await w.put(`${JSON.stringify(full)}\n`);
    return w;
  }

  /** Requests written so far. */
  get count(): number {
    return this.written;
  }

  /** Appends one request. Its expert ids must fit the header's model (checked cheaply: array length). */
  async write(r: TraceRequest): Promise<void> {
    if (this.closed) throw new Error(`trace writer for ${this.path} is closed`);
    const { moeLayers: L, topK: k } = this.header.model;
    if (r.experts.length !== r.tokens * L * k) {
      throw new RangeError(`request ${r.id}: experts has ${r.experts.length} entries, expected ${r.tokens}×${L}×${k}`);
    }
    await this.put(`${serialiseRequest(r, L, k)}\n`);
    this.written++;
  }

  /** Finishes the gzip stream and moves the file to its final name. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      const done = once(this.file, 'close');
      this.sink.end();
      await done;
      await rename(this.tmp, this.path);
    } catch (err) {
      await rm(this.tmp, { force: true });
      throw err;
    }
  }

  /** Stops writing and deletes the temporary file. */
  async abort(): Promise<void> {
    this.closed = true;
    this.sink.destroy();
    this.file.destroy();
    await rm(this.tmp, { force: true });
  }

  private async put(s: string): Promise<void> {
    if (!this.sink.write(s)) await once(this.sink, 'drain');
  }
}

/** One request as a JSON line (without the newline). */
export function serialiseRequest(r: TraceRequest, L: number, k: number): string {
  const parts: string[] = [`{"id":${JSON.stringify(r.id)},"promptTokens":${r.promptTokens}`];
  if (!r.prefillRecorded) parts.push(',"prefillRecorded":false');
  const decodeListed = r.tokens - (r.prefillRecorded ? r.promptTokens : 0);
  if (r.outputTokens !== decodeListed + 1) parts.push(`,"outputTokens":${r.outputTokens}`);
  if (r.task !== undefined) parts.push(`,"task":${JSON.stringify(r.task)}`);
  if (r.arrivalS !== undefined) parts.push(`,"arrivalS":${r.arrivalS}`);
  parts.push(
    ',"tokens":',
    nested(
      r.tokens,
      L,
      k,
      (i) => String(r.experts[i]),
      (i) => r.experts[i] === MISSING,
    ),
  );
  if (r.scores) {
    const s = r.scores;
    parts.push(
      ',"scores":',
      nested(
        r.tokens,
        L,
        k,
        (i) => shortFloat32(s[i]!),
        (i) => Number.isNaN(s[i]!),
      ),
    );
  }
  if (r.predictions) {
    const { offsets, ids } = r.predictions;
    const toks: string[] = [];
    for (let t = 0; t < r.tokens; t++) {
      const layers: string[] = [];
      for (let l = 0; l < L; l++) {
        const a = offsets[t * L + l]!;
        const b = offsets[t * L + l + 1]!;
        layers.push(a === b ? 'null' : `[${Array.prototype.join.call(ids.subarray(a, b), ',')}]`);
      }
      toks.push(`[${layers.join(',')}]`);
    }
    parts.push(`,"predictions":[${toks.join(',')}]`);
  }
  parts.push('}');
  return parts.join('');
}

function nested(T: number, L: number, k: number, fmt: (i: number) => string, missing: (i: number) => boolean): string {
  const toks: string[] = new Array(T);
  let i = 0;
  for (let t = 0; t < T; t++) {
    let s = '[';
    for (let l = 0; l < L; l++) {
      if (l) s += ',';
      if (missing(i)) {
        s += 'null';
        i += k;
        continue;
      }
      s += '[';
      for (let j = 0; j < k; j++) {
        if (j) s += ',';
        s += fmt(i++);
      }
      s += ']';
    }
    toks[t] = `${s}]`;
  }
  return `[${toks.join(',')}]`;
}

/** Shortest decimal that reads back as the same float32. */
function shortFloat32(v: number): string {
  for (let p = 1; p < 9; p++) {
    const s = Number(v.toPrecision(p));
    if (Math.fround(s) === v) return String(s);
  }
  return String(v);
}
