/**
 * What the layer builders of a pass DAG (`pass-dag-layers.ts`) tally of the routing they met,
 * per expert GEMM and per pass. Kept apart from the builders: the two activation counts differ
 * where a layer's micro-batches each run its experts (model-based batching), and the metrics
 * that read them want different ones — the expert activation ratio and tokens per expert GEMM
 * (`throughput-metrics.ts`) count per GEMM, MoE-CAP's S_activated (`sim/metrics/cap.ts`) per pass.
 */
export class RoutingTally {
  /** Σ routed token-slots over the MoE layers built. */
  routedTokenSlots = 0;
  /** (MoE layer, expert) pairs visited, once per expert GEMM (a layer's micro-batches each visit its experts). */
  expertLayerPairs = 0;
  /** Those with at least one token, once per expert GEMM. */
  activatedPairs = 0;
  /**
   * (MoE layer, expert) pairs with a token in the pass, each counted once however many of the
   * layer's micro-batches compute it: MoE-CAP's activation indicator 1[l, i] of a forward pass.
   * Equal to `activatedPairs` when every layer runs its experts once.
   */
  passActivatedPairs = 0;
  /** The pairs already counted in `passActivatedPairs`, at `mi · experts + x`. */
  private readonly seen: Uint8Array;

  constructor(
    moeLayers: number,
    private readonly experts: number,
  ) {
    this.seen = new Uint8Array(moeLayers * experts);
  }

  /** Expert `x` of MoE layer `mi` was visited by one expert GEMM with `tokens` tokens. */
  pair(mi: number, x: number, tokens: number): void {
    this.expertLayerPairs++;
    if (!(tokens > 0)) return;
    this.activatedPairs++;
    const k = mi * this.experts + x;
    if (this.seen[k] === 0) {
      this.seen[k] = 1;
      this.passActivatedPairs++;
    }
  }
}
