/**
 * Expert Activation Matrices (MoE-Infinity, DESIGN §8).
 *
 * An EAM is an L×E matrix of token counts, stored row-major in a `Float64Array`
 * (`eam[layer * E + expert]`; L = MoE layers, E = routed experts per layer): cell (l, e)
 * counts the tokens routed to expert e at MoE layer l (each token adds one count per selected
 * expert, so a row of a request sums to tokens × top-k).
 *
 * - **Iteration EAM**: the counts of one iteration's tokens — of the batch's requests in one
 *   phase (default), or of one request (`batchMatching: 'per-request'`); a prompt in prefill,
 *   one token per request per decode step. The prefetcher consumes it row by row as layers
 *   are routed (`eam-collection.ts`, `IncrementalMatcher`), so it is never stored whole.
 * - **Request EAM**: the sum of a request's iteration EAMs, with prefill and decode kept
 *   separately (`RequestEams`): a prompt's P tokens and a decode step's single token activate
 *   experts very differently, so each phase is matched against the stored EAMs of the same
 *   phase. When the request finishes both parts go to the EAM collection of their phase.
 *
 * Counts are integers held in doubles: every sum is exact below 2^53.
 */

export type Phase = 'prefill' | 'decode';

export interface EamShape {
  /** MoE layers (rows). */
  readonly layers: number;
  /** Routed experts per MoE layer (columns). */
  readonly experts: number;
}

export function createEam(shape: EamShape): Float64Array {
  return new Float64Array(shape.layers * shape.experts);
}

/** Adds one routed row (`counts[e]` tokens to expert e) to row `layer` of `eam`. */
export function addRow(eam: Float64Array, experts: number, layer: number, counts: ArrayLike<number>): void {
  const base = layer * experts;
  for (let e = 0; e < experts; e++) eam[base + e]! += counts[e]!;
}

/**
 * Cosine similarity of two EAMs over the rows in `rows` (all rows when omitted), treating
 * the selected rows as one vector. 0 when either side is all zero. The brute-force reference
 * the incremental matcher is tested against.
 */
export function cosineSimilarity(
  a: ArrayLike<number>,
  b: ArrayLike<number>,
  experts: number,
  rows?: Iterable<number>,
): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  const layers = Math.floor(a.length / experts);
  const list = rows ?? Array.from({ length: layers }, (_, i) => i);
  for (const l of list) {
    const base = l * experts;
    for (let e = 0; e < experts; e++) {
      const x = a[base + e]!;
      const y = b[base + e]!;
      dot += x * y;
      na += x * x;
      nb += y * y;
    }
  }
  return na > 0 && nb > 0 ? dot / Math.sqrt(na * nb) : 0;
}

interface RequestEamState {
  readonly prefill: Float64Array;
  readonly decode: Float64Array;
  /** Tokens routed per phase (a row of the phase's EAM sums to tokens × top-k). */
  prefillTokens: number;
  decodeTokens: number;
}

/**
 * Request EAMs of the requests in flight, keyed by request id. Rows are added after each
 * layer's routing; `take` removes a finished request's EAMs (to insert them in the EAMC).
 */
export class RequestEams {
  private readonly map = new Map<number, RequestEamState>();
  private readonly free: Float64Array[] = [];
  /** Increments on every change (a row or tokens added, a request added or taken). */
  version = 0;
  /** Increments when requests are added or taken, or tokens added (not on rows). */
  layoutVersion = 0;
  /** Every row added so far came as integer counts (an `Int32Array`): every sum of cells is exact. */
  integral = true;

  constructor(readonly shape: EamShape) {}

  get size(): number {
    return this.map.size;
  }

  private state(id: number): RequestEamState {
    let s = this.map.get(id);
    if (!s) {
      s = { prefill: this.alloc(), decode: this.alloc(), prefillTokens: 0, decodeTokens: 0 };
      this.map.set(id, s);
      this.version++;
      this.layoutVersion++;
    }
    return s;
  }

  private alloc(): Float64Array {
    const a = this.free.pop();
    if (a) {
      a.fill(0);
      return a;
    }
    return createEam(this.shape);
  }

  /** Adds request `id`'s routing of `layer` in an iteration of `phase`. */
  addRow(id: number, phase: Phase, layer: number, counts: ArrayLike<number>): void {
    const s = this.state(id);
    this.version++;
    if (!(counts instanceof Int32Array)) this.integral = false;
    addRow(phase === 'prefill' ? s.prefill : s.decode, this.shape.experts, layer, counts);
  }

  /** Records that request `id` routed `tokens` tokens in an iteration of `phase` (once per iteration). */
  addTokens(id: number, phase: Phase, tokens: number): void {
    const s = this.state(id);
    this.version++;
    this.layoutVersion++;
    if (phase === 'prefill') s.prefillTokens += tokens;
    else s.decodeTokens += tokens;
  }

  /** Count of (layer, expert) in request `id`'s EAM, both phases together, and its routed tokens. */
  count(id: number, layer: number, expert: number): number {
    const s = this.map.get(id);
    if (!s) return 0;
    const i = layer * this.shape.experts + expert;
    return s.prefill[i]! + s.decode[i]!;
  }

  /** Tokens request `id` has routed so far (both phases). */
  tokens(id: number): number {
    const s = this.map.get(id);
    return s ? s.prefillTokens + s.decodeTokens : 0;
  }

  /** The phase EAM of a request in flight (read-only use), or undefined. */
  get(id: number, phase: Phase): Float64Array | undefined {
    const s = this.map.get(id);
    return s ? (phase === 'prefill' ? s.prefill : s.decode) : undefined;
  }

  /** Hands a finished request's EAMs to `sink` (phases with no tokens are skipped) and forgets it. */
  take(id: number, sink: (phase: Phase, eam: Float64Array) => void): void {
    const s = this.map.get(id);
    if (!s) return;
    this.map.delete(id);
    this.version++;
    this.layoutVersion++;
    if (s.prefillTokens > 0) sink('prefill', s.prefill);
    if (s.decodeTokens > 0) sink('decode', s.decode);
    this.free.push(s.prefill, s.decode);
  }
}
