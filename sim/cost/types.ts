/**
 * The cost model's contract: one function from (operation, shape, hardware, runtime) to a duration
 * and its provenance. Implemented in `cost-model.ts`.
 */
import type { Ns } from '../kernel/time.ts';

/** Which bound decided the duration. */
export type Bound = 'flops' | 'hbm' | 'pcie' | 'hostMem' | 'cpuFlops' | 'launch' | 'dispatch' | 'sync';

/** An operation whose duration the cost model prices. Token counts are of the whole batch. */
export type Operation =
  /** One routed expert's FFN over `tokens` tokens on the GPU (weights already resident). `fraction` (0..1, default 1) of its columns (MoEpic's split segments). */
  | { readonly kind: 'expert'; readonly tokens: number; readonly fraction?: number }
  /** All shared experts of one MoE layer over `tokens` tokens on the GPU. */
  | { readonly kind: 'sharedExperts'; readonly tokens: number }
  /** The dense FFN of a non-MoE layer on the GPU. */
  | { readonly kind: 'denseFfn'; readonly tokens: number }
  /** Attention of one (full-attention) layer on the GPU: QKV/O projections over `tokens` new tokens plus scores over `contextTokens` (Σ over the tokens of the context each attends to; KV read from HBM). */
  | { readonly kind: 'attention'; readonly tokens: number; readonly contextTokens: number }
  /**
   * The linear-attention (Gated DeltaNet) block of one layer of a hybrid model on the GPU: its
   * projections over `tokens` new tokens, and the fixed recurrent state of each of `sequences`
   * sequences read and written once (no KV, no dependence on the context length).
   */
  | { readonly kind: 'linearAttention'; readonly tokens: number; readonly sequences: number }
  /** Only the attention projections (QKV + O) of one layer on the GPU (when scores run on the CPU). */
  | { readonly kind: 'attentionProj'; readonly tokens: number }
  /** Cross-attention of one encoder-decoder decoder layer: Q/O projections over `tokens`, scores over `contextTokens` (Σ source tokens attended), encoder K/V read from HBM. */
  | { readonly kind: 'crossAttention'; readonly tokens: number; readonly contextTokens: number }
  /** The host work of `count` iterations of an MoE layer's expert loop over experts no token chose (runtimes with `expertLoop: all`). */
  | { readonly kind: 'idleExperts'; readonly count: number }
  /** Attention scores of one layer on the CPU over `contextTokens`, reading `kvBytes` of KV from host DRAM (MLA: includes latent up-projection FLOPs). */
  | { readonly kind: 'cpuAttention'; readonly tokens: number; readonly contextTokens: number; readonly cores: number }
  /** Router (gate) of one MoE layer. */
  | { readonly kind: 'router'; readonly tokens: number }
  /** Embedding lookup + final norm + LM head + sampling. */
  | { readonly kind: 'lmHead'; readonly tokens: number }
  /** A copy over PCIe, uncontended. */
  | { readonly kind: 'transfer'; readonly bytes: number; readonly direction: 'h2d' | 'd2h' };

export interface Cost {
  /** Uncontended duration, rounded up once to integer ns. */
  readonly ns: Ns;
  readonly bound: Bound;
  readonly source: 'roofline' | 'table';
  readonly flops: number;
  /** Bytes read/written from the memory that bounds it (HBM for GPU ops, host DRAM for CPU ops, PCIe for transfers). */
  readonly bytes: number;
  /** For CPU ops: the FLOP-bound time alone (the memory part is shared fluidly at run time). */
  readonly computeNs?: Ns;
  /**
   * The runtime's host-side part (ns), present when the runtime adds more than one kernel launch:
   * ops × dispatch (overlapping the GPU body) plus syncs × sync. `bound` is 'dispatch' or 'sync'
   * when it decided the duration.
   */
  readonly runtimeNs?: number;
  /** Set when a measured table was extrapolated beyond its points. */
  readonly warning?: string;
}

export interface CostModel {
  estimate(op: Operation): Cost;
}
