/**
 * Kernel durations and labels for the serving executor's GPU stream: durations memoised by
 * numeric keys (no key string per kernel) and labels built once per layer or expert, because a
 * run submits millions of kernels and each lookup is on the hot path.
 */
import type { Ns } from '../../kernel/time.ts';
import type { ExpertKey } from '../policy.ts';
import type { ServingContext } from './state.ts';

/** Kernels whose duration depends on their token count only. */
export type TokenOp = 'expert' | 'sharedExperts' | 'denseFfn' | 'router' | 'lmHead';

export interface LayerLabels {
  readonly attention: string;
  /** The layer's Gated DeltaNet block (hybrid models' linear-attention layers). */
  readonly linear: string;
  readonly cross: string;
  readonly dense: string;
  readonly router: string;
  readonly shared: string;
}

export class Kernels {
  /**
   * By token count per kind, in an array indexed by the count (−1: not yet computed; counts are
   * small integers, at most a batch's tokens).
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
  private lastLinearTokens = -1;
  private lastLinearSequences = -1;
  private lastLinearNs = 0 as Ns;
  /** Idle-loop durations by expert count (−1: not yet computed), as `tokenOpCost`. */
  private readonly idleCost: number[] = [];
  /**
   * The last two partial-expert durations asked for (fraction, tokens → ns): split experts
   * alternate between a top and a bottom part, so two pairs answer nearly every call without
   * the cost model's nested maps and an operation object per kernel.
   */
  private readonly partKey = [Number.NaN, -1, Number.NaN, -1];
  private readonly partNs = [0, 0];
  private partNext = 0;
  readonly layerLabels: readonly LayerLabels[];
  private readonly expertLabels: string[] = [];
  private readonly segmentLabels: string[] = [];
  private readonly E: number;

  constructor(
    private readonly ctx: ServingContext,
    moeIndexOfLayer: Int32Array,
  ) {
    this.E = ctx.E;
    this.layerLabels = Array.from({ length: ctx.model.layers }, (_, layer) => ({
      attention: `L${layer} attention`,
      linear: `L${layer} linear attention`,
      cross: `L${layer} cross-attention`,
      dense: `L${layer} dense ffn`,
      router: `L${layer} router`,
      shared: moeIndexOfLayer[layer]! >= 0 ? `M${moeIndexOfLayer[layer]} shared experts` : '',
    }));
  }

  tokenOpNs(kind: TokenOp, tokens: number): Ns {
    if ((tokens | 0) !== tokens || tokens < 0) return this.ctx.cost.estimate({ kind, tokens }).ns;
    const cache = this.tokenOpCost[kind];
    if (tokens < cache.length) {
      const t = cache[tokens]!;
      if (t >= 0) return t as Ns;
    } else {
      // Grown densely with −1 (an array with holes would fall back to a dictionary).
      while (cache.length <= tokens) cache.push(-1);
    }
    const t = this.ctx.cost.estimate({ kind, tokens }).ns;
    cache[tokens] = t;
    return t;
  }

  /**
   * Attention's duration for `tokens` tokens over `contextTokens`: the context differs from one
   * iteration to the next (it grows with every token), so a memo by context would only grow
   * with the run; the last pair asked is kept instead (every layer of an iteration, or of its
   * encoder and of its decoder, asks the same).
   */
  attentionNs(tokens: number, contextTokens: number): Ns {
    if (tokens === this.lastAttnTokens && contextTokens === this.lastAttnContext) return this.lastAttnNs;
    const t = this.ctx.cost.estimate({ kind: 'attention', tokens, contextTokens }).ns;
    this.lastAttnTokens = tokens;
    this.lastAttnContext = contextTokens;
    this.lastAttnNs = t;
    return t;
  }

  /**
   * A linear-attention block's duration for `tokens` tokens of `sequences` sequences: the same
   * for every linear layer of an iteration, so the last pair asked is kept.
   */
  linearAttentionNs(tokens: number, sequences: number): Ns {
    if (tokens === this.lastLinearTokens && sequences === this.lastLinearSequences) return this.lastLinearNs;
    const t = this.ctx.cost.estimate({ kind: 'linearAttention', tokens, sequences }).ns;
    this.lastLinearTokens = tokens;
    this.lastLinearSequences = sequences;
    this.lastLinearNs = t;
    return t;
  }

  /** `count` loop iterations over experts no token chose (runtimes whose loop visits every expert). */
  idleNs(count: number): Ns {
    const cache = this.idleCost;
    if ((count | 0) === count && count >= 0 && count < 4096) {
      while (cache.length <= count) cache.push(-1);
      const t = cache[count]!;
      if (t >= 0) return t as Ns;
      const ns = this.ctx.cost.estimate({ kind: 'idleExperts', count }).ns;
      cache[count] = ns;
      return ns;
    }
    return this.ctx.cost.estimate({ kind: 'idleExperts', count }).ns;
  }

  /** The `expert` operation's duration for `tokens` tokens over `fraction` of the expert's weights. */
  partialExpertNs(tokens: number, fraction: number): Ns {
    const key = this.partKey;
    if (key[0] === fraction && key[1] === tokens) return this.partNs[0]! as Ns;
    if (key[2] === fraction && key[3] === tokens) return this.partNs[1]! as Ns;
    const ns = this.ctx.cost.estimate({ kind: 'expert', tokens, fraction }).ns;
    const i = this.partNext;
    this.partNext = 1 - i;
    key[2 * i] = fraction;
    key[2 * i + 1] = tokens;
    this.partNs[i] = ns;
    return ns;
  }

  /** `expert M<layer>E<expert>`, built once per key. */
  expertLabel(key: ExpertKey): string {
    return (this.expertLabels[key] ??= `expert M${Math.floor(key / this.E)}E${key % this.E}`);
  }

  /** Transfer label of a segment: `expert M<l>E<e> top|bottom`. */
  segmentLabel(key: ExpertKey, top: boolean): string {
    const i = top ? 2 * key : 2 * key + 1;
    return (this.segmentLabels[i] ??= `${this.expertLabel(key)} ${top ? 'top' : 'bottom'}`);
  }

  /** `<label> ×<tokens>` for the trace; without a trace sink the label alone (no string built per kernel). */
  countLabel(label: string, tokens: number): string {
    return this.ctx.sink === undefined ? label : `${label} ×${tokens}`;
  }

  idleLabel(moeLayer: number, gap: number): string {
    return this.ctx.sink === undefined ? 'idle experts' : `M${moeLayer} idle experts ×${gap}`;
  }

  /** One kernel on the executor's GPU stream. */
  submit(durationNs: Ns, label: string, category: string, onDone: () => void): void {
    this.ctx.res.gpu.submitKernel(0, durationNs, label, category, onDone);
  }
}
