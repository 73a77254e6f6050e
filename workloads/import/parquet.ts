/**
 * Importer of Parquet routing traces as Hugging Face datasets publish them: one row per
 * (prompt, token, layer) with the top-k expert ids as a list column (or one column per slot).
 * Read with hyparquet (pure JavaScript) one row group at a time, so memory is bounded by a row
 * group and the largest request. Rows of one request must be contiguous (a request ends when
 * the request column changes); within a request any order of tokens and layers is accepted.
 *
 * Columns are found by name (first match of each list below) or named with `--columns
 * request=…,token=…,layer=…,experts=…[,phase=…]`.
 */
import { asyncBufferFromFile, parquetMetadataAsync, parquetRead, parquetSchema } from 'hyparquet';
import { UserError } from '../../sim/kernel/errors.ts';
import { ioError } from '../trace/lines.ts';
import type { ImportedRequest, ImportPass, ImportShape } from './common.ts';

const CANDIDATES = {
  request: [
    'prompt_id',
    'request_id',
    'prompt_idx',
    'prompt_index',
    'sample_id',
    'seq_id',
    'sequence_id',
    'conversation_id',
    'doc_id',
    'id',
  ],
  token: ['token_idx', 'token_index', 'token_position', 'token_pos', 'position', 'pos', 'token'],
  layer: ['layer', 'layer_idx', 'layer_id', 'layer_index'],
  experts: [
    'experts',
    'expert_ids',
    'topk_ids',
    'topk_indices',
    'top_k_experts',
    'selected_experts',
    'expert_indices',
    'routed_experts',
  ],
  phase: ['phase', 'stage', 'is_prefill', 'is_prompt'],
} as const;

export type ParquetColumns = Partial<Record<keyof typeof CANDIDATES, string>>;

export function parseColumns(v: string | undefined): ParquetColumns {
  if (!v) return {};
  const out: ParquetColumns = {};
  for (const part of v.split(',')) {
    const [k, name] = part.split('=').map((s) => s.trim());
    if (!k || !name || !(k in CANDIDATES))
      throw new UserError(
        'must look like request=prompt_id,token=pos,layer=layer,experts=ids[,phase=phase]',
        undefined,
        '--columns',
        v,
      );
    out[k as keyof ParquetColumns] = name;
  }
  return out;
}

interface Resolved {
  request: string;
  token: string;
  layer: string;
  experts: string[];
  phase?: string;
}

function resolve(file: string, names: string[], given: ParquetColumns): Resolved {
  const pick = (role: keyof typeof CANDIDATES, required: boolean): string | undefined => {
    const g = given[role];
    if (g !== undefined) {
      if (!names.includes(g))
        throw new UserError(`no column "${g}" (has ${names.join(', ')})`, file, `--columns ${role}`);
      return g;
    }
    const found = CANDIDATES[role].find((c) => names.includes(c));
    if (!found && required)
      throw new UserError(
        `no ${role} column (looked for ${CANDIDATES[role].join(', ')}; name it with --columns ${role}=…)`,
        file,
        'schema',
      );
    return found;
  };
  const request = pick('request', true)!;
  const token = pick('token', true)!;
  const layer = pick('layer', true)!;
  let experts: string[];
  const list = pick('experts', false);
  if (list) experts = [list];
  else {
    const slots = names
      .filter((n) => /^(expert|e|topk|top)_?\d+$/.test(n))
      .sort((a, b) => Number(a.replace(/\D/g, '')) - Number(b.replace(/\D/g, '')));
    if (!slots.length)
      throw new UserError(
        `no experts column (looked for ${CANDIDATES.experts.join(', ')} or expert_0 …)`,
        file,
        'schema',
      );
    experts = slots;
  }
  const phase = pick('phase', false);
  return { request, token, layer, experts, ...(phase ? { phase } : {}) };
}

const num = (v: unknown): number => (typeof v === 'bigint' ? Number(v) : (v as number));

function isPrefill(v: unknown, column: string): boolean | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'boolean') return column === 'is_prefill' || column === 'is_prompt' ? v : !v;
  const s = String(v).toLowerCase();
  if (s === 'prefill' || s === 'prompt' || s === 'input') return true;
  if (s === 'decode' || s === 'generation' || s === 'output' || s === 'generate') return false;
  return undefined;
}

export function parquetPass(
  file: string,
  o: { columns?: ParquetColumns; experts?: number; topK?: number },
): ImportPass {
  let shape: ImportShape | undefined;
  let layers: number[] | undefined;
  async function* requests(): AsyncGenerator<ImportedRequest> {
    let buffer;
    try {
      buffer = await asyncBufferFromFile(file);
    } catch (e) {
      throw ioError(e, file);
    }
    let metadata;
    try {
      metadata = await parquetMetadataAsync(buffer);
    } catch (e) {
      throw new UserError(`not a Parquet file: ${(e as Error).message}`, file);
    }
    const names = parquetSchema(metadata).children.map((c) => c.element.name);
    const cols = resolve(file, names, o.columns ?? {});
    const columns = [cols.request, cols.token, cols.layer, ...cols.experts, ...(cols.phase ? [cols.phase] : [])];
    let cur:
      | {
          id: string;
          row: number;
          cells: Map<number, Map<number, number[]>>;
          prefill: Map<number, boolean | undefined>;
        }
      | undefined;
    const done = new Set<string>();
    const finish = (): ImportedRequest | undefined => {
      if (!cur) return undefined;
      const r = assemble(
        file,
        cur,
        cols,
        (ls) => {
          if (!layers) {
            layers = ls;
            shape = {
              moeLayers: layers.length,
              topK: shape?.topK ?? 0,
              ...(o.experts ? { experts: o.experts } : {}),
              moeLayerIds: layers,
            };
          }
          return layers;
        },
        shape!.topK,
      );
      done.add(cur.id);
      cur = undefined;
      return r;
    };
    let rowStart = 0;
    for (const rg of metadata.row_groups) {
      const rowEnd = rowStart + num(rg.num_rows);
      let rows: Record<string, unknown>[] = [];
      try {
        await parquetRead({
          file: buffer,
          metadata,
          columns,
          rowStart,
          rowEnd,
          rowFormat: 'object',
          onComplete: (d) => (rows = d as Record<string, unknown>[]),
        });
      } catch (e) {
        throw new UserError(
          `cannot read rows ${rowStart}…${rowEnd - 1}: ${(e as Error).message}`,
          file,
          `row ${rowStart}`,
        );
      }
      for (let i = 0; i < rows.length; i++) {
        const row = rows[i]!;
        const at = rowStart + i;
        const rid = String(row[cols.request]);
        const t = num(row[cols.token]);
        const l = num(row[cols.layer]);
        const ids = cols.experts.length === 1 ? row[cols.experts[0]!] : cols.experts.map((c) => row[c]);
        if (!Number.isInteger(t) || t < 0)
          throw new UserError('must be a non-negative integer', file, `row ${at}: ${cols.token}`, t);
        if (!Number.isInteger(l) || l < 0)
          throw new UserError('must be a non-negative integer', file, `row ${at}: ${cols.layer}`, l);
        if (!Array.isArray(ids) && !ArrayBuffer.isView(ids))
          throw new UserError('must be a list of expert ids', file, `row ${at}: ${cols.experts[0]}`, ids);
        const list = Array.from(ids as ArrayLike<unknown>, num);
        if (list.some((e) => !Number.isInteger(e)))
          throw new UserError('expert ids must be integers', file, `row ${at}: ${cols.experts[0]}`, list);
        if (!shape) shape = { moeLayers: 0, topK: o.topK ?? list.length };
        if (list.length !== shape.topK)
          throw new UserError(`expected ${shape.topK} expert ids`, file, `row ${at}: ${cols.experts[0]}`, list);
        if (!cur || cur.id !== rid) {
          const r = finish();
          if (r) yield r;
          if (done.has(rid))
            throw new UserError(
              `rows of request ${rid} are not contiguous (sort by ${cols.request})`,
              file,
              `row ${at}: ${cols.request}`,
            );
          cur = { id: rid, row: at, cells: new Map(), prefill: new Map() };
        }
        let byLayer = cur.cells.get(t);
        if (!byLayer) cur.cells.set(t, (byLayer = new Map()));
        if (byLayer.has(l))
          throw new UserError(`token ${t}, layer ${l} appears twice`, file, `row ${at}: ${cols.layer}`);
        byLayer.set(l, list);
        if (cols.phase) cur.prefill.set(t, isPrefill(row[cols.phase], cols.phase));
      }
      rowStart = rowEnd;
    }
    const r = finish();
    if (r) yield r;
  }
  return { shape: () => shape, requests };
}

function assemble(
  file: string,
  cur: {
    id: string;
    row: number;
    cells: Map<number, Map<number, number[]>>;
    prefill: Map<number, boolean | undefined>;
  },
  cols: Resolved,
  layersOf: (ls: number[]) => number[],
  k: number,
): ImportedRequest {
  const tokens = [...cur.cells.keys()].sort((a, b) => a - b);
  const seen = new Set<number>();
  for (const m of cur.cells.values()) for (const l of m.keys()) seen.add(l);
  const layers = layersOf([...seen].sort((a, b) => a - b));
  for (const l of seen)
    if (!layers.includes(l))
      throw new UserError(`layer ${l} is not among the first request's layers`, file, `row ${cur.row}: ${cols.layer}`);
  const L = layers.length;
  const experts = new Int32Array(tokens.length * L * k).fill(-1);
  let prompt = 0;
  let decodeSeen = false;
  tokens.forEach((t, ti) => {
    const m = cur.cells.get(t)!;
    layers.forEach((l, li) => {
      const ids = m.get(l);
      if (ids) experts.set(ids, (ti * L + li) * k);
    });
    const p = cols.phase ? cur.prefill.get(t) : true;
    if (p === true) {
      if (decodeSeen)
        throw new UserError(`prompt token ${t} after a decode token`, file, `row ${cur.row}: ${cols.phase}`);
      prompt++;
    } else decodeSeen = true;
  });
  return {
    id: cur.id,
    where: `row ${cur.row}`,
    promptTokens: prompt,
    prefillRecorded: true,
    tokens: tokens.length,
    experts,
  };
}
