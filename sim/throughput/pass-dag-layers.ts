/**
 * The layer builders of the pass DAG (`pass-dag.ts`, whose header says what each layer runs):
 * a CPU layer, a GPU layer's weight transfer, GPU and CPU attention, the post-attention part
 * (module-based or per micro-batch) and the experts of a MoE layer. Each builder adds its
 * tasks through the emitter (`dag-emitter.ts`) in the order the DAG's ids follow; the
 * orchestration over layers, the LM head and the final join stay in `pass-dag.ts`.
 */
import type { HardwareProfile, ModelProfile } from '../../hardware-profiles/types.ts';
import type { CostModel } from '../cost/types.ts';
import { ceilNs, type Ns } from '../kernel/time.ts';
import type { MemoryRequest } from '../taskgraph/types.ts';
import type { DagEmitter } from './dag-emitter.ts';
import { hold, releasing, Ring, type RingSlot } from './dag-emitter.ts';
import { LayerPrices } from './layer-prices.ts';
import { type CachedModules, cpuAttentionSeqs, KV_OUT_BUFFERS, type ModelModules } from './memory-model.ts';
import { type CountsFn, mlaUpProjection } from './pass-config.ts';
import { RoutingTally } from './routing-tally.ts';
import type { PassConfig, PassShape } from './types.ts';

/** What the layer builders read: the pass's inputs and the model's modules. */
export interface LayerInputs {
  readonly model: ModelProfile;
  readonly hardware: HardwareProfile;
  readonly cost: CostModel;
  readonly shape: PassShape;
  readonly config: PassConfig;
  readonly counts: CountsFn;
  readonly mm: ModelModules;
  readonly cached: CachedModules;
}

/** One GPU layer being built: its index, MoE index, KV placement, inputs and weight transfer. */
interface GpuLayer {
  readonly l: number;
  /** Index among MoE layers, or -1 for a dense layer. */
  readonly mi: number;
  readonly kvHost: boolean;
  /** Deps of the layer's first kernels: its input copy, then its weight transfer (the holder last). */
  readonly inputs: number[];
  /** The layer's (layer granularity) or dense module's (expert granularity) transfer, or -1. */
  readonly weightTask: number;
  readonly weightKey: RingSlot | undefined;
  readonly weightFill: number;
}

/** Builds layers into an emitter and tallies the routing it met. */
export class LayerBuilder {
  /** The routing the builders met (per expert GEMM and per pass). */
  readonly tally: RoutingTally;
  private readonly c: PassConfig;
  /** Tokens of the pass, new tokens and past tokens per sequence. */
  private readonly T: number;
  private readonly nt: number;
  private readonly past: number;
  readonly price: LayerPrices; // the durations and sizes of its tasks
  private readonly mlaUp: ReturnType<typeof mlaUpProjection>;
  private readonly expertRing: Ring;
  private readonly weightRing: Ring;
  private readonly kvInRing: Ring;
  private readonly kvOutRing = new Ring(KV_OUT_BUFFERS, 'ko');
  private readonly countsBuf: Float64Array;

  constructor(
    private readonly inp: LayerInputs,
    private readonly e: DagEmitter,
  ) {
    const { shape, config: c } = inp;
    this.c = c;
    this.T = shape.seqs * shape.newTokens;
    this.nt = shape.newTokens;
    this.past = shape.pastTokens;
    this.price = new LayerPrices(inp.cost, inp.model, inp.hardware, c, this.nt, this.past);
    this.mlaUp = mlaUpProjection(inp.model);
    this.expertRing = new Ring(c.expertSlots, 'x');
    this.weightRing = new Ring(c.weightSlots, 'w');
    this.kvInRing = new Ring(c.kvBuffers, 'ki');
    this.countsBuf = new Float64Array(inp.mm.experts);
    this.tally = new RoutingTally(inp.model.moeLayers, inp.mm.experts);
  }

  /** A CPU layer (llama.cpp): weights read in host DRAM. Returns its last task. */
  cpuLayer(l: number, mi: number, layerEnd: number, prevCpuLayer: boolean): number {
    const { e, T, inp } = this;
    const dv = inp.model.derived;
    const input = prevCpuLayer
      ? layerEnd
      : e.d2h('activations', this.price.actBytes(T), [layerEnd, e.lastGpu], false, () => `L${l} hidden D2H`);
    const proj = e.cpu(
      'cpuAttnProj',
      this.price.cpuNs(T * (dv.attentionProjFlopsPerToken + (mi >= 0 ? dv.routerFlopsPerToken : 0))),
      dv.attentionBytesPerLayer,
      [input],
      () => `L${l} cpu proj`,
    );
    const ca = inp.cost.estimate({
      kind: 'cpuAttention',
      tokens: T,
      contextTokens: inp.shape.seqs * this.price.ctxPerSeq,
      cores: this.c.cpuCores,
    });
    e.cpu('cpuAttention', ca.computeNs ?? ca.ns, ca.bytes, [proj], () => `L${l} cpu attention`);
    let flops: number;
    let bytes: number;
    if (mi >= 0) {
      const counts = this.countsBuf;
      counts.fill(0);
      inp.counts(mi, T, counts);
      let activated = 0;
      let slots = 0;
      for (let x = 0; x < inp.mm.experts; x++) {
        const cnt = counts[x]!;
        slots += cnt;
        this.tally.pair(mi, x, cnt);
        if (cnt > 0) activated++;
      }
      this.tally.routedTokenSlots += slots;
      flops = slots * dv.expertFlopsPerToken + T * dv.sharedExpertFlopsPerToken;
      bytes = activated * inp.mm.expertBytes + dv.sharedExpertBytesPerLayer;
    } else {
      flops = T * dv.denseFfnFlopsPerToken;
      bytes = dv.denseFfnBytesPerLayer;
    }
    return e.cpu('cpuFfn', this.price.cpuNs(flops), bytes, [], () => `L${l} cpu ffn`);
  }

  /** A GPU layer: input copy (after a CPU layer), weights, attention, the rest. Returns its last kernel. */
  gpuLayer(l: number, mi: number, layerEnd: number, prevCpuLayer: boolean): number {
    const e = this.e;
    const input = prevCpuLayer
      ? e.h2d('activations', this.price.actBytes(this.T), [layerEnd], false, () => `L${l} hidden H2D`)
      : -1;
    const layer = this.layerWeights(l, mi, layerEnd, input);
    if (this.c.expertBatching === 'accumulated') this.accumulatedLayer(layer);
    else this.perMicroBatchLayer(layer);
    const wk = layer.weightKey;
    if (this.c.weightGranularity === 'layer' && wk) {
      const sync = e.barrier('sync', [e.lastGpu, layer.weightTask], releasing(wk), () => `L${l} release layer weights`);
      this.weightRing.released(layer.weightFill, sync);
    }
    return e.lastGpu;
  }

  /** The layer's weight transfer: the whole uncached layer (layer granularity) or its dense module. */
  private layerWeights(l: number, mi: number, layerEnd: number, input: number): GpuLayer {
    const { c, e } = this;
    const { mm, cached } = this.inp;
    const denseStreamed = !cached.denseCached[l];
    let weightTask = -1;
    let weightKey: RingSlot | undefined;
    let weightFill = -1;
    if (c.weightGranularity === 'layer') {
      const expertsStreamed = mi >= 0 ? mm.experts - cached.cachedExperts[l]! : 0;
      const bytes = (denseStreamed ? mm.denseBytes[l]! : 0) + expertsStreamed * mm.expertBytes;
      if (bytes > 0) {
        const r = this.weightRing.next();
        weightKey = r.slot;
        weightFill = r.fill;
        weightTask = e.h2d(
          'weights',
          bytes,
          [r.waitFor, c.prefetch ? -1 : layerEnd],
          true,
          () => `L${l} layer weights`,
          {
            alloc: hold(bytes, 'prefetchBuffer', r.slot),
          },
        );
      }
    } else if (denseStreamed) {
      const r = this.weightRing.next();
      weightKey = r.slot;
      weightFill = r.fill;
      const bytes = mm.denseBytes[l]!;
      weightTask = e.h2d('weights', bytes, [r.waitFor, c.prefetch ? -1 : layerEnd], true, () => `L${l} dense weights`, {
        alloc: hold(bytes, 'prefetchBuffer', r.slot),
      });
    }
    const kvHost = l >= c.kvGpuLayers;
    return { l, mi, kvHost, inputs: [input, weightTask], weightTask, weightKey, weightFill };
  }

  /** Module-based batching: attention of every part, then router/shared/dense once, then the experts over the pass. */
  private accumulatedLayer(ly: GpuLayer): void {
    const { c, e, T } = this;
    const { l, mi, inputs, weightKey } = ly;
    const cpuSeqs = cpuAttentionSeqs(this.inp.shape, c);
    const gpuSeqs = this.inp.shape.seqs - cpuSeqs;
    const joins: number[] = [];
    if (cpuSeqs > 0) joins.push(this.cpuAttention(ly, cpuSeqs, 0));
    for (let m = 0, done = 0; done < gpuSeqs; m++) {
      const s = Math.min(c.attnMicroSeqs, gpuSeqs - done);
      this.gpuAttention(ly, s, m);
      done += s;
    }
    // The dense buffer is released by the last module that reads it.
    const denseRelease = c.weightGranularity === 'expert' && weightKey ? { release: releasing(weightKey) } : undefined;
    let after: number;
    if (mi < 0) {
      after = e.gpu(
        'denseFfn',
        this.price.gpuCost('denseFfn', T),
        [...joins, ...inputs],
        () => `L${l} dense FFN`,
        denseRelease,
      );
    } else {
      const shared = this.inp.model.sharedExperts > 0;
      after = e.gpu(
        'router',
        this.price.gpuCost('router', T),
        [...joins, ...inputs],
        () => `L${l} router`,
        shared ? undefined : denseRelease,
      );
      if (shared)
        after = e.gpu(
          'sharedExpert',
          this.price.gpuCost('sharedExperts', T),
          [after],
          () => `L${l} shared experts`,
          denseRelease,
        );
    }
    if (denseRelease) this.weightRing.released(ly.weightFill, after);
    if (mi >= 0) {
      const layerWeights = c.weightGranularity === 'layer' ? ly.weightTask : -1;
      this.experts(l, mi, T, after, layerWeights, c.weightGranularity === 'expert', '');
    }
  }

  /** Model-based batching: attention, router and experts per micro-batch (ω = 1: CGOPipe's order). */
  private perMicroBatchLayer(ly: GpuLayer): void {
    const c = this.c;
    const seqs = this.inp.shape.seqs;
    const M = Math.ceil(seqs / c.attnMicroSeqs);
    const size = (m: number) => Math.min(c.attnMicroSeqs, seqs - m * c.attnMicroSeqs);
    if (c.omega === 0) {
      for (let m = 0; m < M; m++) this.postAttention(ly, m, size(m), this.gpuAttention(ly, size(m), m));
    } else {
      // The GPU runs the projections of micro-batch m+1 before the post-attention part of m.
      const joins: number[] = [];
      joins.push(this.cpuAttention(ly, size(0), 0));
      for (let m = 0; m < M; m++) {
        if (m + 1 < M) joins.push(this.cpuAttention(ly, size(m + 1), m + 1));
        this.postAttention(ly, m, size(m), joins[m]!);
      }
    }
  }

  /** Router, shared experts and experts (or the dense FFN) of micro-batch `m` of `seqs` sequences. */
  private postAttention(ly: GpuLayer, m: number, seqs: number, attnJoin: number): void {
    const e = this.e;
    const { l, mi, weightTask } = ly;
    const tok = seqs * this.nt;
    if (mi < 0) {
      e.gpu('denseFfn', this.price.gpuCost('denseFfn', tok), [attnJoin, weightTask], () => `L${l} m${m} dense FFN`);
      return;
    }
    let after = e.gpu('router', this.price.gpuCost('router', tok), [attnJoin, weightTask], () => `L${l} m${m} router`);
    if (this.inp.model.sharedExperts > 0)
      after = e.gpu(
        'sharedExpert',
        this.price.gpuCost('sharedExperts', tok),
        [after],
        () => `L${l} m${m} shared experts`,
      );
    this.experts(l, mi, tok, after, weightTask, false, ` m${m}`);
  }

  /** GPU attention of `s` sequences (micro-batch `m`) with host or GPU KV. Returns the attention kernel. */
  private gpuAttention(ly: GpuLayer, s: number, m: number): number {
    const { e, nt, past } = this;
    const kvTok = this.inp.mm.kvBytesPerTokenPerLayer;
    if (e.streaming) return this.gpuAttentionStreamed(ly, s);
    const l = ly.l;
    let kvIn = -1;
    let kvInKey: RingSlot | undefined;
    let kvInFill = -1;
    if (ly.kvHost && past > 0) {
      const r = this.kvInRing.next();
      kvInKey = r.slot;
      kvInFill = r.fill;
      const bytes = s * past * kvTok;
      kvIn = e.h2d('kv', bytes, [r.waitFor], true, () => `L${l} m${m} KV H2D`, {
        alloc: hold(bytes, 'kvCache', r.slot),
      });
    }
    const out = ly.kvHost ? this.kvOutRing.next() : undefined;
    const alloc: MemoryRequest[] | undefined = out && hold(s * nt * kvTok, 'kvCache', out.slot);
    const deps = [ly.inputs[0]!, ly.inputs[1]!, out ? out.waitFor : -1, kvIn];
    const att = e.gpu('attention', this.price.attentionNs(s), deps, () => `L${l} m${m} attention`, {
      alloc,
      release: kvInKey ? releasing(kvInKey) : undefined,
    });
    if (kvInKey) this.kvInRing.released(kvInFill, att);
    if (out)
      this.kvOutRing.released(
        out.fill,
        e.d2h('kv', s * nt * kvTok, [att], true, () => `L${l} m${m} KV D2H`, { release: releasing(out.slot) }),
      );
    return att;
  }

  /** `gpuAttention` in streaming mode: the same tasks and deps, priced with no objects. */
  private gpuAttentionStreamed(ly: GpuLayer, s: number): number {
    const { e, nt, past } = this;
    const kvTok = this.inp.mm.kvBytesPerTokenPerLayer;
    let kvIn = -1;
    let kvInFill = -1;
    if (ly.kvHost && past > 0) {
      const waitFor = this.kvInRing.nextWait();
      kvInFill = this.kvInRing.lastFill;
      kvIn = e.chainedCopyN('h2d', s * past * kvTok, waitFor);
    }
    const outWait = ly.kvHost ? this.kvOutRing.nextWait() : -1;
    const outFill = this.kvOutRing.lastFill;
    const att = e.gpuN(this.price.attentionNs(s), ly.inputs[0]!, ly.inputs[1]!, outWait, kvIn);
    if (kvInFill >= 0) this.kvInRing.released(kvInFill, att);
    if (ly.kvHost) this.kvOutRing.released(outFill, e.chainedCopyN('d2h', s * nt * kvTok, att));
    return att;
  }

  /** CPU attention of `s` sequences: GPU projections → Q D2H → CPU → output H2D. Returns the output copy. */
  private cpuAttention(ly: GpuLayer, s: number, m: number): number {
    const { e, nt, mlaUp } = this;
    const l = ly.l;
    const proj = e.gpu(
      'attnProj',
      this.price.gpuCost('attentionProj', s * nt),
      [...ly.inputs],
      () => `L${l} m${m} proj (CPU part)`,
    );
    const q = e.d2h('activations', this.price.actBytes(s * nt), [proj], false, () => `L${l} m${m} Q D2H`);
    const ca = this.inp.cost.estimate({
      kind: 'cpuAttention',
      tokens: s * nt,
      contextTokens: s * this.price.ctxPerSeq,
      cores: this.c.cpuCores,
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
    const ct = e.cpu('cpuAttention', computeNs as Ns, ca.bytes + mlaUp.bytes, [q], () => `L${l} m${m} CPU attention`);
    return e.h2d('activations', this.price.actBytes(s * nt), [ct], false, () => `L${l} m${m} attention out H2D`);
  }

  /** Experts of one MoE layer over `tokens` tokens. `weightDep`: the layer transfer (layer granularity) or -1. */
  private experts(
    l: number,
    mi: number,
    tokens: number,
    after: number,
    weightDep: number,
    streamOwn: boolean,
    tag: string,
  ): void {
    const { c, e } = this;
    const { mm, cached } = this.inp;
    const counts = this.countsBuf;
    counts.fill(0);
    this.inp.counts(mi, tokens, counts);
    if (e.streaming) {
      this.expertsStreamed(l, mi, after, weightDep, streamOwn);
      return;
    }
    for (let x = 0; x < mm.experts; x++) {
      const cnt = counts[x]!;
      this.tally.routedTokenSlots += cnt;
      this.tally.pair(mi, x, cnt);
      let w = -1;
      let key: RingSlot | undefined;
      let fill = -1;
      if (streamOwn && x >= cached.cachedExperts[l]! && (cnt > 0 || c.streamAllExperts)) {
        const r = this.expertRing.next();
        key = r.slot;
        fill = r.fill;
        w = e.h2d('weights', mm.expertBytes, [r.waitFor], true, () => `L${l} e${x} weights`, {
          alloc: hold(mm.expertBytes, 'expertWeights', r.slot),
        });
      }
      if (cnt > 0) {
        // ⌈cnt / b_e⌉ GEMM chunks run back to back on the stream with nothing between them (all
        // their deps are met when the first may start), so they are one task whose duration is
        // the sum of the chunks' (each chunk priced, and launched, on its own).
        const chunks = Math.ceil(cnt / c.expertChunkTokens);
        const id = e.gpu(
          'expert',
          this.price.expertNs(cnt),
          [after, weightDep, w],
          () => `L${l}${tag} e${x} (${chunks} chunk${chunks > 1 ? 's' : ''})`,
          key ? { release: releasing(key) } : undefined,
        );
        if (key) this.expertRing.released(fill, id);
      } else if (key) {
        this.expertRing.released(
          fill,
          e.barrier('sync', [after, w], releasing(key), () => `L${l}${tag} e${x} unused`),
        );
      }
    }
  }

  /**
   * `experts` in streaming mode (the counts already in `countsBuf`): the same tallies, tasks
   * and deps, priced with no objects.
   */
  private expertsStreamed(l: number, mi: number, after: number, weightDep: number, streamOwn: boolean): void {
    const { c, e } = this;
    const { mm, cached } = this.inp;
    const counts = this.countsBuf;
    const firstStreamed = cached.cachedExperts[l]!;
    for (let x = 0; x < mm.experts; x++) {
      const cnt = counts[x]!;
      this.tally.routedTokenSlots += cnt;
      this.tally.pair(mi, x, cnt);
      let w = -1;
      let fill = -1;
      if (streamOwn && x >= firstStreamed && (cnt > 0 || c.streamAllExperts)) {
        const waitFor = this.expertRing.nextWait();
        fill = this.expertRing.lastFill;
        w = e.chainedCopyN('h2d', mm.expertBytes, waitFor);
      }
      if (cnt > 0) {
        const id = e.gpuN(this.price.expertNs(cnt), after, weightDep, w);
        if (fill >= 0) this.expertRing.released(fill, id);
      } else if (fill >= 0) {
        this.expertRing.released(fill, e.barrierN(after, w));
      }
    }
  }
}
