/**
 * The layer walk: runs an iteration's layers on the GPU stream from a given layer up to the next
 * decision point — the router of the next MoE layer, or the LM head. Nothing between these
 * kernels depends on simulated time (each starts when the previous one ends, on the executor's
 * one stream), so they go to the GPU as one chain: one completion event instead of one per
 * kernel, with each kernel's busy time and trace span its own (`Gpu.submitChain`).
 *
 * A hybrid model's linear-attention layers (`isLinearAttentionLayer`) run their Gated DeltaNet
 * block where other layers run attention: priced by the sequences in the iteration, not the
 * context (fixed recurrent state, no KV cache); everything after it is the same walk.
 *
 * What a layer costs in tokens and context is the model walk's (`ModelWalk`); what happens
 * after a router is the coordinator's (`onRouter`), after the LM head too (`onHead`).
 */
import type { Ns } from '../../kernel/time.ts';
import type { KernelPart } from '../../resources/gpu.ts';
import { isLinearAttentionLayer } from '../../cost/linear-attention.ts';
import type { Kernels } from './kernels.ts';
import type { ModelWalk } from './model-walk.ts';
import type { IterationState, ServingContext } from './state.ts';

export class LayerWalk {
  private readonly chainParts: KernelPart[] = [];
  /**
   * The chain's part objects, by position, reused (the GPU reads them until the chain completes,
   * and the next chain starts after).
   */
  private readonly partPool: { durationNs: Ns; label: string; category: string }[] = [];
  /** 1 for a linear-attention layer of a hybrid model, by layer index. */
  private readonly linearLayer: Uint8Array;

  constructor(
    private readonly ctx: ServingContext,
    private readonly walk: ModelWalk,
    private readonly kernels: Kernels,
    /** MoE index of each layer, −1 for a dense layer. */
    private readonly moeIndexOfLayer: Int32Array,
    private readonly onRouter: () => void,
    private readonly onHead: () => void,
  ) {
    const model = ctx.model;
    this.linearLayer = Uint8Array.from({ length: model.layers }, (_, l) => (isLinearAttentionLayer(model, l) ? 1 : 0));
  }

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

  /** Runs `it` from `layer`: attention (and cross-attention), dense FFNs, up to a router or the LM head. */
  start(it: IterationState, layer: number): void {
    const k = this.kernels;
    // Reused: the GPU holds a chain's parts until it completes, and the next chain starts after.
    const parts = this.chainParts;
    while (parts.length > 0) parts.pop(); // pops inline; `length = 0` is a runtime call
    const layers = this.ctx.model.layers;
    for (;;) {
      it.layer = layer;
      if (layer === layers) {
        this.pushPart(k.tokenOpNs('lmHead', this.walk.headTokens(it)), 'lm head', 'lmHead');
        this.ctx.res.gpu.submitChain(0, parts, this.onHead);
        return;
      }
      const contextTokens = this.walk.enterLayer(it, layer);
      const labels = k.layerLabels[layer]!;
      if (this.linearLayer[layer] === 1) {
        this.pushPart(k.linearAttentionNs(it.layerTotal, it.batch.length), labels.linear, 'attention');
      } else {
        this.pushPart(k.attentionNs(it.layerTotal, contextTokens), labels.attention, 'attention');
      }
      if (this.walk.hasCross(layer)) {
        const op = { kind: 'crossAttention', tokens: it.layerTotal, contextTokens: it.crossContext } as const;
        this.pushPart(this.ctx.cost.estimate(op).ns, labels.cross, 'attention');
      }
      if (this.moeIndexOfLayer[layer]! >= 0) {
        this.pushPart(k.tokenOpNs('router', it.layerTotal), labels.router, 'router');
        this.ctx.res.gpu.submitChain(0, parts, this.onRouter);
        return;
      }
      this.pushPart(k.tokenOpNs('denseFfn', it.layerTotal), labels.dense, 'dense');
      layer++;
    }
  }
}
