/**
 * host-experts — experts kept in host DRAM and computed where the engine computes them.
 *
 * Reproduces: llama.cpp `-ot exps=CPU` (cpuLayers = every MoE layer), `--n-cpu-moe N`
 * (cpuLayers N: the first N MoE layers' experts on the CPU, the rest resident in VRAM), its
 * `--moe-expert-cache N --moe-expert-cache-inserts K` (cacheSlotsPerLayer N, uploadsPerLayer K,
 * misses on the CPU) with an admission gate (admitAfterUses / admitWindow), Fiddler's per-expert
 * choice (miss: cost), FreeToken's hybrid (miss: fetch with cpuShare) and paddock's zero-copy
 * reads (miss: zero-copy). The executor parts are sim/serving/parts/host-residency.ts and
 * host-compute.ts; the runtime profile's `hostExperts` gives the CPU kernel rates, the per-layer
 * host cost and whether CPU and GPU work of a layer overlap.
 * `ssd` puts the experts on the testbed's NVMe drive behind the OS page cache (llama.cpp's mmap
 * of a model larger than RAM; sim/serving/parts/ssd-tier.ts): CPU-computed misses and fetches
 * read through the page cache.
 * Known gaps: the gate's window is tumbling, not sliding; zero-copy does not combine with `ssd`.
 */
import { z } from 'zod';
import { HostResidency } from '../../sim/serving/parts/host-residency.ts';
import { definePolicy } from '../types.ts';
import { SsdParams, ssdSpec } from './ssd-params.ts';

export const HostExpertsParams = z
  .object({
    /** Default: every MoE layer (`-ot exps=CPU`). */
    cpuLayers: z.number().int().nonnegative().optional(),
    cacheSlotsPerLayer: z.number().int().nonnegative().default(0),
    /** Default: no cap (an upload per miss). */
    uploadsPerLayer: z.number().int().nonnegative().default(1_000_000),
    admitAfterUses: z.number().int().positive().default(1),
    admitWindow: z.number().int().positive().default(1_000_000),
    miss: z.enum(['cpu', 'zero-copy', 'fetch', 'cost']).default('cpu'),
    cpuShare: z.number().min(0).max(1).default(0),
    threads: z.number().int().positive().default(1),
    format: z.string().default(''),
    /** The SSD tier; absent: every expert in host DRAM. */
    ssd: SsdParams.optional(),
  })
  .strict();
export type HostExpertsParams = z.infer<typeof HostExpertsParams>;

export const hostExperts = definePolicy({
  name: 'host-experts',
  family: 'serving',
  summary: 'experts in host DRAM: computed on the CPU, read zero-copy or fetched, with a GPU cache (llama.cpp)',
  params: HostExpertsParams,
  bufferSlots: (p, model) =>
    Math.max(1, HostResidency.slotsFor(spec(p, model.moeLayers), model.moeLayers, model.experts)),
  create: (p, ctx) => ({
    name: 'host-experts',
    hostExperts: spec(p, ctx.model.moeLayers),
    ...(p.ssd && { ssdTier: ssdSpec(p.ssd) }),
  }),
});

function spec(p: HostExpertsParams, moeLayers: number) {
  const { ssd: _ssd, ...rest } = p;
  return { ...rest, cpuLayers: Math.min(p.cpuLayers ?? moeLayers, moeLayers) };
}
