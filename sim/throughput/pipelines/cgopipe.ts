/**
 * CGOPipe (MoE-Lightning, arXiv 2411.11217) as a closed-form iteration pipeline: the estimate of a
 * pass whose DAG is `pass-dag.ts` with ω = 1 and micro-batches (CPU attention over the host KV, GPU
 * projections + router + experts, layer weights through a 2-layer buffer).
 *
 * - Prefill iterations (GPU attention, one pass over the weights): per layer
 *   max(GPU prefill work, next layer's transfer).
 * - Decode iterations with μ micro-batches: stage = max(next layer's weight transfer, C + G/μ,
 *   G + C/μ) (CPU and GPU work pipelined over μ micro-batches, one of fill/drain), with the
 *   host-DRAM share of `sharedStage` between CPU attention and the weight DMA (`contention`).
 * - `residentDense`: non-expert weights stay on the GPU, only experts stream (the released
 *   optimiser's `w_other`).
 * Even routing; no KV write-back cost. The iteration's duration is rounded up to integer ns once.
 */
import { ACTIVATION_BYTES } from '../../cost/cost-model.ts';
import type { Ns } from '../../kernel/time.ts';
import { iterationNs, type Iteration, type IterationPipeline } from '../iteration.ts';
import { emptyGroup, type GroupLoad, type LayerCosts } from './layer-costs.ts';
import { emptyPipeTotals, sharedStage } from './vslpipe.ts';

export interface CgoPipeOptions {
  readonly microBatches: number;
  /** Host-DRAM bytes per ns shared by CPU attention and the DMA, or undefined (no contention). */
  readonly dramBytesPerNs?: number;
  readonly residentDense: boolean;
}

/**
 * CGOPipe per-layer decode stage: CPU attention `c` ns (reading `kvBytes`), GPU work `g` ns, over
 * μ micro-batches, beside the next layer's DMA (`dmaBytes`, `dmaNs` alone on the link). With a DRAM
 * capacity, the CPU window and the DMA share it as in `sharedStage` (the CPU window first).
 */
export function cgoStage(
  c: number,
  kvBytes: number,
  g: number,
  mu: number,
  dmaBytes: number,
  dmaNs: number,
  capBytesPerNs: number | undefined,
): { stageNs: number; slowed: boolean } {
  const m = Math.max(1, mu);
  const free = Math.max(dmaNs, c + g / m, g + c / m);
  if (capBytesPerNs === undefined) return { stageNs: free, slowed: false };
  const s = sharedStage(c, kvBytes, 0, 0, 0, 0, dmaBytes, dmaNs, capBytesPerNs);
  const rd = dmaNs > 0 ? dmaBytes / dmaNs : 0;
  const rc = c > 0 ? kvBytes / c : 0;
  const cs = c > 0 && kvBytes > 0 && rc + rd > capBytesPerNs ? (c * (rc + rd)) / capBytesPerNs : c;
  const stageNs = Math.max(s.stageNs, cs + g / m, g + cs / m, dmaNs);
  return { stageNs, slowed: stageNs > free + 1e-6 };
}

export class CgoPipe implements IterationPipeline {
  readonly totals = emptyPipeTotals();
  private readonly layerBytes: readonly number[];
  private readonly transferNs: readonly number[];
  private readonly nsPerByte: number;
  private readonly g: GroupLoad = emptyGroup();
  private readonly mb: GroupLoad = emptyGroup();
  private readonly cache = new Map<string, { stage: number; gpu: number; cpu: number; slowed: boolean }>();

  constructor(
    private readonly lc: LayerCosts,
    private readonly o: CgoPipeOptions,
  ) {
    const mm = lc.mm;
    this.layerBytes = o.residentDense
      ? lc.layerBytes.map((_, l) => (mm.moeIndexOfLayer[l]! >= 0 ? mm.experts * mm.expertBytes : 0))
      : lc.layerBytes;
    this.transferNs = o.residentDense
      ? this.layerBytes.map((b) => (b > 0 ? lc.ns({ kind: 'transfer', bytes: b, direction: 'h2d' }) : 0))
      : lc.transferNs;
    // Link ns per byte (activation copies ride the weight stream's rate).
    this.nsPerByte = lc.transferNs[0]! / Math.max(1, lc.layerBytes[0]!);
  }

  run(it: Iteration, _nowNs: Ns): Ns {
    const { lc, layerBytes, transferNs, totals: acc } = this;
    this.cache.clear();
    const n = it.prefill.length + it.decode.length;
    const t = it.prefill.length > 0 ? this.prefill(it, transferNs[0]!) : this.decode(it, transferNs[0]!);
    acc.h2dBusyNs += transferNs[0]!;
    acc.h2dBytes += layerBytes[0]!;
    acc.hostDramBytes += layerBytes[0]!;
    const lm = lc.lmHead(n);
    acc.gpuBusyNs += lm;
    return iterationNs(t + lm);
  }

  private prefill(it: Iteration, t0: number): number {
    const { lc, layerBytes, transferNs, totals: acc, g } = this;
    let tokens = 0;
    let ctx = 0;
    for (const p of it.prefill) {
      tokens += p.tokens;
      ctx += (p.tokens * (p.tokens + 1)) / 2;
    }
    Object.assign(g, { decode: 0, decodeCtx: 0, prefillTokens: tokens, prefillCtx: ctx });
    const L = lc.mm.layers;
    let t = t0;
    for (let l = 0; l < L; l++) {
      const gp = lc.gpuLayerNs(l, g);
      const next = l + 1 < L ? transferNs[l + 1]! : 0;
      t += Math.max(gp, next);
      acc.gpuBusyNs += gp;
      acc.h2dBusyNs += next;
      acc.h2dBytes += l + 1 < L ? layerBytes[l + 1]! : 0;
      acc.hostDramBytes += l + 1 < L ? layerBytes[l + 1]! : 0;
    }
    acc.prefillTokens += tokens;
    return t;
  }

  private decode(it: Iteration, t0: number): number {
    const { lc, layerBytes, transferNs, totals: acc, mb } = this;
    const mm = lc.mm;
    const L = mm.layers;
    const n = it.decode.length;
    // μ micro-batches of ⌈n/μ⌉ sequences: the cost of one, times μ.
    const m = Math.min(Math.max(1, this.o.microBatches), n);
    const per = Math.ceil(n / m);
    Object.assign(mb, { decode: per, decodeCtx: it.decodeContextTokens / m, prefillTokens: 0, prefillCtx: 0 });
    const actBytes = n * lc.model.hiddenSize * ACTIVATION_BYTES;
    const kvRead = it.decodeContextTokens * lc.model.derived.kvBytesPerTokenPerLayer;
    const cAll = m * lc.cpuNs(mb);
    let t = t0;
    for (let l = 0; l < L; l++) {
      const key = `${mm.moeIndexOfLayer[l]! >= 0 ? 'm' : 'd'}|${l + 1 < L ? layerBytes[l + 1] : -1}`;
      const nb = (l + 1 < L ? layerBytes[l + 1]! : 0) + actBytes;
      const linkNs = (l + 1 < L ? transferNs[l + 1]! : 0) + actBytes * this.nsPerByte;
      let c = this.cache.get(key);
      if (!c) {
        const gAll = m * lc.gpuLayerNs(l, mb);
        const s = cgoStage(cAll, kvRead, gAll, m, nb, linkNs, this.o.dramBytesPerNs);
        c = { stage: s.stageNs, gpu: gAll, cpu: cAll, slowed: s.slowed };
        this.cache.set(key, c);
      }
      t += c.stage;
      acc.gpuBusyNs += c.gpu;
      acc.cpuBusyNs += c.cpu;
      if (c.slowed) acc.dramBoundStages++;
      acc.h2dBytes += nb;
      acc.h2dBusyNs += linkNs;
      acc.hostDramBytes += nb + kvRead;
    }
    acc.decodeTokens += n;
    return t;
  }
}
