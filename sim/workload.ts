/**
 * What the executors need from a workload: requests and their routing.
 *
 * The executors import only these interfaces; `workloads/` implements them (synthetic
 * routers, recorded-trace replay, arrival processes, length distributions, predictors), and
 * `experiments/` wires a config to an implementation.
 *
 * Token indexing of a request: tokens 0 .. promptTokens-1 are the prompt (prefill); the
 * decode step that produces output token j (j = 1 .. outputTokens-1) processes input token
 * promptTokens + j - 1. So a request processes promptTokens + outputTokens - 1 tokens and
 * emits outputTokens tokens (the first at the end of prefill).
 */
import type { Ns } from './kernel/time.ts';

export interface RequestSpec {
  /** Dense id 0..n-1 in arrival order. */
  readonly id: number;
  readonly arrivalNs: Ns;
  /** Prompt length in tokens (≥ 1). */
  readonly promptTokens: number;
  /** Tokens to generate (≥ 1); the first is produced by the prefill pass. */
  readonly outputTokens: number;
  /** Task / dataset label, if known (task-cluster experiments, workload shifts). */
  readonly task?: string;
}

/** Tokens a request runs through the model: prompt plus all decode inputs. */
export const processedTokens = (r: RequestSpec): number => r.promptTokens + r.outputTokens - 1;

/**
 * Routing of one request: which experts each token selects at each MoE layer.
 *
 * Calls come in execution order: for a given layer, token ranges are non-decreasing; for a
 * given token, layers are increasing. An implementation may rely on that order (a synthetic
 * router with temporal locality generates token t after token t-1).
 */
export interface RequestRouter {
  /**
   * Writes the top-k expert ids (0..experts-1, distinct within a token) of tokens
   * [fromToken, toToken) at MoE layer `layer` (0-based among MoE layers) into
   * `out[0 .. (toToken-fromToken)*topK)`, token-major.
   */
  route(layer: number, fromToken: number, toToken: number, out: Int32Array): void;
  /**
   * Optional: the same routing as `route` would give for tokens [fromToken, toToken) at
   * `layer`, in any order and any number of times, without counting as routed (for
   * predictors that look ahead). Implementations generate ahead and memoise; asking for tokens
   * long released may cost a regeneration from the request's start, never a different answer.
   */
  peek?(layer: number, fromToken: number, toToken: number, out: Int32Array): void;
}

/** A source of routing for requests of one model. */
export interface RoutingSource {
  readonly moeLayers: number;
  readonly experts: number;
  readonly topK: number;
  /** The router of a request; called once per request, when it is admitted. */
  forRequest(request: RequestSpec): RequestRouter;
  /**
   * Optional: the router `forRequest` returned for a request still in use (held weakly), so a
   * predictor can share its memoised routing; undefined if not admitted or already collected.
   */
  routerOf?(requestId: number): RequestRouter | undefined;
  /** Optional: the request finished (its router is no longer used by the executor; `routerOf` may forget it). */
  release?(requestId: number): void;
  /** Optional: the expected share of activations of each expert at `layer` (length = experts, sums to 1). */
  popularity?(layer: number): Float64Array;
}

/**
 * Per-expert token counts for large batches (throughput family): statistically equivalent to
 * routing `tokens` tokens one by one, without paying per token.
 */
export interface AggregateRouter {
  /** Adds to `out[e]` the number of the `tokens` token-slots routed to expert e at `layer`; Σ out = tokens·topK. */
  counts(layer: number, tokens: number, out: Float64Array): void;
}

/**
 * Predicted experts for speculative prefetchers (a next-layer gate applied to the current
 * hidden state, a trained pre-gate, or predictions recorded in a trace).
 *
 * Call contract:
 * - `predict(requestId, layer, fromToken, toToken)` may be called for any admitted request,
 *   any MoE layer — typically one the tokens have **not** been routed through yet — and any
 *   token range already admitted (prompt chunk or decode token), in any order and any number
 *   of times. Calls never change what `RequestRouter.route` returns.
 * - It returns a ranked list of distinct expert ids, best first, covering all experts of the
 *   layer (so a prefetcher can go as deep as its budget allows). The caller may keep it but
 *   must not change it: equal calls may return the same array (shared across runs, see
 *   `workloads/prediction-memo.ts`).
 * - For one token, its first `topK` entries contain each of the token's true experts at
 *   `layer` with probability `accuracyByLayer[layer]` (independently per true expert). For a
 *   token range, experts are ranked by how many of the tokens' predicted top-k lists name them.
 * - The same arguments always give the same list (randomness is a function of the run seed,
 *   request, layer and token, not of call order).
 */
export interface ExpertPredictor {
  predict(requestId: number, layer: number, fromToken: number, toToken: number): readonly number[];
  /** The configured probability, per MoE layer, that a true expert is in the predicted top-k (when known). */
  readonly accuracyByLayer?: readonly number[];
  /** One line saying what this predictor is. */
  readonly describe?: string;
}

/**
 * The requests of a workload by position (0 … count−1, arrival order), for executors that
 * stream them: a spec is built when asked for, so a run holds only the requests in flight
 * rather than one object per request of the workload (at a million requests, their marking
 * by every major GC made run time grow faster than the request count).
 */
export interface RequestSource {
  readonly count: number;
  /** Request i's spec; `RequestTable` builds a fresh object per call. */
  spec(i: number): RequestSpec;
  arrivalNs(i: number): Ns;
  promptTokens(i: number): number;
  outputTokens(i: number): number;
}

/**
 * Requests in columns (typed arrays: 18 B per request, outside the garbage-collected heap) with
 * their task labels interned. `RequestSpec.id` is the position.
 */
export class RequestTable implements RequestSource {
  private readonly arrival: Float64Array;
  private readonly prompt: Int32Array;
  private readonly output: Int32Array;
  /** Task label index + 1 (0: no label). */
  private readonly task: Uint16Array;
  private readonly taskNames: string[] = [];
  private readonly taskIndex = new Map<string, number>();
  private n = 0;

  constructor(readonly capacity: number) {
    this.arrival = new Float64Array(capacity);
    this.prompt = new Int32Array(capacity);
    this.output = new Int32Array(capacity);
    this.task = new Uint16Array(capacity);
  }

  get count(): number {
    return this.n;
  }

  /** Appends request `count` (its id is its position). */
  push(arrivalNs: Ns, promptTokens: number, outputTokens: number, task?: string): void {
    const i = this.n;
    if (i >= this.capacity) throw new RangeError(`request table full (${this.capacity} requests)`);
    this.arrival[i] = arrivalNs;
    this.prompt[i] = promptTokens;
    this.output[i] = outputTokens;
    if (task !== undefined) {
      let t = this.taskIndex.get(task);
      if (t === undefined) {
        t = this.taskNames.length;
        if (t >= 65535) throw new RangeError('more than 65 535 distinct task labels');
        this.taskNames.push(task);
        this.taskIndex.set(task, t);
      }
      this.task[i] = t + 1;
    }
    this.n = i + 1;
  }

  spec(i: number): RequestSpec {
    if (!(i >= 0 && i < this.n)) throw new RangeError(`request ${i} outside 0…${this.n - 1}`);
    const t = this.task[i]!;
    const arrivalNs = this.arrival[i]! as Ns;
    const promptTokens = this.prompt[i]!;
    const outputTokens = this.output[i]!;
    // The shape `buildWorkload` always gave a spec: `task` only when there is one.
    return t === 0
      ? { id: i, arrivalNs, promptTokens, outputTokens }
      : { id: i, arrivalNs, promptTokens, outputTokens, task: this.taskNames[t - 1]! };
  }
  arrivalNs(i: number): Ns {
    return this.arrival[i]! as Ns;
  }
  promptTokens(i: number): number {
    return this.prompt[i]!;
  }
  outputTokens(i: number): number {
    return this.output[i]!;
  }

  /** Every spec, as an array (built on each call). */
  toArray(): RequestSpec[] {
    const out: RequestSpec[] = [];
    for (let i = 0; i < this.n; i++) out.push(this.spec(i));
    return out;
  }
}

/** A RequestSource over an array of specs (the same objects). */
export function arraySource(requests: readonly RequestSpec[]): RequestSource {
  return {
    count: requests.length,
    spec: (i) => requests[i]!,
    arrivalNs: (i) => requests[i]!.arrivalNs,
    promptTokens: (i) => requests[i]!.promptTokens,
    outputTokens: (i) => requests[i]!.outputTokens,
  };
}

/** A complete workload, ready to run. `requests` is sorted by arrival time. */
export interface Workload {
  /**
   * Every request. A workload built from a config (`buildWorkload`) builds this array on first
   * access (and keeps it); executors that stream read `source` instead and never build it.
   */
  readonly requests: readonly RequestSpec[];
  /** The same requests by position, without an object per request (see `RequestSource`). */
  readonly source?: RequestSource;
  readonly routing: RoutingSource;
  readonly aggregate?: AggregateRouter;
  readonly predictor?: ExpertPredictor;
  /** One line saying what this workload is (for tables and logs). */
  readonly describe: string;
}
