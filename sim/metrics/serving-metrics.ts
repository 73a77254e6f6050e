/**
 * Per-run metrics of the serving executor (DESIGN §9). Names are a contract (tools rely on
 * them): see `RunMetrics`. Only simulated quantities; wall-clock figures live in the runner.
 *
 * Definitions:
 * - ttftMs: first token − arrival; tpotMs: (finish − first token) / (output tokens − 1), over
 *   requests with ≥ 2 output tokens; e2eMs: finish − arrival.
 * - ttftQueueMs: admission − arrival (waiting for the batcher, a batch slot or KV room);
 *   ttftServiceMs: first token − admission (the prefill iteration, its expert fetches included).
 *   Per request ttft = queue + service; the distributions are of each part on its own.
 * - throughputTokPerS: output tokens / makespan; prefillTokPerS: prompt tokens / makespan;
 *   decodeTokPerS: decode-generated tokens (output − 1 per request) / makespan. The serving
 *   family interleaves phases, so all three are over the whole makespan.
 * - makespanS: the last request's finish (prefetches still landing afterwards do not count).
 * - shiftRecoveryRequests (workloads with a `shift`): see `shiftRecovery`.
 * - gpuBusyFrac / gpuBlockedFrac: GPU compute busy / blocked-on-expert-fetch time over makespan;
 *   gpuBlockedS the blocked time itself.
 * - h2dBytes / d2hBytes: bytes moved over PCIe; h2dUtil: H2D link busy time / makespan;
 *   pcieGBps: (h2dBytes + d2hBytes) / makespan, in GB/s (10^9 bytes per simulated second).
 * - bufferHitRate = cacheHitRate + prefetchHitRate: hits over expert needs (DESIGN §7); the two
 *   parts are rounded to 6 significant digits and the total is exactly their sum.
 * - prefetchPrecision: prefetches used (needed before eviction) / prefetches issued.
 * - prefetchWastedBytes: bytes of prefetches never used (evicted, cancelled, or unused at the end).
 * - expertActivationRatio: mean over (iteration, MoE layer) of activated experts / experts.
 * - decodeCacheHitRate / decodeBufferHitRate: the hit rates over the needs of iterations without a
 *   prefill (a prefill activates nearly every expert of a layer, so its needs hit at ≈ the cached
 *   fraction whatever the policy; MoEpic's Table 1 compares policies on decoding).
 * - SSD tier only (a policy with `ssdTier`): nvmeBytes (device bytes read from the drive),
 *   nvmeReads, nvmeUtil (the drive's data channel busy / makespan), nvmeGBps, pageCacheHitRate
 *   (acquisitions of an expert file that found it cached / all acquisitions), pageCacheEvictions;
 *   peakBytes gains the `pageCache` pool.
 * - policy: the policy's own report, when it has one (MoEpic's chosen configuration).
 * - peakBytes: peak per pool, total and per category.
 * - cap / cost (when the runner passes the model and hardware): MoE-CAP's S-MBU, S-MFU, dense
 *   MBU/MFU and cost per million generated tokens (`cap.ts`, whose header lists the definitions
 *   and simplifications).
 */
import type { ServingOutcome } from '../serving/serving-executor.ts';
import { distribution, round6, safeDiv, type Distribution } from './summary.ts';
import type { MemoryPool } from '../resources/memory-pool.ts';
import type { NvmeLink } from '../resources/nvme-link.ts';
import type { PageCache } from '../resources/page-cache.ts';
import type { HardwareProfile, ModelProfile } from '../../hardware-profiles/types.ts';
import { capCost, capMetrics } from './cap.ts';
import { servingCapTotals } from './cap-totals.ts';

export type PeakBytes = Record<string, Record<string, number>>;

export interface RunMetrics {
  ttftMs: Distribution;
  ttftQueueMs: Distribution;
  ttftServiceMs: Distribution;
  tpotMs: Distribution;
  e2eMs: Distribution;
  throughputTokPerS: number;
  prefillTokPerS: number;
  decodeTokPerS: number;
  makespanS: number;
  gpuBusyFrac: number;
  gpuBlockedFrac: number;
  gpuBlockedS: number;
  h2dBytes: number;
  d2hBytes: number;
  h2dUtil: number;
  pcieGBps: number;
  bufferHitRate: number;
  cacheHitRate: number;
  prefetchHitRate: number;
  prefetchPrecision: number;
  prefetchWastedBytes: number;
  expertActivationRatio: number;
  expertNeeds: number;
  demandFetches: number;
  evictions: number;
  bufferSlots: number;
  requests: number;
  outputTokens: number;
  peakBytes: PeakBytes;
  [extra: string]: unknown;
}

const roundDist = (d: Distribution): Distribution => ({
  mean: round6(d.mean),
  p50: round6(d.p50),
  p90: round6(d.p90),
  p99: round6(d.p99),
});

export function poolPeaks(pools: readonly MemoryPool[]): PeakBytes {
  const out: PeakBytes = {};
  for (const p of pools) out[p.name] = { total: p.peakBytes, capacity: p.capacityBytes, ...p.peaks() };
  return out;
}

export interface ServingMetricOptions {
  /** The workload's shift point (first request of the new task mix), for the recovery metrics. */
  readonly shiftAtRequest?: number;
  /** Rolling window (requests) of the recovery metric. Default 8. */
  readonly recoveryWindow?: number;
  /** The run's profiles: adds MoE-CAP's `cap` and `cost` (absent without them). */
  readonly cap?: { readonly model: ModelProfile; readonly hardware: HardwareProfile };
}

/**
 * Recovery after a workload shift (MoE-Infinity §6): requests, in arrival order from the shift
 * on, until the rolling mean TPOT (window `w`) comes within 10 % of the new steady state and
 * stays there. The steady state is the mean TPOT of the last quarter of the post-shift requests.
 * Requests with a single output token have no TPOT and are skipped.
 */
export function shiftRecovery(
  requests: readonly {
    readonly id: number;
    readonly outputTokens: number;
    readonly firstTokenNs: number;
    readonly finishNs: number;
  }[],
  shiftAt: number,
  w = 8,
): { requests: number; beforeMs: number; steadyMs: number } {
  const tpot = (r: (typeof requests)[number]) => (r.finishNs - r.firstTokenNs) / 1e6 / (r.outputTokens - 1);
  const ordered = [...requests].filter((r) => r.outputTokens > 1).sort((a, b) => a.id - b.id);
  const before = ordered.filter((r) => r.id < shiftAt).map(tpot);
  const after = ordered.filter((r) => r.id >= shiftAt).map(tpot);
  const mean = (a: readonly number[]) => (a.length ? a.reduce((x, y) => x + y, 0) / a.length : 0);
  const tail = after.slice(Math.floor(after.length * 0.75));
  const steady = mean(tail);
  const lastStart = Math.max(0, after.length - w);
  let recovered = lastStart;
  for (let k = lastStart; k >= 0; k--) {
    const m = mean(after.slice(k, k + w));
    if (steady > 0 && Math.abs(m - steady) / steady > 0.1) break;
    recovered = k;
  }
  return { requests: recovered, beforeMs: mean(before.slice(Math.floor(before.length / 2))), steadyMs: steady };
}

export function servingMetrics(o: ServingOutcome, opts: ServingMetricOptions = {}): RunMetrics {
  const ttft: number[] = [];
  const ttftQueue: number[] = [];
  const ttftService: number[] = [];
  const tpot: number[] = [];
  const e2e: number[] = [];
  let outputTokens = 0;
  let promptTokens = 0;
  let decodeTokens = 0;
  for (const r of o.requests) {
    ttft.push((r.firstTokenNs - r.arrivalNs) / 1e6);
    ttftQueue.push((r.admitNs - r.arrivalNs) / 1e6);
    ttftService.push((r.firstTokenNs - r.admitNs) / 1e6);
    e2e.push((r.finishNs - r.arrivalNs) / 1e6);
    if (r.outputTokens > 1) tpot.push((r.finishNs - r.firstTokenNs) / 1e6 / (r.outputTokens - 1));
    outputTokens += r.emittedTokens;
    promptTokens += r.promptTokens;
    decodeTokens += r.emittedTokens - 1;
  }
  // The workload is done when its last request finishes (prefetches still on the link after
  // that do not count); utilisations are over the same span.
  let lastFinishNs = 0;
  for (const r of o.requests) if (r.finishNs > lastFinishNs) lastFinishNs = r.finishNs;
  const spanNs = lastFinishNs > 0 ? lastFinishNs : o.endNs;
  const makespanS = spanNs / 1e9;
  const c = o.counters;
  // The buffer hit rate is the sum of its two reported parts, not rounded on its own: rounding
  // each of the three separately broke `bufferHitRate = cacheHitRate + prefetchHitRate` by up
  // to ~1e-6 whenever both parts are non-zero.
  const cacheHitRate = round6(safeDiv(c.cacheHits, c.needs));
  const prefetchHitRate = round6(safeDiv(c.prefetchHits, c.needs));
  const res = o.resources;
  return {
    ttftMs: roundDist(distribution(ttft)),
    ttftQueueMs: roundDist(distribution(ttftQueue)),
    ttftServiceMs: roundDist(distribution(ttftService)),
    tpotMs: roundDist(distribution(tpot)),
    e2eMs: roundDist(distribution(e2e)),
    throughputTokPerS: round6(safeDiv(outputTokens, makespanS)),
    prefillTokPerS: round6(safeDiv(promptTokens, makespanS)),
    decodeTokPerS: round6(safeDiv(decodeTokens, makespanS)),
    makespanS: round6(makespanS),
    gpuBusyFrac: round6(Math.min(1, safeDiv(res.gpu.busyTimeNs(), spanNs))),
    gpuBlockedFrac: round6(safeDiv(c.blockedNs, spanNs)),
    gpuBlockedS: round6(c.blockedNs / 1e9),
    h2dBytes: res.h2d.bytesMoved,
    d2hBytes: res.d2h.bytesMoved,
    h2dUtil: round6(Math.min(1, safeDiv(res.h2d.busyTimeNs(), spanNs))),
    pcieGBps: round6(safeDiv(res.h2d.bytesMoved + res.d2h.bytesMoved, makespanS) / 1e9),
    bufferHitRate: cacheHitRate + prefetchHitRate,
    cacheHitRate,
    prefetchHitRate,
    prefetchPrecision: round6(safeDiv(c.prefetchesUsed, c.prefetchesIssued)),
    prefetchWastedBytes: c.prefetchWastedBytes + res.h2d.cancelledSentBytes,
    expertActivationRatio: round6(safeDiv(c.activationRatioSum, c.layerRoutings)),
    expertNeeds: c.needs,
    demandFetches: c.demandFetches,
    evictions: c.evictions,
    bufferSlots: o.slots,
    decodeCacheHitRate: round6(safeDiv(c.decodeCacheHits, c.decodeNeeds)),
    decodeBufferHitRate: round6(safeDiv(c.decodeCacheHits + c.decodePrefetchHits, c.decodeNeeds)),
    requests: o.requests.length,
    outputTokens,
    peakBytes: poolPeaks(res.pageCache ? [res.vram, res.host, res.pageCache.pool] : [res.vram, res.host]),
    ...(res.nvme && res.pageCache ? storageFields(res.nvme, res.pageCache, spanNs) : {}),
    ...(opts.shiftAtRequest !== undefined ? shiftMetrics(o, opts.shiftAtRequest, opts.recoveryWindow) : {}),
    ...(o.policyReport ? { policy: o.policyReport } : {}),
    ...(opts.cap ? capFields(o, opts.cap.model, opts.cap.hardware, safeDiv(outputTokens, makespanS)) : {}),
  };
}

function capFields(
  o: ServingOutcome,
  model: ModelProfile,
  hardware: HardwareProfile,
  tokPerS: number,
): Record<string, unknown> {
  const cost = capCost(hardware, tokPerS);
  return { cap: capMetrics(model, hardware, servingCapTotals(o, model)), ...(cost ? { cost } : {}) };
}

function shiftMetrics(o: ServingOutcome, shiftAt: number, w?: number): Record<string, number> {
  const r = shiftRecovery(o.requests, shiftAt, w);
  return {
    shiftRecoveryRequests: r.requests,
    shiftTpotBeforeMs: round6(r.beforeMs),
    shiftTpotSteadyMs: round6(r.steadyMs),
  };
}

function storageFields(nvme: NvmeLink, cache: PageCache, spanNs: number): Record<string, number> {
  const s = cache.stats;
  return {
    nvmeBytes: nvme.bytesMoved,
    nvmeReads: nvme.completedReads,
    nvmeUtil: round6(Math.min(1, safeDiv(nvme.busyTimeNs(), spanNs))),
    nvmeGBps: round6(safeDiv(nvme.bytesMoved, spanNs)),
    pageCacheHitRate: round6(safeDiv(s.hits, s.accesses)),
    pageCacheEvictions: s.evictions,
  };
}
