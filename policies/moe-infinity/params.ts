/**
 * MoE-Infinity's policy parameters (DESIGN §8): the schema the experiment configs and the CLI
 * validate against, with each switch of the paper's ablation and its defaults. The policy is
 * `policy.ts`.
 */
import { z } from 'zod';

export const MoeInfinityParams = z
  .object({
    /** EAM tracing + EAMC matching drives prefetching; off: fixed-size dependency prefetch of the next layer. */
    requestTracing: z.boolean().default(true),
    /** Without request tracing: experts of layer l+1 prefetched, in expert order (default: all). */
    fixedPrefetchExperts: z.number().int().positive().optional(),
    /** EAMs stored per phase (prefill, decode). */
    eamcCapacity: z.number().int().positive().default(1000),
    /**
     * Held-out requests whose EAMs are loaded into the EAMC before the run (0: it starts empty and
     * learns online). They are fresh draws of the same workload: the run's request specs (task,
     * prompt and output lengths) cycled, under new request ids, so their routing is new.
     */
    eamcWarmup: z.number().int().nonnegative().default(0),
    /** Full EAMC: replace the most similar stored EAM (paper) or the least matched one (released code). */
    eamcReplacement: z.enum(['most-similar', 'lfu-access']).default('most-similar'),
    /** Best EAMC matches aggregated into activation probabilities. */
    topMatches: z.number().int().positive().max(1024).default(8),
    /** Match each phase's iteration EAM (the batch's rows of that phase, default) or each request on its own. */
    batchMatching: z.enum(['per-batch', 'per-request']).default('per-batch'),
    /** Prefetch several future layers at once (default) or only layer l+1. */
    multiLayerPrefetch: z.boolean().default(true),
    /** With multiLayerPrefetch: how many future layers (default: all remaining). */
    prefetchLayers: z.number().int().positive().optional(),
    /** Scale future layer i by 1 − (i − l)/L. */
    layerProximity: z.boolean().default(true),
    /** Queue order of the ranked set: nearest layer first (then score), or by score. */
    queueOrder: z.enum(['nearest-first', 'score']).default('nearest-first'),
    /** A loading prefetch that becomes needed jumps the queue (priority 0). */
    queueJump: z.boolean().default(true),
    /** Request-EAM cache priorities (default) or LRU. */
    cachePriorities: z.boolean().default(true),
    /** First-layer boost b: cache priority × (1 + b·(1 − layer/L)). 0 disables. */
    initialLayerBoost: z.number().nonnegative().default(1),
    /** Max slots the ranked set may fill (default and cap: buffer slots − experts the current layer needs). */
    prefetchBudget: z.number().int().nonnegative().optional(),
    /**
     * When the buffer is full, a ranked expert is prefetched only if it would evict a cached
     * expert of lower priority than its expected activation frequency (`priority`, default),
     * or always, evicting the lowest-priority cached expert (`always`: prefetched experts
     * outrank every cached one). Without request tracing (no probabilities): always.
     */
    prefetchAdmission: z.enum(['priority', 'always']).default('priority'),
    /** V_e, MoEpic's unified budget (§4.1): the buffer (cache + prefetches) is V_e + top-k slots (U_b = K). */
    budgetExperts: z.number().int().nonnegative().optional(),
  })
  .strict();
export type MoeInfinityParams = z.infer<typeof MoeInfinityParams>;
