/**
 * A small streaming JSON tokenizer, for routing dumps written as one big JSON document (imp's
 * `diagnostics.moe_expert_trace`), so they can be read without holding the file or its parsed
 * tree in memory. It yields punctuation, strings, numbers and literals with the byte offset
 * where each starts; the importer walks them with its own expectations.
 */
import { createReadStream } from 'node:fs';
import { createGunzip } from 'node:zlib';
import { StringDecoder } from 'node:string_decoder';
import type { Readable } from 'node:stream';
import { UserError } from '../../sim/kernel/errors.ts';
import { ioError, isGzipFile } from '../trace/lines.ts';

export type JsonToken =
  | { readonly t: '[' | ']' | '{' | '}' | ':' | ','; readonly at: number }
  | { readonly t: 'str'; readonly v: string; readonly at: number }
  | { readonly t: 'num'; readonly v: number; readonly at: number }
  | { readonly t: 'lit'; readonly v: boolean | null; readonly at: number };

const PUNCT = new Set(['[', ']', '{', '}', ':', ',']);

/** Tokens of a (possibly gzip-compressed) JSON file, in order. */
export async function* jsonTokens(path: string): AsyncGenerator<JsonToken> {
  const gz = await isGzipFile(path);
  const raw = createReadStream(path, { highWaterMark: 1 << 20 });
  let src: Readable = raw;
  if (gz) {
    const g = createGunzip();
    raw.on('error', (e) => g.destroy(e));
    src = raw.pipe(g);
  }
  const dec = new StringDecoder('utf8');
  let carry = '';
  let base = 0;
  try {
    try {
      for await (const buf of src) {
        const s = carry + dec.write(buf as Buffer);
        const { tokens, rest } = scan(s, base, false);
        base += s.length - rest.length;
        carry = rest;
        yield* tokens;
      }
    } catch (err) {
      if (err instanceof UserError) throw err;
      throw ioError(err, path);
    }
    const { tokens, rest } = scan(carry + dec.end(), base, true);
    yield* tokens;
    if (rest.trim()) throw new UserError('unexpected end of JSON', path, `offset ${base}`);
  } finally {
    raw.destroy();
    if (src !== raw) src.destroy();
  }
}

/** Scans complete tokens of `s`; returns the unfinished tail (unless `final`). */
function scan(s: string, base: number, final: boolean): { tokens: JsonToken[]; rest: string } {
  const tokens: JsonToken[] = [];
  let i = 0;
  const n = s.length;
  while (i < n) {
    const c = s[i]!;
    if (c === ' ' || c === '\n' || c === '\r' || c === '\t') {
      i++;
      continue;
    }
    if (PUNCT.has(c)) {
      tokens.push({ t: c as '[', at: base + i });
      i++;
      continue;
    }
    if (c === '"') {
      let j = i + 1;
      while (j < n && s[j] !== '"') j += s[j] === '\\' ? 2 : 1;
      if (j >= n) break;
      tokens.push({ t: 'str', v: JSON.parse(s.slice(i, j + 1)) as string, at: base + i });
      i = j + 1;
      continue;
    }
    let j = i;
    while (j < n && !PUNCT.has(s[j]!) && !/\s/.test(s[j]!)) j++;
    if (j >= n && !final) break;
    const word = s.slice(i, j);
    if (word === 'true' || word === 'false' || word === 'null')
      tokens.push({ t: 'lit', v: word === 'null' ? null : word === 'true', at: base + i });
    else {
      const v = Number(word);
      if (!/^-?\d/.test(word) || !Number.isFinite(v))
        throw new UserError(`invalid JSON near ${JSON.stringify(word.slice(0, 20))}`, undefined, `offset ${base + i}`);
      tokens.push({ t: 'num', v, at: base + i });
    }
    i = j;
  }
  return { tokens, rest: s.slice(i) };
}
