/**
 * Phase totals of a continuously scheduled run (MoE-Lens, and the MoE-Lens setups of
 * moe-lightning-like and vllm-like): one stream of mixed iterations, booked as decode passes; the
 * prefill phase carries only the prompt tokens processed and the first tokens they generated.
 */
import { emptyTotals as totals, type PhaseTotals } from '../../sim/throughput/types.ts';

export { totals };

/** What a lens run reports that the phase totals need. */
export interface LensRunTotals {
  readonly prefillTokens: number;
  readonly generatedTokens: number;
  readonly decodeTokens: number;
  readonly iterations: number;
  readonly endNs: number;
  readonly gpuBusyNs: number;
  readonly h2dBusyNs: number;
  readonly h2dBytes: number;
  /** CPU busy time of one core's worth (× `cores` for core-ns). */
  readonly cpuBusyNs: number;
  readonly hostDramBytes: number;
}

/** Prefill and decode totals of a lens run on `cores` CPU cores (D2H is the caller's: the modes differ). */
export function lensPhaseTotals(r: LensRunTotals, cores: number): { prefill: PhaseTotals; decode: PhaseTotals } {
  const prefill = totals();
  prefill.processedTokens = r.prefillTokens;
  prefill.generatedTokens = r.generatedTokens - r.decodeTokens;
  const decode = totals();
  decode.passes = r.iterations;
  decode.ns = r.endNs;
  decode.processedTokens = r.decodeTokens;
  decode.generatedTokens = r.decodeTokens;
  decode.gpuBusyNs = r.gpuBusyNs;
  decode.h2dBusyNs = r.h2dBusyNs;
  decode.h2dBytes = r.h2dBytes;
  decode.cpuBusyCoreNs = r.cpuBusyNs * cores;
  decode.hostDramBytes = r.hostDramBytes;
  return { prefill, decode };
}
