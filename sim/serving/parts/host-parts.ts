/**
 * Builds the residency and compute parts of a policy declaring `hostExperts` (host-residency.ts,
 * host-compute.ts) from the policy's spec and the runtime's `hostExperts` properties, so the
 * executor chooses them in one place without knowing their insides.
 */
import { UserError } from '../../kernel/errors.ts';
import { ceilNs } from '../../kernel/time.ts';
import type { HardwareProfile, RuntimeProfile } from '../../../hardware-profiles/types.ts';
import { loadQuantKernels } from '../../../hardware-profiles/quant-kernels.ts';
import type { HostExpertsSpec } from '../policy.ts';
import { PlacementCompute, type HostComputeOptions } from './host-compute.ts';
import { HostResidency } from './host-residency.ts';
import type { Kernels } from './kernels.ts';
import type { ReadyListener } from './residency.ts';
import type { SsdSource } from './ssd-tier.ts';
import type { ServingContext } from './state.ts';

/**
 * A runtime without `hostExperts` properties: no per-layer host cost, CPU and GPU concurrent,
 * DRAM term only, zero-copy at the link's full rate [assumption: the neutral choice].
 */
const NEUTRAL = { kernels: null, layerSyncNs: 0, overlap: 'concurrent', zeroCopyEfficiency: 1 } as const;

export function hostComputeOptions(
  spec: HostExpertsSpec,
  runtime: RuntimeProfile | undefined,
  hardware: HardwareProfile,
): HostComputeOptions {
  const r = runtime?.hostExperts ?? NEUTRAL;
  if (!(spec.threads >= 1 && spec.threads <= hardware.cpu.cores)) {
    throw new UserError(`hostExperts.threads ${spec.threads} outside 1..${hardware.cpu.cores} (${hardware.cpu.id})`);
  }
  return {
    kernels: r.kernels ? loadQuantKernels(r.kernels) : null,
    format: spec.format,
    threads: spec.threads,
    layerSyncNs: ceilNs(r.layerSyncNs),
    overlap: r.overlap,
    zeroCopyEfficiency: r.zeroCopyEfficiency,
    perCoreDramBytesPerSec: hardware.cpu.perCoreDramBytesPerSec,
  };
}

export interface HostParts {
  readonly residency: HostResidency;
  readonly compute: PlacementCompute;
}

export function hostParts(
  ctx: ServingContext,
  kernels: Kernels,
  ready: ReadyListener,
  slots: number,
  spec: HostExpertsSpec,
  options: HostComputeOptions,
  cb: { readonly afterExpert: () => void; readonly afterHostPiece: (piece: number) => void },
  pump: () => void,
  ssd?: SsdSource,
): HostParts {
  const residency = new HostResidency(ctx, kernels, ready, slots, spec, options, ssd);
  const compute = new PlacementCompute(ctx, kernels, residency, cb.afterExpert, cb.afterHostPiece, pump, options);
  return { residency, compute };
}
