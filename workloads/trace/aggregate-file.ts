/**
 * Aggregate routing files: per-corpus expert activation counts at a few layers and
 * rank-aligned cross-layer pair counts, without request boundaries or token order — the
 * format of `olmoe-and-mixtral_allenai-olmoe_layer-counts.json.gz` (allenai/OLMoE, Apache-2.0;
 * a copy ships in `traces/`). One JSON object:
 *
 *   models[<model>] = { experts, topk, num_layers, layers: [l0, l1, …],
 *     expert_counts[<corpus>] = one list of E counts per listed layer,
 *     crosslayer_pair_counts[<corpus>]["a->b"] = E×E counts of (rank-r expert at a, rank-r expert at b), summed over r }
 *
 * This module reads such files, computes their statistics, and computes the same statistics
 * of (synthetic) per-request traces, so a profile fitted from an aggregate can be checked.
 */
import { readFile } from 'node:fs/promises';
import { gunzipSync } from 'node:zlib';
import { z } from 'zod';
import { UserError } from '../../sim/kernel/errors.ts';
import { MISSING, type TraceRequest } from './format.ts';
import { ioError } from './lines.ts';
import { formatPath } from './reader.ts';

const counts = z.array(z.number().nonnegative());

export const AggregateModelSchema = z.object({
  experts: z.number().int().positive(),
  topk: z.number().int().positive(),
  num_layers: z.number().int().positive(),
  layers: z.array(z.number().int().nonnegative()).min(1),
  expert_counts: z.record(z.string(), z.array(counts)),
  crosslayer_pair_counts: z.record(z.string(), z.record(z.string(), z.array(counts))).optional(),
});
export type AggregateModel = z.infer<typeof AggregateModelSchema>;

export const AggregateFileSchema = z.object({
  source: z.string().optional(),
  license: z.string().optional(),
  note: z.string().optional(),
  models: z.record(z.string(), AggregateModelSchema),
});
export type AggregateFile = z.infer<typeof AggregateFileSchema>;

/** True if the file is an aggregate file (a JSON object with `models`), judged from its content. */
export async function looksLikeAggregateFile(path: string): Promise<boolean> {
  try {
    const obj = await readJson(path);
    return typeof obj === 'object' && obj !== null && 'models' in obj;
  } catch {
    return false;
  }
}

async function readJson(path: string): Promise<unknown> {
  let buf: Buffer;
  try {
    buf = await readFile(path);
  } catch (e) {
    throw ioError(e, path);
  }
  let text: string;
  try {
    text = (buf[0] === 0x1f && buf[1] === 0x8b ? gunzipSync(buf) : buf).toString('utf8');
  } catch (e) {
    throw new UserError(`corrupt or truncated gzip stream (${(e as Error).message})`, path);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new UserError(`malformed JSON (${(e as Error).message})`, path);
  }
}

/** Reads and validates an aggregate file (small: read whole). */
export async function readAggregateFile(path: string): Promise<AggregateFile> {
  const r = AggregateFileSchema.safeParse(await readJson(path));
  if (!r.success) {
    const issue = r.error.issues[0]!;
    throw new UserError(issue.message, path, formatPath(issue.path));
  }
  for (const [name, m] of Object.entries(r.data.models)) {
    for (const [corpus, perLayer] of Object.entries(m.expert_counts)) {
      if (perLayer.length !== m.layers.length) {
        throw new UserError(
          `lists ${perLayer.length} layers, expected ${m.layers.length}`,
          path,
          `models.${name}.expert_counts.${corpus}`,
        );
      }
      perLayer.forEach((c, i) => {
        if (c.length !== m.experts)
          throw new UserError(
            `has ${c.length} experts, expected ${m.experts}`,
            path,
            `models.${name}.expert_counts.${corpus}[${i}]`,
          );
      });
    }
  }
  return r.data;
}

/** Statistics of one model of an aggregate file, per corpus and pooled over corpora. */
export interface AggregateStats {
  readonly experts: number;
  readonly topk: number;
  /** Model layer indices the counts are for. */
  readonly layers: readonly number[];
  readonly corpora: Record<string, CorpusStats>;
  readonly pooled: CorpusStats;
}

export interface CorpusStats {
  /** Normalised popularity entropy (0…1) per listed layer. */
  readonly entropy: number[];
  /** Share of the top 10 % of experts (≥ 1) per listed layer. */
  readonly top10Share: number[];
  /** Rank-aligned successor predictability per layer pair ("a->b"). */
  readonly rankAligned: Record<string, number>;
}

export function aggregateStats(m: AggregateModel): AggregateStats {
  const E = m.experts;
  const corpora: Record<string, CorpusStats> = {};
  const pooledCounts = m.layers.map(() => new Float64Array(E));
  const pooledPairs: Record<string, Float64Array> = {};
  for (const [corpus, perLayer] of Object.entries(m.expert_counts)) {
    perLayer.forEach((c, i) => c.forEach((v, e) => (pooledCounts[i]![e]! += v)));
    const pairs = m.crosslayer_pair_counts?.[corpus] ?? {};
    const rankAligned: Record<string, number> = {};
    for (const [key, mat] of Object.entries(pairs)) {
      const flat = Float64Array.from(mat.flat());
      rankAligned[key] = successorHitRate(flat, E);
      const acc = (pooledPairs[key] ??= new Float64Array(E * E));
      flat.forEach((v, i) => (acc[i]! += v));
    }
    corpora[corpus] = {
      entropy: perLayer.map((c) => normEntropy(c)),
      top10Share: perLayer.map((c) => topShare(c)),
      rankAligned,
    };
  }
  const pooled: CorpusStats = {
    entropy: pooledCounts.map((c) => normEntropy(c)),
    top10Share: pooledCounts.map((c) => topShare(c)),
    rankAligned: Object.fromEntries(Object.entries(pooledPairs).map(([k, v]) => [k, successorHitRate(v, E)])),
  };
  return { experts: E, topk: m.topk, layers: m.layers, corpora, pooled };
}

/**
 * The same statistics for per-request traces whose requests carry task labels (= corpora):
 * counts at the given MoE layers, rank alignment by the order inside each top-k list.
 */
export function aggregateStatsOfRequests(
  requests: Iterable<TraceRequest>,
  L: number,
  E: number,
  k: number,
  layers: readonly number[],
): AggregateStats {
  const counts = new Map<string, Float64Array[]>();
  const pairs = new Map<string, Map<string, Float64Array>>();
  for (const r of requests) {
    const task = r.task ?? '(none)';
    let c = counts.get(task);
    if (!c) {
      c = layers.map(() => new Float64Array(E));
      counts.set(task, c);
      pairs.set(task, new Map());
    }
    const p = pairs.get(task)!;
    for (let t = 0; t < r.tokens; t++) {
      layers.forEach((l, i) => {
        const base = (t * L + l) * k;
        if (r.experts[base] === MISSING) return;
        for (let j = 0; j < k; j++) c[i]![r.experts[base + j]!]!++;
        const next = layers[i + 1];
        if (next === undefined) return;
        const nb = (t * L + next) * k;
        if (r.experts[nb] === MISSING) return;
        const key = `${l}->${next}`;
        let m = p.get(key);
        if (!m) p.set(key, (m = new Float64Array(E * E)));
        for (let j = 0; j < k; j++) m[r.experts[base + j]! * E + r.experts[nb + j]!]!++;
      });
    }
  }
  const model: AggregateModel = {
    experts: E,
    topk: k,
    num_layers: L,
    layers: [...layers],
    expert_counts: Object.fromEntries([...counts].map(([t, c]) => [t, c.map((x) => [...x])])),
    crosslayer_pair_counts: Object.fromEntries(
      [...pairs].map(([t, m]) => [
        t,
        Object.fromEntries(
          [...m].map(([key, v]) => [key, Array.from({ length: E }, (_, a) => [...v.subarray(a * E, (a + 1) * E)])]),
        ),
      ]),
    ),
  };
  return aggregateStats(model);
}

function normEntropy(c: ArrayLike<number>): number {
  let total = 0;
  for (let i = 0; i < c.length; i++) total += c[i]!;
  if (total === 0 || c.length < 2) return 1;
  let h = 0;
  for (let i = 0; i < c.length; i++) {
    const p = c[i]! / total;
    if (p > 0) h -= p * Math.log2(p);
  }
  return h / Math.log2(c.length);
}

function topShare(c: ArrayLike<number>): number {
  const s = Array.from(c).sort((a, b) => b - a);
  const total = s.reduce((a, b) => a + b, 0);
  const n = Math.max(1, Math.round(s.length / 10));
  return total ? s.slice(0, n).reduce((a, b) => a + b, 0) / total : 0;
}

/** Σ_a max_b M[a][b] / Σ M: how often the most frequent successor is right. */
function successorHitRate(m: Float64Array, E: number): number {
  let hits = 0;
  let total = 0;
  for (let a = 0; a < E; a++) {
    let best = 0;
    for (let b = 0; b < E; b++) {
      const v = m[a * E + b]!;
      total += v;
      if (v > best) best = v;
    }
    hits += best;
  }
  return total ? hits / total : 0;
}
