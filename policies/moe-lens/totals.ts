/**
 * Phase totals of a run on the MoE-Lens executor (`sim/lens/`), shared by `moe-lens` and its
 * baselines: the lens executors report one stream of iterations, booked as decode passes; the
 * prefill phase carries only the prompt tokens processed and the first tokens they generated.
 */
import type { PhaseTotals } from '../../sim/throughput/throughput-executor.ts';

/** Zeroed totals (every key, in the order results.json prints them). */
export const totals = (): PhaseTotals => ({
  passes: 0, ns: 0, processedTokens: 0, generatedTokens: 0, gpuBusyNs: 0, gpuBusyNsByCategory: {}, h2dBusyNs: 0, d2hBusyNs: 0,
  h2dBytes: 0, d2hBytes: 0, cpuBusyCoreNs: 0, hostDramBytes: 0, routedTokenSlots: 0, expertLayerPairs: 0, activatedPairs: 0,
});

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
