/**
 * Streams the lines of a text file that may be gzip-compressed, without loading it whole.
 *
 * Compression is detected from the gzip magic bytes (1f 8b), not from the file name, so a
 * `.jsonl` file works too. I/O and decompression errors become `UserError`s naming the file
 * and the line where reading stopped (a truncated gzip stream is the common case).
 */
import { createReadStream } from 'node:fs';
import { open } from 'node:fs/promises';
import { StringDecoder } from 'node:string_decoder';
import { createGunzip } from 'node:zlib';
import type { Readable } from 'node:stream';
import { UserError } from '../../sim/kernel/errors.ts';

export interface NumberedLine {
  /** 1-based line number. */
  readonly no: number;
  readonly text: string;
}

/** True if the file starts with the gzip magic bytes. Throws UserError if it cannot be opened. */
export async function isGzipFile(path: string): Promise<boolean> {
  let fh;
  try {
    fh = await open(path, 'r');
  } catch (err) {
    throw ioError(err, path);
  }
  try {
    const b = Buffer.alloc(2);
    const { bytesRead } = await fh.read(b, 0, 2, 0);
    return bytesRead === 2 && b[0] === 0x1f && b[1] === 0x8b;
  } finally {
    await fh.close();
  }
}

export function ioError(err: unknown, path: string): UserError {
  const e = err as NodeJS.ErrnoException;
  if (e?.code === 'ENOENT') return new UserError('no such file', path);
  if (e?.code === 'EISDIR') return new UserError('is a directory, expected a file', path);
  if (e?.code === 'EACCES') return new UserError('permission denied', path);
  return new UserError(`cannot read: ${e?.message ?? String(err)}`, path);
}

/**
 * Yields the lines of `path` (gunzipped if needed), with their numbers; a final line without a
 * newline is yielded too; `\r\n` endings are accepted. Empty lines are yielded as empty strings
 * (the caller decides). Breaking out of the loop closes the file.
 *
 * @throws UserError on a missing file, a truncated or corrupt gzip stream, or invalid UTF-8 is
 *   not checked (replacement characters end up in the text and fail JSON parsing).
 */
export async function* readLines(path: string): AsyncGenerator<NumberedLine> {
  const gz = await isGzipFile(path);
  const raw = createReadStream(path, { highWaterMark: 1 << 20 });
  let src: Readable = raw;
  if (gz) {
    const gunzip = createGunzip({ chunkSize: 1 << 20 });
    raw.on('error', (e) => gunzip.destroy(e));
    src = raw.pipe(gunzip);
  }
  const decoder = new StringDecoder('utf8');
  const parts: string[] = [];
  let no = 0;
  try {
    try {
      for await (const buf of src) {
        const s = decoder.write(buf as Buffer);
        let nl = s.indexOf('\n');
        if (nl < 0) {
          if (s.length) parts.push(s);
          continue;
        }
        parts.push(s.slice(0, nl));
        yield { no: ++no, text: stripCr(parts.join('')) };
        parts.length = 0;
        let start = nl + 1;
        while ((nl = s.indexOf('\n', start)) >= 0) {
          yield { no: ++no, text: stripCr(s.slice(start, nl)) };
          start = nl + 1;
        }
        if (start < s.length) parts.push(s.slice(start));
      }
    } catch (err) {
      if (err instanceof UserError) throw err;
      const e = err as NodeJS.ErrnoException;
      if (e?.code === 'Z_BUF_ERROR' || /unexpected end of file/i.test(e?.message ?? '')) {
        throw new UserError(
          `truncated gzip stream (file ends inside compressed data after ${no} complete lines)`,
          path,
          `line ${no + 1}`,
        );
      }
      if (typeof e?.code === 'string' && e.code.startsWith('Z_')) {
        throw new UserError(`corrupt gzip stream: ${e.message}`, path, `line ${no + 1}`);
      }
      throw ioError(err, path);
    }
    const tail = parts.join('') + decoder.end();
    if (tail.length) yield { no: ++no, text: stripCr(tail) };
  } finally {
    raw.destroy();
    if (src !== raw) src.destroy();
  }
}

const stripCr = (s: string): string => (s.endsWith('\r') ? s.slice(0, -1) : s);
