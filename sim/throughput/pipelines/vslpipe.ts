/**
 * MoE-Lens executor (DESIGN §8 "MoE-Lens"): a continuous, stateful offline-batch schedule over
 * a paged host KV pool. Every iteration is decided by the resource-aware scheduler
 * (`scheduler.ts`) and costed as one VSLPipe pass; iterations are simulated one by one (only the
 * pure cost lookups are memoised). The analytic model (`analytic.ts`) is computed beside it.
 *
 * Iteration cost (VSLPipe, paper §6.4) — a SIMPLIFIED closed-form pipeline, not the task-DAG
 * executor of `sim/throughput/pass-dag.ts`:
 * - the iteration's tokens are split into two groups α/β (decode sequences alternately,
 *   prefill sequences greedily to the lighter group);
 * - per layer l: GPU work of a group = attention projections of its decode tokens + GPU
 *   (flash) attention of its prefill tokens + router + experts (even routing, `expectedCounts`)
 *   or the dense FFN, all from the cost model; CPU work = decode attention over its KV
 *   (`cpuAttention`, all cores); compute_l = max(CPU α, GPU β) + max(CPU β, GPU α) (two phases,
 *   a sync per phase);
 * - weights: each layer's bytes stream over H2D (cost-model `transfer`) into a 2-layer buffer
 *   (2W/L): layer l+1 loads while layer l computes, so the iteration takes
 *   transfer_0 + Σ_l stage_l + LM head (one token per sequence stepped); the H2D activation
 *   copies (the CPU attention output, d per decode token) are added to the link's bytes (the
 *   100 MB-packet data mover is assumed to keep them from being starved, so they are not
 *   separate transfers); Q and new K/V go D2H, the other direction, and are not modelled;
 * - host-DRAM contention (`contention: true`): the weight stream of layer l+1 and the CPU
 *   attention of layer l share the socket's DRAM bandwidth in proportion to demand when
 *   oversubscribed (`sharedStage`: a closed form of the two-flow fluid share over the stage's
 *   two phases, not the event-level `sim/resources/fluid-share.ts`).
 * - `pipeline: 'events'` (default `closed-form`): the same iteration simulated as events instead
 *   (`vslpipe-events.ts`: phases on the CPU pool and GPU, the data mover's 100 MB packets at low
 *   priority and the attention outputs at high priority on the H2D link, host DRAM as the
 *   `FluidShare`); the schedule, bytes and book-keeping are shared, busy times come from the
 *   resources. Agrees with the closed form to ~0.01 % on contention.yaml (FIDELITY.md).
 * - Trace: KV pages in use as a host memory counter (category `kvPages`) after every iteration;
 *   each preemption iteration as a blocked slice on the `prefill scheduler` track; admit,
 *   first token and finish of every request.
 * - Not modelled: KV write-back of new tokens (D2H), sampling, GPU memory limits of the groups'
 *   activations, the schedulers' own time.
 *
 * Pipeline profiler (paper §6.3, Fig. 7): n_real from a line fit of one MoE layer's GPU time
 * (cost model) against tokens, and that layer's transfer time (`profilerNReal`); T_GPU for the
 * analytic model = 1/(slope × layers) tokens/s, T_GPU,it = n_real.
 */
import type { HardwareProfile, ModelProfile } from '../../hardware-profiles/types.ts';
import type { CostModel } from '../cost/types.ts';
import { ACTIVATION_BYTES } from '../cost/cost-model.ts';
import type { Ns } from '../kernel/time.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import { lensCosts, type GroupLoad } from './costs.ts';
import { lensAnalytic, profilerNReal, type LensAnalytic } from './analytic.ts';
import { PagePool } from './page-pool.ts';
import { LensScheduler, type Iteration } from './scheduler.ts';
import { EventPipe, PAPER_PACKET_BYTES, type EventPipeStats } from './vslpipe-events.ts';

export interface LensSettings {
  /** Host KV capacity, bytes. */
  readonly kvCapacityBytes: number;
  /** Page size b, token slots. */
  readonly pageTokens: number;
  /** n_real override (default: the profiler's). */
  readonly nReal?: number;
  /** Cores for CPU attention (default all). */
  readonly cpuCores?: number;
  /** Host-DRAM contention between CPU attention and DMA. */
  readonly contention: boolean;
  /** Cap on sequences holding KV at once (executor.batchSeqs). */
  readonly maxRunning?: number;
  /** Occupancy timeline samples kept (every k-th iteration). */
  readonly timelineEvery?: number;
  /**
   * VSLPipe iteration cost: `closed-form` (default; the formulas of this file) or `events`
   * (`vslpipe-events.ts`: phases, data-mover packets and the host-DRAM fluid share as events).
   */
  readonly pipeline?: 'closed-form' | 'events';
  /** Data-mover packet size in `events` mode (default the paper's 100 MB, `PAPER_PACKET_BYTES`). */
  readonly packetBytes?: number;
  /** `events` mode only: model the D2H leg (Q, new K/V of decode tokens, K/V of prefill tokens; see vslpipe-events.ts). */
  readonly qkvD2H?: boolean;
}

export interface LensRunInput {
  readonly model: ModelProfile;
  readonly hardware: HardwareProfile;
  readonly cost: CostModel;
  readonly requests: readonly { readonly id: number; readonly promptTokens: number; readonly outputTokens: number }[];
  readonly settings: LensSettings;
  readonly sink?: TraceSink;
}

export interface LensRunResult {
  readonly endNs: number;
  readonly iterations: number;
  readonly generatedTokens: number;
  readonly prefillTokens: number;
  readonly decodeTokens: number;
  readonly preemptions: number;
  readonly recomputedTokens: number;
  readonly pages: number;
  readonly peakPages: number;
  readonly meanOccupancy: number;
  readonly nReal: number;
  readonly gpuBusyNs: number;
  readonly cpuBusyNs: number;
  readonly h2dBusyNs: number;
  readonly h2dBytes: number;
  readonly dramBoundStages: number;
  /** Bytes served by host DRAM: weight DMA + CPU attention's KV reads. */
  readonly hostDramBytes: number;
  /** (time s, pages in use, generated tokens so far, prefill tokens so far, preemptions so far) every `timelineEvery` iterations. */
  readonly timeline: readonly (readonly [number, number, number, number, number])[];
  readonly analytic: LensAnalytic;
  readonly throughputTokPerS: number;
  /** Which VSLPipe ran. */
  readonly pipeline: 'closed-form' | 'events';
  /** `events` mode only: what the event pipeline measured over the run. */
  readonly eventStats?: EventPipeStats;
}

export function runLens(x: LensRunInput): LensRunResult {
  const { model, hardware: hw, cost, settings: st } = x;
  const cores = st.cpuCores ?? hw.cpu.cores;
  const lc = lensCosts(model, hw, cost, cores);
  const { mm, layerBytes, transferNs, ns, gpuLayerNs, cpuNs, lmHead } = lc;
  const E = model.experts;
  const kvTokBytes = model.derived.kvBytesPerTokenPerLayer;
  const kvBytesPerToken = model.derived.kvBytesPerToken;
  const d = model.hiddenSize;
  // H2D activation bytes per decode token per layer: the CPU attention's output (d). Q and the new
  // K/V (d + 2d/s per token; prefill tokens send only their K/V) go D2H, the other direction of
  // the full-duplex link, so they do not delay the weight stream (paper §6.4 bounds both
  // directions together by 2n(d + 2d/s)).
  const h2dActBytesPerDecodeToken = d * ACTIVATION_BYTES;

  // Pipeline profiler on the first MoE layer (or layer 0).
  const profLayer = Math.max(0, mm.moeIndexOfLayer.findIndex((m) => m >= 0));
  const pts: [number, number][] = [1024, 2048, 4096, 8192, 16384].map((n) => [n, gpuLayerNs(profLayer, { decode: n, decodeCtx: 0, prefillTokens: 0, prefillCtx: 0 }) / 1e9]);
  const prof = profilerNReal(pts, transferNs[profLayer]! / 1e9);
  const nReal = st.nReal ?? prof.nReal;

  const pages = Math.floor(st.kvCapacityBytes / (kvBytesPerToken * st.pageTokens));
  const pool = new PagePool(pages, st.pageTokens);
  const sched = new LensScheduler(x.requests, pool, nReal, st.maxRunning);
  const dramBps = hw.cpu.dramBytesPerSec;

  let now = 0;
  let iterations = 0;
  let gpuBusy = 0;
  let cpuBusy = 0;
  let h2dBusy = 0;
  let h2dBytes = 0;
  let prefillTokens = 0;
  let decodeTokens = 0;
  let dramBound = 0;
  let dramBytes = 0;
  let occIntegral = 0;
  const every = st.timelineEvery ?? 1;
  const timeline: [number, number, number, number, number][] = [];
  const alpha: GroupLoad = { decode: 0, decodeCtx: 0, prefillTokens: 0, prefillCtx: 0 };
  const beta: GroupLoad = { decode: 0, decodeCtx: 0, prefillTokens: 0, prefillCtx: 0 };
  const layerCache = new Map<string, { ga: number; gb: number; nextBytes: number; linkNs: number; stage: number; slowed: boolean }>();
  const mode = st.pipeline ?? 'closed-form';
  if (st.qkvD2H && mode !== 'events') throw new RangeError('qkvD2H needs pipeline: events');
  // D2H bytes per layer: a decode token's Q (d) and new K/V; a prefill token's K/V (written to host pages).
  const d2hPerDecodeToken = st.qkvD2H ? d * ACTIVATION_BYTES + kvTokBytes : 0;
  const d2hPerPrefillToken = st.qkvD2H ? kvTokBytes : 0;
  const pipe =
    mode === 'events'
      ? new EventPipe({
          linkBytesPerSec: hw.pcie.h2dBytesPerSec * (hw.pinnedHostMemory ? 1 : hw.pcie.pageableFactor),
          linkLatencyNs: hw.pcie.latencyNs,
          packetBytes: st.packetBytes ?? PAPER_PACKET_BYTES,
          dramBytesPerSec: dramBps,
          contention: st.contention,
          cores,
          d2hBytesPerSec: hw.pcie.d2hBytesPerSec * (hw.pinnedHostMemory ? 1 : hw.pcie.pageableFactor),
        })
      : null;
  const gaL: number[] = new Array<number>(mm.layers).fill(0);
  const gbL: number[] = new Array<number>(mm.layers).fill(0);
  /** Book-keeping after an iteration of `t` ns (both modes). */
  const finishIteration = (it: Iteration, t: number): void => {
    occIntegral += pool.usedPages * t;
    now += t;
    iterations++;
    decodeTokens += it.decode.length;
    for (const p of it.prefill) prefillTokens += p.tokens;
    if (iterations % every === 0) timeline.push([now / 1e9, pool.usedPages, sched.generatedTokens, prefillTokens, sched.preemptions]);
    if (x.sink?.onMemory) {
      x.sink.onMemory({ pool: 'host', category: 'kvPages', timeNs: now as Ns, categoryUsedBytes: pool.usedPages * st.pageTokens * kvBytesPerToken, usedBytes: pool.usedPages * st.pageTokens * kvBytesPerToken, capacityBytes: pages * st.pageTokens * kvBytesPerToken });
    }
    const startNs = now - t;
    if (x.sink?.onRequest) {
      for (const p of it.prefill) {
        if (p.recomputed === 0) {
          x.sink.onRequest(x.requests[p.seq.id]!.id, 'admit', startNs as Ns);
          x.sink.onRequest(x.requests[p.seq.id]!.id, 'firstToken', now as Ns);
        }
      }
      for (const q of it.decode.concat(it.prefill.map((p) => p.seq))) if (q.state === 'done') x.sink.onRequest(x.requests[q.id]!.id, 'finish', now as Ns);
    }
    // Preemption iterations on the timeline: prefill admission is blocked for the iteration.
    if (it.preempted.length > 0 && x.sink?.onBlocked) {
      x.sink.onBlocked({ stream: 'prefill scheduler', reason: `preempted ${it.preempted.length} sequences (no admission)`, startNs: startNs as Ns, endNs: now as Ns });
    }
  };
  while (!sched.done) {
    const it: Iteration = sched.next(now);
    split(it, alpha, beta);
    const actBytes = it.decode.length * h2dActBytesPerDecodeToken;
    // LM head: one token per sequence stepped (the last prompt position of a prefill, or the decode token).
    const headTokens = it.decode.length + it.prefill.length;
    const kvReadBytes = it.decodeContextTokens * kvTokBytes;
    if (pipe) {
      // Event level: the per-layer GPU times are pure lookups (per layer kind within the
      // iteration); the iteration itself is simulated (vslpipe-events.ts).
      const gpuCache = new Map<boolean, [number, number]>();
      for (let l = 0; l < mm.layers; l++) {
        const moe = mm.moeIndexOfLayer[l]! >= 0;
        let g = gpuCache.get(moe);
        if (!g) {
          g = [gpuLayerNs(l, alpha), gpuLayerNs(l, beta)];
          gpuCache.set(moe, g);
        }
        gaL[l] = g[0];
        gbL[l] = g[1];
        dramBytes += (l + 1 < mm.layers ? layerBytes[l + 1]! : 0) + actBytes + kvReadBytes;
      }
      dramBytes += layerBytes[0]!;
      h2dBytes += layerBytes.reduce((a, b) => a + b, 0) + mm.layers * actBytes;
      const lm = lmHead(headTokens);
      const t = pipe.runIteration({
        layerBytes, ga: gaL, gb: gbL,
        ca: cpuNs(alpha), cb: cpuNs(beta), ka: alpha.decodeCtx * kvTokBytes, kb: beta.decodeCtx * kvTokBytes,
        actA: alpha.decode * h2dActBytesPerDecodeToken, actB: beta.decode * h2dActBytesPerDecodeToken,
        d2hA: alpha.decode * d2hPerDecodeToken + alpha.prefillTokens * d2hPerPrefillToken,
        d2hB: beta.decode * d2hPerDecodeToken + beta.prefillTokens * d2hPerPrefillToken,
        lmHeadNs: lm,
      });
      finishIteration(it, t);
      continue;
    }
    let t = transferNs[0]!;
    const ca = cpuNs(alpha);
    const cb = cpuNs(beta);
    layerCache.clear();
    for (let l = 0; l < mm.layers; l++) {
      // Layers of the same kind (MoE or dense) and the same next-layer bytes cost the same within
      // an iteration: computed once per iteration (a pure lookup, not a memoised iteration).
      const kindKey = `${mm.moeIndexOfLayer[l]! >= 0 ? 'm' : 'd'}|${l + 1 < mm.layers ? layerBytes[l + 1] : -1}`;
      let c = layerCache.get(kindKey);
      if (!c) {
        const ga = gpuLayerNs(l, alpha);
        const gb = gpuLayerNs(l, beta);
        const nextBytes = l + 1 < mm.layers ? layerBytes[l + 1]! + actBytes : actBytes;
        const next = l + 1 < mm.layers ? transferNs[l + 1]! : 0;
        const linkNs = next + (actBytes / Math.max(1, layerBytes[Math.min(l + 1, mm.layers - 1)]!)) * transferNs[Math.min(l + 1, mm.layers - 1)]!;
        let stage: number;
        let slowed = false;
        if (!st.contention) {
          stage = Math.max(Math.max(ca, gb) + Math.max(cb, ga), linkNs);
        } else {
          const shared = sharedStage(ca, alpha.decodeCtx * kvTokBytes, gb, cb, beta.decodeCtx * kvTokBytes, ga, nextBytes, linkNs, dramBps / 1e9);
          stage = shared.stageNs;
          slowed = shared.slowed;
        }
        c = { ga, gb, nextBytes, linkNs, stage, slowed };
        layerCache.set(kindKey, c);
      }
      const { ga, gb, nextBytes, linkNs, stage } = c;
      if (c.slowed) dramBound++;
      t += stage;
      gpuBusy += ga + gb;
      cpuBusy += ca + cb;
      h2dBusy += linkNs;
      h2dBytes += nextBytes;
      dramBytes += nextBytes + kvReadBytes;
    }
    h2dBusy += transferNs[0]!;
    h2dBytes += layerBytes[0]!;
    dramBytes += layerBytes[0]!;
    t += lmHead(headTokens);
    gpuBusy += lmHead(headTokens);
    finishIteration(it, t);
  }
  const eventStats = pipe ? pipe.stats() : undefined;
  if (eventStats) {
    if (eventStats.h2dBytes !== h2dBytes) throw new Error(`event VSLPipe moved ${eventStats.h2dBytes} B over H2D, expected ${h2dBytes}`);
    gpuBusy = eventStats.gpuBusyNs;
    cpuBusy = eventStats.cpuBusyNs;
    h2dBusy = eventStats.h2dBusyNs;
    dramBound = eventStats.dramBoundStages;
  }
  if (timeline.length === 0 || timeline[timeline.length - 1]![0] !== now / 1e9) timeline.push([now / 1e9, pool.usedPages, sched.generatedTokens, prefillTokens, sched.preemptions]);

  // Analytic model beside the run (batch means; settings card §8).
  const K = x.requests.length;
  const pMean = x.requests.reduce((a, r) => a + r.promptTokens, 0) / Math.max(1, K);
  const gMean = x.requests.reduce((a, r) => a + Math.max(1, r.outputTokens), 0) / Math.max(1, K);
  const modelBytes = layerBytes.reduce((a, b) => a + b, 0);
  const deltaS = transferNs.reduce((a, b) => a + b, 0) / 1e9;
  const analytic = lensAnalytic({
    promptTokens: pMean,
    genTokens: Math.max(1, Math.round(gMean)),
    pageTokens: st.pageTokens,
    kvCapacityTokens: pages * st.pageTokens,
    sequences: Math.max(1, K),
    modelBytes,
    ioBytesPerS: modelBytes / deltaS,
    tGpuTokPerS: 1 / (prof.slopeS * mm.layers),
    tGpuItTokens: nReal,
    experts: E,
    topK: model.topK,
    gpuFlops: hw.gpu.bf16FlopsPerSec,
    kvCapacityBytes: st.kvCapacityBytes,
  });
  return {
    endNs: now,
    iterations,
    generatedTokens: sched.generatedTokens,
    prefillTokens,
    decodeTokens,
    preemptions: sched.preemptions,
    recomputedTokens: sched.recomputedTokens,
    pages,
    peakPages: pool.peakUsed,
    meanOccupancy: now > 0 ? occIntegral / now / pages : 0,
    nReal,
    gpuBusyNs: gpuBusy,
    cpuBusyNs: cpuBusy,
    h2dBusyNs: h2dBusy,
    h2dBytes,
    dramBoundStages: dramBound,
    hostDramBytes: dramBytes,
    timeline,
    analytic,
    throughputTokPerS: now > 0 ? sched.generatedTokens / (now / 1e9) : 0,
    pipeline: mode,
    ...(eventStats ? { eventStats } : {}),
  };
}

/** VSLPipe groups: decode sequences alternately, prefill sequences to the lighter group. */
function split(it: Iteration, a: GroupLoad, b: GroupLoad): void {
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
 * (`dmaBytes`, `dmaNs` alone on the link) runs through both. During a CPU-attention window of
 * demand r_c (bytes/ns, its unconstrained rate) and DMA demand r_d, if r_c + r_d > C both get
 * C·r/(r_c + r_d): the window stretches by (r_c + r_d)/C and the DMA slows to C·r_d/(r_c + r_d).
 * Outside the windows the DMA runs at its link rate. Returns the stage time and whether DRAM
 * sharing lengthened it. Closed form of the two-flow fluid share (CPU windows first in each phase).
 */
export function sharedStage(ca: number, ka: number, gb: number, cb: number, kb: number, ga: number, dmaBytes: number, dmaNs: number, capBytesPerNs: number): { stageNs: number; slowed: boolean } {
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
  for (const [len, rate] of [[w1.len, w1.dmaRate], [p1 - w1.len, rd], [w2.len, w2.dmaRate], [p2 - w2.len, rd]] as const) {
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
