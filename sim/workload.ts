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
}

/** A source of routing for requests of one model. */
export interface RoutingSource {
  readonly moeLayers: number;
  readonly experts: number;
  readonly topK: number;
  /** The router of a request; called once per request, when it is admitted. */
  forRequest(request: RequestSpec): RequestRouter;
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
 * Predicted experts for speculative prefetchers: a ranked list (best first) of experts
 * predicted for `layer` for the given tokens. Accuracy follows the predictor's profile.
 */
export interface ExpertPredictor {
  predict(requestId: number, layer: number, fromToken: number, toToken: number): readonly number[];
}

/** A complete workload, ready to run. `requests` is sorted by arrival time. */
export interface Workload {
  readonly requests: readonly RequestSpec[];
  readonly routing: RoutingSource;
  readonly aggregate?: AggregateRouter;
  readonly predictor?: ExpertPredictor;
  /** One line saying what this workload is (for tables and logs). */
  readonly describe: string;
}
