/**
 * MoE-CAP metrics (DESIGN §8 "MoE-CAP"; the paper: Jiang et al., "MoE-CAP"; settings card
 * `../shared/reference/settings-moe-cap.md`): S-MBU, S-MFU, the dense MBU/MFU beside them, and
 * cost per million generated tokens.
 *
 * Definitions (what we compute; the paper's equation numbers):
 * - **S-MBU** (Eq. 4, dynamic batching Eq. 6) = Σ_passes (S_activated + S_KV) / Σ_passes latency
 *   / peak bandwidth: a ratio of sums over forward passes.
 *   S_activated per pass = layers × S_attn (attention projections + norms; router excluded, as in
 *   the paper) + Σ_(MoE layer, expert) activated in that pass × expert bytes (the indicator
 *   1[l, i]: an expert counted once per pass, even where several micro-batches of the pass each
 *   compute it, as in model-based batching) + shared experts of every MoE layer (always used) +
 *   the dense FFN of every non-MoE layer (Eq. 4 with n_expert = 1).
 *   Embedding and LM head are excluded (the paper excludes them).
 *   S_KV = KV bytes the pass reads (the paper says only "the KV cache size"; we read it as the KV
 *   read by the pass).
 * - **dense MBU** (§2.1): the same with every expert of every MoE layer counted in every pass.
 * - **S-MFU** (Eq. 5) = Σ FLOPs / Σ latency / peak FLOP/s, with FLOPs per token = Σ layers
 *   (attention projections + score FLOPs over the context + 2·N_router + 2·(top-k)·N_expert +
 *   shared experts) + dense FFN of non-MoE layers; per-token and config-based (top-k), as the paper
 *   (no tracing). The score FLOPs over the context are included (the paper leaves it open).
 *   Aggregation over passes: ratio of sums (the paper does not say; labelled).
 * - **dense MFU**: the same with all E experts per token.
 * - Peaks: the GPU's peak HBM bandwidth and dense BF16 FLOP/s (FP32 CUDA-core FLOP/s for FP32
 *   models, as the cost model does). No efficiency factor: these are fractions of the datasheet peak.
 *
 * Hybrid CPU–GPU systems: MoE-CAP does not define the metrics for them (its only hint is Fig. 4's
 * "reduced bandwidth when DRAM offloading is needed"). Our convention (ours, not the paper's):
 * every byte / FLOP is charged to the device that reads / computes it. The GPU figures (`sMbu`,
 * `sMfu`, `mbu`, `mfu`) count only GPU-side work against the GPU's peak; the CPU-side work (KV read
 * by CPU attention — the fraction ω of sequences — and its score FLOPs; layers computed on the CPU
 * with `gpuLayers` < layers) goes into `sMbuCpu` / `sMfuCpu` against the CPU's theoretical DRAM
 * bandwidth (channels × MT/s × 8 B) and vector FLOP/s (cores × FLOP/cycle × clock). Bytes
 * fetched over PCIe are not in either (the GPU reads them from HBM once they land, which is counted).
 *
 * SIMPLIFICATIONS (say so in reports):
 * - Serving family: Σ latency = the time at least one request is admitted and unfinished (union of
 *   [admit, finish] intervals): the executor runs iterations back to back while it has work. KV
 *   read: a prefill reads its prompt's KV once; decode step j (1 ≤ j < emitted) reads prompt + j
 *   tokens of KV. Activated (layer, expert) pairs come from the executor's activation counters
 *   (Σ over iterations × MoE layers). Encoder–decoder models: every layer's attention is counted
 *   in every pass (an overestimate for decoder-only iterations).
 * - Throughput family: KV read per decode token ≈ (P + O/2) tokens (padded prompt P, longest
 *   output O): the mean context of a padded host batch; prefill reads its prompt's KV once. Score
 *   FLOPs use the same mean contexts (prefill: causal P(P+1)/2 per sequence). ω and gpuLayers are
 *   the decode phase's configuration (prefill's for its own passes).
 * - Over all forward passes (prefill and decode together); the paper defines both with TPOT
 *   (throughput runs add `cap.decode`, the decode passes alone).
 * - Runs whose executor records no activations (MoE-Lens's self-scheduling run): activated pairs
 *   are the expectation under uniform routing of each pass's tokens (`activations: 'uniform-estimate'`).
 */
import type { HardwareProfile, ModelProfile } from '../../hardware-profiles/types.ts';
import { round6, safeDiv } from './summary.ts';

/** What a run did, summed over its forward passes (inputs of `capMetrics`). */
export interface CapTotals {
  /** Forward passes (iterations). */
  readonly passes: number;
  /** Tokens processed by the passes (prompt tokens of prefills + one per decode step). */
  readonly tokens: number;
  /** Σ over tokens of the context each attends to (for the attention score FLOPs). */
  readonly contextTokenSum: number;
  /** Σ over passes of the (MoE layer, routed expert) pairs with ≥ 1 token. */
  readonly activatedPairs: number;
  /** KV bytes read by the passes. */
  readonly kvReadBytes: number;
  /** Σ latency of the passes, ns. */
  readonly forwardNs: number;
  /** Fraction of the KV reads and score FLOPs done by the CPU (CPU attention, ω). Default 0. */
  readonly cpuAttentionFrac?: number;
  /** Fraction of the layers computed by the CPU (llama.cpp-like `gpuLayers` < layers). Default 0. */
  readonly cpuLayerFrac?: number;
  /** Set when the run did not record its activations and `activatedPairs` is an estimate. */
  readonly activations?: 'uniform-estimate';
  /**
   * The same totals per phase when the phases split the work between the devices differently
   * (throughput runs: a prefill on the GPU, decode with CPU layers or CPU attention): each
   * phase's bytes and FLOPs go to the devices by its own fractions (a fraction mixed over the
   * run would charge the prefill's tokens to the CPU). Their sums are the whole's.
   */
  readonly phases?: readonly CapTotals[];
}

export interface CapMetrics {
  /** GPU-side S-MBU / S-MFU and dense MBU / MFU (fractions of the GPU's peak). */
  sMbu: number;
  sMfu: number;
  mbu: number;
  mfu: number;
  /** CPU-side (hybrid systems only; our convention, see the header). */
  sMbuCpu?: number;
  sMfuCpu?: number;
  /** dense MBU / S-MBU: how much the dense metric over-rates memory use (the paper's ">260 %" is 3.6). */
  mbuOverSMbu: number;
  mfuOverSMfu: number;
  /** Bytes per pass, mean: activated (S-MBU numerator without KV) and dense. */
  activatedBytesPerPass: number;
  denseBytesPerPass: number;
  /** S_activated / S_dense (the share of parameters a pass activates, Fig. 5). */
  activatedParamFrac: number;
  kvReadBytes: number;
  forwardS: number;
  /** 'uniform-estimate' when the executor recorded no activations (see `throughputCapTotals`). */
  activations?: 'uniform-estimate';
}

/** The per-model quantities of MoE-CAP (bytes per pass, FLOPs per token). */
export function capModelQuantities(m: ModelProfile) {
  const d = m.derived;
  const denseLayers = m.layers - m.moeLayers;
  const attnBytes = d.attentionBytesPerLayer - d.routerBytesPerLayer;
  /** Bytes every pass reads whatever the routing: attention of every layer, shared experts, dense FFNs. */
  const fixedBytesPerPass =
    m.layers * attnBytes + m.moeLayers * d.sharedExpertBytesPerLayer + denseLayers * d.denseFfnBytesPerLayer;
  const allExpertBytesPerPass = m.moeLayers * m.experts * d.bytesPerExpert;
  const baseFlops =
    m.layers * d.attentionProjFlopsPerToken +
    m.moeLayers * (d.routerFlopsPerToken + d.sharedExpertFlopsPerToken) +
    denseLayers * d.denseFfnFlopsPerToken;
  const sparseFlopsPerToken = baseFlops + m.moeLayers * m.topK * d.expertFlopsPerToken;
  const denseFlopsPerToken = baseFlops + m.moeLayers * m.experts * d.expertFlopsPerToken;
  /** Score FLOPs per (token, context token), over all attention layers. */
  const scoreFlopsPerContextToken = d.attentionScoreFlopsPerContextToken * m.layers;
  return {
    fixedBytesPerPass,
    allExpertBytesPerPass,
    bytesPerExpert: d.bytesPerExpert,
    sparseFlopsPerToken,
    denseFlopsPerToken,
    scoreFlopsPerContextToken,
  };
}

/** The GPU's peak FLOP/s for this model (FP32 models on the FP32 rate, as `sim/cost`). */
export function gpuPeakFlops(m: ModelProfile, hw: HardwareProfile): number {
  return m.dtypes.expertBytesPerParam >= 4 && hw.gpu.fp32FlopsPerSec !== undefined
    ? hw.gpu.fp32FlopsPerSec
    : hw.gpu.bf16FlopsPerSec;
}

/** Bytes the passes of totals `t` read, routed experts as activated (S-MBU) and as all of them (dense MBU). */
function passBytes(q: ReturnType<typeof capModelQuantities>, t: CapTotals) {
  return {
    activatedBytes: t.passes * q.fixedBytesPerPass + t.activatedPairs * q.bytesPerExpert,
    denseBytes: t.passes * (q.fixedBytesPerPass + q.allExpertBytesPerPass),
  };
}

/** Bytes and FLOPs of totals `t`, charged to the device that reads or computes them (see the header). */
function deviceSums(q: ReturnType<typeof capModelQuantities>, t: CapTotals) {
  const fa = t.cpuAttentionFrac ?? 0;
  const fl = t.cpuLayerFrac ?? 0;
  const { activatedBytes, denseBytes } = passBytes(q, t);
  const scoreFlops = t.contextTokenSum * q.scoreFlopsPerContextToken;
  const sparseFlops = t.tokens * q.sparseFlopsPerToken;
  const denseFlops = t.tokens * q.denseFlopsPerToken;
  // GPU side: its layers' weights, its share of the KV and score FLOPs.
  const g = 1 - fl;
  const kvGpu = t.kvReadBytes * g * (1 - fa);
  const scoreGpu = scoreFlops * g * (1 - fa);
  return {
    hybrid: fa > 0 || fl > 0,
    gpuActivatedBytes: activatedBytes * g + kvGpu,
    gpuDenseBytes: denseBytes * g + kvGpu,
    gpuSparseFlops: sparseFlops * g + scoreGpu,
    gpuDenseFlops: denseFlops * g + scoreGpu,
    cpuBytes: activatedBytes * fl + (t.kvReadBytes - kvGpu),
    cpuFlops: sparseFlops * fl + scoreFlops - scoreGpu,
  };
}

type DeviceSums = ReturnType<typeof deviceSums>;

/** Two phases' device sums together. */
function addDeviceSums(a: DeviceSums, b: DeviceSums): DeviceSums {
  return {
    hybrid: a.hybrid || b.hybrid,
    gpuActivatedBytes: a.gpuActivatedBytes + b.gpuActivatedBytes,
    gpuDenseBytes: a.gpuDenseBytes + b.gpuDenseBytes,
    gpuSparseFlops: a.gpuSparseFlops + b.gpuSparseFlops,
    gpuDenseFlops: a.gpuDenseFlops + b.gpuDenseFlops,
    cpuBytes: a.cpuBytes + b.cpuBytes,
    cpuFlops: a.cpuFlops + b.cpuFlops,
  };
}

export function capMetrics(m: ModelProfile, hw: HardwareProfile, t: CapTotals): CapMetrics {
  const q = capModelQuantities(m);
  const s = t.forwardNs / 1e9;
  const { activatedBytes, denseBytes } = passBytes(q, t);
  // Each phase by its own fractions where the totals carry them, else the whole by its (mixed) ones.
  const d =
    t.phases && t.phases.length > 0 ? t.phases.map((p) => deviceSums(q, p)).reduce(addDeviceSums) : deviceSums(q, t);
  const bw = hw.gpu.hbmBytesPerSec;
  const fp = gpuPeakFlops(m, hw);
  const sMbu = safeDiv(d.gpuActivatedBytes / s, bw);
  const mbu = safeDiv(d.gpuDenseBytes / s, bw);
  const sMfu = safeDiv(d.gpuSparseFlops / s, fp);
  const mfu = safeDiv(d.gpuDenseFlops / s, fp);
  const out: CapMetrics = {
    sMbu: round6(sMbu),
    sMfu: round6(sMfu),
    mbu: round6(mbu),
    mfu: round6(mfu),
    mbuOverSMbu: round6(safeDiv(mbu, sMbu)),
    mfuOverSMfu: round6(safeDiv(mfu, sMfu)),
    activatedBytesPerPass: Math.round(safeDiv(activatedBytes, t.passes)),
    denseBytesPerPass: Math.round(safeDiv(denseBytes, t.passes)),
    activatedParamFrac: round6(safeDiv(activatedBytes, denseBytes)),
    kvReadBytes: Math.round(t.kvReadBytes),
    forwardS: round6(s),
    ...(t.activations ? { activations: t.activations } : {}),
  };
  if (d.hybrid) {
    const cpuBw = hw.cpu.dramPeakBytesPerSec ?? hw.cpu.dramBytesPerSec;
    const cpuFlops = hw.cpu.cores * hw.cpu.vectorFlopsPerSecPerCore;
    out.sMbuCpu = round6(safeDiv(d.cpuBytes / s, cpuBw));
    out.sMfuCpu = round6(safeDiv(d.cpuFlops / s, cpuFlops));
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Cost (MoE-CAP §3.1, Eqs. 1–3)
// ---------------------------------------------------------------------------------------

export interface CapCost {
  /** Eq. 1: GPU + CPU + board + DRAM + SSD, USD. */
  hardwareUsd: number;
  /** Eq. 2's power: GPU + CPU TDP, W (an upper bound of the average draw; see below). */
  powerW: number;
  /** Eq. 3 per million generated tokens, and its two parts. */
  usdPerMTok: number;
  amortisedUsdPerMTok: number;
  energyUsdPerMTok: number;
  lifetimeYears: number;
  electricityUsdPerKwh: number;
}

/**
 * Cost per million generated tokens (MoE-CAP Eq. 3): (C_hardware + C_energy × $/kWh) / (T × R),
 * R the lifetime, T the run's generated-token throughput; the machine is assumed to run at T for
 * its whole lifetime (the paper's assumption: no utilisation factor, no residual value).
 *
 * SIMPLIFICATIONS: power = GPU TDP + CPU TDP (the paper uses the average draw over R, which we do
 * not model; TDP is an upper bound); link power (C2M, PCIe, NVLink) and DRAM/SSD power omitted
 * (no sourced figures; the paper folds memory power into the compute terms). DRAM is priced per
 * 10^9 bytes of installed capacity. Prices are the profiles' (testbed `cost.gpuUsd` / `cpuUsd`
 * override the component's `priceUsd`). Undefined when a price or a TDP is missing, or T = 0.
 */
export function capCost(hw: HardwareProfile, generatedTokPerS: number): CapCost | undefined {
  const c = hw.cost;
  const gpuUsd = c.gpuUsd ?? hw.gpu.priceUsd;
  const cpuUsd = c.cpuUsd ?? hw.cpu.priceUsd;
  const gpuW = hw.gpu.tdpWatts;
  const cpuW = hw.cpu.tdpWatts;
  if (
    gpuUsd === undefined ||
    cpuUsd === undefined ||
    gpuW === undefined ||
    cpuW === undefined ||
    !(generatedTokPerS > 0)
  )
    return undefined;
  const hardwareUsd = gpuUsd + cpuUsd + c.boardUsd + (c.dramUsdPerGb * hw.hostDramBytes) / 1e9 + c.ssdUsd;
  const powerW = gpuW + cpuW;
  const lifetimeS = c.lifetimeYears * 365.25 * 24 * 3600;
  const amortised = (hardwareUsd / (generatedTokPerS * lifetimeS)) * 1e6;
  // (kW × hours) × $/kWh over the tokens made in those hours: per token = kW × $/kWh / (3600 · T).
  const energy = (((powerW / 1000) * c.electricityUsdPerKwh) / (3600 * generatedTokPerS)) * 1e6;
  return {
    hardwareUsd: round6(hardwareUsd),
    powerW,
    usdPerMTok: round6(amortised + energy),
    amortisedUsdPerMTok: round6(amortised),
    energyUsdPerMTok: round6(energy),
    lifetimeYears: c.lifetimeYears,
    electricityUsdPerKwh: c.electricityUsdPerKwh,
  };
}
