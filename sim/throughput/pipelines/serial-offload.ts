/**
 * Serial offload (vLLM `--cpu-offload-gb`) as a closed-form iteration pipeline: the estimate of a
 * pass whose DAG is `pass-dag.ts` with one layer buffer and no prefetch (every layer's offloaded
 * weights copied right before it runs, so a layer costs transfer + compute), all attention on the
 * GPU over a paged GPU KV cache. KV swap-outs (D2H) and swap-ins (H2D) are copied before the step,
 * serially. Even routing. The iteration's duration is rounded up to integer ns once.
 */
import type { Ns } from '../../kernel/time.ts';
import { iterationNs, type Iteration, type IterationPipeline } from '../iteration.ts';
import { emptyGroup, type LayerCosts } from './layer-costs.ts';
import { emptyPipeTotals } from './vslpipe.ts';

export class SerialOffloadPipe implements IterationPipeline {
  readonly totals = emptyPipeTotals();
  private readonly offTotalNs: number;
  private readonly offTotalBytes: number;
  private readonly g = emptyGroup();

  constructor(
    private readonly lc: LayerCosts,
    /** Share of every layer's weights offloaded to host DRAM (0..1). */
    offloadedFraction: number,
  ) {
    const offBytes = lc.layerBytes.map((b) => Math.round(b * offloadedFraction));
    const offNs = offBytes.map((b) => (b > 0 ? lc.ns({ kind: 'transfer', bytes: b, direction: 'h2d' }) : 0));
    this.offTotalNs = offNs.reduce((a, b) => a + b, 0);
    this.offTotalBytes = offBytes.reduce((a, b) => a + b, 0);
  }

  run(it: Iteration, _nowNs: Ns): Ns {
    const { lc, totals: acc, g } = this;
    const kvBytesPerToken = lc.model.derived.kvBytesPerToken;
    let t = 0;
    const swapOut = it.swapOutTokens ?? 0;
    const swapIn = it.swapInTokens ?? 0;
    if (swapOut > 0) {
      const b = swapOut * kvBytesPerToken;
      t += lc.ns({ kind: 'transfer', bytes: b, direction: 'd2h' });
      acc.d2hBytes += b;
      acc.hostDramBytes += b;
    }
    if (swapIn > 0) {
      const b = swapIn * kvBytesPerToken;
      const d = lc.ns({ kind: 'transfer', bytes: b, direction: 'h2d' });
      t += d;
      acc.h2dBusyNs += d;
      acc.h2dBytes += b;
      acc.hostDramBytes += b;
    }
    // All attention on the GPU: one attention op over every token with its context.
    let tokens = 0;
    let ctx = 0;
    for (const p of it.prefill) {
      tokens += p.tokens;
      ctx += (p.tokens * (p.tokens + 1)) / 2;
    }
    tokens += it.decode.length;
    ctx += it.decodeContextTokens;
    Object.assign(g, { decode: 0, decodeCtx: 0, prefillTokens: tokens, prefillCtx: ctx });
    const mm = lc.mm;
    let gpu = 0;
    let lastKey = '';
    let lastNs = 0;
    for (let l = 0; l < mm.layers; l++) {
      const key = mm.moeIndexOfLayer[l]! >= 0 ? 'm' : 'd';
      if (key !== lastKey) {
        lastNs = lc.gpuLayerNs(l, g);
        lastKey = key;
      }
      gpu += lastNs;
    }
    gpu += lc.lmHead(it.prefill.length + it.decode.length);
    t += this.offTotalNs + gpu;
    acc.gpuBusyNs += gpu;
    acc.h2dBusyNs += this.offTotalNs;
    acc.h2dBytes += this.offTotalBytes;
    acc.hostDramBytes += this.offTotalBytes;
    for (const p of it.prefill) acc.prefillTokens += p.tokens;
    acc.decodeTokens += it.decode.length;
    return iterationNs(t);
  }
}
