/**
 * The SSD tier's parameters, shared by the policies that can read experts from NVMe
 * (flash-moe, host-experts): how much host DRAM the page cache gets and how many expert reads
 * the engine keeps in flight. The mechanism is sim/serving/parts/ssd-tier.ts.
 */
import { z } from 'zod';
import type { SsdTierSpec } from '../../sim/serving/policy.ts';

const GIB = 1024 ** 3;

export const SsdParams = z
  .object({
    /** Page cache size; absent: host DRAM − the host copy of dense weights − `reservedGiB`. */
    pageCacheGiB: z.number().positive().optional(),
    /**
     * Host DRAM the OS and the engine process keep [assumption: 4 GiB, a Linux desktop's
     * resident set; flash-moe reports a 5.5 GB process RSS, of which its pinned buffers].
     */
    reservedGiB: z.number().nonnegative().default(4),
    /** Expert reads in flight at once (flash-moe: one `pread` thread per expert, K = 4). */
    parallelReads: z.number().int().positive().default(4),
  })
  .strict();
export type SsdParams = z.infer<typeof SsdParams>;

export function ssdSpec(p: SsdParams): SsdTierSpec {
  return {
    ...(p.pageCacheGiB !== undefined && { pageCacheBytes: Math.floor(p.pageCacheGiB * GIB) }),
    reservedBytes: Math.floor(p.reservedGiB * GIB),
    parallelReads: p.parallelReads,
  };
}
