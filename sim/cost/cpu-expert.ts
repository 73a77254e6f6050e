/**
 * The CPU's time for one routed expert over `tokens` tokens, from host DRAM, in a quantised
 * format: both terms the engines show (llama.cpp's i-quant kernels on AVX2 are compute-bound far
 * below DRAM bandwidth; K-quants and wider formats are memory-bound): the kernel term is the
 * format's measured weights per second per thread × threads, per token; the memory term is the
 * expert's bytes once per call at the DRAM share the caller gives. The larger binds. Pure; the
 * executor that computes experts on the CPU shares DRAM fluidly and calls this for the kernel part.
 */
import type { QuantKernelFile } from '../../hardware-profiles/quant-kernels.ts';

export interface CpuExpertCost {
  readonly ns: number;
  readonly kernelNs: number | null;
  readonly memoryNs: number;
  readonly bound: 'cpuFlops' | 'hostMem';
  /** Set when the format has no measured kernel rate (only the DRAM term was priced). */
  readonly warning?: string;
}

/**
 * @param weights weights of the expert (all its tensors)
 * @param bytes its bytes in the format
 * @param format the stored block format of its tensors (the dominant one for a mix)
 * @param dramBytesPerSec the host-DRAM bandwidth available to this call
 */
export function cpuExpertCost(
  kernels: QuantKernelFile,
  format: string,
  weights: number,
  bytes: number,
  tokens: number,
  threads: number,
  dramBytesPerSec: number,
): CpuExpertCost {
  const memoryNs = Math.ceil((bytes / dramBytesPerSec) * 1e9);
  const rate = kernels.formats[format];
  if (!rate) {
    const warning = `no measured ${kernels.isa} kernel rate for ${format}`;
    return { ns: memoryNs, kernelNs: null, memoryNs, bound: 'hostMem', warning };
  }
  const kernelNs = Math.ceil(((weights * tokens) / (rate.weightsPerSecPerThread * threads)) * 1e9);
  return kernelNs >= memoryNs
    ? { ns: kernelNs, kernelNs, memoryNs, bound: 'cpuFlops' }
    : { ns: memoryNs, kernelNs, memoryNs, bound: 'hostMem' };
}
