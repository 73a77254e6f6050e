/**
 * Plain state shared by the serving executor's parts: the counters every part adds to, a request
 * in flight, the iteration being run, and the context object (simulation, resources, policy
 * driver, the view hooks get) each part is built with. No behaviour lives here.
 */
import type { Simulation } from '../../kernel/simulation.ts';
import type { Ns } from '../../kernel/time.ts';
import type { TraceSink } from '../../observe/trace-sink.ts';
import type { CostModel } from '../../cost/types.ts';
import type { ResourceEvent, StorageEvent } from '../../resources/events.ts';
import type { Resources } from '../../resources/index.ts';
import type { Allocation } from '../../resources/memory-pool.ts';
import type { ModelProfile } from '../../../hardware-profiles/types.ts';
import type { RequestRouter, RequestSpec } from '../../workload.ts';
import type { PolicyDriver } from '../policy-driver.ts';
import type { ModelShapeView, RequestView, ServingView } from '../policy.ts';

export interface ServingConfig {
  readonly batching: 'static' | 'continuous';
  readonly maxBatchSize: number;
  /** Auto-batcher: the longest a request waits for its batch to fill. */
  readonly maxWaitNs: Ns;
  /** Cap on tokens per iteration when admitting prompts (one request is always admitted). */
  readonly maxBatchTokens: number;
  /**
   * Expert buffer capacity in slots, or 'auto': what fits in VRAM after dense weights,
   * activations and the KV reserve.
   */
  readonly bufferSlots: number | 'auto';
  readonly packetBytes: number;
  /** gpu-rich reference: every expert resident from the start, VRAM unbounded. */
  readonly preloadAllExperts: boolean;
  /**
   * Caching disabled (MoE-Infinity's prefetch-only experiments): every expert is released as
   * soon as it has computed, whatever the policy's `afterUse` says; prefetched experts stay
   * until they are used (or evicted / cancelled).
   */
  readonly releaseAfterUse?: boolean;
}

export type ServingEvent =
  | ResourceEvent
  | StorageEvent
  | { readonly kind: 'serving.arrival'; readonly index: number }
  | { readonly kind: 'serving.decide' }
  | { readonly kind: 'serving.batchTimer' };

/** Counters of the expert buffer and transfers. */
export interface ServingCounters {
  needs: number;
  cacheHits: number;
  prefetchHits: number;
  demandFetches: number;
  prefetchesIssued: number;
  prefetchesCompleted: number;
  prefetchesUsed: number;
  prefetchesCancelled: number;
  /** Bytes of completed prefetches never used (evicted, or unused at the end); cancelled ones are on the link. */
  prefetchWastedBytes: number;
  evictions: number;
  blockedNs: number;
  iterations: number;
  activationRatioSum: number;
  layerRoutings: number;
  /** Split experts: needs whose top segment was resident at routing but not the rest (MoEpic's β). */
  partialHits: number;
  /** Split experts: top segments loaded over the link (reshaping) and their bytes. */
  topLoads: number;
  topLoadBytes: number;
  /** Needs and hits of iterations without a prefill (decode-only hit rates, MoEpic Table 1). */
  decodeNeeds: number;
  decodeCacheHits: number;
  decodePrefetchHits: number;
}

export function newCounters(): ServingCounters {
  return {
    needs: 0,
    cacheHits: 0,
    prefetchHits: 0,
    demandFetches: 0,
    prefetchesIssued: 0,
    prefetchesCompleted: 0,
    prefetchesUsed: 0,
    prefetchesCancelled: 0,
    prefetchWastedBytes: 0,
    evictions: 0,
    blockedNs: 0,
    iterations: 0,
    activationRatioSum: 0,
    layerRoutings: 0,
    partialHits: 0,
    topLoads: 0,
    topLoadBytes: 0,
    decodeNeeds: 0,
    decodeCacheHits: 0,
    decodePrefetchHits: 0,
  };
}

/** A request from its arrival to its end (the executor keeps none before or after). */
export interface RequestState {
  /** Position in the workload (and in the outcome arrays). */
  readonly index: number;
  readonly spec: RequestSpec;
  router: RequestRouter | null;
  processed: number;
  emitted: number;
  kv: Allocation | null;
}

export interface IterationState {
  readonly index: number;
  readonly batch: RequestState[];
  readonly tokens: number[];
  readonly totalTokens: number;
  /** Encoder-decoder models: encoder tokens per request (its prompt in its prefill iteration, else 0) and their sum. */
  readonly encTokens: number[];
  readonly encTotal: number;
  /** Tokens per request and their sum at the current layer (encoder or decoder side). */
  layerTokens: number[];
  layerTotal: number;
  /** The first MoE layer this iteration routes. */
  readonly firstMoeLayer: number;
  /** Encoder-decoder: source tokens every decoder token attends to (Σ prompts of the batch). */
  readonly crossContext: number;
  readonly views: RequestView[];
  activations: Allocation | null;
  layer: number;
  moeLayer: number;
  /** Pieces of the current layer's experts not yet computed (ready, loading or waiting for a slot). */
  remaining: number;
  tokensPerExpert: Int32Array;
  computing: boolean;
  /** The piece whose kernel is running (when `computing` for an expert), for its completion. */
  computingKey: number;
  blockedSinceNs: number;
  /** Activated experts of the current MoE layer. */
  activatedCount: number;
  /** No request of the batch is in prefill. */
  readonly decodeOnly: boolean;
}

/** What every part is built with: the run's simulation, resources, policy and shared counters. */
export interface ServingContext {
  readonly sim: Simulation<ServingEvent>;
  readonly res: Resources;
  readonly model: ModelProfile;
  /** Experts per MoE layer. */
  readonly E: number;
  readonly cfg: ServingConfig;
  readonly cost: CostModel;
  readonly sink: TraceSink | undefined;
  readonly driver: PolicyDriver;
  readonly counters: ServingCounters;
  /** Static facts given to `init` and `initialTops`. */
  readonly shape: ModelShapeView;
  /** The view every hook gets (set once the coordinator has built it). */
  view: ServingView;
  /** The iteration being run, or null between iterations. */
  iter: IterationState | null;
  /** Every request has finished: prefetches are pointless (and could keep the link busy forever). */
  workloadDone(): boolean;
}
