/**
 * The synthetic router: routing with each property of real traces under its own knob
 * (DESIGN §6, knobs in `profile.ts`, structure in `model.ts`).
 *
 * Generative model, for request r with task label c (both optional):
 *   global popularity g_l (Zipf, per layer)
 *   task distribution   T_{c,l} ~ Dirichlet(β_T · g_l)          (fixed per label; = g_l if β_T = ∞)
 *   latent cluster      K_{c,z,l} ~ Dirichlet(β_C · T_{c,l})   (z uniform in 1…C per request; = T if β_C = ∞)
 *   request affinity    R_{r,l} ~ Dirichlet(β_R · K_{c,z,l})   (per request; = K if β_R = ∞)
 *   token t < startTokens routes along the t-th start path (shared by all requests);
 *   token t continues token t−1 with prob τ (τ_P for prompt tokens t < p; if t > 0). If it does
 *     not, with prob ψ it is a shared-vocabulary token: type v ~ Zipf(1) over the shared
 *     vocabulary, routed along v's fixed path at every layer (token identity). Otherwise, for each layer l, slot j = 0 … k−1:
 *     if continuing, with prob ρ:        copy slot j of token t−j at layer l         (temporal;
 *                                        j = 1, or with memory μ > 0, P(j) = (1−μ)μ^(j−1), j ≤ 64)
 *     else with prob γ (if l > 0):       succ_{l−1}(slot j of token t at layer l−1)  (cross-layer)
 *     else, or if that expert is already in the token's list: draw from R_{r,l} among the
 *     experts not yet in the list (successive sampling: rejection, then an exact scan).
 * Since E[R] = T and E[T] = g, counts over many requests even out to g, while one request
 * keeps returning to its own few experts. Prefill and decode tokens are routed alike (in the
 * real Mixtral trace temporal reuse is 0.379 over all tokens and 0.376 over decode tokens).
 *
 * Determinism: a request's routing is a pure function of (run seed, request id, task, profile),
 * whatever order requests are admitted in and whatever a predictor peeks, so policies compare
 * on identical routing and a predictor may build its own copy.
 *
 * Cost: O(L·E) per request at admission (Dirichlet draws, alias tables: ~5·L·E bytes), then
 * O(k) per (token, layer) with one to three uniforms per slot and no allocation.
 */
import { Rng } from '../../sim/kernel/rng.ts';
import type { RequestRouter, RequestSpec, RoutingSource } from '../../sim/workload.ts';
import { AliasTables } from '../random/alias.ts';
import { successiveInclusion } from '../aggregate-router.ts';
import { dirichletInto, type SyntheticModel } from './model.ts';
import { type RoutingTape, TapeRouter, type TapeSet, tapeSet } from './tape.ts';

export class SyntheticRequestRouter implements RequestRouter {
  private readonly L: number;
  private readonly E: number;
  private readonly k: number;
  private readonly stride: number;
  private readonly table: AliasTables;
  private rng: Rng;
  /** Routing of tokens [bufStart, genUpTo), token-major. */
  private buf: Int32Array;
  private bufStart = 0;
  private genUpTo = 0;
  /** Per layer: highest `toToken` routed so far. */
  private readonly routedTo: Int32Array;
  /** Ring of the routing of the last `H` tokens generated (temporal memory μ > 0; empty without: see genToken); newest at `histHead`. */
  private readonly hist: Int32Array;
  private readonly H: number;
  private histHead = 0;
  private histCount = 0;

  constructor(
    private readonly model: SyntheticModel,
    private readonly seed: string,
    task: string | undefined,
    /** Prompt length p: tokens t < p use the prefill temporal reuse τ_P. */
    private readonly promptTokens = 0,
    /**
     * Tokens the request will route (prompt + output), when known: the token buffer starts at
     * that size (at most 64 tokens, or the prompt's length if longer) instead of 64 tokens, so
     * short requests allocate less and long prompts do not grow it by doubling. Only memory
     * depends on it: tokens are generated in order and regenerated identically.
     */
    expectedTokens = 64,
    /**
     * Latent cluster to use instead of the request's own draw (topic-grouped batches in
     * `routing-summary.ts`). The draw is still made, so the rest of the request's routing is the
     * same stream either way; undefined = the drawn cluster (every simulated request).
     */
    cluster?: number,
    /** Where each generated token is also recorded for later runs (`tape.ts`). */
    private readonly tape?: RoutingTape,
  ) {
    const { L, E, k } = model;
    this.L = L;
    this.E = E;
    this.k = k;
    this.stride = L * k;
    const aff = new Rng(`${seed}/affinity`);
    const drawn = model.clusters > 1 ? aff.int(model.clusters) : 0;
    const base = model.distributionFor(task, cluster ?? drawn);
    if (Number.isFinite(model.betaR)) {
      this.table = new AliasTables(L, E);
      const w = model.scratchWeights;
      for (let l = 0; l < L; l++) {
        dirichletInto(aff, model.betaR, base.weights, l * E, E, w, 0);
        this.table.build(l, w, 0, model.scratch);
      }
    } else {
      this.table = base.alias;
    }
    this.rng = new Rng(`${seed}/tokens`);
    // The prompt is routed layer by layer over all its tokens, so the buffer holds it whole
    // anyway: starting at its length spares the doublings (and copies) on the way there.
    this.buf = new Int32Array(Math.max(1, Math.min(64, expectedTokens), promptTokens) * this.stride);
    this.routedTo = new Int32Array(L);
    this.H = model.mu > 0 ? MEMORY_TOKENS : 1;
    this.hist = new Int32Array(this.H > 1 ? this.H * this.stride : 0);
  }

  route(layer: number, fromToken: number, toToken: number, out: Int32Array): void {
    this.copyOut(layer, fromToken, toToken, out);
    if (toToken > this.routedTo[layer]!) this.routedTo[layer] = toToken;
  }

  peek(layer: number, fromToken: number, toToken: number, out: Int32Array): void {
    this.copyOut(layer, fromToken, toToken, out);
  }

  /**
   * Writes the routing of tokens [0, tokens) for all layers (token-major, L·k per token) into
   * `out`, from a fresh state. For trace generation and calibration; do not mix with `route`.
   */
  generateAll(tokens: number, out: Int32Array): void {
    this.rewind();
    for (let t = 0; t < tokens; t++) this.genToken(out, t * this.stride, t);
    this.rewind();
  }

  private copyOut(layer: number, from: number, to: number, out: Int32Array): void {
    if (!(layer >= 0 && layer < this.L) || !(from >= 0 && to >= from) || out.length < (to - from) * this.k) {
      throw new RangeError(
        `route(layer ${layer}, tokens ${from}…${to}) with out of length ${out.length}: bad arguments`,
      );
    }
    this.ensure(from, to);
    const { k, stride } = this;
    let o = 0;
    let p = (from - this.bufStart) * stride + layer * k;
    for (let t = from; t < to; t++, p += stride) for (let j = 0; j < k; j++) out[o++] = this.buf[p + j]!;
  }

  /** Makes tokens [from, to) available in the buffer. */
  private ensure(from: number, to: number): void {
    if (from < this.bufStart) this.rewind();
    while (this.genUpTo < to) {
      if ((this.genUpTo - this.bufStart + 1) * this.stride > this.buf.length)
        this.makeRoom(Math.min(from, this.lowWater()));
      const pos = (this.genUpTo - this.bufStart) * this.stride;
      this.genToken(this.buf, pos, this.genUpTo);
      this.tape?.append(this.buf, pos, this.genUpTo);
      this.genUpTo++;
    }
  }

  private lowWater(): number {
    let m = Infinity;
    for (let l = 0; l < this.L; l++) if (this.routedTo[l]! < m) m = this.routedTo[l]!;
    return m;
  }

  /** Drops tokens below `keepFrom` if that frees enough room, else doubles the buffer. */
  private makeRoom(keepFrom: number): void {
    // The last token generated stays: the next one may continue it (read in place, see genToken).
    const drop = Math.min(keepFrom, this.genUpTo - 1) - this.bufStart;
    const capTokens = this.buf.length / this.stride;
    const held = this.genUpTo - this.bufStart;
    if (drop > 0 && held - drop <= (capTokens * 3) / 4) {
      this.buf.copyWithin(0, drop * this.stride, held * this.stride);
      this.bufStart += drop;
      return;
    }
    const bigger = new Int32Array(this.buf.length * 2);
    bigger.set(this.buf.subarray(0, held * this.stride));
    this.buf = bigger;
  }

  /** Restarts generation from token 0 (deterministic: same tokens again). */
  private rewind(): void {
    this.rng = new Rng(`${this.seed}/tokens`);
    this.genUpTo = 0;
    this.bufStart = 0;
    this.histCount = 0;
  }

  /**
   * Generates the next token into dst[pos … pos + L·k) and pushes it onto the history ring.
   * Without temporal memory (μ = 0, a ring of one token) the ring is not written: the previous
   * token is read where it was generated, dst[pos − L·k …) (the buffer always keeps the last
   * token generated, and `generateAll` writes tokens contiguously).
   */
  private genToken(dst: Int32Array, pos: number, t: number): void {
    const { L, E, k, rng, stride, H } = this;
    const ring = H > 1;
    const m = this.model;
    const next = (this.histHead + 1) % H;
    if (t < m.startTokens) {
      const p = t * stride;
      for (let i = 0; i < stride; i++) dst[pos + i] = m.startPaths[p + i]!;
      this.pushed(dst, pos, next);
      return;
    }
    // Alea's state in locals for the token (written back before every return): each
    // `x = 2091639 * s0 …; s2 = x − c` below is one `Rng.next()` (value s2), inlined by hand, the
    // same arithmetic in the same order: a draw then costs registers, not four loads and four
    // stores of a typed array (genToken ~17 % faster, the same routing bit for bit). The carry is
    // `Math.floor(x)`, as in `Rng.next()` (one rounding instruction on the draws' serial chain
    // instead of a truncation to int32 and a conversion back: genToken 1.45 → 1.03 µs per
    // Mixtral token, the same routing).
    const st = rng.aleaState;
    let s0 = st[0]!;
    let s1 = st[1]!;
    let s2 = st[2]!;
    let c = st[3]!;
    let x = 0;
    const tau = t < this.promptTokens ? m.tauPrefill : m.tau;
    let cont = false;
    if (t > 0 && this.histCount > 0 && tau > 0) {
      x = 2091639 * s0 + c * 2.3283064365386963e-10;
      s0 = s1;
      s1 = s2;
      c = Math.floor(x);
      s2 = x - c;
      cont = s2 < tau;
    }
    if (!cont && m.psi > 0) {
      x = 2091639 * s0 + c * 2.3283064365386963e-10;
      s0 = s1;
      s1 = s2;
      c = Math.floor(x);
      s2 = x - c;
      if (s2 < m.psi) {
        x = 2091639 * s0 + c * 2.3283064365386963e-10;
        s0 = s1;
        s1 = s2;
        c = Math.floor(x);
        s2 = x - c;
        st[0] = s0;
        st[1] = s1;
        st[2] = s2;
        st[3] = c;
        const p = m.sharedAlias.sample(0, s2) * stride;
        for (let i = 0; i < stride; i++) dst[pos + i] = m.sharedPaths[p + i]!;
        this.pushed(dst, pos, next);
        return;
      }
    }
    // The token continues an earlier one: the previous token, read in dst, or (temporal memory
    // μ > 0, the only case with a ring) the j-th previous in the ring, P(j) = (1 − μ) μ^(j−1),
    // j ≤ the tokens remembered.
    const hist = ring ? this.hist : dst;
    let src = 0;
    if (cont) {
      if (ring) {
        x = 2091639 * s0 + c * 2.3283064365386963e-10;
        s0 = s1;
        s1 = s2;
        c = Math.floor(x);
        s2 = x - c;
        const lag = Math.min(this.histCount, 1 + Math.floor(Math.log(1 - s2) / Math.log(m.mu)));
        src = ((this.histHead - (lag - 1) + H) % H) * stride;
      } else {
        src = pos - stride;
      }
    }
    const { gamma, successor, rho } = m;
    const prob = this.table.prob;
    const alias = this.table.alias;
    for (let l = 0; l < L; l++) {
      const base = pos + l * k;
      const lk = l * k;
      const aOff = l * E;
      for (let j = 0; j < k; j++) {
        let e = -1;
        let copy = false;
        if (cont) {
          if (rho >= 1) copy = true;
          else {
            x = 2091639 * s0 + c * 2.3283064365386963e-10;
            s0 = s1;
            s1 = s2;
            c = Math.floor(x);
            s2 = x - c;
            copy = s2 < rho;
          }
        }
        if (copy) e = hist[src + lk + j]!;
        else if (l > 0 && gamma > 0) {
          x = 2091639 * s0 + c * 2.3283064365386963e-10;
          s0 = s1;
          s1 = s2;
          c = Math.floor(x);
          s2 = x - c;
          if (s2 < gamma) e = successor[(l - 1) * E + dst[base - k + j]!]!;
        }
        if (e >= 0) {
          for (let i = 0; i < j; i++) {
            if (dst[base + i] === e) {
              e = -1;
              break;
            }
          }
        }
        if (e < 0) {
          // Successive sampling: reject experts already in the list; after 16 rejections draw
          // exactly from the remaining weights (same distribution, bounded time).
          for (let tries = 0; tries < 16 && e < 0; tries++) {
            x = 2091639 * s0 + c * 2.3283064365386963e-10;
            s0 = s1;
            s1 = s2;
            c = Math.floor(x);
            s2 = x - c;
            const y = s2 * E;
            const i = y | 0;
            e = y - i < prob[aOff + i]! ? i : alias[aOff + i]!;
            for (let q = 0; q < j; q++) {
              if (dst[base + q] === e) {
                e = -1;
                break;
              }
            }
          }
          if (e < 0) {
            x = 2091639 * s0 + c * 2.3283064365386963e-10;
            s0 = s1;
            s1 = s2;
            c = Math.floor(x);
            s2 = x - c;
            e = this.table.sampleExcluding(l, s2, dst, base, base + j);
          }
        }
        dst[base + j] = e;
      }
    }
    st[0] = s0;
    st[1] = s1;
    st[2] = s2;
    st[3] = c;
    this.pushed(dst, pos, next);
  }

  /** Records the token just written at dst[pos …) as the newest (copied into the ring when μ > 0). */
  private pushed(dst: Int32Array, pos: number, head: number): void {
    if (this.H > 1) {
      const { hist, stride } = this;
      const h = head * stride;
      for (let i = 0; i < stride; i++) hist[h + i] = dst[pos + i]!;
    }
    this.histHead = head;
    if (this.histCount < this.H) this.histCount++;
  }
}

/** Tokens a router remembers for temporal reuse when the memory knob μ > 0. */
const MEMORY_TOKENS = 64;

const LIVE_CAP = 4096;

/** A RoutingSource of synthetic routers sharing one model. */
export class SyntheticRouting implements RoutingSource {
  readonly moeLayers: number;
  readonly experts: number;
  readonly topK: number;
  /**
   * Routers of admitted requests, for `routerOf`, held strongly until `release` (the executor
   * calls it when a request finishes) and at most `LIVE_CAP` of them (oldest forgotten first:
   * `routerOf` may answer undefined, and its users regenerate the same routing). Not WeakRefs:
   * a WeakRef's target stays alive until the current synchronous job ends, and a whole
   * simulation is one job, so every router of a run stayed in memory (~25 KB per request).
   */
  private readonly live = new Map<number, SyntheticRequestRouter | TapeRouter>();
  /** Requests' routing recorded for, or by, the thread's other runs on the same inputs (`tape.ts`). */
  private readonly tapes: TapeSet | undefined;

  /**
   * @param seedBase per-run seed (drawn from the `routing` stream); request r uses `${seedBase}:${r}`.
   * @param inputsKey what `model` is a pure function of, with `seedBase` (shape and knobs), when
   *   known: requests' routing is then shared with the thread's other runs on the same inputs
   */
  constructor(
    readonly model: SyntheticModel,
    readonly seedBase: string,
    inputsKey?: string,
  ) {
    this.moeLayers = model.L;
    this.experts = model.E;
    this.topK = model.k;
    const shared = inputsKey !== undefined && model.E <= 256;
    this.tapes = shared ? tapeSet(`${inputsKey}|${seedBase}`, model.L * model.k) : undefined;
  }

  forRequest(request: RequestSpec): SyntheticRequestRouter | TapeRouter {
    const tape = this.tapes?.tapeFor(request.id, request.task, request.promptTokens);
    const generate = (): SyntheticRequestRouter =>
      new SyntheticRequestRouter(
        this.model,
        `${this.seedBase}:${request.id}`,
        request.task,
        request.promptTokens,
        request.promptTokens + request.outputTokens,
        undefined,
        tape,
      );
    const r = tape && tape.tokens > 0 ? new TapeRouter(tape, this.model.L, this.model.k, generate) : generate();
    if (this.live.size >= LIVE_CAP) this.live.delete(this.live.keys().next().value!);
    this.live.set(request.id, r);
    return r;
  }

  /** The request finished: `routerOf` forgets its router. */
  release(requestId: number): void {
    this.live.delete(requestId);
  }

  /**
   * A router for a request id that is not registered (calibration, trace generation, predictors).
   * `promptTokens` matters only for profiles with `prefillTemporalReuse`; give the request's.
   */
  create(requestId: number, task: string | undefined, promptTokens = 0, cluster?: number): SyntheticRequestRouter {
    return new SyntheticRequestRouter(this.model, `${this.seedBase}:${requestId}`, task, promptTokens, 64, cluster);
  }

  routerOf(requestId: number): SyntheticRequestRouter | TapeRouter | undefined {
    return this.live.get(requestId);
  }

  /** Expected share of activations per expert at `layer`: successive-sampling inclusion of g, / k. */
  popularity(layer: number): Float64Array {
    let p = this.shares[layer];
    if (!p) {
      const E = this.experts;
      p = successiveInclusion(this.model.global.weights.subarray(layer * E, (layer + 1) * E), this.topK).map(
        (q) => q / this.topK,
      );
      this.shares[layer] = p;
    }
    return p.slice();
  }
  private readonly shares: (Float64Array | undefined)[] = [];
}
