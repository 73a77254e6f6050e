/**
 * Replay of a recorded routing trace as a workload's routing (`routing: { kind: trace }`).
 *
 * The trace is streamed once into a compact store (1 byte per expert id when E ≤ 255, else 2),
 * keeping only the requests the workload needs; request i of the workload replays trace
 * request i mod N (cycling when the trace is shorter).
 *
 * Token mapping: the workload's prompt tokens map to the trace's recorded prompt tokens from
 * the start, its decode tokens to the recorded decode tokens from the start of decode. A token
 * with no recorded routing — a `null` entry, a prompt that was not recorded (decode-only
 * requests), or tokens beyond the recording when the config asks for longer requests — is
 * filled by resampling: the experts of a random recorded token of the same request at the
 * same layer (so the request's own skew is kept), or of the whole trace at that layer if the
 * request has none. The fill is a pure function of (seed, request, token, layer).
 */
import type { Rng } from '../sim/kernel/rng.ts';
import type { RequestRouter, RequestSpec, RoutingSource } from '../sim/workload.ts';
import { UserError } from '../sim/kernel/errors.ts';
import { AliasTables, aliasScratch } from './random/alias.ts';
import { HashRng, seedFrom } from './random/hash-rng.ts';
import { InclusionAggregateRouter } from './aggregate-router.ts';
import { TraceReader, type ExpectedShape } from './trace/reader.ts';
import {
  MISSING,
  recordedPromptTokens,
  type PackedPredictions,
  type TraceHeader,
  type TraceRequest,
} from './trace/format.ts';

export interface StoredRequest {
  readonly id: string;
  readonly promptTokens: number;
  readonly prefillRecorded: boolean;
  readonly tokens: number;
  readonly outputTokens: number;
  readonly recordedPrompt: number;
  readonly task?: string;
  readonly arrivalS?: number;
  /** tokens × L × k ids; `store.missing` where not recorded. */
  readonly experts: Uint8Array | Uint16Array;
  /** Recorded tokens per layer (L). */
  readonly presentPerLayer: Int32Array;
  readonly predictions?: PackedPredictions;
}

export class TraceStore {
  /** The sentinel for a missing entry in `experts`. */
  readonly missing: number;
  /** L×E activation counts over the stored requests, and recorded (token) entries per layer. */
  readonly counts: Float64Array;
  readonly present: Float64Array;

  private constructor(
    readonly path: string,
    readonly header: TraceHeader,
    readonly requests: readonly StoredRequest[],
    /** Requests in the file (≥ requests.length when reading stopped early). */
    readonly complete: boolean,
  ) {
    const { moeLayers: L, experts: E, topK: k } = header.model;
    this.missing = E <= 255 ? 255 : 65535;
    this.counts = new Float64Array(L * E);
    this.present = new Float64Array(L);
    for (const r of requests) {
      for (let t = 0; t < r.tokens; t++) {
        for (let l = 0; l < L; l++) {
          const base = (t * L + l) * k;
          if (r.experts[base] === this.missing) continue;
          this.present[l]!++;
          for (let j = 0; j < k; j++) this.counts[l * E + r.experts[base + j]!]!++;
        }
      }
    }
  }

  get model(): TraceHeader['model'] {
    return this.header.model;
  }

  /**
   * Streams `path` into memory, checking it against `expect`; stops after `maxRequests`.
   * @throws UserError on any bad input (see reader.ts) or an empty trace
   */
  static async load(
    path: string,
    opts: { expect?: ExpectedShape; maxRequests?: number; predictions?: boolean } = {},
  ): Promise<TraceStore> {
    const reader = await TraceReader.open(path, {
      ...(opts.expect ? { expect: opts.expect } : {}),
      scores: false,
      predictions: opts.predictions ?? true,
    });
    const { moeLayers: L, experts: E } = reader.header.model;
    const missing = E <= 255 ? 255 : 65535;
    const requests: StoredRequest[] = [];
    let complete = true;
    const max = opts.maxRequests ?? Infinity;
    for await (const r of reader) {
      if (requests.length >= max) {
        complete = false;
        break;
      }
      requests.push(compact(r, L, E, missing));
    }
    if (requests.length === 0) throw new UserError('the trace has no requests', path);
    return new TraceStore(path, reader.header, requests, complete);
  }
}

function compact(r: TraceRequest, L: number, E: number, missing: number): StoredRequest {
  const k = r.experts.length / Math.max(1, r.tokens * L);
  const experts = E <= 255 ? new Uint8Array(r.experts.length) : new Uint16Array(r.experts.length);
  const presentPerLayer = new Int32Array(L);
  for (let i = 0; i < r.experts.length; i++) {
    const e = r.experts[i]!;
    experts[i] = e === MISSING ? missing : e;
  }
  for (let t = 0; t < r.tokens; t++)
    for (let l = 0; l < L; l++) if (r.experts[(t * L + l) * k] !== MISSING) presentPerLayer[l]!++;
  return {
    id: r.id,
    promptTokens: r.promptTokens,
    prefillRecorded: r.prefillRecorded,
    tokens: r.tokens,
    outputTokens: r.outputTokens,
    recordedPrompt: recordedPromptTokens(r),
    ...(r.task !== undefined ? { task: r.task } : {}),
    ...(r.arrivalS !== undefined ? { arrivalS: r.arrivalS } : {}),
    experts,
    presentPerLayer,
    ...(r.predictions ? { predictions: r.predictions } : {}),
  };
}

/** Routing replayed from a `TraceStore`. */
export class TraceRouting implements RoutingSource {
  readonly moeLayers: number;
  readonly experts: number;
  readonly topK: number;
  private readonly seed: number;
  private readonly globalAlias: AliasTables;
  private readonly specs = new Map<number, RequestSpec>();

  /** @param rng the run's `routing` stream (one seed is drawn for the fills) */
  constructor(
    readonly store: TraceStore,
    rng: Rng,
  ) {
    const { moeLayers: L, experts: E, topK: k } = store.model;
    this.moeLayers = L;
    this.experts = E;
    this.topK = k;
    this.seed = seedFrom(rng);
    this.globalAlias = new AliasTables(L, E);
    const scratch = aliasScratch(E);
    for (let l = 0; l < L; l++) this.globalAlias.build(l, store.counts, l * E, scratch);
  }

  /** The trace request that workload request `id` replays. */
  storedFor(id: number): StoredRequest {
    return this.store.requests[id % this.store.requests.length]!;
  }

  /** Record index of workload token t for a request with `promptTokens` prompt tokens, or −1. */
  static recordIndex(s: StoredRequest, promptTokens: number, t: number): number {
    if (t < promptTokens) return t < s.recordedPrompt ? t : -1;
    const d = t - promptTokens;
    return d < s.tokens - s.recordedPrompt ? s.recordedPrompt + d : -1;
  }

  forRequest(request: RequestSpec): RequestRouter {
    this.specs.set(request.id, request);
    const s = this.storedFor(request.id);
    const { moeLayers: L, experts: E, topK: k, store } = this;
    const miss = store.missing;
    const h = new HashRng(this.seed);
    const alias = this.globalAlias;
    const id = request.id;
    const P = request.promptTokens;
    const fill = (layer: number, fromToken: number, toToken: number, out: Int32Array): void => {
      if (!(layer >= 0 && layer < L) || out.length < (toToken - fromToken) * k) {
        throw new RangeError(
          `route(layer ${layer}, tokens ${fromToken}…${toToken}) with out of length ${out.length}: bad arguments`,
        );
      }
      let o = 0;
      for (let t = fromToken; t < toToken; t++, o += k) {
        let rec = TraceRouting.recordIndex(s, P, t);
        if (rec >= 0 && s.experts[(rec * L + layer) * k] === miss) rec = -1;
        if (rec < 0 && s.presentPerLayer[layer]! > 0) {
          h.reset(id, t, layer);
          for (let tries = 0; tries < 32 && rec < 0; tries++) {
            const r = h.int(s.tokens);
            if (s.experts[(r * L + layer) * k] !== miss) rec = r;
          }
        }
        if (rec >= 0) {
          const base = (rec * L + layer) * k;
          for (let j = 0; j < k; j++) out[o + j] = s.experts[base + j]!;
        } else {
          h.reset(id, t, layer + 0x10000);
          drawDistinctAlias(alias, layer, E, k, h, out, o);
        }
      }
    };
    return { route: fill, peek: fill };
  }

  routerOf(requestId: number): RequestRouter | undefined {
    const spec = this.specs.get(requestId);
    return spec ? this.forRequest(spec) : undefined;
  }

  popularity(layer: number): Float64Array {
    const E = this.experts;
    const p = this.store.counts.slice(layer * E, (layer + 1) * E);
    const s = p.reduce((a, b) => a + b, 0);
    for (let e = 0; e < E; e++) p[e] = s > 0 ? p[e]! / s : 1 / E;
    return p;
  }

  /**
   * Aggregate counts whose per-token model is "a uniformly chosen recorded token of the trace at
   * that layer": inclusion probabilities are the trace's exact per-token frequencies.
   */
  aggregate(rng: Rng): InclusionAggregateRouter {
    const { moeLayers: L, experts: E, topK: k, store } = this;
    const q = new Float64Array(L * E);
    for (let l = 0; l < L; l++)
      for (let e = 0; e < E; e++)
        q[l * E + e] = store.present[l]! > 0 ? store.counts[l * E + e]! / store.present[l]! : k / E;
    const reqAlias = new AliasTables(L, store.requests.length);
    const scratch = aliasScratch(store.requests.length);
    const w = new Float64Array(store.requests.length);
    for (let l = 0; l < L; l++) {
      store.requests.forEach((r, i) => (w[i] = r.presentPerLayer[l]!));
      reqAlias.build(l, w, 0, scratch);
    }
    const miss = store.missing;
    const sampler = (l: number, r: Rng, out: Int32Array): void => {
      if (store.present[l] === 0) {
        drawDistinctAlias(this.globalAlias, l, E, k, r, out, 0);
        return;
      }
      for (;;) {
        const s = store.requests[reqAlias.sample(l, r.next())]!;
        const t = r.int(s.tokens);
        const base = (t * L + l) * k;
        if (s.experts[base] === miss) continue;
        for (let j = 0; j < k; j++) out[j] = s.experts[base + j]!;
        return;
      }
    };
    return new InclusionAggregateRouter(L, E, k, q, sampler, rng);
  }
}

/** k distinct experts from alias table `t` by successive sampling (rejection, then an exact scan after 16 tries). */
export function drawDistinctAlias(
  alias: AliasTables,
  t: number,
  _E: number,
  k: number,
  rng: { next(): number },
  out: Int32Array,
  o: number,
): void {
  for (let j = 0; j < k; j++) {
    let e = -1;
    for (let tries = 0; tries < 16 && e < 0; tries++) {
      e = alias.sample(t, rng.next());
      for (let m = 0; m < j; m++) if (out[o + m] === e) e = -1;
    }
    if (e < 0) e = alias.sampleExcluding(t, rng.next(), out, o, o + j);
    out[o + j] = e;
  }
}
