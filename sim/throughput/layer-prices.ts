/**
 * The durations the pass DAG's layer builders (`pass-dag-layers.ts`) give their tasks: GPU
 * kernels from the cost model (attention with its context, an expert's GEMM chunks) and CPU
 * work at the pass's vector rate. Kept apart from the builders so that what a task costs and
 * which tasks a layer adds are read in separate places.
 */
import type { HardwareProfile, ModelProfile } from '../../hardware-profiles/types.ts';
import { ACTIVATION_BYTES } from '../cost/cost-model.ts';
import type { CostModel } from '../cost/types.ts';
import { ceilNs, type Ns } from '../kernel/time.ts';
import type { PassConfig } from './types.ts';

/** Prices of one pass's tasks. */
export class LayerPrices {
  private readonly cpuRate: number;
  /** `attentionNs`'s last size and price. */
  private attnSeqs = -1;
  private attnNs = 0 as Ns;

  /** Σ over a sequence's new tokens of the context each attends (itself included). */
  readonly ctxPerSeq: number;

  /** `nt`: new tokens per sequence; `past`: past tokens per sequence. */
  constructor(
    private readonly cost: CostModel,
    private readonly model: ModelProfile,
    hardware: HardwareProfile,
    private readonly c: PassConfig,
    private readonly nt: number,
    past: number,
  ) {
    this.ctxPerSeq = nt * past + (nt * (nt + 1)) / 2;
    const cpu = hardware.cpu;
    this.cpuRate = c.cpuCores * cpu.vectorFlopsPerSecPerCore * cpu.vectorEfficiency;
  }

  /** The attention kernel of `s` sequences (the last size asked for kept: micro-batches mostly share one). */
  attentionNs(s: number): Ns {
    if (s !== this.attnSeqs) {
      this.attnSeqs = s;
      this.attnNs = this.cost.estimate({
        kind: 'attention',
        tokens: s * this.nt,
        contextTokens: s * this.ctxPerSeq,
      }).ns;
    }
    return this.attnNs;
  }

  /** One expert's GEMM chunks over `cnt` tokens, back to back (see `LayerBuilder.experts`). */
  expertNs(cnt: number): Ns {
    const { c, cost } = this;
    const chunks = Math.ceil(cnt / c.expertChunkTokens);
    const full = cost.estimate({ kind: 'expert', tokens: c.expertChunkTokens }).ns;
    const lastTokens = cnt - c.expertChunkTokens * (chunks - 1);
    return ((chunks - 1) * full + cost.estimate({ kind: 'expert', tokens: lastTokens }).ns) as Ns;
  }

  /** A GPU kernel's cost-model duration over `tokens` tokens (attention has its own, with context). */
  gpuCost(kind: 'denseFfn' | 'router' | 'sharedExperts' | 'attentionProj', tokens: number): Ns {
    return this.cost.estimate({ kind, tokens }).ns;
  }

  /** Bytes of the hidden states of `tokens` tokens. */
  actBytes(tokens: number): number {
    return Math.max(1, Math.round(tokens * this.model.hiddenSize * ACTIVATION_BYTES));
  }

  /** CPU work of `flops` at the pass's cores' vector rate. */
  cpuNs(flops: number): Ns {
    return ceilNs((flops / this.cpuRate) * 1e9);
  }
}
