/**
 * Where a piece of expert work is computed (`ExpertCompute`). Today one implementation: the GPU,
 * from a VRAM slot, as one kernel on the executor's stream (`GpuSlotCompute`), its duration the
 * `expert` operation for the piece's token count and share of the expert. CPU-computed experts
 * (host DRAM, the CPU pool's per-format rate bounded by the host-DRAM fluid share) and zero-copy
 * reads (a GPU kernel bound by the link) are further implementations chosen by the piece's
 * `placement` (see residency.ts).
 */
import type { Kernels } from './kernels.ts';
import type { PieceWork, Residency } from './residency.ts';
import type { IterationState, ServingContext } from './state.ts';

export interface ExpertCompute {
  /** Starts `piece` of the current layer; the layer waits for its `onDone`. */
  start(it: IterationState, piece: number): void;
}

export class GpuSlotCompute implements ExpertCompute {
  private readonly work: PieceWork = {
    key: 0,
    fraction: 1,
    label: '',
    reportKey: 0,
    resident: false,
    placement: 'gpu-slot',
  };

  constructor(
    private readonly ctx: ServingContext,
    private readonly kernels: Kernels,
    private readonly residency: Residency,
    private readonly onDone: () => void,
  ) {}

  start(it: IterationState, piece: number): void {
    const w = this.work;
    this.residency.describe(piece, w);
    const ctx = this.ctx;
    ctx.sink?.onExpertCompute?.(w.reportKey, ctx.sim.now, w.resident);
    it.computing = true;
    it.computingKey = piece;
    const tokens = it.tokensPerExpert[w.key % ctx.E]!;
    const k = this.kernels;
    const ns = w.fraction === 1 ? k.tokenOpNs('expert', tokens) : k.partialExpertNs(tokens, w.fraction);
    k.submit(ns, k.countLabel(w.label, tokens), 'expert', this.onDone);
  }
}
