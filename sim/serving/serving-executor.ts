/**
 * The layer-wise serving executor (DESIGN §7): the latency family (MoE-Infinity, MoEpic,
 * Mixtral-Offloading, Pre-gated, AdapMoE, BrainStorm-style tracing, DeepSpeed-style prefetch).
 *
 * Requests arrive; the batcher forms iterations; each iteration walks the model's layers on one
 * GPU stream: attention → (MoE layer) router → every activated expert, or (dense layer) the
 * dense FFN; then the LM head emits one token per request. KV cache stays on the GPU (reserved
 * per request at admission for prompt + output tokens). The policy (`ServingPolicy`) is called
 * through one driver (policy-driver.ts) and decides what to prefetch, keep and evict.
 *
 * This class is the coordinator; each job is a part behind an interface (sim/serving/parts/):
 * - iteration formation: `Batcher` (static auto-batcher, continuous) — batcher.ts
 * - which layers and tokens: `ModelWalk` (decoder-only, encoder–decoder) — model-walk.ts
 * - the layer walk and kernel chaining: `LayerWalk` — layer-walk.ts
 * - routing of a MoE layer: `LayerRouter` — routing.ts
 * - expert residency (buffer, fetch, eviction): `Residency` (whole experts in slots; MoEpic's
 *   split experts) — residency.ts, slot-residency.ts, split-residency.ts
 * - where a piece of expert work is computed: `ExpertCompute` — compute.ts
 * - the runtime's expert order: `ExpertOrder` (ready-first, index order) — expert-order.ts
 * - VRAM sizing — vram-plan.ts; the batch predictor policies ask — predictor.ts
 * - which implementation of each part a run uses — assemble.ts
 *
 * Simplifications: prefill is not chunked (a prompt is processed in one iteration); KV is
 * reserved for the full output at admission (no preemption: admission waits instead);
 * activations are one allocation per iteration sized from its token count; the LM head and
 * embedding are one kernel per iteration.
 */
import { SimError, UserError } from '../kernel/errors.ts';
import { EventPriority, Simulation } from '../kernel/simulation.ts';
import type { Ns } from '../kernel/time.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import type { CostModel } from '../cost/types.ts';
import { createResources, resourceHandlers, storageHandlers, withStorage, type Resources } from '../resources/index.ts';
import type { HardwareProfile, ModelProfile, RuntimeProfile } from '../../hardware-profiles/types.ts';
import { arraySource, type RequestSource, type Workload } from '../workload.ts';
import { PolicyDriver } from './policy-driver.ts';
import type { ModelShapeView, RequestView, ServingPolicy, ServingView } from './policy.ts';
import { assembleParts, placeHostWeights, storagePlanOf } from './parts/assemble.ts';
import type { Batcher } from './parts/batcher.ts';
import type { ExpertOrder } from './parts/expert-order.ts';
import type { Kernels } from './parts/kernels.ts';
import type { LayerWalk } from './parts/layer-walk.ts';
import type { ModelWalk } from './parts/model-walk.ts';
import { predictBatch } from './parts/predictor.ts';
import type { Residency } from './parts/residency.ts';
import type { LayerRouter } from './parts/routing.ts';
import {
  newCounters,
  type IterationState,
  type RequestState,
  type ServingContext,
  type ServingCounters,
} from './parts/state.ts';
import { activationBytes, planVram } from './parts/vram-plan.ts';

export type { ServingConfig, ServingCounters, ServingEvent } from './parts/state.ts';
export { activationBytes } from './parts/vram-plan.ts';
import type { ServingConfig, ServingEvent } from './parts/state.ts';

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

export class ServingExecutor {
  private readonly sim = new Simulation<ServingEvent>();
  private readonly res: Resources;
  private readonly m: ModelProfile;
  private readonly cfg: ServingConfig;
  private readonly driver: PolicyDriver;
  private readonly policy: ServingPolicy;
  private readonly workload: Workload;
  private readonly sink: TraceSink | undefined;
  private readonly src: RequestSource;
  private readonly ctx: ServingContext;
  private readonly walk: ModelWalk;
  private readonly kernels: Kernels;
  private readonly layers: LayerWalk;
  private readonly router: LayerRouter;
  private readonly residency: Residency;
  private readonly order: ExpertOrder;
  private readonly batcher: Batcher;
  private readonly moeIndexOfLayer: Int32Array;
  /**
   * Per-request outcomes by workload position, in typed arrays (about 30 B a request): a state
   * object lives only from arrival to finish, so a run of a million requests keeps no million
   * objects alive while it runs. `ServingOutcome.requests` is built from these at the end.
   */
  private readonly outcome: {
    admitNs: Float64Array;
    firstTokenNs: Float64Array;
    finishNs: Float64Array;
    emitted: Int32Array;
  };
  private iterations = 0;
  private finishedRequests = 0;
  private decidePending = false;
  readonly slots: number;
  readonly counters: ServingCounters = newCounters();

  constructor(private readonly input: ServingInput) {
    const { model, hardware, config, workload } = input;
    this.m = model;
    this.cfg = config;
    this.policy = input.policy;
    this.workload = workload;
    this.sink = input.sink;
    checkRoutingShape(model, workload);
    this.moeIndexOfLayer = new Int32Array(model.layers).fill(-1);
    model.moeLayerIndices.forEach((li, mi) => (this.moeIndexOfLayer[li] = mi));
    // Requests are streamed from the workload's source (a spec object exists only while its
    // request is in flight); a workload given as an array alone is read through it.
    this.src = workload.source ?? arraySource(workload.requests);
    const ssd = input.policy.ssdTier !== undefined;
    const plan = planVram(model, hardware, config, this.src, input.policy.segmentCacheBytes ?? 0, ssd);
    this.slots = plan.slots;
    const storage = storagePlanOf(input.policy.ssdTier, model, hardware);
    const res = createResources(hardware, this.sim, this.sink, {
      streamNames: ['gpu.compute'],
      packetBytes: config.packetBytes,
      vramBytes: plan.vramBytes,
    });
    this.res = withStorage(res, hardware, this.sim, this.sink, storage);
    const d = model.derived;
    placeHostWeights(this.res, model, storage);
    this.res.vram.allocate(d.nonExpertBytes, 'denseWeights', 'dense weights');
    this.driver = new PolicyDriver(input.policy, this.sim, model.moeLayers * model.experts);
    const shape: ModelShapeView = {
      moeLayers: model.moeLayers,
      experts: model.experts,
      topK: model.topK,
      bytesPerExpert: d.bytesPerExpert,
      slots: plan.slots,
    };
    this.ctx = {
      sim: this.sim,
      res: this.res,
      model,
      E: model.experts,
      cfg: config,
      cost: input.cost,
      sink: this.sink,
      driver: this.driver,
      counters: this.counters,
      shape,
      view: undefined as unknown as ServingView,
      iter: null,
      workloadDone: () => this.finishedRequests === this.src.count,
    };
    const parts = assembleParts(
      this.ctx,
      { policy: input.policy, runtime: input.runtime, hardware, moeIndexOfLayer: this.moeIndexOfLayer, ...plan },
      {
        afterRouter: this.afterRouter,
        afterLmHead: this.afterLmHead,
        afterExpert: this.afterExpertKernel,
        afterHostPiece: this.afterHostPiece,
        finishLayer: (it) => this.finishMoeLayer(it),
        admitted: (s) => this.admitted(s),
      },
    );
    ({ walk: this.walk, kernels: this.kernels, layers: this.layers, router: this.router } = parts);
    ({ residency: this.residency, order: this.order, batcher: this.batcher } = parts);
    const n = this.src.count;
    this.outcome = {
      admitNs: new Float64Array(n).fill(-1),
      firstTokenNs: new Float64Array(n).fill(-1),
      finishNs: new Float64Array(n).fill(-1),
      emitted: new Int32Array(n),
    };
    this.ctx.view = this.buildView(shape);
    this.setHandlers();
  }

  private setHandlers(): void {
    this.sim.setHandlers({
      ...resourceHandlers(this.res),
      ...storageHandlers(this.res),
      'serving.arrival': (e) => this.onArrival(e.index),
      'serving.decide': () => {
        this.decidePending = false;
        this.maybeStartIteration();
      },
      'serving.batchTimer': () => {
        this.batcher.onTimer();
        this.maybeStartIteration();
      },
    });
  }

  private buildView(shape: ModelShapeView): ServingView {
    const ctx = this.ctx;
    const E = ctx.E;
    const self = this;
    return {
      ...shape,
      get nowNs() {
        return self.sim.now;
      },
      buffer: this.residency.buffer,
      get batch() {
        return ctx.iter ? ctx.iter.views : [];
      },
      get iteration() {
        return ctx.iter ? ctx.iter.index : self.iterations;
      },
      get layer() {
        return ctx.iter ? ctx.iter.moeLayer : -1;
      },
      get firstLayer() {
        return ctx.iter ? ctx.iter.firstMoeLayer : 0;
      },
      keyOf: (layer: number, expert: number) => layer * E + expert,
      layerOf: (key: number) => Math.floor(key / E),
      expertOf: (key: number) => key % E,
      predict: (layer: number) => predictBatch(this.workload.predictor, ctx.iter, E, layer),
      segments: this.residency.segments,
      estimateNs: (op) => ctx.cost.estimate(op).ns,
    };
  }

  get simulation(): Simulation<ServingEvent> {
    return this.sim;
  }

  get resources(): Resources {
    return this.res;
  }

  /** Runs the workload to completion. Throws SimError if requests remain unfinished (a deadlock). */
  run(): ServingOutcome {
    this.driver.call('init', () => this.policy.init?.(this.ctx.shape));
    this.residency.start();
    if (this.src.count > 0) {
      this.sim.schedule(this.src.arrivalNs(0), { kind: 'serving.arrival', index: 0 }, EventPriority.arrival);
    }
    const result = this.sim.run({ maxEvents: this.input.maxEvents });
    if (result.stoppedBy === 'maxEvents') {
      throw new SimError(`stopped after ${result.events} events (maxEvents)`, this.sim.now, 'serving executor');
    }
    const out = this.outcome;
    if (this.finishedRequests < this.src.count) {
      const first = this.src.spec(out.finishNs.findIndex((f) => f < 0)).id;
      const left = this.src.count - this.finishedRequests;
      const msg = `${left} request(s) never finished (first: ${first}); the executor is stuck`;
      throw new SimError(msg, this.sim.now, 'serving executor');
    }
    this.residency.finish();
    this.counters.iterations = this.iterations;
    const policyReport = this.policy.report ? this.driver.call('report', () => this.policy.report!()) : undefined;
    this.sink?.onEnd?.(this.sim.now);
    return {
      requests: this.requestOutcomes(),
      counters: this.counters,
      resources: this.res,
      endNs: this.sim.now,
      events: this.sim.eventsProcessed,
      slots: this.slots,
      ...(policyReport ? { policyReport } : {}),
    };
  }

  private requestOutcomes(): RequestOutcome[] {
    const out = this.outcome;
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
    return requests;
  }

  // ---------------------------------------------------------------- arrivals and iterations

  private onArrival(index: number): void {
    const s: RequestState = { index, spec: this.src.spec(index), router: null, processed: 0, emitted: 0, kv: null };
    this.batcher.arrive(s);
    this.sink?.onRequest?.(s.spec.id, 'arrive', this.sim.now);
    if (index + 1 < this.src.count) {
      const next = { kind: 'serving.arrival', index: index + 1 } as const;
      this.sim.schedule(this.src.arrivalNs(index + 1), next, EventPriority.arrival);
    }
    if (!this.ctx.iter && !this.decidePending) {
      // Decide after every arrival of this instant has been processed.
      this.decidePending = true;
      this.sim.schedule(this.sim.now, { kind: 'serving.decide' }, EventPriority.decision);
    }
  }

  /** The batcher admitted `s` (its KV is allocated). */
  private admitted(s: RequestState): void {
    this.outcome.admitNs[s.index] = this.sim.now;
    s.router = this.workload.routing.forRequest(s.spec);
    this.sink?.onRequest?.(s.spec.id, 'admit', this.sim.now);
  }

  private maybeStartIteration(): void {
    if (this.ctx.iter) return;
    const batch = this.batcher.next();
    if (batch) this.startIteration(batch);
  }

  private startIteration(batch: RequestState[]): void {
    const E = this.ctx.E;
    const t = this.walk.plan(batch);
    const views: RequestView[] = batch.map((s, i) => ({
      spec: s.spec,
      processedTokens: s.processed,
      iterationTokens: t.tokens[i]!,
      phase: s.processed === 0 ? 'prefill' : 'decode',
      emittedTokens: s.emitted,
    }));
    this.router.reserve(batch.length);
    const actBytes = activationBytes(this.m, t.totalTokens);
    const activations = this.res.vram.tryAllocate(actBytes, 'activations', `iteration ${this.iterations}`);
    if (!activations) {
      throw new SimError(`no VRAM for the activations of ${t.totalTokens} tokens`, this.sim.now, 'serving executor');
    }
    this.ctx.iter = {
      index: this.iterations,
      batch,
      tokens: t.tokens,
      totalTokens: t.totalTokens,
      encTokens: t.encTokens,
      encTotal: t.encTotal,
      firstMoeLayer: t.firstMoeLayer,
      crossContext: t.crossContext,
      layerTokens: t.layerTokens,
      layerTotal: t.layerTotal,
      views,
      activations,
      layer: -1,
      moeLayer: -1,
      remaining: 0,
      tokensPerExpert: new Int32Array(E),
      computing: false,
      computingKey: -1,
      blockedSinceNs: -1,
      activatedCount: 0,
      decodeOnly: views.every((v) => v.phase === 'decode'),
    };
    const d = this.driver;
    const start = d.call('onIterationStart', () => this.policy.onIterationStart?.(this.ctx.view));
    this.residency.apply('onIterationStart', start);
    this.layers.start(this.ctx.iter, t.startLayer);
  }

  // Kernel completions. The executor has at most one kernel on the GPU at a time, and the
  // iteration state says where it stands (layer, expert), so each kind of kernel has one stored
  // callback rather than a closure per submission.
  private readonly afterRouter = (): void => {
    const it = this.ctx.iter!;
    this.routeLayer(it, this.moeIndexOfLayer[it.layer]!);
  };
  private readonly afterExpertKernel = (): void => {
    const it = this.ctx.iter!;
    it.computing = false;
    it.remaining--;
    this.residency.afterCompute(it.computingKey);
    this.order.pump(it);
  };
  /** A piece computed off the GPU stream (host experts on the CPU) finished. */
  private readonly afterHostPiece = (piece: number): void => {
    const it = this.ctx.iter!;
    it.remaining--;
    this.residency.afterCompute(piece);
    this.order.pump(it);
  };
  private readonly afterLmHead = (): void => this.finishIteration();

  /** The router of MoE layer `moeLayer` has run: route, claim the experts, ask the policy, compute. */
  private routeLayer(it: IterationState, moeLayer: number): void {
    it.moeLayer = moeLayer;
    const activated = this.router.route(it, moeLayer);
    it.activatedCount = activated.length;
    this.order.beginLayer(it, activated);
    // Needs first (hits, queue-jumps, on-demand fetches), then the policy's prefetches.
    this.residency.claimLayer(it, moeLayer, activated);
    if (this.policy.onLayerRouted) {
      // LayerRouting is valid during the call only.
      const d = this.driver.onLayerRouted(this.ctx.view, this.router.layerRouting(it, moeLayer));
      this.residency.apply('onLayerRouted', d);
    }
    if (this.m.sharedExperts > 0) {
      it.computing = true;
      const k = this.kernels;
      const label = k.layerLabels[it.layer]!.shared;
      k.submit(k.tokenOpNs('sharedExperts', it.layerTotal), label, 'sharedExpert', this.afterShared);
    } else {
      this.order.pump(it);
    }
  }

  private readonly afterShared = (): void => {
    const it = this.ctx.iter!;
    it.computing = false;
    this.order.pump(it);
  };

  private finishMoeLayer(it: IterationState): void {
    if (this.policy.onLayerDone) {
      this.residency.apply('onLayerDone', this.driver.onLayerDone(this.ctx.view, it.moeLayer));
    }
    this.layers.start(it, it.layer + 1);
  }

  private finishIteration(): void {
    const it = this.ctx.iter!;
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
    for (const s of finished) this.finishRequest(s, now);
    this.batcher.retire();
    const d = this.driver;
    this.residency.apply(
      'onIterationEnd',
      d.call('onIterationEnd', () => this.policy.onIterationEnd?.(this.ctx.view)),
    );
    this.ctx.iter = null;
    this.maybeStartIteration();
  }

  private finishRequest(s: RequestState, now: Ns): void {
    this.outcome.finishNs[s.index] = now;
    this.outcome.emitted[s.index] = s.emitted;
    this.finishedRequests++;
    if (s.kv) this.res.vram.free(s.kv);
    s.kv = null;
    s.router = null;
    this.workload.routing.release?.(s.spec.id);
    this.sink?.onRequest?.(s.spec.id, 'finish', now);
    this.driver.call('onRequestFinished', () => this.policy.onRequestFinished?.(this.ctx.view, s.spec));
  }
}

function checkRoutingShape(model: ModelProfile, workload: Workload): void {
  const r = workload.routing;
  if (r.moeLayers !== model.moeLayers || r.experts !== model.experts || r.topK !== model.topK) {
    throw new UserError(
      `routing shape ${r.moeLayers} layers × ${r.experts} experts top-${r.topK} does not match model ${model.id} ` +
        `(${model.moeLayers} × ${model.experts} top-${model.topK})`,
      undefined,
      'workload.routing',
    );
  }
}
