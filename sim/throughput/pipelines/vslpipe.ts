/**
 * VSLPipe (MoE-Lens §6.4) as an iteration pipeline: the closed-form estimate of one iteration's
 * pipeline over cost-model durations, or (`mode: 'events'`) the same iteration simulated as events
 * (`vslpipe-events.ts`). Stateless about the schedule; it keeps the busy times and bytes.
 *
 * Closed form:
 * - the iteration's tokens are split into two groups α/β (decode sequences alternately, prefill
 *   sequences greedily to the lighter group);
 * - per layer l: GPU work of a group = projections of its decode tokens + GPU (flash) attention of
 *   its prefill tokens + router + experts (even routing) or the dense FFN; CPU work = decode
 *   attention over its KV; compute_l = max(CPU α, GPU β) + max(CPU β, GPU α);
 * - weights stream over H2D into a 2-layer buffer: transfer_0 + Σ_l stage_l + LM head, a stage
 *   bounded below by the next layer's transfer plus the attention outputs' H2D bytes (d per
 *   decode token; Q and new K/V go D2H, the other direction, and are not modelled);
 * - host-DRAM contention (`contention`): the weight stream and CPU attention share the socket's
 *   DRAM in proportion to demand when oversubscribed (`sharedStage`).
 * The iteration's duration is rounded up to integer ns once.
 */
import type { HardwareProfile } from '../../../hardware-profiles/types.ts';
import { ACTIVATION_BYTES } from '../../cost/cost-model.ts';
import type { Ns } from '../../kernel/time.ts';
import { iterationNs, type Iteration, type IterationPipeline } from '../iteration.ts';
import type { GroupLoad, LayerCosts } from './layer-costs.ts';
import { EventPipe, PAPER_PACKET_BYTES, type EventPipeStats } from './vslpipe-events.ts';

export interface VslPipeOptions {
  readonly contention: boolean;
  readonly mode: 'closed-form' | 'events';
  /** Data-mover packet (events mode). */
  readonly packetBytes?: number;
  /** Events mode: also the D2H leg (Q, new K/V of decode tokens, K/V of prefill tokens). */
  readonly qkvD2H?: boolean;
  readonly cores: number;
}

/** Totals a lens-style pipeline keeps (ns, bytes); CPU busy is one core's worth. */
export interface PipeTotals {
  gpuBusyNs: number;
  cpuBusyNs: number;
  h2dBusyNs: number;
  h2dBytes: number;
  d2hBytes: number;
  hostDramBytes: number;
  dramBoundStages: number;
  prefillTokens: number;
  decodeTokens: number;
}

export const emptyPipeTotals = (): PipeTotals => ({
  gpuBusyNs: 0,
  cpuBusyNs: 0,
  h2dBusyNs: 0,
  h2dBytes: 0,
  d2hBytes: 0,
  hostDramBytes: 0,
  dramBoundStages: 0,
  prefillTokens: 0,
  decodeTokens: 0,
});

interface StageCache {
  ga: number;
  gb: number;
  nextBytes: number;
  linkNs: number;
  stage: number;
  slowed: boolean;
}

export class VslPipe implements IterationPipeline {
  readonly totals = emptyPipeTotals();
  private readonly alpha: GroupLoad = { decode: 0, decodeCtx: 0, prefillTokens: 0, prefillCtx: 0 };
  private readonly beta: GroupLoad = { decode: 0, decodeCtx: 0, prefillTokens: 0, prefillCtx: 0 };
  private readonly layerCache = new Map<string, StageCache>();
  private readonly events: EventPipe | null;
  private readonly kvTokBytes: number;
  private readonly actPerDecode: number;
  private readonly d2hPerDecode: number;
  private readonly d2hPerPrefill: number;
  private readonly gaL: number[];
  private readonly gbL: number[];

  constructor(
    private readonly lc: LayerCosts,
    private readonly hw: HardwareProfile,
    private readonly o: VslPipeOptions,
  ) {
    const model = lc.model;
    this.kvTokBytes = model.derived.kvBytesPerTokenPerLayer;
    this.actPerDecode = model.hiddenSize * ACTIVATION_BYTES;
    if (o.qkvD2H && o.mode !== 'events') throw new RangeError('qkvD2H needs pipeline: events');
    this.d2hPerDecode = o.qkvD2H ? model.hiddenSize * ACTIVATION_BYTES + this.kvTokBytes : 0;
    this.d2hPerPrefill = o.qkvD2H ? this.kvTokBytes : 0;
    this.gaL = new Array<number>(lc.mm.layers).fill(0);
    this.gbL = new Array<number>(lc.mm.layers).fill(0);
    const pageable = hw.pinnedHostMemory ? 1 : hw.pcie.pageableFactor;
    this.events =
      o.mode === 'events'
        ? new EventPipe({
            linkBytesPerSec: hw.pcie.h2dBytesPerSec * pageable,
            linkLatencyNs: hw.pcie.latencyNs,
            packetBytes: o.packetBytes ?? PAPER_PACKET_BYTES,
            dramBytesPerSec: hw.cpu.dramBytesPerSec,
            contention: o.contention,
            cores: o.cores,
            d2hBytesPerSec: hw.pcie.d2hBytesPerSec * pageable,
          })
        : null;
  }

  run(it: Iteration, _nowNs: Ns): Ns {
    split(it, this.alpha, this.beta);
    this.totals.decodeTokens += it.decode.length;
    for (const p of it.prefill) this.totals.prefillTokens += p.tokens;
    return iterationNs(this.events ? this.runEvents(it) : this.runClosedForm(it));
  }

  /** The event pipeline's measurements (events mode), with busy times replacing the closed form's. */
  eventStats(): EventPipeStats | undefined {
    if (!this.events) return undefined;
    const s = this.events.stats();
    if (s.h2dBytes !== this.totals.h2dBytes)
      throw new Error(`event VSLPipe moved ${s.h2dBytes} B over H2D, expected ${this.totals.h2dBytes}`);
    this.totals.gpuBusyNs = s.gpuBusyNs;
    this.totals.cpuBusyNs = s.cpuBusyNs;
    this.totals.h2dBusyNs = s.h2dBusyNs;
    this.totals.dramBoundStages = s.dramBoundStages;
    if (s.d2hBytes > 0) this.totals.d2hBytes = s.d2hBytes;
    return s;
  }

  private runEvents(it: Iteration): number {
    const { lc, alpha, beta, gaL, gbL, totals: acc } = this;
    const { mm, layerBytes } = lc;
    const actBytes = it.decode.length * this.actPerDecode;
    const kvReadBytes = it.decodeContextTokens * this.kvTokBytes;
    // The per-layer GPU times are pure lookups per layer kind within the iteration.
    const gpuCache = new Map<boolean, [number, number]>();
    for (let l = 0; l < mm.layers; l++) {
      const moe = mm.moeIndexOfLayer[l]! >= 0;
      let g = gpuCache.get(moe);
      if (!g) {
        g = [lc.gpuLayerNs(l, alpha), lc.gpuLayerNs(l, beta)];
        gpuCache.set(moe, g);
      }
      gaL[l] = g[0];
      gbL[l] = g[1];
      acc.hostDramBytes += (l + 1 < mm.layers ? layerBytes[l + 1]! : 0) + actBytes + kvReadBytes;
    }
    acc.hostDramBytes += layerBytes[0]!;
    acc.h2dBytes += layerBytes.reduce((a, b) => a + b, 0) + mm.layers * actBytes;
    const kv = this.kvTokBytes;
    return this.events!.runIteration({
      layerBytes,
      ga: gaL,
      gb: gbL,
      ca: lc.cpuNs(alpha),
      cb: lc.cpuNs(beta),
      ka: alpha.decodeCtx * kv,
      kb: beta.decodeCtx * kv,
      actA: alpha.decode * this.actPerDecode,
      actB: beta.decode * this.actPerDecode,
      d2hA: alpha.decode * this.d2hPerDecode + alpha.prefillTokens * this.d2hPerPrefill,
      d2hB: beta.decode * this.d2hPerDecode + beta.prefillTokens * this.d2hPerPrefill,
      lmHeadNs: lc.lmHead(it.decode.length + it.prefill.length),
    });
  }

  private runClosedForm(it: Iteration): number {
    const { lc, alpha, beta, totals: acc } = this;
    const { mm, layerBytes, transferNs } = lc;
    const actBytes = it.decode.length * this.actPerDecode;
    const kvReadBytes = it.decodeContextTokens * this.kvTokBytes;
    const dramBytesPerNs = this.hw.cpu.dramBytesPerSec / 1e9;
    let t = transferNs[0]!;
    const ca = lc.cpuNs(alpha);
    const cb = lc.cpuNs(beta);
    this.layerCache.clear();
    for (let l = 0; l < mm.layers; l++) {
      // Layers of the same kind and next-layer bytes cost the same within an iteration (a lookup).
      const kindKey = `${mm.moeIndexOfLayer[l]! >= 0 ? 'm' : 'd'}|${l + 1 < mm.layers ? layerBytes[l + 1] : -1}`;
      let c = this.layerCache.get(kindKey);
      if (!c) {
        const ga = lc.gpuLayerNs(l, alpha);
        const gb = lc.gpuLayerNs(l, beta);
        const last = Math.min(l + 1, mm.layers - 1);
        const nextBytes = l + 1 < mm.layers ? layerBytes[l + 1]! + actBytes : actBytes;
        const next = l + 1 < mm.layers ? transferNs[l + 1]! : 0;
        const linkNs = next + (actBytes / Math.max(1, layerBytes[last]!)) * transferNs[last]!;
        let stage: number;
        let slowed = false;
        if (!this.o.contention) {
          stage = Math.max(Math.max(ca, gb) + Math.max(cb, ga), linkNs);
        } else {
          const kb = this.kvTokBytes;
          const s = sharedStage(
            ca,
            alpha.decodeCtx * kb,
            gb,
            cb,
            beta.decodeCtx * kb,
            ga,
            nextBytes,
            linkNs,
            dramBytesPerNs,
          );
          stage = s.stageNs;
          slowed = s.slowed;
        }
        c = { ga, gb, nextBytes, linkNs, stage, slowed };
        this.layerCache.set(kindKey, c);
      }
      if (c.slowed) acc.dramBoundStages++;
      t += c.stage;
      acc.gpuBusyNs += c.ga + c.gb;
      acc.cpuBusyNs += ca + cb;
      acc.h2dBusyNs += c.linkNs;
      acc.h2dBytes += c.nextBytes;
      acc.hostDramBytes += c.nextBytes + kvReadBytes;
    }
    acc.h2dBusyNs += transferNs[0]!;
    acc.h2dBytes += layerBytes[0]!;
    acc.hostDramBytes += layerBytes[0]!;
    const lm = lc.lmHead(it.decode.length + it.prefill.length);
    acc.gpuBusyNs += lm;
    return t + lm;
  }
}

/** VSLPipe groups: decode sequences alternately, prefill sequences to the lighter group. */
export function split(it: Iteration, a: GroupLoad, b: GroupLoad): void {
  for (const g of [a, b]) {
    g.decode = 0;
    g.decodeCtx = 0;
    g.prefillTokens = 0;
    g.prefillCtx = 0;
  }
  it.decode.forEach((s, i) => {
    const g = i % 2 === 0 ? a : b;
    g.decode++;
    g.decodeCtx += s.kvTokens;
  });
  for (const p of it.prefill) {
    const g = a.decode + a.prefillTokens <= b.decode + b.prefillTokens ? a : b;
    g.prefillTokens += p.tokens;
    g.prefillCtx += (p.tokens * (p.tokens + 1)) / 2;
  }
}

/**
 * One VSLPipe stage with host DRAM shared by CPU attention and the weight DMA (proportional to
 * demand when oversubscribed, as `sim/resources/fluid-share.ts` shares it): phase 1 runs CPU
 * attention of α beside the GPU on β, phase 2 the reverse; the DMA of the next layer's weights
 * (`dmaBytes`, `dmaNs` alone on the link) runs through both. During a CPU window of demand r_c
 * and DMA demand r_d, if r_c + r_d > C both get C·r/(r_c + r_d). Returns the stage time and
 * whether DRAM sharing lengthened it (CPU windows first in each phase).
 */
export function sharedStage(
  ca: number,
  ka: number,
  gb: number,
  cb: number,
  kb: number,
  ga: number,
  dmaBytes: number,
  dmaNs: number,
  capBytesPerNs: number,
): { stageNs: number; slowed: boolean } {
  const rd = dmaNs > 0 ? dmaBytes / dmaNs : 0;
  const window = (c: number, k: number): { len: number; dmaRate: number } => {
    if (c <= 0 || k <= 0) return { len: Math.max(0, c), dmaRate: rd };
    const rc = k / c;
    if (rc + rd <= capBytesPerNs) return { len: c, dmaRate: rd };
    return { len: (c * (rc + rd)) / capBytesPerNs, dmaRate: (rd * capBytesPerNs) / (rc + rd) };
  };
  const w1 = window(ca, ka);
  const w2 = window(cb, kb);
  const p1 = Math.max(w1.len, gb);
  const p2 = Math.max(w2.len, ga);
  // DMA progress over [0, w1) at w1.dmaRate, [w1, p1) at rd, [p1, p1 + w2) at w2.dmaRate, then rd.
  let left = dmaBytes;
  let t = 0;
  for (const [len, rate] of [
    [w1.len, w1.dmaRate],
    [p1 - w1.len, rd],
    [w2.len, w2.dmaRate],
    [p2 - w2.len, rd],
  ] as const) {
    if (left <= 0 || rate <= 0) break;
    const can = len * rate;
    if (can >= left) {
      t += left / rate;
      left = 0;
      break;
    }
    left -= can;
    t += len;
  }
  if (left > 0) t += rd > 0 ? left / rd : 0;
  const dmaEnd = dmaBytes > 0 ? t : 0;
  const stageNs = Math.max(p1 + p2, dmaEnd);
  const free = Math.max(Math.max(ca, gb) + Math.max(cb, ga), dmaNs);
  return { stageNs, slowed: stageNs > free + 1e-6 };
}
