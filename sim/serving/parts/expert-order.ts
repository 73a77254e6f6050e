/**
 * The runtime's expert order: in which order a layer's ready pieces of expert work run on the
 * GPU, and what the runtime's loop costs besides them (DESIGN §5, `RuntimeProfile`).
 *
 * - `ReadyFirstOrder`: resident pieces run first, in the order they became ready, while missing
 *   ones load (fused runtimes; MoEpic's engine, `computeOrder: ready-first`). With `payIdle` (a
 *   runtime looping over every expert) the loop's idle iterations over experts no token chose
 *   are paid once per layer, after the activated ones.
 * - `IndexOrder` (`expertOrder: index`): experts in index order, as a Python loop over the
 *   experts does — a missing expert blocks the ones after it, even resident ones; with
 *   `loopAll` the idle iterations before each chosen expert and after the last are paid.
 *
 * Both track the time the GPU waits with nothing to compute (`counters.blockedNs`).
 */
import type { Ns } from '../../kernel/time.ts';
import type { ExpertCompute } from './compute.ts';
import type { Kernels } from './kernels.ts';
import type { IterationState, ServingContext } from './state.ts';

export interface ExpertOrder {
  /** A new MoE layer with these activated experts (ascending; valid while the layer runs). */
  beginLayer(it: IterationState, activated: readonly number[]): void;
  /** A piece the current layer needs is resident and claimed. */
  markReady(piece: number): void;
  /** Runs the next piece, or an idle-loop kernel, or finishes the layer, or records that the GPU is blocked. */
  pump(it: IterationState): void;
}

abstract class OrderBase {
  /** The kernel completion of idle-loop iterations (and of shared experts): the layer goes on. */
  readonly afterIdle = (): void => {
    const it = this.ctx.iter!;
    it.computing = false;
    this.pump(it);
  };

  constructor(
    protected readonly ctx: ServingContext,
    protected readonly kernels: Kernels,
    protected readonly compute: ExpertCompute,
    protected readonly finishLayer: (it: IterationState) => void,
  ) {}

  abstract pump(it: IterationState): void;

  /**
   * Every piece of the layer started: finishes the layer, or, while pieces computed off the
   * stream (host experts on the CPU, overlap `concurrent`) still run, records that the GPU waits
   * for them (their completion pumps again). The wait is closed before the layer finishes, so it
   * never spans the next layer's kernels.
   */
  protected finishOrWait(it: IterationState): void {
    if (it.remaining > 0) {
      if (it.blockedSinceNs < 0) it.blockedSinceNs = this.ctx.sim.now;
      return;
    }
    this.closeBlocked(it);
    this.finishLayer(it);
  }

  protected closeBlocked(it: IterationState): void {
    if (it.blockedSinceNs >= 0) {
      const now = this.ctx.sim.now;
      this.ctx.counters.blockedNs += now - it.blockedSinceNs;
      const startNs = it.blockedSinceNs as Ns;
      this.ctx.sink?.onBlocked?.({ stream: 'gpu.compute', reason: 'expert fetch', startNs, endNs: now });
      it.blockedSinceNs = -1;
    }
  }

  protected idle(it: IterationState, gap: number): void {
    this.closeBlocked(it);
    it.computing = true;
    const k = this.kernels;
    k.submit(k.idleNs(gap), k.idleLabel(it.moeLayer, gap), 'expertLoop', this.afterIdle);
  }
}

export class ReadyFirstOrder extends OrderBase implements ExpertOrder {
  private readonly ready: number[] = [];
  private trailingPaid = false;

  constructor(
    ctx: ServingContext,
    kernels: Kernels,
    compute: ExpertCompute,
    finishLayer: (it: IterationState) => void,
    private readonly payIdle: boolean,
  ) {
    super(ctx, kernels, compute, finishLayer);
  }

  beginLayer(): void {
    while (this.ready.length > 0) this.ready.pop();
    this.trailingPaid = false;
  }

  markReady(piece: number): void {
    this.ready.push(piece);
  }

  pump(it: IterationState): void {
    if (it.computing) return;
    // One ready piece (the common case): `pop` takes the same one as `shift`, without its runtime call.
    const piece = this.ready.length === 1 ? this.ready.pop() : this.ready.shift();
    if (piece !== undefined) {
      this.closeBlocked(it);
      this.compute.start(it, piece);
      return;
    }
    if (it.remaining === 0 && this.payIdle && !this.trailingPaid) {
      // A runtime looping over every expert still visits the ones no token chose.
      this.trailingPaid = true;
      const gap = this.ctx.E - it.activatedCount;
      if (gap > 0) {
        this.idle(it, gap);
        return;
      }
    }
    this.finishOrWait(it);
  }
}

export class IndexOrder extends OrderBase implements ExpertOrder {
  private order: readonly number[] = [];
  private orderPos = 0;
  /** Whether the idle iterations before `order[orderPos]`, and after the last, were paid. */
  private gapPaid = false;
  private trailingPaid = false;
  private readonly readyMask: Uint8Array;

  constructor(
    ctx: ServingContext,
    kernels: Kernels,
    compute: ExpertCompute,
    finishLayer: (it: IterationState) => void,
    private readonly loopAll: boolean,
  ) {
    super(ctx, kernels, compute, finishLayer);
    this.readyMask = new Uint8Array(ctx.E);
  }

  beginLayer(_it: IterationState, activated: readonly number[]): void {
    this.order = activated;
    this.orderPos = 0;
    this.gapPaid = false;
    this.trailingPaid = false;
    this.readyMask.fill(0);
  }

  markReady(piece: number): void {
    this.readyMask[piece % this.ctx.E] = 1;
  }

  pump(it: IterationState): void {
    if (it.computing) return;
    const E = this.ctx.E;
    const order = this.order;
    if (this.orderPos < order.length) {
      const e = order[this.orderPos]!;
      if (this.loopAll && !this.gapPaid) {
        this.gapPaid = true;
        const gap = e - (this.orderPos > 0 ? order[this.orderPos - 1]! + 1 : 0);
        if (gap > 0) {
          this.closeBlocked(it);
          this.idle(it, gap);
          return;
        }
      }
      if (this.readyMask[e] === 1) {
        this.readyMask[e] = 0;
        this.orderPos++;
        this.gapPaid = false;
        this.closeBlocked(it);
        this.compute.start(it, it.moeLayer * E + e);
        return;
      }
      if (it.blockedSinceNs < 0) it.blockedSinceNs = this.ctx.sim.now;
      return;
    }
    if (this.loopAll && !this.trailingPaid) {
      this.trailingPaid = true;
      const gap = E - 1 - (order.length > 0 ? order[order.length - 1]! : -1);
      if (gap > 0) {
        this.idle(it, gap);
        return;
      }
    }
    this.finishOrWait(it);
  }
}
