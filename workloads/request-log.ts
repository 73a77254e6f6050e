/**
 * Request logs for arrival replay (`arrival: { kind: replay, path }`): one request per row with
 * an arrival time and, optionally, prompt/output lengths and a task label.
 *
 * Accepted formats (gzip or plain, detected by content):
 * - CSV with a header row. Time column: `TIMESTAMP` / `timestamp` / `time` / `arrivalS`
 *   (seconds as a number, or a date-time `YYYY-MM-DD[ T]hh:mm:ss[.fraction]`, as in the Azure
 *   LLM inference traces `AzureLLMInferenceTrace_{conv,code}.csv` whose columns are
 *   `TIMESTAMP,ContextTokens,GeneratedTokens`). Lengths: `ContextTokens` / `promptTokens` /
 *   `inputTokens`, `GeneratedTokens` / `outputTokens`. Task: `task`.
 * - JSON Lines with the same names as keys.
 * Times are made relative to the earliest request and sorted (stable).
 */
import { UserError } from '../sim/kernel/errors.ts';
import { readLines } from './trace/lines.ts';

export interface RequestLogEntry {
  readonly arrivalS: number;
  readonly promptTokens?: number;
  readonly outputTokens?: number;
  readonly task?: string;
}

const TIME_KEYS = ['timestamp', 'time', 'arrivals', 'arrival_s', 'arrival'];
const PROMPT_KEYS = ['contexttokens', 'prompttokens', 'inputtokens', 'prompt_tokens', 'input_tokens', 'context_tokens'];
const OUTPUT_KEYS = ['generatedtokens', 'outputtokens', 'output_tokens', 'generated_tokens'];

/** Reads a request log. @throws UserError naming file, line and column on bad input */
export async function readRequestLog(path: string): Promise<RequestLogEntry[]> {
  const rows: { t: number; p?: number; o?: number; task?: string }[] = [];
  let columns: string[] | undefined;
  let jsonl: boolean | undefined;
  for await (const { no, text } of readLines(path)) {
    const line = text.trim();
    if (!line) continue;
    if (jsonl === undefined) jsonl = line.startsWith('{');
    if (jsonl) {
      let obj: unknown;
      try {
        obj = JSON.parse(line);
      } catch (e) {
        throw new UserError(`malformed JSON (${(e as Error).message})`, path, `line ${no}`);
      }
      if (typeof obj !== 'object' || obj === null || Array.isArray(obj))
        throw new UserError('expected a JSON object', path, `line ${no}`);
      const rec: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(obj)) rec[k.toLowerCase()] = v;
      rows.push(parseRow(rec, path, no));
      continue;
    }
    const cells = splitCsv(line);
    if (!columns) {
      columns = cells.map((c) => c.trim().toLowerCase());
      if (!columns.some((c) => TIME_KEYS.includes(c))) {
        throw new UserError(
          `CSV header has no time column (one of TIMESTAMP, time, arrivalS)`,
          path,
          `line ${no}`,
          line,
        );
      }
      continue;
    }
    const rec: Record<string, unknown> = {};
    columns.forEach((c, i) => (rec[c] = cells[i]?.trim()));
    rows.push(parseRow(rec, path, no));
  }
  if (rows.length === 0) throw new UserError('the request log has no requests', path);
  const t0 = Math.min(...rows.map((r) => r.t));
  const out = rows.map((r) => ({
    arrivalS: r.t - t0,
    ...(r.p !== undefined ? { promptTokens: r.p } : {}),
    ...(r.o !== undefined ? { outputTokens: r.o } : {}),
    ...(r.task !== undefined ? { task: r.task } : {}),
  }));
  return out
    .map((r, i) => ({ r, i }))
    .sort((a, b) => a.r.arrivalS - b.r.arrivalS || a.i - b.i)
    .map((x) => x.r);
}

function parseRow(
  rec: Record<string, unknown>,
  path: string,
  no: number,
): { t: number; p?: number; o?: number; task?: string } {
  const timeKey = TIME_KEYS.find((k) => rec[k] !== undefined && rec[k] !== '');
  if (!timeKey) throw new UserError('missing arrival time', path, `line ${no}: timestamp`);
  const t = parseTime(rec[timeKey]);
  if (t === undefined)
    throw new UserError(
      'unreadable arrival time (seconds or YYYY-MM-DD hh:mm:ss[.f])',
      path,
      `line ${no}: ${timeKey}`,
      rec[timeKey],
    );
  const int = (keys: string[], what: string): number | undefined => {
    const key = keys.find((k) => rec[k] !== undefined && rec[k] !== '');
    if (!key) return undefined;
    const v = Number(rec[key]);
    if (!Number.isInteger(v) || v < 0)
      throw new UserError(`${what} must be a non-negative integer`, path, `line ${no}: ${key}`, rec[key]);
    return v;
  };
  const p = int(PROMPT_KEYS, 'prompt tokens');
  const o = int(OUTPUT_KEYS, 'output tokens');
  const task = typeof rec['task'] === 'string' && rec['task'] ? rec['task'] : undefined;
  return { t, ...(p !== undefined ? { p } : {}), ...(o !== undefined ? { o } : {}), ...(task ? { task } : {}) };
}

/** Seconds from a number, a numeric string, or a date-time string (UTC assumed). */
export function parseTime(v: unknown): number | undefined {
  if (typeof v === 'number') return Number.isFinite(v) ? v : undefined;
  if (typeof v !== 'string') return undefined;
  const s = v.trim();
  if (/^[+-]?\d+(\.\d+)?([eE][+-]?\d+)?$/.test(s)) return Number(s);
  const m = /^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:?\d{2})?$/.exec(s);
  if (!m) return undefined;
  const whole = Date.UTC(+m[1]!, +m[2]! - 1, +m[3]!, +m[4]!, +m[5]!, +m[6]!) / 1000;
  let off = 0;
  if (m[8] && m[8] !== 'Z') {
    const sign = m[8][0] === '-' ? -1 : 1;
    const hh = +m[8].slice(1, 3);
    const mm = +m[8].slice(-2);
    off = sign * (hh * 3600 + mm * 60);
  }
  return whole + (m[7] ? Number(`0${m[7]}`) : 0) - off;
}

/** Splits one CSV line (double-quoted fields with "" escapes). */
function splitCsv(line: string): string[] {
  const out: string[] = [];
  let cur = '';
  let q = false;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (q) {
      if (c === '"' && line[i + 1] === '"') {
        cur += '"';
        i++;
      } else if (c === '"') q = false;
      else cur += c;
    } else if (c === '"') q = true;
    else if (c === ',') {
      out.push(cur);
      cur = '';
    } else cur += c;
  }
  out.push(cur);
  return out;
}
