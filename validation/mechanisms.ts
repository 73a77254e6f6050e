/**
 * The mechanisms a validation case may exercise, and whether moesim models each today. A case
 * whose mechanisms are all built runs; any other prints "not modelled yet" in its simulated
 * column. When a mechanism lands (CPU experts, GPU cache in front of the CPU, zero-copy, SSD
 * tier), flip `built` here and give the case's config the new policy or runtime name.
 */
export interface Mechanism {
  readonly id: string;
  readonly what: string;
  readonly built: boolean;
  /** How a config selects it (policy / runtime / profile), or what is missing. */
  readonly how: string;
}

const M = (id: string, what: string, built: boolean, how: string): Mechanism => ({ id, what, built, how });

export const MECHANISMS: readonly Mechanism[] = [
  M(
    'resident-decode',
    'every expert in VRAM, GPU decode',
    true,
    'any policy with every expert resident (lru, perLayerSlots = experts)',
  ),
  M(
    'blocking-copy-slot',
    'a miss is copied over PCIe into a VRAM slot, the GPU waits',
    true,
    'policies on-demand / lru',
  ),
  M('staging-only', 'no cache: one staging buffer, every activated expert copied', true, 'policy on-demand'),
  M('per-layer-lru', 'a per-layer LRU of expert slots', true, 'policy lru, perLayerSlots'),
  M(
    'routing-readback',
    'the routing of a layer read back to the host before its copies',
    true,
    'runtime imp-host-offload (router sync)',
  ),
  M(
    'quantised-experts',
    'experts in a block-quantised format (bytes per expert from the format)',
    true,
    'model profile with expertFormat (sim/cost/formats.ts)',
  ),
  M(
    'cpu-experts',
    'host-resident experts computed by the CPU (-ot exps=CPU, --n-cpu-moe)',
    true,
    'policy host-experts (cpuLayers, threads, format); runtime hostExperts (kernel rates, layer sync, overlap)',
  ),
  M(
    'gpu-cache-cpu-misses',
    'GPU slots for hits, CPU computes misses, same layer',
    true,
    'policy host-experts, cacheSlotsPerLayer',
  ),
  M(
    'async-capped-uploads',
    'background uploads of missed experts, capped per layer per step, admission gate',
    true,
    'policy host-experts, uploadsPerLayer, admitAfterUses, admitWindow',
  ),
  M(
    'zero-copy',
    'GPU kernels read host-mapped memory over PCIe in place',
    true,
    'policy host-experts, miss: zero-copy; runtime hostExperts.zeroCopyEfficiency',
  ),
  M(
    'ssd-tier',
    'experts on NVMe behind the OS page cache, VRAM slots in front',
    true,
    'policy flash-moe (ssd), or host-experts with ssd; testbed with a drive (sim/serving/parts/ssd-tier.ts)',
  ),
  M(
    'host-gather-embeddings',
    'per-token gathers from a large table in pinned host memory (Qwen3.8 PLE n-gram embeddings)',
    false,
    'not modelled',
  ),
  M('multi-gpu', 'experts or layers spread over several GPUs', false, 'not modelled (single-GPU simulator)'),
  M(
    'linear-attention',
    'Gated DeltaNet layers: fixed recurrent state, no KV growth',
    true,
    'model profile with linearAttention (full_attention_interval); layer walk + cost op linearAttention',
  ),
];

export const MECHANISM_IDS: ReadonlySet<string> = new Set(MECHANISMS.map((m) => m.id));
export const isBuilt = (id: string): boolean => MECHANISMS.find((m) => m.id === id)?.built ?? false;
