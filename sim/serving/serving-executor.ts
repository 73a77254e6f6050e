/**
 * The layer-wise serving executor (DESIGN §7): the latency family (MoE-Infinity, MoEpic,
 * Mixtral-Offloading, Pre-gated, AdapMoE, BrainStorm-style tracing, DeepSpeed-style prefetch).
 *
 * Requests arrive; a batcher forms iterations — `static` (the auto-batcher: wait for
 * `maxBatchSize` requests or `maxWait`, then run that batch to completion) or `continuous`
 * (admit waiting requests at every iteration boundary). Each iteration walks the model's
 * layers on one GPU stream: attention → (MoE layer) router → every activated expert, or
 * (dense layer) the dense FFN; then the LM head emits one token per request. KV cache stays
 * on the GPU (reserved per request at admission for prompt + output tokens).
 *
 * Experts: an activated expert must be resident in the expert buffer before it computes.
 * Resident ones compute first (in expert order); a missing one is fetched on demand at the
 * top priority of the H2D link (a loading prefetch it needs is re-prioritised: it jumps the
 * queue), and the GPU is *blocked* while it has nothing else to compute. Prefetches decided
 * by the policy overlap compute on the H2D link. Buffer hits are counted at routing time
 * (DESIGN §7).
 *
 * Encoder-decoder models (Switch, NLLB): the encoder runs once per request, in its prefill
 * iteration, over the prompt (bidirectional self-attention); every iteration then walks the
 * decoder layers with one token per request (self-attention over the tokens generated so far,
 * cross-attention over the prompt's encoder states). An iteration without a prefill skips the
 * encoder entirely.
 *
 * Runtime (`ServingInput.runtime`, DESIGN §5): the cost model prices each kernel under it; the
 * executor follows its expert loop. `expertOrder: index` runs a layer's experts in index order, as
 * a Python loop over the experts does (a missing expert blocks the ones after it, even resident
 * ones); `ready-first` runs resident experts first. `expertLoop: all` also pays, in the same
 * order, the loop iterations over experts no token chose (`idleExperts` kernels).
 *
 * Simplifications: prefill is not chunked (a prompt is processed in one iteration); KV is
 * reserved for the full output at admission (no preemption: admission waits instead);
 * activations are one allocation per iteration sized from its token count; the LM head and
 * embedding are one kernel per iteration.
 */
import { PolicyError, SimError, UserError } from '../kernel/errors.ts';
import { EventPriority, Simulation } from '../kernel/simulation.ts';
import type { Ns } from '../kernel/time.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import type { CostModel } from '../cost/types.ts';
import type { ResourceEvent } from '../resources/events.ts';
import type { KernelPart } from '../resources/gpu.ts';
import { createResources, resourceHandlers, type Resources } from '../resources/index.ts';
import type { Allocation } from '../resources/memory-pool.ts';
import type { Transfer } from '../resources/pcie-link.ts';
import type { HardwareProfile, ModelProfile, RuntimeProfile } from '../../hardware-profiles/types.ts';
import { arraySource, type RequestRouter, type RequestSource, type RequestSpec, type Workload } from '../workload.ts';
import { ExpertBuffer, TopSegmentCache, type BufferEntry } from './expert-buffer.ts';
import type {
  EvictionQuery,
  ExpertKey,
  KeepTop,
  LayerRouting,
  ModelShapeView,
  PolicyDecision,
  RequestView,
  ServingPolicy,
  ServingView,
} from './policy.ts';

export interface ServingConfig {
  readonly batching: 'static' | 'continuous';
  readonly maxBatchSize: number;
  /** Auto-batcher: the longest a request waits for its batch to fill. */
  readonly maxWaitNs: Ns;
  /** Cap on tokens per iteration when admitting prompts (one request is always admitted). */
  readonly maxBatchTokens: number;
  /** Expert buffer capacity in slots, or 'auto': what fits in VRAM after dense weights, activations and the KV reserve. */
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
  | { readonly kind: 'serving.arrival'; readonly index: number }
  | { readonly kind: 'serving.decide' }
  | { readonly kind: 'serving.batchTimer' };

export interface ServingInput {
  readonly model: ModelProfile;
  readonly hardware: HardwareProfile;
  readonly cost: CostModel;
  readonly workload: Workload;
  readonly policy: ServingPolicy;
  readonly config: ServingConfig;
  readonly sink?: TraceSink;
  /** The software stack (expert loop order and idle iterations); default: fused (ready-first, active experts only). */
  readonly runtime?: RuntimeProfile;
  /** Safety net against runaway runs. */
  readonly maxEvents?: number;
}

/** One request's outcome (simulated ns). */
export interface RequestOutcome {
  readonly id: number;
  readonly arrivalNs: number;
  readonly admitNs: number;
  readonly firstTokenNs: number;
  readonly finishNs: number;
  readonly promptTokens: number;
  readonly outputTokens: number;
  readonly emittedTokens: number;
}

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

export interface ServingOutcome {
  readonly requests: readonly RequestOutcome[];
  readonly counters: Readonly<ServingCounters>;
  readonly resources: Resources;
  readonly endNs: Ns;
  readonly events: number;
  readonly slots: number;
  /** The policy's own report (`ServingPolicy.report`), when it has one. */
  readonly policyReport?: Record<string, unknown>;
}

/** A request from its arrival to its end (the executor keeps none before or after: see `outcome`). */
interface RequestState {
  /** Position in the workload (and in the outcome arrays). */
  readonly index: number;
  readonly spec: RequestSpec;
  router: RequestRouter | null;
  processed: number;
  emitted: number;
  kv: Allocation | null;
}

interface IterationState {
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
  /** Index-order expert loop: position in `order`, and whether the idle iterations before it were paid. */
  order: number[];
  orderPos: number;
  gapPaid: boolean;
  trailingPaid: boolean;
  readyMask: Uint8Array;
  readonly views: RequestView[];
  activations: Allocation | null;
  layer: number;
  moeLayer: number;
  /** Needed experts of the current MoE layer, resident and pinned, waiting for the GPU. */
  ready: ExpertKey[];
  /** Needed experts of the current layer not yet computed (ready, loading or waiting for a slot). */
  remaining: number;
  tokensPerExpert: Int32Array;
  computing: boolean;
  /** The expert whose kernel is running (when `computing` for an expert), for its completion. */
  computingKey: ExpertKey;
  blockedSinceNs: number;
  /** Activated experts of the current MoE layer (split experts / ready-first idle iterations). */
  activatedCount: number;
  /** No request of the batch is in prefill. */
  readonly decodeOnly: boolean;
}

/** Kernels whose duration depends on their token count only. */
type TokenOp = 'expert' | 'sharedExperts' | 'denseFfn' | 'router' | 'lmHead';

const DEMAND_PRIORITY = 0;

/** Bytes of activations an iteration of `tokens` tokens holds (input, output, FFN intermediate, BF16). */
export function activationBytes(model: ModelProfile, tokens: number): number {
  const inter = Math.max(model.expertIntermediateSize, model.denseIntermediateSize, model.sharedIntermediateSize);
  return tokens * (4 * model.hiddenSize + 2 * inter) * 2;
}

export class ServingExecutor {
  private readonly sim = new Simulation<ServingEvent>();
  private readonly res: Resources;
  private readonly buffer: ExpertBuffer;
  private readonly m: ModelProfile;
  private readonly cfg: ServingConfig;
  private readonly cost: CostModel;
  private readonly policy: ServingPolicy;
  private readonly workload: Workload;
  private readonly sink: TraceSink | undefined;
  private readonly E: number;
  private readonly moeIndexOfLayer: Int32Array;
  private readonly src: RequestSource;
  /**
   * Per-request outcomes by workload position, in typed arrays (about 30 B a request): a state
   * object lives only from arrival to finish, so a run of a million requests keeps no million
   * objects alive while it runs. `ServingOutcome.requests` is built from these at the end.
   */
  private readonly outcome: { admitNs: Float64Array; firstTokenNs: Float64Array; finishNs: Float64Array; emitted: Int32Array };
  private readonly waiting: RequestState[] = [];
  private active: RequestState[] = [];
  private iter: IterationState | null = null;
  private iterations = 0;
  private finishedRequests = 0;
  private decidePending = false;
  private timerAtNs = -1;
  private readonly waitingForSlot: ExpertKey[] = [];
  /** Encoder layers (0 for decoder-only models): layers below this index form the encoder. */
  private readonly encoderLayers: number;
  private readonly firstDecoderMoeLayer: number;
  private readonly indexOrder: boolean;
  private readonly loopAll: boolean;
  /** Split experts (policy `segmentCacheBytes`): the top-segment cache; null otherwise. */
  private readonly tops: TopSegmentCache | null;
  private readonly segCapBytes: number;
  /** moeLayers × experts: a piece id ≥ span is the top segment of expert (id − span). */
  private readonly span: number;
  /** Pieces (top, whole/bottom) of each expert of the current layer still to compute (split experts). */
  private piecesLeft = new Int8Array(0);
  /** A ready-first policy (`computeOrder`) on a runtime that loops over every expert pays the idle iterations once per layer. */
  private readonly payIdleReadyFirst: boolean;
  private readonly segmentLabels: string[] = [];
  /**
   * Kernel durations, memoised by numeric keys (no key string per kernel): by token count per
   * kind in an array indexed by the count (−1: not yet computed; counts are small integers,
   * at most a batch's tokens) (attention: see `attentionNs`).
   */
  private readonly tokenOpCost: Record<TokenOp, number[]> = {
    expert: [],
    sharedExperts: [],
    denseFfn: [],
    router: [],
    lmHead: [],
  };
  /** The last attention duration asked for (a decode iteration asks the same for every layer). */
  private lastAttnTokens = -1;
  private lastAttnContext = -1;
  private lastAttnNs = 0 as Ns;
  /** Kernel and transfer labels, built once per layer / expert rather than per submission. */
  private readonly layerLabels: { readonly attention: string; readonly cross: string; readonly dense: string; readonly router: string; readonly shared: string }[];
  private readonly expertLabels: string[] = [];
  /**
   * Expert key of each fetch in flight, by H2D transfer id. With it one stored `onDone` serves
   * every fetch: a closure per transfer costs an allocation plus (under tsx, which keeps
   * function names) a `defineProperty` for its name.
   */
  /** Expert transfers carry their key (top segments: key + span) as their tag. */
  private readonly onFetchDone = (t: Transfer): void => this.onExpertArrived(t.tag);
  private scratch = new Int32Array(1024);
  private readonly absentScratch: ExpertKey[] = [];
  private readonly activatedScratch: number[] = [];
  private readonly routing: { -readonly [K in keyof LayerRouting]: LayerRouting[K] } & { perRequest: Int32Array[] } = {
    layer: -1,
    tokensPerExpert: new Int32Array(0),
    perRequest: [],
    activated: [],
  };
  /** Eviction candidates of the current `acquireSlot` (EvictionQuery.candidates: valid during the call). */
  private readonly candidateScratch: ExpertKey[] = [];
  private readonly chainParts: KernelPart[] = [];
  /** The chain's part objects, by position, reused (the GPU reads them until the chain completes, and the next chain starts after). */
  private readonly partPool: { durationNs: Ns; label: string; category: string }[] = [];
  private perRequestCounts: Int32Array[] = [];
  private readonly activationReserveBytes: number;
  readonly slots: number;
  private readonly view: ServingView;
  private readonly shape: ModelShapeView;
  readonly counters: ServingCounters = {
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

  constructor(private readonly input: ServingInput) {
    const { model, hardware, config, workload } = input;
    this.m = model;
    this.cfg = config;
    this.cost = input.cost;
    this.policy = input.policy;
    this.workload = workload;
    this.sink = input.sink;
    this.E = model.experts;
    // Loaded profiles carry the decoder depth in `details`; a hand-built encoder-decoder profile without it splits evenly.
    const decoderLayers = (model as { details?: { decoderLayers?: number } }).details?.decoderLayers ?? Math.ceil(model.layers / 2);
    this.encoderLayers = model.arch === 'encoder-decoder' ? Math.max(0, model.layers - decoderLayers) : 0;
    this.firstDecoderMoeLayer = Math.max(0, model.moeLayerIndices.findIndex((li) => li >= this.encoderLayers));
    this.segCapBytes = input.policy.segmentCacheBytes ?? 0;
    const split = input.policy.segmentCacheBytes !== undefined;
    const readyFirst = split || input.policy.computeOrder === 'ready-first';
    this.indexOrder = input.runtime?.expertOrder === 'index' && !readyFirst;
    this.loopAll = input.runtime?.expertLoop === 'all';
    this.payIdleReadyFirst = this.loopAll && readyFirst;
    this.span = model.moeLayers * model.experts;
    const r = workload.routing;
    if (r.moeLayers !== model.moeLayers || r.experts !== model.experts || r.topK !== model.topK) {
      throw new UserError(
        `routing shape ${r.moeLayers} layers × ${r.experts} experts top-${r.topK} does not match model ${model.id} (${model.moeLayers} × ${model.experts} top-${model.topK})`,
        undefined,
        'workload.routing',
      );
    }
    this.moeIndexOfLayer = new Int32Array(model.layers).fill(-1);
    model.moeLayerIndices.forEach((li, mi) => (this.moeIndexOfLayer[li] = mi));
    this.layerLabels = Array.from({ length: model.layers }, (_, layer) => ({
      attention: `L${layer} attention`,
      cross: `L${layer} cross-attention`,
      dense: `L${layer} dense ffn`,
      router: `L${layer} router`,
      shared: this.moeIndexOfLayer[layer]! >= 0 ? `M${this.moeIndexOfLayer[layer]} shared experts` : '',
    }));

    const d = model.derived;
    // Requests are streamed from the workload's source (a spec object exists only while its
    // request is in flight); a workload given as an array alone is read through it.
    const src = workload.source ?? arraySource(workload.requests);
    this.src = src;
    let maxPrompt = 1;
    let maxKv = 0;
    for (let i = 0; i < src.count; i++) {
      const p = src.promptTokens(i);
      maxPrompt = Math.max(maxPrompt, p);
      maxKv = Math.max(maxKv, (p + src.outputTokens(i)) * d.kvBytesPerToken);
    }
    const iterTokenCap = Math.max(config.maxBatchTokens, maxPrompt) + config.maxBatchSize;
    this.activationReserveBytes = activationBytes(model, iterTokenCap);
    const allExperts = model.moeLayers * this.E;

    let vramBytes = hardware.gpu.vramBytes;
    let slots: number;
    if (config.preloadAllExperts) {
      slots = allExperts;
      vramBytes = d.nonExpertBytes + allExperts * d.bytesPerExpert + this.activationReserveBytes + config.maxBatchSize * maxKv;
    } else if (config.bufferSlots === 'auto') {
      const kvReserve = config.maxBatchSize * maxKv;
      slots = Math.min(allExperts, Math.floor((vramBytes - d.nonExpertBytes - this.activationReserveBytes - kvReserve - this.segCapBytes) / d.bytesPerExpert));
      if (!(slots >= 1)) {
        throw new UserError(
          `${model.id} does not fit ${hardware.id}: ${vramBytes} B of VRAM cannot hold dense weights (${d.nonExpertBytes} B), activations (${this.activationReserveBytes} B), KV for ${config.maxBatchSize} requests (${kvReserve} B) and one expert (${d.bytesPerExpert} B)`,
          undefined,
          'executor.bufferSlots',
          'auto',
        );
      }
    } else {
      slots = config.bufferSlots;
      const need = d.nonExpertBytes + slots * d.bytesPerExpert + this.segCapBytes + this.activationReserveBytes + maxKv;
      if (need > vramBytes) {
        throw new UserError(
          `${slots} expert slots${this.segCapBytes > 0 ? ` and a ${this.segCapBytes} B segment cache` : ''} do not fit ${hardware.id}: dense ${d.nonExpertBytes} B + experts ${slots * d.bytesPerExpert} B + activations ${this.activationReserveBytes} B + one request's KV ${maxKv} B = ${need} B > VRAM ${vramBytes} B`,
          undefined,
          'executor.bufferSlots',
          slots,
        );
      }
    }
    this.slots = slots;
    const hostNeed = d.totalBytes;
    if (hostNeed > hardware.hostDramBytes) {
      throw new UserError(
        `${model.id} (${hostNeed} B) does not fit the host DRAM of ${hardware.id} (${hardware.hostDramBytes} B)`,
        undefined,
        'hardware',
        hardware.id,
      );
    }

    this.res = createResources(hardware, this.sim, this.sink, {
      streamNames: ['gpu.compute'],
      packetBytes: config.packetBytes,
      vramBytes,
    });
    this.res.host.allocate(d.allExpertBytes, 'expertWeights', 'all experts (host copy)');
    this.res.host.allocate(d.nonExpertBytes, 'denseWeights', 'dense weights (host copy)');
    this.res.vram.allocate(d.nonExpertBytes, 'denseWeights', 'dense weights');
    this.buffer = new ExpertBuffer(slots, d.bytesPerExpert, this.res.vram, this.sim, this.sink, { experts: this.E, moeLayers: model.moeLayers });
    this.tops = split ? new TopSegmentCache(this.segCapBytes, d.bytesPerExpert, this.span, this.res.vram, this.sim, this.sink) : null;
    if (split) {
      this.buffer.segmentKeySpan = this.span;
      this.piecesLeft = new Int8Array(this.E);
    }

    const n = src.count;
    this.outcome = {
      admitNs: new Float64Array(n).fill(-1),
      firstTokenNs: new Float64Array(n).fill(-1),
      finishNs: new Float64Array(n).fill(-1),
      emitted: new Int32Array(n),
    };

    this.shape = { moeLayers: model.moeLayers, experts: this.E, topK: model.topK, bytesPerExpert: d.bytesPerExpert, slots };
    const self = this;
    const E = this.E;
    this.view = {
      ...this.shape,
      get nowNs() {
        return self.sim.now;
      },
      buffer: this.buffer,
      get batch() {
        return self.iter ? self.iter.views : [];
      },
      get iteration() {
        return self.iter ? self.iter.index : self.iterations;
      },
      get layer() {
        return self.iter ? self.iter.moeLayer : -1;
      },
      get firstLayer() {
        return self.iter ? self.iter.firstMoeLayer : 0;
      },
      keyOf: (layer: number, expert: number) => layer * E + expert,
      layerOf: (key: number) => Math.floor(key / E),
      expertOf: (key: number) => key % E,
      predict: (layer: number) => self.predict(layer),
      segments: this.tops ?? undefined,
      estimateNs: (op) => self.cost.estimate(op).ns,
    };

    this.sim.setHandlers({
      ...resourceHandlers(this.res),
      'serving.arrival': (e) => this.onArrival(e.index),
      'serving.decide': () => {
        this.decidePending = false;
        this.maybeStartIteration();
      },
      'serving.batchTimer': () => {
        this.timerAtNs = -1;
        this.maybeStartIteration();
      },
    });
  }

  get simulation(): Simulation<ServingEvent> {
    return this.sim;
  }

  get resources(): Resources {
    return this.res;
  }

  /** Runs the workload to completion. Throws SimError if requests remain unfinished (a deadlock). */
  run(): ServingOutcome {
    this.callPolicy('init', () => this.policy.init?.(this.shape));
    if (this.cfg.preloadAllExperts) {
      for (let k = 0; k < this.m.moeLayers * this.E; k++) this.buffer.occupy(k, 'cache', true);
    }
    if (this.tops && this.policy.initialTops) {
      const initial = this.callPolicy('initialTops', () => this.policy.initialTops!(this.shape));
      for (const t of initial) {
        if (!this.validKey(t.key, 'initialTops')) continue;
        if (this.tops.entry(t.key)) throw new PolicyError(`initial top of ${t.key} given twice`, this.sim.now, this.policy.name, 'initialTops');
        if (this.tops.topBytes(t.fraction) > this.tops.freeBytes) {
          throw new PolicyError(`initial tops exceed the segment cache (${this.segCapBytes} B)`, this.sim.now, this.policy.name, 'initialTops');
        }
        if (this.tops.topBytes(t.fraction) > 0) this.tops.add(t.key, t.fraction, true);
      }
    }
    if (this.src.count > 0) {
      this.sim.schedule(this.src.arrivalNs(0), { kind: 'serving.arrival', index: 0 }, EventPriority.arrival);
    }
    const result = this.sim.run({ maxEvents: this.input.maxEvents });
    if (result.stoppedBy === 'maxEvents') {
      throw new SimError(`stopped after ${result.events} events (maxEvents)`, this.sim.now, 'serving executor');
    }
    const out = this.outcome;
    if (this.finishedRequests < this.src.count) {
      const first = out.finishNs.findIndex((f) => f < 0);
      throw new SimError(
        `${this.src.count - this.finishedRequests} request(s) never finished (first: ${this.src.spec(first).id}); the executor is stuck`,
        this.sim.now,
        'serving executor',
      );
    }
    // Prefetched experts never used by the end of the run were wasted.
    for (const e of this.buffer.entries()) if (e.prefetchUnused) this.counters.prefetchWastedBytes += e.bytes;
    this.counters.iterations = this.iterations;
    const policyReport = this.policy.report ? this.callPolicy('report', () => this.policy.report!()) : undefined;
    this.sink?.onEnd?.(this.sim.now);
    const requests: RequestOutcome[] = [];
    for (let i = 0; i < this.src.count; i++) {
      const spec = this.src.spec(i);
      requests.push({
        id: spec.id,
        arrivalNs: spec.arrivalNs,
        admitNs: out.admitNs[i]!,
        firstTokenNs: out.firstTokenNs[i]!,
        finishNs: out.finishNs[i]!,
        promptTokens: spec.promptTokens,
        outputTokens: spec.outputTokens,
        emittedTokens: out.emitted[i]!,
      });
    }
    return {
      requests,
      counters: this.counters,
      resources: this.res,
      endNs: this.sim.now,
      events: this.sim.eventsProcessed,
      slots: this.slots,
      ...(policyReport ? { policyReport } : {}),
    };
  }

  // ---------------------------------------------------------------- arrivals and batching

  private onArrival(index: number): void {
    const s: RequestState = { index, spec: this.src.spec(index), router: null, processed: 0, emitted: 0, kv: null };
    this.waiting.push(s);
    this.sink?.onRequest?.(s.spec.id, 'arrive', this.sim.now);
    if (index + 1 < this.src.count) this.sim.schedule(this.src.arrivalNs(index + 1), { kind: 'serving.arrival', index: index + 1 }, EventPriority.arrival);
    if (!this.iter && !this.decidePending) {
      // Decide after every arrival of this instant has been processed.
      this.decidePending = true;
      this.sim.schedule(this.sim.now, { kind: 'serving.decide' }, EventPriority.decision);
    }
  }

  private kvBytes(s: RequestState): number {
    return (s.spec.promptTokens + s.spec.outputTokens) * this.m.derived.kvBytesPerToken;
  }

  /** Admits the head of the queue if its KV fits without eating the expert buffer's free slots or the activation reserve. */
  private tryAdmit(s: RequestState): boolean {
    const kv = this.kvBytes(s);
    let reserved = this.buffer.free * this.m.derived.bytesPerExpert + this.activationReserveBytes;
    if (this.tops) reserved += this.tops.freeBytes;
    if (this.res.vram.freeBytes - reserved < kv) return false;
    s.kv = this.res.vram.allocate(kv, 'kvCache', `kv r${s.spec.id}`);
    this.outcome.admitNs[s.index] = this.sim.now;
    s.router = this.workload.routing.forRequest(s.spec);
    this.sink?.onRequest?.(s.spec.id, 'admit', this.sim.now);
    return true;
  }

  private admitFromQueue(): void {
    let tokens = 0;
    for (const a of this.active) tokens += a.processed === 0 ? a.spec.promptTokens : 1;
    while (this.waiting.length > 0 && this.active.length < this.cfg.maxBatchSize) {
      const s = this.waiting[0]!;
      if (this.active.length > 0 && tokens + s.spec.promptTokens > this.cfg.maxBatchTokens) break;
      if (!this.tryAdmit(s)) break;
      this.waiting.shift();
      this.active.push(s);
      tokens += s.spec.promptTokens;
    }
  }

  private maybeStartIteration(): void {
    if (this.iter) return;
    if (this.cfg.batching === 'continuous') {
      this.admitFromQueue();
    } else if (this.active.length === 0 && this.waiting.length > 0) {
      const oldest = this.waiting[0]!.spec.arrivalNs;
      const deadline = oldest + this.cfg.maxWaitNs;
      if (this.waiting.length >= this.cfg.maxBatchSize || this.sim.now >= deadline) {
        this.admitFromQueue();
      } else if (this.timerAtNs !== deadline) {
        this.timerAtNs = deadline;
        this.sim.schedule(deadline as Ns, { kind: 'serving.batchTimer' }, EventPriority.decision);
      }
    }
    if (this.active.length === 0) {
      if (this.waiting.length > 0 && this.cfg.batching === 'continuous') {
        throw new SimError(`request ${this.waiting[0]!.spec.id} cannot be admitted into an empty GPU`, this.sim.now, 'serving executor');
      }
      return;
    }
    this.startIteration();
  }

  // ---------------------------------------------------------------- iterations and layers

  private startIteration(): void {
    const batch = this.active.slice();
    const tokens = batch.map((s) => (s.processed === 0 ? s.spec.promptTokens : 1));
    const totalTokens = tokens.reduce((a, b) => a + b, 0);
    const encDec = this.encoderLayers > 0;
    const encTokens = encDec ? batch.map((s) => (s.processed === 0 ? s.spec.promptTokens : 0)) : [];
    const encTotal = encTokens.reduce((a, b) => a + b, 0);
    const decTokens = encDec ? batch.map(() => 1) : tokens;
    const views: RequestView[] = batch.map((s, i) => ({
      spec: s.spec,
      processedTokens: s.processed,
      iterationTokens: tokens[i]!,
      phase: s.processed === 0 ? 'prefill' : 'decode',
      emittedTokens: s.emitted,
    }));
    while (this.perRequestCounts.length < batch.length) this.perRequestCounts.push(new Int32Array(this.E));
    const activations = this.res.vram.tryAllocate(activationBytes(this.m, totalTokens), 'activations', `iteration ${this.iterations}`);
    if (!activations) {
      throw new SimError(`no VRAM for the activations of ${totalTokens} tokens`, this.sim.now, 'serving executor');
    }
    this.iter = {
      index: this.iterations,
      batch,
      tokens,
      totalTokens,
      encTokens,
      encTotal,
      firstMoeLayer: encDec && encTotal === 0 ? this.firstDecoderMoeLayer : 0,
      crossContext: encDec ? batch.reduce((a, r) => a + r.spec.promptTokens, 0) : 0,
      layerTokens: decTokens,
      layerTotal: encDec ? batch.length : totalTokens,
      order: [],
      orderPos: 0,
      gapPaid: false,
      trailingPaid: false,
      readyMask: new Uint8Array(this.E),
      views,
      activations,
      layer: -1,
      moeLayer: -1,
      ready: [],
      remaining: 0,
      tokensPerExpert: new Int32Array(this.E),
      computing: false,
      computingKey: -1,
      blockedSinceNs: -1,
      activatedCount: 0,
      decodeOnly: views.every((v) => v.phase === 'decode'),
    };
    this.apply('onIterationStart', this.callPolicy('onIterationStart', () => this.policy.onIterationStart?.(this.view)));
    this.startLayer(encDec && encTotal === 0 ? this.encoderLayers : 0);
  }

  private tokenOpNs(kind: TokenOp, tokens: number): Ns {
    if ((tokens | 0) !== tokens || tokens < 0) return this.cost.estimate({ kind, tokens }).ns;
    const cache = this.tokenOpCost[kind];
    if (tokens < cache.length) {
      const t = cache[tokens]!;
      if (t >= 0) return t as Ns;
    } else {
      // Grown densely with −1 (an array with holes would fall back to a dictionary).
      while (cache.length <= tokens) cache.push(-1);
    }
    const t = this.cost.estimate({ kind, tokens }).ns;
    cache[tokens] = t;
    return t;
  }

  /**
   * Attention's duration for `tokens` tokens over `contextTokens`: the context differs from one
   * iteration to the next (it grows with every token), so a memo by context would only grow
   * with the run; the last pair asked is kept instead (every layer of an iteration, or of its
   * encoder and of its decoder, asks the same).
   */
  private attentionNs(tokens: number, contextTokens: number): Ns {
    if (tokens === this.lastAttnTokens && contextTokens === this.lastAttnContext) return this.lastAttnNs;
    const t = this.cost.estimate({ kind: 'attention', tokens, contextTokens }).ns;
    this.lastAttnTokens = tokens;
    this.lastAttnContext = contextTokens;
    this.lastAttnNs = t;
    return t;
  }

  /** `expert M<layer>E<expert>`, built once per key. */
  private expertLabel(key: ExpertKey): string {
    return (this.expertLabels[key] ??= `expert M${Math.floor(key / this.E)}E${key % this.E}`);
  }

  /** `<label> ×<tokens>` for the trace; without a trace sink the label alone (no string built per kernel). */
  private countLabel(label: string, tokens: number): string {
    return this.sink === undefined ? label : `${label} ×${tokens}`;
  }

  private idleLabel(moeLayer: number, gap: number): string {
    return this.sink === undefined ? 'idle experts' : `M${moeLayer} idle experts ×${gap}`;
  }

  private kernel(durationNs: Ns, label: string, category: string, onDone: () => void): void {
    this.res.gpu.submitKernel(0, durationNs, label, category, onDone);
  }

  // Kernel completions. The executor has at most one kernel on the GPU at a time, and the
  // iteration state says where it stands (layer, expert), so each kind of kernel has one stored
  // callback rather than a closure per submission.
  private readonly afterIdleExperts = (): void => {
    this.iter!.computing = false;
    this.pumpExperts();
  };
  private readonly afterRouter = (): void => this.routeLayer(this.moeIndexOfLayer[this.iter!.layer]!);
  private readonly afterSharedExperts = (): void => {
    this.iter!.computing = false;
    this.pumpExperts();
  };
  private readonly afterExpertKernel = (): void => this.afterExpert(this.iter!.computingKey);
  private readonly afterLmHead = (): void => this.finishIteration();

  /** Appends a kernel to the chain being built, in a part object reused from chain to chain. */
  private pushPart(durationNs: Ns, label: string, category: string): void {
    const parts = this.chainParts;
    let p = this.partPool[parts.length];
    if (p === undefined) {
      p = { durationNs, label, category };
      this.partPool.push(p);
    } else {
      p.durationNs = durationNs;
      p.label = label;
      p.category = category;
    }
    parts.push(p);
  }

  /**
   * Runs the model from `layer` to the next decision: attention (and cross-attention) of each
   * layer, the FFN of dense layers, up to the router of the next MoE layer (then `routeLayer`)
   * or the LM head (then `finishIteration`). Nothing between these kernels depends on the
   * simulated time — each starts when the previous one ends, on the executor's one stream — so
   * they go to the GPU as one chain: one completion event instead of one per kernel, with each
   * kernel's busy time and trace span its own (`Gpu.submitChain`).
   */
  private startLayer(layer: number): void {
    const it = this.iter!;
    // Reused: the GPU holds a chain's parts until it completes, and the next chain starts after.
    const parts = this.chainParts;
    while (parts.length > 0) parts.pop(); // pops inline; `length = 0` is a runtime call
    for (;;) {
      it.layer = layer;
      if (layer === this.m.layers) {
        this.pushPart(this.tokenOpNs('lmHead', this.encoderLayers > 0 ? it.batch.length : it.totalTokens), 'lm head', 'lmHead');
        this.res.gpu.submitChain(0, parts, this.afterLmHead);
        return;
      }
      let contextTokens = 0;
      let cross = false;
      if (this.encoderLayers === 0) {
        for (let i = 0; i < it.batch.length; i++) {
          const s = it.batch[i]!;
          const n = it.tokens[i]!;
          // Causal attention: token at position p attends to p + 1 positions.
          contextTokens += n * s.processed + (n * (n + 1)) / 2;
        }
      } else if (layer < this.encoderLayers) {
        // Encoder: bidirectional self-attention over the prompts of the requests in prefill.
        it.layerTokens = it.encTokens;
        it.layerTotal = it.encTotal;
        for (const n of it.encTokens) contextTokens += n * n;
      } else {
        // Decoder: one token per request over the tokens generated so far, then cross-attention.
        if (layer === this.encoderLayers) {
          it.layerTokens = it.batch.map(() => 1);
          it.layerTotal = it.batch.length;
        }
        for (const s of it.batch) contextTokens += s.emitted + 1;
        cross = true;
      }
      const labels = this.layerLabels[layer]!;
      this.pushPart(this.attentionNs(it.layerTotal, contextTokens), labels.attention, 'attention');
      if (cross) {
        this.pushPart(this.cost.estimate({ kind: 'crossAttention', tokens: it.layerTotal, contextTokens: it.crossContext }).ns, labels.cross, 'attention');
      }
      if (this.moeIndexOfLayer[layer]! >= 0) {
        this.pushPart(this.tokenOpNs('router', it.layerTotal), labels.router, 'router');
        this.res.gpu.submitChain(0, parts, this.afterRouter);
        return;
      }
      this.pushPart(this.tokenOpNs('denseFfn', it.layerTotal), labels.dense, 'dense');
      layer++;
    }
  }

  private routeLayer(moeLayer: number): void {
    const it = this.iter!;
    it.moeLayer = moeLayer;
    const E = this.E;
    const k = this.m.topK;
    const total = it.tokensPerExpert;
    // Zeroed by a loop: `fill` is a runtime call, dearer than a handful of stores.
    for (let e = 0; e < E; e++) total[e] = 0;
    const encDec = this.encoderLayers > 0;
    const encoderSide = encDec && it.layer < this.encoderLayers;
    for (let i = 0; i < it.batch.length; i++) {
      const s = it.batch[i]!;
      const n = it.layerTokens[i]!;
      const counts = this.perRequestCounts[i]!;
      for (let e = 0; e < E; e++) counts[e] = 0;
      if (n === 0) continue;
      if (this.scratch.length < n * k) this.scratch = new Int32Array(n * k * 2);
      // Positions: the prompt's in the encoder, the output token's in the decoder.
      const from = !encDec ? s.processed : encoderSide ? 0 : s.spec.promptTokens + s.emitted;
      s.router!.route(moeLayer, from, from + n, this.scratch);
      for (let j = 0; j < n * k; j++) {
        const e = this.scratch[j]!;
        if (!(e >= 0 && e < E)) {
          throw new SimError(`router returned expert ${e} (experts ${E}) for request ${s.spec.id} layer ${moeLayer}`, this.sim.now, 'routing');
        }
        counts[e]!++;
      }
      for (let e = 0; e < E; e++) total[e]! += counts[e]!;
    }
    // Reused from layer to layer (`LayerRouting.activated` and the index-order loop's order are
    // valid while the layer runs).
    // Written by index over the previous layer's list, the length cut once (up to E entries).
    const activated = this.activatedScratch;
    let na = 0;
    for (let e = 0; e < E; e++) {
      if (total[e]! === 0) continue;
      if (na < activated.length) activated[na] = e;
      else activated.push(e);
      na++;
    }
    if (activated.length > na) activated.length = na;
    this.counters.activationRatioSum += activated.length / E;
    this.counters.layerRoutings++;

    // Needs first (hits, queue-jumps, on-demand fetches), then the policy's prefetches.
    while (it.ready.length > 0) it.ready.pop();
    it.remaining = activated.length;
    if (this.indexOrder) {
      it.order = activated;
      it.orderPos = 0;
      it.gapPaid = false;
      it.trailingPaid = false;
      it.readyMask.fill(0);
    }
    // Experts already in the buffer (resident or loading) are claimed (pinned) before any miss
    // looks for a slot, so a miss can never evict — or cancel the prefetch of — an expert this
    // same layer needs (the router's choices are known all at once, as in Mixtral-Offloading's
    // `load_experts`, which marks every requested expert used before loading).
    it.activatedCount = activated.length;
    if (this.payIdleReadyFirst) it.trailingPaid = false;
    if (this.tops) {
      // Split experts: every segment already cached or in flight is claimed before any fetch.
      it.remaining = 0;
      const fetches: ExpertKey[] = [];
      for (const e of activated) if (this.needSplit(moeLayer * E + e)) fetches.push(moeLayer * E + e);
      for (const key of fetches) {
        if (this.acquireSlot(key, 'demand')) this.fetch(key, 'demand', DEMAND_PRIORITY, true);
        else this.waitingForSlot.push(key);
      }
    } else {
      const absent = this.absentScratch;
      while (absent.length > 0) absent.pop();
      for (const e of activated) {
        const key = moeLayer * E + e;
        if (this.buffer.has(key)) this.need(key);
        else absent.push(key);
      }
      for (const key of absent) this.need(key);
    }
    if (this.policy.onLayerRouted) {
      // One object and one array for every layer (LayerRouting is valid during the call only).
      const routing = this.routing;
      routing.layer = moeLayer;
      routing.tokensPerExpert = total;
      const perRequest = routing.perRequest;
      while (perRequest.length > it.batch.length) perRequest.pop();
      for (let i = 0; i < it.batch.length; i++) {
        if (i < perRequest.length) perRequest[i] = this.perRequestCounts[i]!;
        else perRequest.push(this.perRequestCounts[i]!);
      }
      routing.activated = activated;
      let d: PolicyDecision | void;
      try {
        d = this.policy.onLayerRouted(this.view, routing);
      } catch (err) {
        throw this.policyFailure('onLayerRouted', err);
      }
      this.apply('onLayerRouted', d);
    }
    if (this.m.sharedExperts > 0) {
      it.computing = true;
      this.kernel(this.tokenOpNs('sharedExperts', it.layerTotal), this.layerLabels[it.layer]!.shared, 'sharedExpert', this.afterSharedExperts);
    } else {
      this.pumpExperts();
    }
  }

  /** One activated expert of the current layer. */
  private need(key: ExpertKey): void {
    const it = this.iter!;
    this.counters.needs++;
    if (it.decodeOnly) this.counters.decodeNeeds++;
    const e = this.buffer.entry(key);
    if (e && e.state === 'resident') {
      if (e.prefetchUnused) {
        this.counters.prefetchHits++;
        if (it.decodeOnly) this.counters.decodePrefetchHits++;
        this.markPrefetchUsed(e);
      } else {
        this.counters.cacheHits++;
        if (it.decodeOnly) this.counters.decodeCacheHits++;
      }
      e.pinned = true;
      it.ready.push(key);
      it.readyMask[key % this.E] = 1;
      return;
    }
    if (e) {
      // Loading (a prefetch): it jumps the queue, unless the policy opts out (`queueJump: false`).
      e.pinned = true;
      if (e.prefetchUnused) this.markPrefetchUsed(e);
      if (e.transfer && this.policy.queueJump !== false) this.res.h2d.reprioritize(e.transfer, DEMAND_PRIORITY);
      return;
    }
    if (this.acquireSlot(key, 'demand')) this.fetch(key, 'demand', DEMAND_PRIORITY, true);
    else this.waitingForSlot.push(key);
  }

  /**
   * One activated expert of the current layer, split experts: pins its top segment (if cached)
   * and its whole/bottom entry (if in the buffer), queues the resident pieces, counts the need.
   * Returns true when its whole/bottom part must be fetched on demand (done by the caller after
   * every present piece of the layer is claimed).
   */
  private needSplit(key: ExpertKey): boolean {
    const it = this.iter!;
    const tops = this.tops!;
    this.counters.needs++;
    if (it.decodeOnly) this.counters.decodeNeeds++;
    const e = this.buffer.entry(key);
    // A whole expert in the buffer is computed whole (a top cached meanwhile is not used for it).
    const t = e?.part === 'whole' ? undefined : tops.entry(key);
    let pieces = 0;
    let allResident = true;
    let fromPrefetch = false;
    let mustFetch = false;
    if (t) {
      t.pinned = true;
      pieces++;
      if (t.state === 'resident') it.ready.push(key + this.span);
      else allResident = false;
    }
    if (!t || t.fraction < 1) {
      pieces++;
      if (e) {
        e.pinned = true;
        if (e.prefetchUnused) {
          fromPrefetch = e.state === 'resident';
          this.markPrefetchUsed(e);
        }
        if (e.state === 'resident') it.ready.push(key);
        else {
          allResident = false;
          if (e.transfer && this.policy.queueJump !== false) this.res.h2d.reprioritize(e.transfer, DEMAND_PRIORITY);
        }
      } else {
        allResident = false;
        mustFetch = true;
      }
    }
    this.piecesLeft[key % this.E] = pieces;
    it.remaining += pieces;
    if (allResident) {
      if (fromPrefetch) this.counters.prefetchHits++;
      else this.counters.cacheHits++;
      if (it.decodeOnly) {
        if (fromPrefetch) this.counters.decodePrefetchHits++;
        else this.counters.decodeCacheHits++;
      }
    } else if (t && t.state === 'resident') {
      this.counters.partialHits++;
    }
    return mustFetch;
  }

  /** Transfer label of a segment: `expert M<l>E<e> top|bottom`. */
  private segmentLabel(key: ExpertKey, top: boolean): string {
    const i = top ? 2 * key : 2 * key + 1;
    return (this.segmentLabels[i] ??= `${this.expertLabel(key)} ${top ? 'top' : 'bottom'}`);
  }

  private markPrefetchUsed(e: BufferEntry): void {
    e.prefetchUnused = false;
    this.counters.prefetchesUsed++;
  }

  private fetch(key: ExpertKey, origin: 'demand' | 'prefetch', priority: number, pinned: boolean): void {
    // Split experts: with its top cached (or loading), only the bottom moves.
    const top = this.tops?.entry(key);
    const e = top ? this.buffer.occupy(key, origin, false, this.m.derived.bytesPerExpert - top.bytes) : this.buffer.occupy(key, origin);
    e.pinned = pinned;
    if (origin === 'demand') this.counters.demandFetches++;
    else this.counters.prefetchesIssued++;
    // prettier-ignore
    e.transfer = this.res.h2d.submitTransfer(e.bytes, priority, top ? this.segmentLabel(key, false) : this.expertLabel(key),
      origin === 'demand' ? 'expert-demand' : 'expert-prefetch', this.onFetchDone, key);
  }

  private onExpertArrived(key: ExpertKey): void {
    if (key >= this.span) {
      // A top segment (split experts) finished loading.
      const t = this.tops!.arrived(key - this.span);
      if (t.pinned) {
        this.iter!.ready.push(key);
        this.pumpExperts();
      }
      return;
    }
    const e = this.buffer.arrived(key);
    if (e.origin === 'prefetch') this.counters.prefetchesCompleted++;
    if (e.pinned) {
      this.iter!.ready.push(key);
      this.iter!.readyMask[key % this.E] = 1;
      this.pumpExperts();
    } else {
      this.apply('onPrefetchDone', this.callPolicy('onPrefetchDone', () => this.policy.onPrefetchDone?.(this.view, key)));
    }
  }

  /** Runs the next ready expert, or finishes the layer, or records that the GPU is blocked. */
  private pumpExperts(): void {
    const it = this.iter!;
    if (it.computing) return;
    if (this.indexOrder) {
      this.pumpInOrder(it);
      return;
    }
    // One ready expert (the common case): `pop` takes the same one as `shift`, without its runtime call.
    const key = it.ready.length === 1 ? it.ready.pop() : it.ready.shift();
    if (key !== undefined) {
      if (it.blockedSinceNs >= 0) {
        this.counters.blockedNs += this.sim.now - it.blockedSinceNs;
        this.sink?.onBlocked?.({ stream: 'gpu.compute', reason: 'expert fetch', startNs: it.blockedSinceNs as Ns, endNs: this.sim.now });
        it.blockedSinceNs = -1;
      }
      if (this.tops) {
        this.computePiece(it, key);
        return;
      }
      const entry = this.buffer.entry(key);
      this.sink?.onExpertCompute?.(key, this.sim.now, entry?.state === 'resident');
      it.computing = true;
      it.computingKey = key;
      const tokens = it.tokensPerExpert[key % this.E]!;
      this.kernel(this.tokenOpNs('expert', tokens), this.countLabel(this.expertLabel(key), tokens), 'expert', this.afterExpertKernel);
      return;
    }
    if (it.remaining === 0 && this.payIdleReadyFirst && !it.trailingPaid) {
      // A runtime looping over every expert still visits the ones no token chose.
      it.trailingPaid = true;
      const gap = this.E - it.activatedCount;
      if (gap > 0) {
        it.computing = true;
        this.kernel(this.cost.estimate({ kind: 'idleExperts', count: gap }).ns, this.idleLabel(it.moeLayer, gap), 'expertLoop', this.afterIdleExperts);
        return;
      }
    }
    if (it.remaining === 0) {
      this.finishMoeLayer(it);
      return;
    }
    if (it.blockedSinceNs < 0) it.blockedSinceNs = this.sim.now;
  }

  /** Index-order loop (`expertOrder: index`): idle iterations before each chosen expert, the expert once resident, then the trailing idle ones. */
  private pumpInOrder(it: IterationState): void {
    const E = this.E;
    if (it.orderPos < it.order.length) {
      const e = it.order[it.orderPos]!;
      if (this.loopAll && !it.gapPaid) {
        it.gapPaid = true;
        const gap = e - (it.orderPos > 0 ? it.order[it.orderPos - 1]! + 1 : 0);
        if (gap > 0) {
          this.closeBlocked(it);
          it.computing = true;
          this.kernel(this.cost.estimate({ kind: 'idleExperts', count: gap }).ns, this.idleLabel(it.moeLayer, gap), 'expertLoop', this.afterIdleExperts);
          return;
        }
      }
      if (it.readyMask[e] === 1) {
        it.readyMask[e] = 0;
        const key = it.moeLayer * E + e;
        const idx = it.ready.indexOf(key);
        if (idx >= 0) it.ready.splice(idx, 1);
        it.orderPos++;
        it.gapPaid = false;
        this.closeBlocked(it);
        const entry = this.buffer.entry(key);
        this.sink?.onExpertCompute?.(key, this.sim.now, entry?.state === 'resident');
        it.computing = true;
        it.computingKey = key;
        const tokens = it.tokensPerExpert[e]!;
        this.kernel(this.tokenOpNs('expert', tokens), this.countLabel(this.expertLabel(key), tokens), 'expert', this.afterExpertKernel);
        return;
      }
      if (it.blockedSinceNs < 0) it.blockedSinceNs = this.sim.now;
      return;
    }
    if (this.loopAll && !it.trailingPaid) {
      it.trailingPaid = true;
      const last = it.order.length > 0 ? it.order[it.order.length - 1]! : -1;
      const gap = E - 1 - last;
      if (gap > 0) {
        it.computing = true;
        this.kernel(this.cost.estimate({ kind: 'idleExperts', count: gap }).ns, this.idleLabel(it.moeLayer, gap), 'expertLoop', this.afterIdleExperts);
        return;
      }
    }
    this.finishMoeLayer(it);
  }

  private closeBlocked(it: IterationState): void {
    if (it.blockedSinceNs >= 0) {
      this.counters.blockedNs += this.sim.now - it.blockedSinceNs;
      this.sink?.onBlocked?.({ stream: 'gpu.compute', reason: 'expert fetch', startNs: it.blockedSinceNs as Ns, endNs: this.sim.now });
      it.blockedSinceNs = -1;
    }
  }

  private finishMoeLayer(it: IterationState): void {
    const layer = it.moeLayer;
    if (this.policy.onLayerDone) {
      let d: PolicyDecision | void;
      try {
        d = this.policy.onLayerDone(this.view, layer);
      } catch (err) {
        throw this.policyFailure('onLayerDone', err);
      }
      this.apply('onLayerDone', d);
    }
    this.startLayer(it.layer + 1);
  }

  /** Split experts: runs one resident piece (a top segment, a bottom, or a whole expert). */
  private computePiece(it: IterationState, piece: number): void {
    const isTop = piece >= this.span;
    const key = isTop ? piece - this.span : piece;
    const t = this.tops!.entry(key);
    const e = isTop ? undefined : this.buffer.entry(key);
    let fraction = 1;
    let label: string;
    if (isTop) {
      fraction = t!.fraction;
      label = this.segmentLabel(key, true);
      this.sink?.onExpertCompute?.(piece, this.sim.now, t!.state === 'resident');
    } else {
      if (e!.part === 'bottom') fraction = 1 - t!.fraction;
      label = e!.part === 'bottom' ? this.segmentLabel(key, false) : this.expertLabel(key);
      this.sink?.onExpertCompute?.(this.buffer.reportKey(e!), this.sim.now, e!.state === 'resident');
    }
    it.computing = true;
    it.computingKey = piece;
    const tokens = it.tokensPerExpert[key % this.E]!;
    const ns = fraction === 1 ? this.tokenOpNs('expert', tokens) : this.cost.estimate({ kind: 'expert', tokens, fraction }).ns;
    this.kernel(ns, this.countLabel(label, tokens), 'expert', this.afterExpertKernel);
  }

  /** Split experts: a piece finished; once every piece of the expert has, the policy's `afterUse`. */
  private afterPiece(piece: number): void {
    const it = this.iter!;
    const tops = this.tops!;
    it.computing = false;
    it.remaining--;
    const isTop = piece >= this.span;
    const key = isTop ? piece - this.span : piece;
    if (isTop) {
      tops.entry(key)!.pinned = false;
    } else {
      const e = this.buffer.entry(key)!;
      e.pinned = false;
      e.uses++;
      e.lastUsedNs = this.sim.now;
      e.origin = 'cache';
    }
    const ex = key % this.E;
    if (--this.piecesLeft[ex]! > 0) {
      this.pumpExperts();
      return;
    }
    let r: boolean | void | KeepTop = true;
    if (this.policy.afterUse) {
      try {
        r = this.policy.afterUse(this.view, key);
      } catch (err) {
        throw this.policyFailure('afterUse', err);
      }
    }
    const e = this.buffer.entry(key);
    if (typeof r === 'object' && r !== null) {
      for (const k of r.dropTops ?? []) if (this.validKey(k, 'afterUse')) this.dropTop(k);
      if (e && !e.pinned) {
        const whole = e.part === 'whole' && e.state === 'resident';
        this.evict(key, false);
        if (whole && !tops.entry(key)) {
          const f = r.keepTop;
          if (!(f > 0 && f <= 1)) throw new PolicyError(`keepTop ${f} outside (0, 1]`, this.sim.now, this.policy.name, 'afterUse');
          const bytes = tops.topBytes(f);
          if (bytes > tops.freeBytes) {
            throw new PolicyError(`keepTop of ${key} needs ${bytes} B, the segment cache has ${tops.freeBytes} B free`, this.sim.now, this.policy.name, 'afterUse');
          }
          // The top's bytes are already on the GPU (they were part of the whole expert): no transfer.
          if (bytes > 0) tops.add(key, f, true);
        }
      }
    } else if (e && !e.pinned) {
      const keep = r !== false && this.cfg.releaseAfterUse !== true;
      if (!keep) this.evict(key, false);
    }
    this.serveSlotWaiters();
    this.pumpExperts();
  }

  /** Drops the top segment of `key` (and its bottom entry); ignored while either is pinned. */
  private dropTop(key: ExpertKey): void {
    const tops = this.tops!;
    const t = tops.entry(key);
    if (!t || t.pinned) return;
    const e = this.buffer.entry(key);
    if (e && e.part === 'bottom') {
      if (e.pinned) return;
      if (e.state === 'loading') this.cancelPrefetch(key);
      else this.evict(key, true);
    }
    if (t.transfer) {
      this.res.h2d.cancel(t.transfer);
      t.transfer = null;
    }
    tops.release(key);
  }

  /** Loads a top segment of `fraction` for `key` over the link (reshaping); see `PolicyDecision.loadTops`. */
  private loadTop(key: ExpertKey, fraction: number, priority: number): void {
    const tops = this.tops!;
    if (!(fraction > 0 && fraction <= 1)) throw new PolicyError(`top fraction ${fraction} outside (0, 1]`, this.sim.now, this.policy.name, 'loadTops');
    const cur = tops.entry(key);
    if (cur) {
      if (cur.fraction === fraction) return;
      this.dropTop(key);
      if (tops.entry(key)) return;
    }
    // A whole expert in the buffer already has these bytes on the GPU; it becomes the top's source later (afterUse).
    const e = this.buffer.entry(key);
    if (e && e.part === 'whole') return;
    const bytes = tops.topBytes(fraction);
    if (bytes === 0 || bytes > tops.freeBytes) return;
    const t = tops.add(key, fraction, false);
    this.counters.topLoads++;
    this.counters.topLoadBytes += bytes;
    t.transfer = this.res.h2d.submit({ bytes, priority, label: this.segmentLabel(key, true), category: 'expert-reshape', onDone: this.onFetchDone, tag: key + this.span });
  }

  private afterExpert(key: ExpertKey): void {
    if (this.tops) {
      this.afterPiece(key);
      return;
    }
    const it = this.iter!;
    it.computing = false;
    it.remaining--;
    const e = this.buffer.entry(key)!;
    e.pinned = false;
    e.uses++;
    e.lastUsedNs = this.sim.now;
    e.origin = 'cache';
    let policyKeeps = true;
    if (this.policy.afterUse) {
      try {
        policyKeeps = this.policy.afterUse(this.view, key) !== false;
      } catch (err) {
        throw this.policyFailure('afterUse', err);
      }
    }
    const keep = this.cfg.preloadAllExperts || (policyKeeps && this.cfg.releaseAfterUse !== true);
    if (!keep) this.evict(key, false);
    this.serveSlotWaiters();
    this.pumpExperts();
  }

  private finishIteration(): void {
    const it = this.iter!;
    const now = this.sim.now;
    const finished: RequestState[] = [];
    for (let i = 0; i < it.batch.length; i++) {
      const s = it.batch[i]!;
      s.processed += it.tokens[i]!;
      s.emitted++;
      if (s.emitted === 1) {
        this.outcome.firstTokenNs[s.index] = now;
        this.sink?.onRequest?.(s.spec.id, 'firstToken', now);
      } else {
        this.sink?.onRequest?.(s.spec.id, 'token', now);
      }
      if (s.emitted === s.spec.outputTokens) finished.push(s);
    }
    if (it.activations) this.res.vram.free(it.activations);
    this.iterations++;
    for (const s of finished) {
      this.outcome.finishNs[s.index] = now;
      this.outcome.emitted[s.index] = s.emitted;
      this.finishedRequests++;
      if (s.kv) this.res.vram.free(s.kv);
      s.kv = null;
      s.router = null;
      this.workload.routing.release?.(s.spec.id);
      this.sink?.onRequest?.(s.spec.id, 'finish', now);
      this.callPolicy('onRequestFinished', () => this.policy.onRequestFinished?.(this.view, s.spec));
    }
    this.active = this.active.filter((s) => s.emitted < s.spec.outputTokens);
    this.apply('onIterationEnd', this.callPolicy('onIterationEnd', () => this.policy.onIterationEnd?.(this.view)));
    this.iter = null;
    this.maybeStartIteration();
  }

  // ---------------------------------------------------------------- buffer management

  /** Makes room for `key`. Returns false when no slot can be freed now. */
  private acquireSlot(key: ExpertKey, reason: 'demand' | 'prefetch'): boolean {
    if (this.buffer.free > 0) return true;
    const candidates = this.buffer.evictable(this.candidateScratch);
    if (candidates.length === 0) {
      if (reason === 'prefetch') return false;
      // A demand fetch may take the slot of the least urgent loading prefetch nobody waits for.
      let victim: BufferEntry | undefined;
      for (const e of this.buffer.entries()) {
        if (e.state !== 'loading' || e.pinned || !e.transfer) continue;
        if (!victim || e.transfer.priority > victim.transfer!.priority || (e.transfer.priority === victim.transfer!.priority && e.transfer.seq > victim.transfer!.seq)) victim = e;
      }
      if (!victim) return false;
      this.cancelPrefetch(victim.key);
      return true;
    }
    const query: EvictionQuery = { reason, forKey: key, candidates };
    let victim: ExpertKey | undefined;
    if (this.policy.chooseVictim) {
      try {
        victim = this.policy.chooseVictim(this.view, query);
      } catch (err) {
        throw this.policyFailure('chooseVictim', err);
      }
      if (victim === undefined) {
        if (reason === 'prefetch') return false;
        throw new PolicyError(`declined to evict for an on-demand fetch of ${key}`, this.sim.now, this.policy.name, 'chooseVictim');
      }
      // A candidate is exactly a resident, unpinned entry (`ExpertBuffer.evictable`): checked on the entry, not by a search of the list.
      const ve = this.buffer.entry(victim);
      if (ve === undefined || ve.state !== 'resident' || ve.pinned) {
        throw new PolicyError(`chose ${victim}, which is not an evictable candidate`, this.sim.now, this.policy.name, 'chooseVictim');
      }
    } else {
      victim = candidates.reduce((best, c) => (this.buffer.entry(c)!.lastUsedNs < this.buffer.entry(best)!.lastUsedNs ? c : best));
    }
    this.evict(victim, true);
    return true;
  }

  private evict(key: ExpertKey, countEviction: boolean): void {
    const e = this.buffer.release(key);
    if (e.prefetchUnused) this.counters.prefetchWastedBytes += e.bytes;
    if (countEviction) this.counters.evictions++;
  }

  private cancelPrefetch(key: ExpertKey): void {
    const e = this.buffer.entry(key)!;
    const t = e.transfer!;
    this.res.h2d.cancel(t);
    this.counters.prefetchesCancelled++;
    // The bytes it already sent (and the packet on the wire, when it lands) are counted by the
    // link as cancelledSentBytes; the metrics add them to the wasted bytes.
    e.prefetchUnused = false;
    e.transfer = null;
    this.buffer.release(key);
  }

  private serveSlotWaiters(): void {
    while (this.waitingForSlot.length > 0) {
      const key = this.waitingForSlot[0]!;
      if (!this.acquireSlot(key, 'demand')) return;
      this.waitingForSlot.shift();
      this.fetch(key, 'demand', DEMAND_PRIORITY, true);
    }
  }

  // ---------------------------------------------------------------- policy plumbing

  private callPolicy<T>(hook: string, f: () => T): T {
    try {
      return f();
    } catch (err) {
      throw this.policyFailure(hook, err);
    }
  }

  /**
   * What to throw when a policy hook threw `err`: simulator errors as they are, anything else
   * wrapped in a PolicyError naming the hook. (The per-expert and per-layer hooks call the
   * policy inline with this in their `catch`, saving `callPolicy` a closure per call.)
   */
  private policyFailure(hook: string, err: unknown): unknown {
    if (err instanceof PolicyError || err instanceof SimError) return err;
    const msg = err instanceof Error ? err.message : String(err);
    const wrapped = new PolicyError(msg, this.sim.now, this.policy.name, hook);
    if (err instanceof Error && err.stack) wrapped.stack = `${wrapped.name}: ${wrapped.message}\n${err.stack}`;
    return wrapped;
  }

  private validKey(key: unknown, hook: string): key is ExpertKey {
    if (typeof key === 'number' && Number.isInteger(key) && key >= 0 && key < this.m.moeLayers * this.E) return true;
    throw new PolicyError(`invalid expert key ${String(key)}`, this.sim.now, this.policy.name, hook);
  }

  private apply(hook: string, d: PolicyDecision | void): void {
    if (!d) return;
    for (const key of d.cancel ?? []) {
      if (!this.validKey(key, hook)) continue;
      const e = this.buffer.entry(key);
      if (e && e.state === 'loading' && !e.pinned) this.cancelPrefetch(key);
    }
    for (const key of d.evict ?? []) {
      if (!this.validKey(key, hook)) continue;
      const e = this.buffer.entry(key);
      if (e && e.state === 'resident' && !e.pinned && !this.cfg.preloadAllExperts) this.evict(key, true);
    }
    // Once every request has finished nobody can use a prefetch. Dropping them lets the run end:
    // a policy that prefetches again from onPrefetchDone would otherwise keep the link busy forever.
    const workloadDone = this.finishedRequests === this.src.count;
    if (this.tops) for (const key of d.dropTops ?? []) if (this.validKey(key, hook)) this.dropTop(key);
    for (const p of d.prefetch ?? []) {
      if (!this.validKey(p.key, hook)) continue;
      if (workloadDone) continue;
      // Split experts: an expert whose top is all of it needs nothing more.
      if (this.tops && this.tops.topFraction(p.key) === 1) continue;
      const priority = Math.max(1, Number.isFinite(p.priority) ? p.priority : 1);
      const e = this.buffer.entry(p.key);
      if (e) {
        if (e.state === 'loading' && !e.pinned && e.transfer) this.res.h2d.reprioritize(e.transfer, priority);
        continue;
      }
      if (this.acquireSlot(p.key, 'prefetch')) this.fetch(p.key, 'prefetch', priority, false);
    }
    if (this.tops && d.loadTops && !workloadDone) {
      const priority = Math.max(1, Number.isFinite(d.topPriority) ? d.topPriority! : Number.MAX_SAFE_INTEGER);
      for (const t of d.loadTops) if (this.validKey(t.key, hook)) this.loadTop(t.key, t.fraction, priority);
    }
    if ((d.cancel?.length ?? 0) + (d.evict?.length ?? 0) + (d.dropTops?.length ?? 0) > 0) this.serveSlotWaiters();
  }

  // ---------------------------------------------------------------- prediction

  private predict(layer: number): readonly number[] {
    const p = this.workload.predictor;
    const it = this.iter;
    if (!p || !it) return [];
    if (it.batch.length === 1) {
      const s = it.batch[0]!;
      return p.predict(s.spec.id, layer, s.processed, s.processed + it.tokens[0]!);
    }
    // Batch: Borda count over the requests' ranked lists.
    const score = new Float64Array(this.E);
    for (let i = 0; i < it.batch.length; i++) {
      const s = it.batch[i]!;
      const ranked = p.predict(s.spec.id, layer, s.processed, s.processed + it.tokens[i]!);
      ranked.forEach((e, r) => (score[e]! += ranked.length - r));
    }
    return [...score.keys()].filter((e) => score[e]! > 0).sort((a, b) => score[b]! - score[a]! || a - b);
  }
}
