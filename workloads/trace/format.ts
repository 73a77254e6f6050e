/**
 * The moesim routing-trace format, version 1: gzip-compressed JSON Lines.
 *
 * Line 1 is a header naming the format, its version and the model; every further line is one
 * request. The full specification, with an example, is in `traces/README.md`.
 *
 * ```jsonc
 * {"format":"moesim-trace","version":1,"model":{"id":"mixtral-8x7b","moeLayers":32,"experts":8,"topK":2},"source":"…"}
 * {"id":"r0","promptTokens":3,"task":"gsm8k","arrivalS":0.25,"tokens":[[[5,2],[4,3],…32 layers],…]}
 * ```
 *
 * A request line's `tokens[t][l]` holds the top-k expert ids (distinct, `0 … experts-1`) of
 * token t at MoE layer l, or `null` when that entry was not recorded. Tokens come in sequence
 * order: `tokens[0 … promptTokens-1]` are the prompt (prefill) and the rest are decode inputs,
 * unless `prefillRecorded` is false, in which case every listed token is a decode input.
 *
 * The in-memory form (`TraceRequest`) packs the routing into one `Int32Array`, token-major
 * then layer then slot, with -1 for a missing entry.
 */
import { z } from 'zod';

export const TRACE_FORMAT = 'moesim-trace';
/** The newest format version this code reads and the one it writes. */
export const TRACE_VERSION = 1;

/** Marks a (token, layer) entry that was not recorded. */
export const MISSING = -1;

export const TraceModelSchema = z
  .object({
    /** Model id as in `hardware-profiles/` (e.g. `mixtral-8x7b`), when known. */
    id: z.string().min(1).optional(),
    /** Free-text name of the model and how it was run. */
    name: z.string().optional(),
    moeLayers: z.number().int().positive(),
    experts: z.number().int().positive().max(65535),
    topK: z.number().int().positive(),
    /** Always-on shared experts; never listed in `tokens`. */
    sharedExperts: z.number().int().nonnegative().optional(),
    /** Model layer index of each MoE layer of the trace (length = moeLayers). */
    moeLayerIds: z.array(z.number().int().nonnegative()).optional(),
  })
  .strict()
  .refine((m) => m.topK <= m.experts, { message: 'topK must not exceed experts', path: ['topK'] })
  .refine((m) => m.moeLayerIds === undefined || m.moeLayerIds.length === m.moeLayers, {
    message: 'moeLayerIds must list one id per MoE layer',
    path: ['moeLayerIds'],
  });
export type TraceModel = z.infer<typeof TraceModelSchema>;

export const TraceHeaderSchema = z
  .object({
    format: z.literal(TRACE_FORMAT),
    version: z.number().int().positive(),
    model: TraceModelSchema,
    /** Where the routing came from (repository, commit, generator and profile ...). */
    source: z.string().optional(),
    /** License of the routing data. */
    license: z.string().optional(),
    description: z.string().optional(),
    /** Number of request lines, when the writer knew it up front (informational). */
    requests: z.number().int().nonnegative().optional(),
  })
  .strict();
export type TraceHeader = z.infer<typeof TraceHeaderSchema>;

/**
 * A request line without its per-token arrays (those are validated by hand, with exact
 * positions in the error, and packed into typed arrays).
 */
export const TraceRequestEnvelopeSchema = z
  .object({
    id: z.string().min(1),
    /** Prompt length in tokens. 0 only if the prompt was not recorded and its length is unknown. */
    promptTokens: z.number().int().nonnegative(),
    /** False: the prompt ran but was not recorded, so `tokens` holds decode inputs only. Default true. */
    prefillRecorded: z.boolean().optional(),
    /** Tokens generated; default = decode tokens listed + 1 (the first comes from the prefill pass). */
    outputTokens: z.number().int().positive().optional(),
    task: z.string().min(1).optional(),
    /** Arrival time in seconds from the start of the trace. */
    arrivalS: z.number().nonnegative().optional(),
    tokens: z.array(z.unknown()),
    /** Router weights, same shape as `tokens` (null where tokens is null). */
    scores: z.array(z.unknown()).optional(),
    /** Predicted experts per (token, layer): a ranked list of ids, best first, any length ≥ 1, or null. */
    predictions: z.array(z.unknown()).optional(),
  })
  .strict();

/** Ranked predictions of one request, packed: the list of (token t, layer l) is `ids[offsets[t*L+l] … offsets[t*L+l+1])`. */
export interface PackedPredictions {
  readonly offsets: Int32Array;
  readonly ids: Int32Array;
}

/** One request of a trace, in memory. */
export interface TraceRequest {
  readonly id: string;
  /** 1-based line number in the file (0 for generated requests). */
  readonly line: number;
  /** Prompt length (0 = not recorded and unknown). */
  readonly promptTokens: number;
  readonly prefillRecorded: boolean;
  /** Number of tokens listed (`tokens.length` in the file). */
  readonly tokens: number;
  readonly outputTokens: number;
  readonly task?: string;
  readonly arrivalS?: number;
  /** tokens × layers × topK expert ids, token-major; MISSING (-1) where not recorded. */
  readonly experts: Int32Array;
  /** Same layout as `experts`; NaN where not recorded. */
  readonly scores?: Float32Array;
  readonly predictions?: PackedPredictions;
}

/** Listed tokens of a request that are prompt (prefill) tokens. */
export const recordedPromptTokens = (r: TraceRequest): number =>
  r.prefillRecorded ? Math.min(r.promptTokens, r.tokens) : 0;

/** Listed tokens of a request that are decode inputs. */
export const recordedDecodeTokens = (r: TraceRequest): number => r.tokens - recordedPromptTokens(r);

/** What a reader found at the top of a file. */
export interface TraceInfo {
  readonly header: TraceHeader;
  /** `moesim-trace` for native files; `shared-real` for the converted real traces of `../shared/traces/real`. */
  readonly dialect: 'moesim-trace' | 'shared-real';
}

/** Model ids of `hardware-profiles/` for model names found in foreign traces. */
export function guessModelId(name: string | undefined): string | undefined {
  if (!name) return undefined;
  const n = name.toLowerCase();
  if (n.includes('mixtral-8x7b')) return 'mixtral-8x7b';
  if (n.includes('mixtral-8x22b')) return 'mixtral-8x22b';
  if (n.includes('deepseek-v2-lite')) return 'deepseek-v2-lite';
  if (n.includes('olmoe')) return 'olmoe';
  if (n.includes('qwen1.5-moe')) return 'qwen1.5-moe-a2.7b';
  if (n.includes('arctic')) return 'snowflake-arctic';
  return undefined;
}
