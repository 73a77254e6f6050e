/**
 * MoE-Gen's configuration search (DESIGN §8; arXiv 2503.09716): choose (B, b_a, b_e, ω,
 * S_expert, S_params) maximising B / T, T the critical path of the pass's task DAG priced with
 * the cost model, subject to
 * - host memory: KV(B) + model ≤ host DRAM (KV for the padded prompt + the longest output);
 * - VRAM: S_params + S_expert + dense buffer (one layer's dense module) + GPU KV staging of one
 *   attention micro-batch + intermediate state + workspace ≤ VRAM (`vramNeeded`, at the
 *   largest pass of the phase).
 *
 * Decode: B is as large as host memory allows (capped by the workload and a fixed batch);
 * for every ω ∈ {0, 0.1, …, 1} (or the fixed ω), b_a, S_expert (in experts) and b_e are
 * searched by coordinate search over candidate grids (from two starts), each candidate priced
 * by the critical path of the decode pass at mid-output context; S_params is all the VRAM the other choices leave (more cached
 * parameters never slow a pass). Prefill (GPU attention, ω = 0): the sequences per pass, b_a,
 * S_expert and b_e, maximising prompt tokens / T. Inside the search the critical path is
 * extrapolated from a few MoE layers (`estimator.ts`); the chosen configuration is re-priced
 * on the full DAG and that is the reported `predictedPassS`.
 *
 * Searches are pure functions of (model, machine, cost model, workload summary, parameters)
 * and memoised per process (the cost model by a fingerprint of its prices, so a runtime with
 * another CPU kernel or thread count searches anew), so a sweep over ω repeats the
 * unconstrained search (reported as `omegaAuto`) only once. The pass predictions the searches
 * price candidates with are memoised per process too (same context key, plus shape,
 * configuration and mode): a fixed-ω search walks the same candidates as that ω's leg of the
 * unconstrained search, so after one of the two the other prices nothing anew. The
 * per-search candidate memo (whose size is the reported `evaluated`) is unchanged.
 */
import type { ModelProfile } from '../../hardware-profiles/types.ts';
import {
  cachedModules,
  hostInfeasibility,
  type ModelModules,
  maxHostSeqs,
  modelModules,
  vramNeeded,
} from '../../sim/throughput/memory-model.ts';
import type { PlanContext } from '../../sim/throughput/policy.ts';
import {
  coordinateSearch,
  powersOfTwoUpTo,
  predictPassNs,
  prefillShape,
  refDecodeShape,
  type SearchResult,
  worstDecodeShape,
} from '../../sim/throughput/search.ts';
import {
  defaultPassConfig,
  type PassConfig,
  type PassShape,
  type PhasePlan,
  type PlanResult,
  type SearchReport,
} from '../../sim/throughput/types.ts';

export interface MoeGenSettings {
  /** Fixed ω, or 'auto' (searched). */
  readonly omega: number | 'auto';
  readonly omegaStep: number;
  readonly kvBuffers: number | 'auto';
  readonly cpuCores: number | 'all';
  /** Fixed values for the search's axes (skip searching them). */
  readonly B?: number;
  readonly ba?: number;
  readonly be?: number;
  readonly expertSlots?: number;
  readonly sParamsGiB?: number;
  readonly prefillBatchSeqs?: number;
}

interface Candidate {
  readonly omega: number;
  readonly ba: number;
  readonly be: number;
  readonly slots: number;
  /** Sequences per pass (prefill only; decode uses the host batch). */
  readonly seqs: number;
}

const SLOT_GRID = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512];
const BE_GRID_DECODE = [256, 512, 1024, 2048, 4096, 8192, 16384];
const BE_GRID_PREFILL = [1024, 2048, 4096, 8192, 16384, 32768];

const searchMemo = new Map<string, PlanResult>();
/** Pass predictions by context key, then by (shape, configuration, mode): pure, so shared by every search. */
const predictMemo = new Map<string, Map<string, number>>();

/** Bytes for messages: GB with two decimals, or MB below 0.1 GB. */
function bytesText(b: number): string {
  return b >= 1e8 ? `${(b / 1e9).toFixed(2)} GB` : `${(b / 1e6).toFixed(1)} MB`;
}

/** MLA caches one latent per token: two staging buffers suffice (MoE-Gen uses 2 for DeepSeek, 3 for Mixtral). */
function autoKvBuffers(model: ModelProfile): number {
  return model.attention.type === 'MLA' ? 2 : 3;
}

/**
 * A fingerprint of the cost model (which carries the runtime: kernel rates, thread count): the
 * prices of a few probe operations. Runs of one sweep with the same profiles and runtime share
 * a memoised search; a different runtime (e.g. fewer CPU attention threads) never does.
 */
function costFingerprint(ctx: PlanContext): number[] {
  const c = ctx.cost;
  const cores = ctx.hardware.cpu.cores;
  return [
    c.estimate({ kind: 'cpuAttention', tokens: 1, contextTokens: 1_000_000, cores: 1 }).ns,
    c.estimate({ kind: 'cpuAttention', tokens: 1, contextTokens: 1_000_000, cores }).ns,
    c.estimate({ kind: 'expert', tokens: 1 }).ns,
    c.estimate({ kind: 'expert', tokens: 1024 }).ns,
    c.estimate({ kind: 'attention', tokens: 1, contextTokens: 1000 }).ns,
    c.estimate({ kind: 'attentionProj', tokens: 64 }).ns,
    c.estimate({ kind: 'router', tokens: 64 }).ns,
    c.estimate({ kind: 'transfer', bytes: 1e9, direction: 'h2d' }).ns,
    c.estimate({ kind: 'transfer', bytes: 1e9, direction: 'd2h' }).ns,
  ];
}

/** What a pass prediction depends on besides its shape and configuration: the profiles and the cost model's prices. */
function contextKey(ctx: PlanContext): string {
  return JSON.stringify([ctx.model, ctx.hardware, costFingerprint(ctx)]);
}

export function moeGenPlan(ctx: PlanContext, s: MoeGenSettings): PlanResult {
  return planWithKey(ctx, s, contextKey(ctx));
}

function planWithKey(ctx: PlanContext, s: MoeGenSettings, ctxKey: string): PlanResult {
  const key = JSON.stringify([ctxKey, ctx.workload, s]);
  let r = searchMemo.get(key);
  if (!r) {
    let predictions = predictMemo.get(ctxKey);
    if (!predictions) {
      predictions = new Map();
      predictMemo.set(ctxKey, predictions);
    }
    const memo = predictions;
    const predict: Predict = (shape, config, mode) => {
      const k = JSON.stringify([shape, config, mode]);
      let ns = memo.get(k);
      if (ns === undefined) {
        ns = predictPassNs(ctx, shape, config, { mode });
        memo.set(k, ns);
      }
      return ns;
    };
    r = plan(ctx, s, predict, ctxKey);
    searchMemo.set(key, r);
  }
  return r;
}

/** `predictPassNs` of the plan's context (memoised). */
type Predict = (shape: PassShape, config: PassConfig, mode: 'exact' | 'extrapolate') => number;

function plan(ctx: PlanContext, s: MoeGenSettings, predict: Predict, ctxKey: string): PlanResult {
  const { model, hardware: hw, workload: w } = ctx;
  const hostWhy = hostInfeasibility(model, hw.hostDramBytes);
  if (hostWhy) return { feasible: false, reason: hostWhy };
  const reserve = w.promptTokens + w.outputTokens;
  const hostMax = maxHostSeqs(model, hw.hostDramBytes, reserve, 0);
  if (hostMax < 1) {
    return {
      feasible: false,
      reason: `host DRAM left after the weights (${((hw.hostDramBytes - model.derived.totalBytes) / 1e9).toFixed(1)} GB) cannot hold one sequence's KV`,
    };
  }
  const N = Math.max(1, Math.min(w.sequences, w.fixedBatchSeqs ?? Infinity, s.B ?? Infinity, hostMax));
  const cores = s.cpuCores === 'all' ? hw.cpu.cores : Math.min(s.cpuCores, hw.cpu.cores);
  const base: PassConfig = {
    ...defaultPassConfig(model.layers),
    cpuCores: cores,
    kvBuffers: s.kvBuffers === 'auto' ? autoKvBuffers(model) : s.kvBuffers,
    weightSlots: 1, // a single dense-module buffer sized for one layer
  };
  const notes: string[] = [];
  if (N < w.sequences && N === hostMax) notes.push(`host batch ${N} limited by host DRAM`);

  let decode: PhasePlan | undefined;
  if (w.phases.decode) {
    const d = searchPhase(ctx, s, base, 'decode', N, predict);
    if (!d.feasible) return d;
    decode = d.plan;
    if (s.omega !== 'auto') {
      // The unconstrained search of the same run (memoised: a sweep over ω runs it once).
      const auto = planWithKey(ctx, { ...s, omega: 'auto' }, ctxKey);
      const a = auto.feasible ? auto.plan.decode.search : undefined;
      if (a)
        decode = { ...decode, search: { ...decode.search!, omegaAuto: a.omega, predictedPassSAuto: a.predictedPassS } };
    }
  }
  let prefill: PhasePlan | undefined;
  if (w.phases.prefill) {
    const p = searchPhase(ctx, s, base, 'prefill', N, predict);
    if (!p.feasible) return p;
    prefill = p.plan;
  }
  const fallback: PhasePlan = prefill ?? decode!;
  return {
    feasible: true,
    plan: {
      hostBatchSeqs: N,
      prefill: prefill ?? { ...fallback, batchSeqs: N },
      decode: decode ?? { ...fallback, batchSeqs: N },
      ...(notes.length ? { notes } : {}),
    },
  };
}

type PhaseResult =
  | { readonly feasible: true; readonly plan: PhasePlan }
  | { readonly feasible: false; readonly reason: string };

/** One phase's search: the plan's context and settings, the base configuration, the host batch. */
interface PhaseSearch {
  readonly ctx: PlanContext;
  readonly s: MoeGenSettings;
  readonly base: PassConfig;
  readonly phase: 'prefill' | 'decode';
  readonly N: number;
  readonly mm: ModelModules;
}

/** The shape a candidate must fit in VRAM (the phase's largest pass) and the shape it is priced at. */
function shapesOf(q: PhaseSearch, c: Candidate): { fit: PassShape; ref: PassShape } {
  const w = q.ctx.workload;
  const N = q.N;
  return q.phase === 'decode'
    ? { fit: worstDecodeShape(w, N, N), ref: refDecodeShape(w, N, N) }
    : { fit: prefillShape(w, c.seqs, N), ref: prefillShape(w, c.seqs, N) };
}

/**
 * The configuration of a candidate, with S_params = the VRAM it leaves; undefined if it does
 * not fit. A micro-batch larger than the GPU share, or a GEMM chunk larger than an expert's
 * expected tokens, builds the same DAG as the smallest such value: normalised to it, so that
 * equivalent candidates share one evaluation and the report shows the effective sizes.
 */
function toConfig(q: PhaseSearch, c: Candidate): PassConfig | undefined {
  const { model, hardware: hw, workload: w } = q.ctx;
  const { s, base, phase, N, mm } = q;
  const vram = hw.gpu.vramBytes;
  const P = w.promptTokens;
  const seqs = phase === 'decode' ? N : c.seqs;
  const gpuSeqs = Math.max(1, seqs - Math.round(c.omega * seqs));
  const tokensPerExpert = Math.max(1, Math.ceil((seqs * (phase === 'decode' ? 1 : P) * model.topK) / model.experts));
  const cfg0: PassConfig = {
    ...base,
    omega: c.omega,
    attnMicroSeqs: Math.min(c.ba, gpuSeqs),
    expertChunkTokens: Math.min(c.be, tokensPerExpert),
    expertSlots: c.slots,
    cachedParamBytes: 0,
  };
  const { fit } = shapesOf(q, c);
  const left = vram - vramNeeded(model, fit, cfg0).totalBytes;
  if (left < 0) return undefined;
  const budget = s.sParamsGiB !== undefined ? Math.round(s.sParamsGiB * 2 ** 30) : left;
  if (budget > left) return undefined;
  const cfg = { ...cfg0, cachedParamBytes: cachedModules(mm, budget, base.cacheOrder, base.gpuLayers).bytes };
  return vramNeeded(model, fit, cfg).totalBytes <= vram ? cfg : undefined;
}

/** The candidate grids of a phase's search (a fixed setting is a grid of one value). */
interface PhaseGrids {
  /** b_a's grid from `from` up. */
  readonly baFrom: (from: number) => readonly number[];
  readonly beGrid: readonly number[];
  readonly slotGrid: readonly number[];
  readonly omegaGrid: readonly number[];
  readonly seqGrid: readonly number[];
}

function phaseGrids(q: PhaseSearch): PhaseGrids {
  const { s, phase, N } = q;
  const model = q.ctx.model;
  const omegaFixed = s.omega === 'auto' ? undefined : s.omega;
  const maxSeqs = phase === 'decode' ? N : Math.min(N, s.prefillBatchSeqs ?? N);
  // b_a from 8 up (smaller micro-batches only trade kernel launches for staging memory), and from
  // 1 when nothing fits otherwise.
  const baFrom = (from: number) =>
    s.ba !== undefined ? [s.ba] : powersOfTwoUpTo(Math.min(maxSeqs, 4096), Math.min(from, maxSeqs));
  const beGrid = s.be !== undefined ? [s.be] : phase === 'decode' ? BE_GRID_DECODE : BE_GRID_PREFILL;
  const slotGrid = s.expertSlots !== undefined ? [s.expertSlots] : SLOT_GRID.filter((v) => v <= 2 * model.experts);
  const omegaGrid =
    phase === 'prefill'
      ? [0]
      : omegaFixed !== undefined
        ? [omegaFixed]
        : Array.from({ length: Math.round(1 / s.omegaStep) + 1 }, (_, i) =>
            Math.min(1, Number((i * s.omegaStep).toFixed(6))),
          );
  const seqGrid =
    phase === 'decode'
      ? [N]
      : s.prefillBatchSeqs !== undefined
        ? [Math.min(N, s.prefillBatchSeqs)]
        : powersOfTwoUpTo(maxSeqs, 1);
  return { baFrom, beGrid, slotGrid, omegaGrid, seqGrid };
}

/** Where every ω's coordinate searches start: b_e and the expert-slot starts. */
interface SearchStarts {
  readonly be0: number;
  readonly slotStarts: readonly number[];
}

/**
 * The best candidate over every ω of the grid, each ω a coordinate search of its own over the
 * other axes from each slot start (evaluations shared through `memo`); undefined if none fits.
 */
function bestOverOmegas(
  g: PhaseGrids,
  baGrid: readonly number[],
  st: SearchStarts,
  evaluate: (c: Candidate) => number | undefined,
  memo: Map<string, number>,
): SearchResult<Candidate> | undefined {
  let found: SearchResult<Candidate> | undefined;
  for (const omega of g.omegaGrid) {
    for (const slots of st.slotStarts) {
      const r = coordinateSearch<Candidate>({
        start: { omega, ba: baGrid[0]!, be: st.be0, slots, seqs: g.seqGrid[0]! },
        axes: [
          { key: 'seqs', values: g.seqGrid },
          { key: 'ba', values: baGrid },
          { key: 'slots', values: g.slotGrid },
          { key: 'be', values: g.beGrid },
        ],
        evaluate,
        memo,
      });
      if (r && (!found || r.objective > found.objective * (1 + 1e-9))) found = r;
    }
  }
  return found;
}

/** Why no configuration of the phase fits: what the smallest one needs, by part, against the GPU's VRAM. */
function noFitReason(q: PhaseSearch, start: Candidate, beGrid: readonly number[]): string {
  const { model, hardware: hw } = q.ctx;
  const vram = hw.gpu.vramBytes;
  const need = vramNeeded(model, shapesOf(q, start).fit, {
    ...q.base,
    attnMicroSeqs: 1,
    expertSlots: 1,
    expertChunkTokens: beGrid[0]!,
    omega: start.omega,
  });
  return `no ${q.phase} configuration fits VRAM: the smallest needs ${bytesText(need.totalBytes)} (dense buffer ${bytesText(need.weightBufferBytes)}, one expert ${bytesText(need.expertBufferBytes)}, intermediate state ${bytesText(need.activationBytes)}, workspace ${bytesText(need.workspaceBytes)}), the GPU has ${bytesText(vram)}`;
}

/** The search's report of the chosen configuration, priced at `exactNs` on the full DAG. */
function searchReport(
  cfg: PassConfig,
  ref: PassShape,
  mm: ModelModules,
  exactNs: number,
  evaluated: number,
): SearchReport {
  return {
    B: ref.seqs,
    // No GPU attention at all when ω = 1: no micro-batch to report.
    ba: ref.seqs - Math.round(cfg.omega * ref.seqs) > 0 ? cfg.attnMicroSeqs : 0,
    be: cfg.expertChunkTokens,
    // The share of sequences actually on the CPU: round(ω·B) / B.
    omega: Math.round(cfg.omega * ref.seqs) / ref.seqs,
    sExpertBytes: cfg.expertSlots * mm.expertBytes,
    sParamsBytes: cfg.cachedParamBytes,
    predictedPassS: exactNs / 1e9,
    refPastTokens: ref.pastTokens,
    evaluated,
  };
}

function searchPhase(
  ctx: PlanContext,
  s: MoeGenSettings,
  base: PassConfig,
  phase: 'prefill' | 'decode',
  N: number,
  predict: Predict,
): PhaseResult {
  const { model, workload: w } = ctx;
  const mm = modelModules(model);
  const q: PhaseSearch = { ctx, s, base, phase, N, mm };
  const P = w.promptTokens;
  const tokensOf = (c: Candidate) => (phase === 'decode' ? N : c.seqs * P);
  // Candidates that build the same DAG share one evaluation.
  const byConfig = new Map<string, number | undefined>();
  const evaluate = (c: Candidate): number | undefined => {
    const cfg = toConfig(q, c);
    if (!cfg) return undefined;
    const ref = shapesOf(q, c).ref;
    const key = JSON.stringify([cfg, ref.seqs]);
    if (byConfig.has(key)) return byConfig.get(key);
    const v = tokensOf(c) / predict(ref, cfg, 'extrapolate');
    byConfig.set(key, v);
    return v;
  };
  const g = phaseGrids(q);
  let baGrid = g.baFrom(8);
  const { beGrid, slotGrid, omegaGrid, seqGrid } = g;

  // ω interacts with everything (a CPU share frees PCIe from KV but serialises CPU attention
  // with the experts unless the expert buffer prefetches the whole layer), so every ω of the grid
  // gets its own coordinate search over the other axes, from two starts: a small expert buffer
  // (more S_params) and one layer's experts. Evaluations are shared.
  const memo = new Map<string, number>();
  const be0 = beGrid.includes(2048) ? 2048 : beGrid[0]!;
  const slotStarts = [
    ...new Set([
      slotGrid.includes(2) ? 2 : slotGrid[0]!,
      slotGrid.filter((v) => v <= model.experts).pop() ?? slotGrid[0]!,
    ]),
  ];
  const st: SearchStarts = { be0, slotStarts };
  let found = bestOverOmegas(g, baGrid, st, evaluate, memo);
  if (!found && baGrid[0]! > 1) {
    baGrid = g.baFrom(1);
    found = bestOverOmegas(g, baGrid, st, evaluate, memo);
  }
  if (found) found = { ...found, evaluated: memo.size };
  const start: Candidate = { omega: omegaGrid[0]!, ba: baGrid[0]!, be: be0, slots: slotStarts[0]!, seqs: seqGrid[0]! };
  if (!found) return { feasible: false, reason: noFitReason(q, start, beGrid) };
  const cfg = toConfig(q, found.best)!;
  const ref = shapesOf(q, found.best).ref;
  const exactNs = predict(ref, cfg, 'exact');
  const report = searchReport(cfg, ref, mm, exactNs, found.evaluated);
  return { feasible: true, plan: { batchSeqs: ref.seqs, config: cfg, search: report } };
}
