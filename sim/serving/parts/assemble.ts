/**
 * Composes the serving executor's parts for one run: which model walk, residency, compute and
 * expert order the policy and runtime call for. This is where a new mechanism is chosen (a CPU
 * compute, a GPU cache in front of CPU experts, an SSD tier): a new implementation of a part's
 * interface and one line here, not a branch in the coordinator.
 */
import type { HardwareProfile, RuntimeProfile } from '../../../hardware-profiles/types.ts';
import type { ServingPolicy } from '../policy.ts';
import { ContinuousBatcher, StaticBatcher, type Batcher } from './batcher.ts';
import { GpuSlotCompute, type ExpertCompute } from './compute.ts';
import { hostComputeOptions, hostParts } from './host-parts.ts';
import { IndexOrder, ReadyFirstOrder, type ExpertOrder } from './expert-order.ts';
import { Kernels } from './kernels.ts';
import { LayerWalk } from './layer-walk.ts';
import { modelWalkOf, type ModelWalk } from './model-walk.ts';
import type { ReadyListener, Residency } from './residency.ts';
import { LayerRouter } from './routing.ts';
import { SlotResidency } from './slot-residency.ts';
import { SplitResidency } from './split-residency.ts';
import { SsdSource } from './ssd-tier.ts';
import type { IterationState, RequestState, ServingContext } from './state.ts';
import { UserError } from '../../kernel/errors.ts';

export { placeHostWeights, storagePlanOf } from './ssd-tier.ts';

export interface Parts {
  readonly walk: ModelWalk;
  readonly kernels: Kernels;
  readonly layers: LayerWalk;
  readonly router: LayerRouter;
  readonly residency: Residency;
  readonly order: ExpertOrder;
  readonly batcher: Batcher;
}

/** What the coordinator does when a part hands control back. */
export interface PartCallbacks {
  /** A MoE layer's router kernel completed. */
  readonly afterRouter: () => void;
  /** The LM head completed: the iteration ends. */
  readonly afterLmHead: () => void;
  /** A piece of expert work completed on the GPU stream. */
  readonly afterExpert: () => void;
  /** A piece computed off the GPU stream (a host expert on the CPU) completed. */
  readonly afterHostPiece: (piece: number) => void;
  /** Every piece of the current MoE layer has computed. */
  readonly finishLayer: (it: IterationState) => void;
  /** The batcher admitted a request (its KV is allocated). */
  readonly admitted: (s: RequestState) => void;
}

export interface PartOptions {
  readonly policy: ServingPolicy;
  readonly runtime: RuntimeProfile | undefined;
  readonly hardware: HardwareProfile;
  /** MoE index of each layer, −1 for a dense layer. */
  readonly moeIndexOfLayer: Int32Array;
  readonly slots: number;
  readonly activationReserveBytes: number;
}

export function assembleParts(ctx: ServingContext, o: PartOptions, cb: PartCallbacks): Parts {
  const walk = modelWalkOf(ctx.model);
  const kernels = new Kernels(ctx, o.moeIndexOfLayer);
  const layers = new LayerWalk(ctx, walk, kernels, o.moeIndexOfLayer, cb.afterRouter, cb.afterLmHead);
  const router = new LayerRouter(ctx, walk);
  // The residency tells the order what is ready; the order is built after it, so late-bound.
  let order: ExpertOrder | undefined;
  const ready: ReadyListener = {
    markReady: (piece) => order!.markReady(piece),
    pump: () => order!.pump(ctx.iter!),
  };
  const split = o.policy.segmentCacheBytes !== undefined;
  let residency: Residency;
  let compute: ExpertCompute;
  const hostSpec = o.policy.hostExperts;
  // SSD tier: fetches read the drive into the page cache first (ssd-tier.ts); else straight from host DRAM.
  const ssd = ssdSourceOf(ctx, o.policy, split);
  if (hostSpec) {
    // Experts in host DRAM computed on the CPU, read in place, or fetched (policies/engine/host-experts.ts).
    const options = hostComputeOptions(hostSpec, o.runtime, o.hardware);
    const pump = (): void => order!.pump(ctx.iter!);
    const host = hostParts(ctx, kernels, ready, o.slots, hostSpec, options, cb, pump, ssd);
    residency = host.residency;
    compute = host.compute;
  } else {
    residency = split
      ? new SplitResidency(ctx, kernels, ready, o.slots, o.policy.segmentCacheBytes ?? 0)
      : new SlotResidency(ctx, kernels, ready, o.slots, ssd);
    compute = new GpuSlotCompute(ctx, kernels, residency, cb.afterExpert);
  }
  const readyFirst = split || o.policy.computeOrder === 'ready-first';
  const loopAll = o.runtime?.expertLoop === 'all';
  order =
    o.runtime?.expertOrder === 'index' && !readyFirst
      ? new IndexOrder(ctx, kernels, compute, cb.finishLayer, loopAll)
      : new ReadyFirstOrder(ctx, kernels, compute, cb.finishLayer, loopAll && readyFirst);
  const reserved = (): number => residency.reservedFreeBytes() + o.activationReserveBytes;
  const batcher =
    ctx.cfg.batching === 'continuous'
      ? new ContinuousBatcher(ctx, reserved, cb.admitted)
      : new StaticBatcher(ctx, reserved, cb.admitted);
  return { walk, kernels, layers, router, residency, order, batcher };
}

/** The SSD tier's fetch source when the policy declares one (the executor built its resources). */
function ssdSourceOf(ctx: ServingContext, policy: ServingPolicy, split: boolean): SsdSource | undefined {
  const cache = ctx.res.pageCache;
  if (!policy.ssdTier || !cache) return undefined;
  if (split) throw new UserError('the SSD tier does not combine with split experts (segmentCacheBytes)');
  if (policy.hostExperts?.miss === 'zero-copy') {
    throw new UserError('the SSD tier does not combine with zero-copy reads (page-cache pages are not mapped)');
  }
  return new SsdSource(ctx.res.h2d, cache, ctx.sim);
}
