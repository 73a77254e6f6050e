/**
 * Single-token predictions kept across the runs of one thread. A `ProfilePredictor`'s answer is
 * a pure function of its inputs (the request table, the synthetic routing's shape, knobs and
 * seed, the accuracy profile, the seed drawn from the `prediction` stream) and of the call's
 * (request, layer, token): routing is generated per request from its own seed, and the
 * prediction draws are counter-based per (request, token, layer), whatever the simulated timing
 * or the policy asked before. The runs of a sweep that share a workload (every policy, budget
 * and hardware variant of a case) therefore ask the same decode-token predictions, and each
 * built them anew (vote draws, popularity fallbacks, ranking: ~5 % of a MoEpic-reproduction run
 * of Mixtral-Offloading or AdapMoE). The ranked lists are kept here, keyed on those inputs, and
 * handed out shared: callers must not change them (`ExpertPredictor.predict` returns a readonly
 * list). Bounded: at most `MAX_MEMOS` workloads and `MAX_ELEMENTS` list entries per thread;
 * beyond, lists are built as before.
 */
import { BoundedMemo } from '../sim/bounded-memo.ts';

/** Entries kept over all memos (~8 B each in a packed array: ~64 MB; a Qwen1.5-MoE MMLU run of 64 × 64 decode tokens holds ~5.9 M). */
const MAX_ELEMENTS = 8_000_000;
/** Workloads remembered per thread (a sweep runs one case's policies next to each other). */
const MAX_MEMOS = 2;

export class PredictionMemo {
  /** Per request id, the list for (token t, layer l) at t·L + l (undefined: not kept). */
  private readonly byRequest: (readonly number[] | undefined)[][] = [];
  /** List entries held. */
  elements = 0;
  /** Lookups answered from the memo (tests assert coverage with it). */
  hits = 0;

  constructor(private readonly L: number) {}

  get(requestId: number, layer: number, token: number): readonly number[] | undefined {
    const lists = this.byRequest[requestId];
    if (lists === undefined) return undefined;
    const got = lists[token * this.L + layer];
    if (got !== undefined) this.hits++;
    return got;
  }

  /** Keeps `ranked` for the call if the thread's bound allows. */
  put(requestId: number, layer: number, token: number, ranked: readonly number[]): void {
    if (!(requestId >= 0 && Number.isSafeInteger(requestId)) || requestId > MAX_REQUEST_ID) return;
    const byRequest = this.byRequest;
    const i = token * this.L + layer;
    if (byRequest[requestId]?.[i] !== undefined) return;
    if (!memos.reserve(this, ranked.length)) return;
    // Grown densely (holes would turn the arrays into dictionaries).
    while (byRequest.length <= requestId) byRequest.push([]);
    const lists = byRequest[requestId]!;
    while (lists.length <= i) lists.push(undefined);
    lists[i] = ranked;
    this.elements += ranked.length;
  }
}

/** Request ids beyond this are not kept (dense per-request arrays). */
const MAX_REQUEST_ID = 1 << 20;

const memos = new BoundedMemo<PredictionMemo>(MAX_MEMOS, MAX_ELEMENTS, (m) => m.elements);

/** The thread's memo for predictor inputs `key` (made on first use; the least recently used forgotten beyond `MAX_MEMOS`). */
export function predictionMemo(key: string, moeLayers: number): PredictionMemo {
  return memos.getOrMake(key, () => new PredictionMemo(moeLayers));
}

/** Lookups answered from the memos the thread holds (tests assert coverage with it). */
export function predictionMemoHits(): number {
  let n = 0;
  for (const m of memos.values()) n += m.hits;
  return n;
}

/** Forgets every kept prediction (tests). */
export function clearPredictionMemos(): void {
  memos.clear();
}

/**
 * A key that tells apart every value a JSON text would merge: non-finite numbers and −0 are
 * spelled out (JSON writes `null` and `0`), `undefined` fields are kept as such.
 */
export function exactKey(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => {
    if (typeof v === 'number' && (!Number.isFinite(v) || Object.is(v, -0))) return `#${Object.is(v, -0) ? '-0' : v}`;
    if (v === undefined) return '#undefined';
    if (typeof v === 'string' && v.startsWith('#')) return `#${v}`;
    return v;
  });
}
