/**
 * The task DAG of one pass (DESIGN §7, §8): the single builder that both the critical-path
 * estimator (`estimator.ts`, static, cost-model durations, no contention) and the pass
 * simulation (`pass-sim.ts`, the task-graph executor with contention) consume, so that
 * "simulated ≥ critical path" is a meaningful property.
 *
 * Tasks per GPU layer (`expert` granularity, module-based batching — MoE-Gen):
 * - H2D: the layer's dense module into one of `weightSlots` dense buffers (skipped if cached);
 * - ω part (round(ω·B) sequences): GPU attention projections → D2H of Q → CPU attention over
 *   the host KV (`cpuCores` cores; for MLA with the latent up-projection, `mlaUpProjection`)
 *   → H2D of its output;
 * - GPU part, per micro-batch of b_a sequences: H2D of its past KV into one of `kvBuffers`
 *   staging buffers (decode, host KV) → GPU attention → D2H of its new KV (host KV);
 * - GPU router over every token of the pass (after both parts), shared experts or, in a dense
 *   layer, the dense FFN; the dense buffer is released after its last user;
 * - per expert in order: H2D of its weights into one of `expertSlots` slots (every expert
 *   when `streamAllExperts`, else the routed ones; none if cached) → its ⌈tokens / b_e⌉ GEMM
 *   chunks, one task (they run back to back; each chunk priced and launched on its own); the
 *   slot is released after it, so the next expert streams while the previous one computes.
 * `layer` granularity: one H2D of the whole (uncached part of the) layer into one of
 * `weightSlots` layer buffers, released at the end of the layer. Model-based batching
 * (`perMicroBatch`): attention, router and experts run per micro-batch; with ω = 1 the GPU
 * runs the projections of micro-batch m+1 before the post-attention part of m (CGOPipe).
 * CPU layers (`l ≥ gpuLayers`, llama.cpp): hidden state D2H, CPU projections + router, CPU
 * attention, CPU FFN over the routed experts' weights in host DRAM; H2D back before the next
 * GPU layer. Finally the LM head on the GPU and a join.
 *
 * **Engine order is part of the DAG.** Kernels form one chain (one CUDA stream), chained H2D
 * copies (weights and KV) one chain (MoE-Gen's single host-to-device engine thread, which
 * issues copies in a fixed order), the KV D2H copies one chain, CPU tasks one chain; small
 * activation copies of the CPU-attention path are not chained and have a higher link priority
 * (they overtake bulk copies at packet boundaries). Buffer reuse is a dep: fill f of
 * a ring of n buffers waits for the task that releases fill f − n. Without these edges a
 * critical path would let every copy run at once. With them, the simulated pass differs from
 * the critical path only by contention the DAG does not express: host-DRAM bandwidth shared by
 * DMA and CPU work, the unchained copies sharing the links, memory gating.
 *
 * Routing: per-expert token counts per MoE layer from `counts` (the workload's aggregate
 * router in simulations; `expectedCounts`, even integers, in the estimator).
 *
 * Ids are consecutive integers from 0 in creation order, deps always earlier (creation order is
 * a topological order); a releaser lists its holder as its last dep (the executor checks
 * ancestry depth-first from the last dep).
 */
import type { HardwareProfile, ModelProfile } from '../../hardware-profiles/types.ts';
import { ACTIVATION_BYTES } from '../cost/cost-model.ts';
import type { CostModel } from '../cost/types.ts';
import type { Ns } from '../kernel/time.ts';
import { ceilNs } from '../kernel/time.ts';
import type { MemoryCategory } from '../resources/memory-pool.ts';
import type { MemoryRequest, TaskSpec } from '../taskgraph/types.ts';
import {
  cachedModules,
  cpuAttentionSeqs,
  KV_OUT_BUFFERS,
  modelModules,
  vramNeeded,
  type CachedModules,
  type VramBreakdown,
} from './memory-model.ts';
import { mlaUpProjection, passConfigProblem, type CountsFn } from './pass-config.ts';
import type { PassConfig, PassShape } from './types.ts';

export { expectedCounts, mlaUpProjection, passConfigProblem, type CountsFn } from './pass-config.ts';

export interface DagInput {
  readonly model: ModelProfile;
  readonly hardware: HardwareProfile;
  readonly cost: CostModel;
  readonly shape: PassShape;
  readonly config: PassConfig;
  readonly counts: CountsFn;
  /** Build only the first `layerLimit` layers (then the LM head): the search's extrapolation. */
  readonly layerLimit?: number;
  /** Give tasks readable labels (timelines, errors). Default false (ids only, faster). */
  readonly labels?: boolean;
  /**
   * Streaming: each task is handed to `onTask` as it is created (ids in order, deps always
   * earlier) and not kept (`PassDag.tasks` is then empty): the estimator's allocation-light path.
   */
  readonly onTask?: (t: TaskSpec) => void;
}

export interface PassDag {
  readonly tasks: readonly TaskSpec[];
  /** The final join: the pass ends when it finishes. */
  readonly finalId: number;
  readonly cached: CachedModules;
  readonly vram: VramBreakdown;
  /** Σ routed token-slots over the MoE layers built, and the (MoE layer, expert) pairs. */
  readonly routedTokenSlots: number;
  readonly expertLayerPairs: number;
  /** (MoE layer, expert) pairs with at least one token. */
  readonly activatedPairs: number;
  readonly layersBuilt: number;
  readonly moeLayersBuilt: number;
  /** Per layer built: the task its next layer's compute follows (its last kernel or CPU task). */
  readonly layerEnds: readonly number[];
}

/** A ring of n buffers: fill f waits for the release of fill f − n. */
class Ring {
  private readonly releasers: number[] = [];
  private fills = 0;
  constructor(
    private readonly size: number,
    private readonly prefix: string,
  ) {}
  /** The next fill: its index, hold key, and the releaser of the fill it reuses (-1: none). */
  next(): { readonly fill: number; readonly key: string; readonly waitFor: number } {
    const fill = this.fills++;
    const waitFor = fill >= this.size ? this.releasers[fill - this.size]! : -1;
    if (waitFor === undefined) throw new RangeError(`ring ${this.prefix}: fill ${fill - this.size} has no releaser`);
    return { fill, key: `${this.prefix}${fill}`, waitFor };
  }
  released(fill: number, by: number): void {
    this.releasers[fill] = by;
  }
}

/**
 * Link priority of the unchained activation copies (hidden states, Q and attention output of
 * the CPU-attention path): ahead of the bulk weight/KV streams, which they overtake at the next
 * packet boundary (the default priority is 0, lower first).
 */
export const URGENT_PRIORITY = -1;

interface MutableTask {
  id: number;
  priority?: number;
  kind: TaskSpec['kind'];
  category: string;
  label?: string;
  deps: number[];
  alloc?: MemoryRequest[];
  release?: string[];
  durationNs?: Ns;
  cores?: number;
  computeNs?: Ns;
  bytes?: number;
}

/** Builds the DAG of one pass. Throws RangeError for an invalid configuration. */
export function buildPassDag(inp: DagInput): PassDag {
  const { model, hardware: hw, cost, shape, config: c } = inp;
  const problem = passConfigProblem(c, model);
  if (problem) throw new RangeError(`invalid pass configuration: ${problem}`);
  if (!(Number.isSafeInteger(shape.seqs) && shape.seqs >= 1))
    throw new RangeError(`pass seqs must be an integer ≥ 1 (got ${shape.seqs})`);
  const mm = modelModules(model);
  const dv = model.derived;
  const L = mm.layers;
  const E = mm.experts;
  const gl = Math.min(L, c.gpuLayers);
  const cached = cachedModules(mm, c.cachedParamBytes, c.cacheOrder, gl);
  const vram = vramNeeded(model, shape, c, cached);
  const layersBuilt = Math.min(L, inp.layerLimit ?? L);
  const labels = inp.labels ?? false;
  const h = model.hiddenSize;
  const kvTok = mm.kvBytesPerTokenPerLayer;
  const T = shape.seqs * shape.newTokens;
  const nt = shape.newTokens;
  const past = shape.pastTokens;
  /** Σ over a sequence's new tokens of the context each attends (itself included). */
  const ctxPerSeq = nt * past + (nt * (nt + 1)) / 2;
  const actBytes = (tokens: number) => Math.max(1, Math.round(tokens * h * ACTIVATION_BYTES));
  const cpuRate = c.cpuCores * hw.cpu.vectorFlopsPerSecPerCore * hw.cpu.vectorEfficiency;
  const cpuNs = (flops: number): Ns => ceilNs((flops / cpuRate) * 1e9);

  const mlaUp = mlaUpProjection(model);
  const tasks: TaskSpec[] = [];
  let lastGpu = -1;
  let lastH2d = -1;
  let lastD2h = -1;
  let lastCpu = -1;
  let routedTokenSlots = 0;
  let expertLayerPairs = 0;
  let activatedPairs = 0;
  let moeLayersBuilt = 0;

  const onTask = inp.onTask;
  let nextId = 0;
  const emit = (t: MutableTask): number => {
    if (onTask) onTask(t as unknown as TaskSpec);
    else tasks.push(t as unknown as TaskSpec);
    return t.id;
  };
  const base = (
    kind: TaskSpec['kind'],
    category: string,
    deps: number[],
    label: (() => string) | undefined,
  ): MutableTask => {
    const t: MutableTask = { id: nextId++, kind, category, deps: deps.filter((d) => d >= 0) };
    if (labels && label) t.label = label();
    return t;
  };
  const hold = (bytes: number, category: MemoryCategory, key: string): MemoryRequest[] => [
    { pool: 'vram', bytes, category, hold: key },
  ];

  const gpu = (
    category: string,
    durationNs: Ns,
    deps: number[],
    label?: () => string,
    extra?: Partial<MutableTask>,
  ): number => {
    const t = base('gpu', category, [lastGpu, ...deps], label);
    t.durationNs = durationNs;
    if (extra) Object.assign(t, extra, { deps: t.deps });
    lastGpu = emit(t);
    return lastGpu;
  };
  const h2d = (
    category: string,
    bytes: number,
    deps: number[],
    chained: boolean,
    label?: () => string,
    extra?: Partial<MutableTask>,
  ): number => {
    const t = base('h2d', category, chained ? [lastH2d, ...deps] : deps, label);
    t.bytes = bytes;
    if (!chained) t.priority = URGENT_PRIORITY;
    if (extra) Object.assign(t, extra, { deps: t.deps });
    const id = emit(t);
    if (chained) lastH2d = id;
    return id;
  };
  const d2h = (
    category: string,
    bytes: number,
    deps: number[],
    chained: boolean,
    label?: () => string,
    extra?: Partial<MutableTask>,
  ): number => {
    const t = base('d2h', category, chained ? [lastD2h, ...deps] : deps, label);
    t.bytes = bytes;
    if (!chained) t.priority = URGENT_PRIORITY;
    if (extra) Object.assign(t, extra, { deps: t.deps });
    const id = emit(t);
    if (chained) lastD2h = id;
    return id;
  };
  const cpu = (category: string, computeNs: Ns, bytes: number, deps: number[], label?: () => string): number => {
    const t = base('cpu', category, [lastCpu, ...deps], label);
    t.cores = c.cpuCores;
    t.computeNs = computeNs;
    t.bytes = Math.round(bytes);
    lastCpu = emit(t);
    return lastCpu;
  };
  const barrier = (category: string, deps: number[], release: string[], label?: () => string): number => {
    const t = base('barrier', category, deps, label);
    if (release.length > 0) t.release = release;
    return emit(t);
  };
  const gpuCost = (op: Parameters<CostModel['estimate']>[0]): Ns => cost.estimate(op).ns;

  const expertRing = new Ring(c.expertSlots, 'x');
  const weightRing = new Ring(c.weightSlots, 'w');
  const kvInRing = new Ring(c.kvBuffers, 'ki');
  const kvOutRing = new Ring(KV_OUT_BUFFERS, 'ko');
  const counts = new Float64Array(E);

  /** Experts of one MoE layer over `tokens` tokens. `weightDep`: the layer transfer (layer granularity) or -1. */
  const experts = (
    l: number,
    mi: number,
    tokens: number,
    after: number,
    weightDep: number,
    streamOwn: boolean,
    tag: string,
  ): void => {
    counts.fill(0);
    inp.counts(mi, tokens, counts);
    for (let e = 0; e < E; e++) {
      const cnt = counts[e]!;
      routedTokenSlots += cnt;
      expertLayerPairs++;
      if (cnt > 0) activatedPairs++;
      let w = -1;
      let key: string | undefined;
      let fill = -1;
      if (streamOwn && e >= cached.cachedExperts[l]! && (cnt > 0 || c.streamAllExperts)) {
        const r = expertRing.next();
        key = r.key;
        fill = r.fill;
        w = h2d('weights', mm.expertBytes, [r.waitFor], true, () => `L${l} e${e} weights`, {
          alloc: hold(mm.expertBytes, 'expertWeights', r.key),
        });
      }
      if (cnt > 0) {
        // ⌈cnt / b_e⌉ GEMM chunks run back to back on the stream with nothing between them (all
        // their deps are met when the first may start), so they are one task whose duration is
        // the sum of the chunks' (each chunk priced, and launched, on its own).
        const chunks = Math.ceil(cnt / c.expertChunkTokens);
        const full = cost.estimate({ kind: 'expert', tokens: c.expertChunkTokens }).ns;
        const lastTokens = cnt - c.expertChunkTokens * (chunks - 1);
        const ns = ((chunks - 1) * full + cost.estimate({ kind: 'expert', tokens: lastTokens }).ns) as Ns;
        const id = gpu(
          'expert',
          ns,
          [after, weightDep, w],
          () => `L${l}${tag} e${e} (${chunks} chunk${chunks > 1 ? 's' : ''})`,
          key ? { release: [key] } : undefined,
        );
        if (key) expertRing.released(fill, id);
      } else if (key) {
        expertRing.released(
          fill,
          barrier('sync', [after, w], [key], () => `L${l}${tag} e${e} unused`),
        );
      }
    }
  };

  let layerEnd = -1; // last task of the previous layer
  const layerEnds: number[] = [];
  let prevCpuLayer = false;
  for (let l = 0; l < layersBuilt; l++) {
    const mi = mm.moeIndexOfLayer[l]!;
    if (mi >= 0) moeLayersBuilt++;
    const kvHost = l >= c.kvGpuLayers;

    // ---- CPU layer (llama.cpp): weights read in host DRAM.
    if (l >= gl) {
      const input = prevCpuLayer
        ? layerEnd
        : d2h('activations', actBytes(T), [layerEnd, lastGpu], false, () => `L${l} hidden D2H`);
      const proj = cpu(
        'cpuAttnProj',
        cpuNs(T * (dv.attentionProjFlopsPerToken + (mi >= 0 ? dv.routerFlopsPerToken : 0))),
        dv.attentionBytesPerLayer,
        [input],
        () => `L${l} cpu proj`,
      );
      const ca = cost.estimate({
        kind: 'cpuAttention',
        tokens: T,
        contextTokens: shape.seqs * ctxPerSeq,
        cores: c.cpuCores,
      });
      cpu('cpuAttention', ca.computeNs ?? ca.ns, ca.bytes, [proj], () => `L${l} cpu attention`);
      let flops: number;
      let bytes: number;
      if (mi >= 0) {
        counts.fill(0);
        inp.counts(mi, T, counts);
        let activated = 0;
        let slots = 0;
        for (let e = 0; e < E; e++) {
          const cnt = counts[e]!;
          slots += cnt;
          expertLayerPairs++;
          if (cnt > 0) {
            activated++;
            activatedPairs++;
          }
        }
        routedTokenSlots += slots;
        flops = slots * dv.expertFlopsPerToken + T * dv.sharedExpertFlopsPerToken;
        bytes = activated * mm.expertBytes + dv.sharedExpertBytesPerLayer;
      } else {
        flops = T * dv.denseFfnFlopsPerToken;
        bytes = dv.denseFfnBytesPerLayer;
      }
      layerEnd = cpu('cpuFfn', cpuNs(flops), bytes, [], () => `L${l} cpu ffn`);
      layerEnds.push(layerEnd);
      prevCpuLayer = true;
      continue;
    }

    // ---- GPU layer.
    const input = prevCpuLayer ? h2d('activations', actBytes(T), [layerEnd], false, () => `L${l} hidden H2D`) : -1;
    prevCpuLayer = false;
    const denseStreamed = !cached.denseCached[l];
    let weightTask = -1; // layer (layer granularity) or dense module (expert granularity)
    let weightKey: string | undefined;
    let weightFill = -1;
    if (c.weightGranularity === 'layer') {
      const expertsStreamed = mi >= 0 ? E - cached.cachedExperts[l]! : 0;
      const bytes = (denseStreamed ? mm.denseBytes[l]! : 0) + expertsStreamed * mm.expertBytes;
      if (bytes > 0) {
        const r = weightRing.next();
        weightKey = r.key;
        weightFill = r.fill;
        weightTask = h2d('weights', bytes, [r.waitFor, c.prefetch ? -1 : layerEnd], true, () => `L${l} layer weights`, {
          alloc: hold(bytes, 'prefetchBuffer', r.key),
        });
      }
    } else if (denseStreamed) {
      const r = weightRing.next();
      weightKey = r.key;
      weightFill = r.fill;
      weightTask = h2d(
        'weights',
        mm.denseBytes[l]!,
        [r.waitFor, c.prefetch ? -1 : layerEnd],
        true,
        () => `L${l} dense weights`,
        {
          alloc: hold(mm.denseBytes[l]!, 'prefetchBuffer', r.key),
        },
      );
    }
    const inputs = [input, weightTask]; // the holder last: releasers find it first

    /** GPU attention of `s` sequences (micro-batch `m`) with host or GPU KV. */
    const gpuAttention = (s: number, m: number, extraDeps: number[]): number => {
      let kvIn = -1;
      let kvInKey: string | undefined;
      let kvInFill = -1;
      if (kvHost && past > 0) {
        const r = kvInRing.next();
        kvInKey = r.key;
        kvInFill = r.fill;
        const bytes = s * past * kvTok;
        kvIn = h2d('kv', bytes, [r.waitFor], true, () => `L${l} m${m} KV H2D`, {
          alloc: hold(bytes, 'kvCache', r.key),
        });
      }
      let out: ReturnType<Ring['next']> | undefined;
      const alloc: MemoryRequest[] = [];
      if (kvHost) {
        out = kvOutRing.next();
        alloc.push({ pool: 'vram', bytes: s * nt * kvTok, category: 'kvCache', hold: out.key });
      }
      const deps = [...inputs, ...extraDeps, out ? out.waitFor : -1, kvIn];
      const att = gpu(
        'attention',
        gpuCost({ kind: 'attention', tokens: s * nt, contextTokens: s * ctxPerSeq }),
        deps,
        () => `L${l} m${m} attention`,
        {
          ...(alloc.length > 0 ? { alloc } : {}),
          ...(kvInKey ? { release: [kvInKey] } : {}),
        },
      );
      if (kvInKey) kvInRing.released(kvInFill, att);
      if (out)
        kvOutRing.released(
          out.fill,
          d2h('kv', s * nt * kvTok, [att], true, () => `L${l} m${m} KV D2H`, { release: [out.key] }),
        );
      return att;
    };

    /** CPU attention of `s` sequences: GPU projections → Q D2H → CPU → output H2D. Returns [proj, join]. */
    const cpuAttention = (s: number, m: number, extraDeps: number[]): [number, number] => {
      const proj = gpu(
        'attnProj',
        gpuCost({ kind: 'attentionProj', tokens: s * nt }),
        [...inputs, ...extraDeps],
        () => `L${l} m${m} proj (CPU part)`,
      );
      const q = d2h('activations', actBytes(s * nt), [proj], false, () => `L${l} m${m} Q D2H`);
      const ca = cost.estimate({
        kind: 'cpuAttention',
        tokens: s * nt,
        contextTokens: s * ctxPerSeq,
        cores: c.cpuCores,
      });
      // MLA: the latent up-projection of these tokens (W_UK into the queries, W_UV out of the
      // attended latents) runs beside the scores on the CPU, reading kv_b from host DRAM.
      // Priced at the FLOP rate of the runtime's CPU kernel (its efficiency and threads), as the
      // scores are: the system's own CPU code does both.
      const caNs = ca.computeNs ?? ca.ns;
      const upNs =
        mlaUp.flopsPerToken > 0 && ca.flops > 0 && caNs > 0
          ? ceilNs(((s * nt * mlaUp.flopsPerToken) / ca.flops) * caNs)
          : 0;
      const computeNs = caNs + upNs;
      const ct = cpu('cpuAttention', computeNs as Ns, ca.bytes + mlaUp.bytes, [q], () => `L${l} m${m} CPU attention`);
      const out = h2d('activations', actBytes(s * nt), [ct], false, () => `L${l} m${m} attention out H2D`);
      return [proj, out];
    };

    if (c.expertBatching === 'accumulated') {
      const cpuSeqs = cpuAttentionSeqs(shape, c);
      const gpuSeqs = shape.seqs - cpuSeqs;
      const joins: number[] = [];
      if (cpuSeqs > 0) joins.push(cpuAttention(cpuSeqs, 0, [])[1]);
      for (let m = 0, done = 0; done < gpuSeqs; m++) {
        const s = Math.min(c.attnMicroSeqs, gpuSeqs - done);
        gpuAttention(s, m, []);
        done += s;
      }
      // The dense buffer is released by the last module that reads it.
      const denseRelease = c.weightGranularity === 'expert' && weightKey ? { release: [weightKey] } : undefined;
      let after: number;
      if (mi < 0) {
        after = gpu(
          'denseFfn',
          gpuCost({ kind: 'denseFfn', tokens: T }),
          [...joins, ...inputs],
          () => `L${l} dense FFN`,
          denseRelease,
        );
      } else {
        const shared = model.sharedExperts > 0;
        after = gpu(
          'router',
          gpuCost({ kind: 'router', tokens: T }),
          [...joins, ...inputs],
          () => `L${l} router`,
          shared ? undefined : denseRelease,
        );
        if (shared)
          after = gpu(
            'sharedExpert',
            gpuCost({ kind: 'sharedExperts', tokens: T }),
            [after],
            () => `L${l} shared experts`,
            denseRelease,
          );
      }
      if (denseRelease) weightRing.released(weightFill, after);
      if (mi >= 0)
        experts(
          l,
          mi,
          T,
          after,
          c.weightGranularity === 'layer' ? weightTask : -1,
          c.weightGranularity === 'expert',
          '',
        );
    } else {
      const M = Math.ceil(shape.seqs / c.attnMicroSeqs);
      const size = (m: number) => Math.min(c.attnMicroSeqs, shape.seqs - m * c.attnMicroSeqs);
      const post = (m: number, attnJoin: number): void => {
        const tok = size(m) * nt;
        if (mi < 0) {
          gpu(
            'denseFfn',
            gpuCost({ kind: 'denseFfn', tokens: tok }),
            [attnJoin, weightTask],
            () => `L${l} m${m} dense FFN`,
          );
          return;
        }
        let after = gpu(
          'router',
          gpuCost({ kind: 'router', tokens: tok }),
          [attnJoin, weightTask],
          () => `L${l} m${m} router`,
        );
        if (model.sharedExperts > 0)
          after = gpu(
            'sharedExpert',
            gpuCost({ kind: 'sharedExperts', tokens: tok }),
            [after],
            () => `L${l} m${m} shared experts`,
          );
        experts(l, mi, tok, after, weightTask, false, ` m${m}`);
      };
      if (c.omega === 0) {
        for (let m = 0; m < M; m++) post(m, gpuAttention(size(m), m, []));
      } else {
        const joins: number[] = [];
        joins.push(cpuAttention(size(0), 0, [])[1]);
        for (let m = 0; m < M; m++) {
          if (m + 1 < M) joins.push(cpuAttention(size(m + 1), m + 1, [])[1]);
          post(m, joins[m]!);
        }
      }
    }
    if (c.weightGranularity === 'layer' && weightKey) {
      weightRing.released(
        weightFill,
        barrier('sync', [lastGpu, weightTask], [weightKey], () => `L${l} release layer weights`),
      );
    }
    layerEnd = lastGpu;
    layerEnds.push(layerEnd);
  }

  const lmInput = prevCpuLayer ? h2d('activations', actBytes(T), [layerEnd], false, () => 'hidden H2D (LM head)') : -1;
  const lm = gpu('lmHead', gpuCost({ kind: 'lmHead', tokens: shape.seqs }), [lmInput], () => 'LM head');
  // Every unchained copy feeds a later task in a whole pass and in a truncated one, so the chain
  // tails cover everything; a materialised DAG also joins any task nobody depends on.
  const finalId = barrier(
    'sync',
    [lm, lastH2d, lastD2h, lastCpu, ...(onTask ? [] : unchainedTails(tasks))],
    [],
    () => 'pass end',
  );
  return {
    tasks,
    finalId,
    cached,
    vram,
    routedTokenSlots,
    expertLayerPairs,
    activatedPairs,
    layersBuilt,
    moeLayersBuilt,
    layerEnds,
  };
}

/**
 * Tasks nobody depends on (besides the chain tails): the unchained activation copies whose
 * consumers were not built (none in a full pass, but kept so the join covers everything).
 */
function unchainedTails(tasks: readonly TaskSpec[]): number[] {
  const hasDependent = new Uint8Array(tasks.length);
  for (const t of tasks) for (const d of t.deps ?? []) hasDependent[d as number] = 1;
  const out: number[] = [];
  for (let i = 0; i < tasks.length; i++) if (!hasDependent[i]) out.push(i);
  return out;
}
