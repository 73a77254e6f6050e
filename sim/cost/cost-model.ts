/**
 * The roofline cost model: (operation, shape, hardware) → uncontended duration + provenance.
 *
 * GPU operations (expert, sharedExperts, denseFfn, attentionProj, attention, router, lmHead):
 *
 *     ns = kernelLaunchNs + max(flops / (flopsPerSec · eff(tokens)),
 *                               bytes / (hbmBytesPerSec · hbmEfficiency))
 *     eff(tokens) = maxFraction · tokens / (tokens + halfSaturationTokens)
 *
 * - flopsPerSec = the GPU's dense BF16 rate, or its FP32 CUDA-core rate (`fp32FlopsPerSec`) for an
 *   FP32 checkpoint (expertBytesPerParam 4: Switch, NLLB as released).
 * - flops = 2 × parameters touched per token × tokens (`ModelDerived.*FlopsPerToken`), plus
 *   for `attention` the scores: contextTokens × attentionScoreFlopsPerContextToken.
 * - bytes = weights read once per op + activations in and out (tokens × 2 × hidden × 2 B,
 *   BF16) + for `attention` the KV cache read (contextTokens × kvBytesPerTokenPerLayer) and
 *   the new tokens' KV written (tokens × kvBytesPerTokenPerLayer).
 * - `expert` with `fraction` f (MoEpic's top/bottom segments): weight bytes and FLOPs × f.
 * - bound: 'flops' or 'hbm', whichever term is larger; 'launch' when the launch overhead
 *   alone exceeds both.
 *
 * CPU attention (`cpuAttention`): FLOPs = contextTokens × attentionScoreFlopsPerContextToken,
 * computeNs = FLOPs / (cores · vectorFlopsPerSecPerCore · vectorEfficiency); bytes =
 * contextTokens × kvBytesPerTokenPerLayer read from host DRAM at min(dramBytesPerSec,
 * cores · perCoreDramBytesPerSec); ns = max(computeNs, memory time); bound 'cpuFlops' or
 * 'hostMem'. `computeNs` is returned separately because at run time the memory part is shared
 * fluidly with DMA traffic. For MLA (DeepSeek) the scores are priced in the absorbed form
 * (see `hardware-profiles/derive.ts`): the latent "up-projection" is folded into the query and
 * output, so per context token the CPU does 2·heads·(kv_lora + rope) + 2·heads·kv_lora FLOPs
 * against the 576-element latent (3.4× a standard 128-dim head) and no per-context-token
 * decompression; the absorbed per-token matrices are priced with the projections
 * (`attentionProj`, on the GPU). This makes DeepSeek CPU attention FLOP-bound on every
 * shipped CPU, which is why MoE-Gen leaves it on the GPU (ω = 0).
 *
 * Runtime (`RuntimeProfile`, DESIGN §5; default: the `fused` behaviour below). Each GPU module
 * call costs the host `ops` dispatched ops and `syncs` device→host synchronisations
 * (`runtime.modules[module]`). Asynchronous dispatch overlaps the GPU body; a sync does not:
 *
 *     ns = max(ops · dispatchNs, kernelLaunchNs + body) + syncs · syncNs
 *
 * with dispatchNs = the runtime's, or the GPU's kernel launch when it names none (`fused`: one
 * op, no sync, so ns = kernelLaunchNs + body exactly as before runtimes existed). `bound` is
 * 'dispatch' when ops · dispatchNs exceeds the launch + body, 'sync' when the syncs alone exceed
 * that max; `runtimeNs` reports the host part whenever it is more than one launch. An `eager`
 * attention runtime also writes and reads the FP32 score matrix in HBM (16 B per head per
 * context token: written, read by softmax, written, read by AV). A runtime may override the
 * GPU's GEMM efficiency curve. `idleExperts` prices `count` loop iterations over experts no token
 * chose (runtimes with `expertLoop: all`): count · (ops · dispatchNs + syncs · syncNs) of the
 * `idleExpert` module, no GPU body. `crossAttention` (encoder-decoder decoder layers) is priced
 * like `attention` with the encoder's K/V as its context. CPU attention uses the runtime's
 * kernel efficiency (`cpuAttention.fmaPeakFraction`, else the CPU's `vectorEfficiency`) and
 * thread count (`cpuAttention.threads`, else the op's cores, capped at the CPU's cores).
 *
 * Hybrid models (`linearAttention`): `attention` prices a full-attention layer (its own
 * projection weights and FLOPs, `fullAttention*`, instead of the all-layer average) and
 * `linearAttention` a Gated DeltaNet layer: FLOPs = tokens × linearAttentionFlopsPerToken
 * (projections + recurrence, `derive.ts`); bytes = the block's weights and norms + activations
 * in and out + sequences × 2 × linearStateBytesPerLayer (each sequence's state read and written
 * once per call: the recurrent kernel at decode, the chunked kernel keeping it on chip within a
 * call at prefill; the chunk boundary states of a long prefill are not priced). Its host work is
 * the runtime's `attention` module's (a DeltaNet block is a graph of similar size: norm, two
 * input projections, conv, gates, the recurrence, gated norm, output projection [estimate]).
 *
 * Transfers: ns = latencyNs + bytes / (direction's effective pinned bandwidth ×
 * (pinnedHostMemory ? 1 : pageableFactor)); bound 'pcie'. Zero bytes take zero time.
 *
 * Measured tables (`GpuProfile.measured`): a table keyed `<kind>@<model id>` or `<kind>`
 * replaces the roofline time of that token-indexed GPU op (expert, sharedExperts, denseFfn,
 * attentionProj, router, lmHead; not attention, whose time also depends on context). Linear
 * interpolation in tokens between points; outside the range, linear extrapolation from the two
 * nearest points, clamped at ≥ 1 ns, with `warning` set. An `expert` segment of fraction f
 * takes f × the table time. flops, bytes and bound are still the roofline's (the table says how
 * long, not why).
 *
 * Simplifications (all deliberate; calibrate with tables where they matter):
 * - one kernel launch per op (fused kernels / CUDA Graphs); eager frameworks pay several;
 * - intermediate activations (the i-wide FFN hidden state, attention scores) stay on chip;
 * - no tile/wave quantisation beyond the efficiency curve; the curve depends on the tokens
 *   of the op, not on the GEMM's K and N (small experts saturate no faster than big ones);
 * - every duration is uncontended: sharing of SMs, PCIe links and DRAM is the resources' job;
 * - an op with zero tokens (zero context, zero bytes) costs nothing, not even a launch.
 *
 * Results are memoised per (kind, shape) in nested Maps keyed by numbers, so the hot path is
 * two or three Map lookups and no allocation; the memo is cleared when it holds more than
 * 2^20 entries (estimates are pure, so clearing never changes a result).
 */
import type { HardwareProfile, ModelProfile, ModuleWork, RuntimeProfile } from '../../hardware-profiles/types.ts';
import { ceilNs, type Ns } from '../kernel/time.ts';
import type { Bound, Cost, CostModel, Operation } from './types.ts';

/** Bytes per activation element (BF16). */
export const ACTIVATION_BYTES = 2;

/** Memo entries kept before the memo is cleared. */
const MAX_MEMO_ENTRIES = 1 << 20;

export interface CostModelOptions {
  /** Receives each distinct warning text once per cost model (e.g. a measured table extrapolated). Default: none. */
  readonly onWarning?: (message: string) => void;
  /** The software stack (`hardware-profiles/runtimes`); default: the fused roofline. */
  readonly runtime?: RuntimeProfile;
}

/** The work of one module call when no runtime is given: one launch, no sync (the `fused` runtime). */
const ONE_LAUNCH: ModuleWork = Object.freeze({ ops: 1, syncs: 0 });
const NO_WORK: ModuleWork = Object.freeze({ ops: 0, syncs: 0 });
type RuntimeModule = keyof RuntimeProfile['modules'];

/** The GEMM efficiency eff(tokens) = maxFraction · tokens / (tokens + halfSaturationTokens); 0 for 0 tokens. */
export function gemmEfficiency(
  gpu: { readonly gemmEfficiency: { readonly maxFraction: number; readonly halfSaturationTokens: number } },
  tokens: number,
): number {
  const { maxFraction, halfSaturationTokens } = gpu.gemmEfficiency;
  return tokens > 0 ? (maxFraction * tokens) / (tokens + halfSaturationTokens) : 0;
}

type GpuKind = 'expert' | 'sharedExperts' | 'denseFfn' | 'attentionProj' | 'router' | 'lmHead';
type Points = readonly (readonly [number, number])[];
/** The operation of one kind. */
type OpOf<K extends Operation['kind']> = Extract<Operation, { kind: K }>;

const ZERO_COST_GPU: Cost = Object.freeze({ ns: 0 as Ns, bound: 'launch', source: 'roofline', flops: 0, bytes: 0 });

/**
 * Builds the cost model of `model` on `hw`. Pure: the same op always gives the same Cost
 * (the same object while it stays memoised).
 *
 * @param options `{ onWarning }`, or the `onWarning` callback itself.
 * @throws RangeError from `estimate` for a malformed op (negative or non-finite shape,
 *   fraction outside (0, 1], more CPU cores than the CPU has): those are executor bugs.
 */
export function createCostModel(
  model: ModelProfile,
  hw: HardwareProfile,
  options: CostModelOptions | ((message: string) => void) = {},
): CostModel {
  const onWarning = typeof options === 'function' ? options : options.onWarning;
  const runtime = typeof options === 'function' ? undefined : options.runtime;
  const { gpu, cpu, pcie } = hw;
  const gemm = runtime?.gemmEfficiency ? { gemmEfficiency: runtime.gemmEfficiency } : gpu;
  const dispatchNs = runtime?.dispatchNs ?? gpu.kernelLaunchNs;
  const syncNs = runtime?.syncNs ?? 0;
  const work = (m: RuntimeModule): ModuleWork =>
    runtime ? runtime.modules[m] : m === 'idleExpert' ? NO_WORK : ONE_LAUNCH;
  const eagerScoreBytesPerContextToken =
    runtime?.attention === 'eager' && model.attention.type !== 'MLA' ? 16 * model.attention.heads : 0;
  const cpuEfficiency = runtime?.cpuAttention.fmaPeakFraction ?? cpu.vectorEfficiency;
  const cpuThreads = runtime?.cpuAttention.threads ?? null;
  const dv = model.derived;
  const h = model.hiddenSize;
  const actInOut = 2 * h * ACTIVATION_BYTES; // per token: input + output hidden state

  // FP32 checkpoints (4 bytes per expert parameter) run on the CUDA cores when the GPU profile gives that rate.
  const flopsPerSec =
    model.dtypes.expertBytesPerParam >= 4 && gpu.fp32FlopsPerSec !== undefined
      ? gpu.fp32FlopsPerSec
      : gpu.bf16FlopsPerSec;
  const hbmBytesPerSec = gpu.hbmBytesPerSec * gpu.hbmEfficiency;
  const launchNs = gpu.kernelLaunchNs;
  // A hybrid model's `attention` op is a full-attention layer; other models' the average layer.
  const projWeightBytes =
    dv.fullAttentionBytesPerLayer ?? Math.max(0, dv.attentionBytesPerLayer - dv.routerBytesPerLayer);
  const attnProjFlopsPerToken = dv.fullAttentionProjFlopsPerToken ?? dv.attentionProjFlopsPerToken;

  const tableOf = (kind: GpuKind): Points | undefined => gpu.measured?.[`${kind}@${model.id}`] ?? gpu.measured?.[kind];
  const tables: Record<GpuKind, Points | undefined> = {
    expert: tableOf('expert'),
    sharedExperts: tableOf('sharedExperts'),
    denseFfn: tableOf('denseFfn'),
    attentionProj: tableOf('attentionProj'),
    router: tableOf('router'),
    lmHead: tableOf('lmHead'),
  };

  const warned = new Set<string>();
  const warn = (text: string): void => {
    if (warned.has(text)) return;
    warned.add(text);
    onWarning?.(text);
  };

  /** Roofline (or table) cost of a GPU op, plus the runtime's host work for one call of `module`. */
  function gpuCost(
    kind: GpuKind | 'attention' | 'linearAttention',
    tokens: number,
    flops: number,
    bytes: number,
    scale = 1,
    module: RuntimeModule = kind === 'linearAttention' ? 'attention' : kind,
  ): Cost {
    if (tokens === 0) return ZERO_COST_GPU;
    const flopNs = flops > 0 ? (flops / (flopsPerSec * gemmEfficiency(gemm, tokens))) * 1e9 : 0;
    const memNs = (bytes / hbmBytesPerSec) * 1e9;
    const bodyNs = Math.max(flopNs, memNs);
    const w = work(module);
    const table = kind === 'attention' || kind === 'linearAttention' ? undefined : tables[kind];
    if (table === undefined) {
      const dispatch = w.ops * dispatchNs;
      const gpuNs = launchNs + bodyNs;
      const syncs = w.syncs * syncNs;
      let bound: Bound = launchNs > bodyNs ? 'launch' : flopNs >= memNs ? 'flops' : 'hbm';
      if (dispatch > gpuNs) bound = 'dispatch';
      if (syncs > Math.max(dispatch, gpuNs)) bound = 'sync';
      const ns = ceilNs(Math.max(dispatch, gpuNs) + syncs);
      const host = dispatch + syncs;
      if (host > launchNs) return Object.freeze({ ns, bound, source: 'roofline', flops, bytes, runtimeNs: host });
      return Object.freeze({ ns, bound, source: 'roofline', flops, bytes });
    }
    const bound: Bound = launchNs > bodyNs ? 'launch' : flopNs >= memNs ? 'flops' : 'hbm';
    const { ns: tableNs, warning } = interpolate(table, tokens, kind);
    const ns = ceilNs(Math.max(1, tableNs * scale));
    if (warning !== undefined) {
      warn(warning);
      return Object.freeze({ ns, bound, source: 'table', flops, bytes, warning });
    }
    return Object.freeze({ ns, bound, source: 'table', flops, bytes });
  }

  /** A linear-attention layer: its weights and each sequence's recurrent state read and written. */
  function linearAttentionCost(op: OpOf<'linearAttention'>): Cost {
    const t = checkCount(op.tokens, 'tokens');
    const n = checkCount(op.sequences, 'sequences');
    if (dv.linearAttentionBytesPerLayer === undefined || dv.linearStateBytesPerLayer === undefined) {
      throw new RangeError(`model ${model.id} has no linear-attention layers`);
    }
    const flops = t * (dv.linearAttentionFlopsPerToken ?? 0);
    const bytes = dv.linearAttentionBytesPerLayer + t * actInOut + 2 * n * dv.linearStateBytesPerLayer;
    return gpuCost('linearAttention', t, flops, bytes);
  }

  /** Host work of the experts a layer skips (no GPU time): the runtime still visits each one. */
  function idleExpertsCost(op: OpOf<'idleExperts'>): Cost {
    const n = checkCount(op.count, 'count');
    const w = work('idleExpert');
    const dispatch = n * w.ops * dispatchNs;
    const syncs = n * w.syncs * syncNs;
    const bound: Bound = syncs > dispatch ? 'sync' : 'dispatch';
    const host = dispatch + syncs;
    if (host === 0) return Object.freeze({ ns: 0 as Ns, bound, source: 'roofline', flops: 0, bytes: 0 });
    return Object.freeze({ ns: ceilNs(host), bound, source: 'roofline', flops: 0, bytes: 0, runtimeNs: host });
  }

  /** Attention scores over the context on the CPU: roofline of vector FLOPs and DRAM bandwidth. */
  function cpuAttentionCost(op: OpOf<'cpuAttention'>): Cost {
    const c = checkCount(op.contextTokens, 'contextTokens');
    checkCount(op.tokens, 'tokens');
    if (!Number.isInteger(op.cores) || op.cores < 1 || op.cores > cpu.cores) {
      throw new RangeError(`cpuAttention cores must be an integer in 1..${cpu.cores} (${cpu.id}), got ${op.cores}`);
    }
    const cores = cpuThreads === null ? op.cores : Math.min(cpuThreads, cpu.cores);
    const flops = c * dv.attentionScoreFlopsPerContextToken;
    const bytes = c * dv.kvBytesPerTokenPerLayer;
    const computeReal = (flops / (cores * cpu.vectorFlopsPerSecPerCore * cpuEfficiency)) * 1e9;
    const memReal = (bytes / Math.min(cpu.dramBytesPerSec, cores * cpu.perCoreDramBytesPerSec)) * 1e9;
    const bound: Bound = computeReal >= memReal ? 'cpuFlops' : 'hostMem';
    return Object.freeze({
      ns: ceilNs(Math.max(computeReal, memReal)),
      bound,
      source: 'roofline',
      flops,
      bytes,
      computeNs: ceilNs(computeReal),
    });
  }

  /** One PCIe copy: latency plus bytes over the direction's bandwidth (pageable memory is slower). */
  function transferCost(op: OpOf<'transfer'>): Cost {
    const b = checkCount(op.bytes, 'bytes');
    if (b === 0) return Object.freeze({ ns: 0 as Ns, bound: 'pcie', source: 'roofline', flops: 0, bytes: 0 });
    const bw =
      (op.direction === 'h2d' ? pcie.h2dBytesPerSec : pcie.d2hBytesPerSec) *
      (hw.pinnedHostMemory ? 1 : pcie.pageableFactor);
    return Object.freeze({
      ns: ceilNs(pcie.latencyNs + (b / bw) * 1e9),
      bound: 'pcie',
      source: 'roofline',
      flops: 0,
      bytes: b,
    });
  }

  /** The cost of one operation, by kind (the memo below calls this on a miss). */
  function compute(op: Operation): Cost {
    switch (op.kind) {
      case 'expert': {
        const t = checkCount(op.tokens, 'tokens');
        const f = op.fraction ?? 1;
        if (!(f > 0 && f <= 1)) throw new RangeError(`expert fraction must be in (0, 1], got ${f}`);
        return gpuCost('expert', t, f * t * dv.expertFlopsPerToken, f * dv.bytesPerExpert + t * actInOut, f);
      }
      case 'sharedExperts': {
        const t = checkCount(op.tokens, 'tokens');
        return gpuCost(
          'sharedExperts',
          t,
          t * dv.sharedExpertFlopsPerToken,
          dv.sharedExpertBytesPerLayer + t * actInOut,
        );
      }
      case 'denseFfn': {
        const t = checkCount(op.tokens, 'tokens');
        return gpuCost('denseFfn', t, t * dv.denseFfnFlopsPerToken, dv.denseFfnBytesPerLayer + t * actInOut);
      }
      case 'attentionProj': {
        const t = checkCount(op.tokens, 'tokens');
        return gpuCost('attentionProj', t, t * attnProjFlopsPerToken, projWeightBytes + t * actInOut);
      }
      case 'attention': {
        const t = checkCount(op.tokens, 'tokens');
        const c = checkCount(op.contextTokens, 'contextTokens');
        const flops = t * attnProjFlopsPerToken + c * dv.attentionScoreFlopsPerContextToken;
        const bytes =
          projWeightBytes + t * actInOut + (c + t) * dv.kvBytesPerTokenPerLayer + c * eagerScoreBytesPerContextToken;
        return gpuCost('attention', t, flops, bytes);
      }
      case 'linearAttention':
        return linearAttentionCost(op);
      case 'crossAttention': {
        const t = checkCount(op.tokens, 'tokens');
        const c = checkCount(op.contextTokens, 'contextTokens');
        const flops = t * attnProjFlopsPerToken + c * dv.attentionScoreFlopsPerContextToken;
        const bytes =
          projWeightBytes + t * actInOut + c * dv.kvBytesPerTokenPerLayer + c * eagerScoreBytesPerContextToken;
        return gpuCost('attention', t, flops, bytes, 1, 'crossAttention');
      }
      case 'idleExperts':
        return idleExpertsCost(op);
      case 'router': {
        const t = checkCount(op.tokens, 'tokens');
        return gpuCost(
          'router',
          t,
          t * dv.routerFlopsPerToken,
          dv.routerBytesPerLayer + t * (h + model.experts) * ACTIVATION_BYTES,
        );
      }
      case 'lmHead': {
        const t = checkCount(op.tokens, 'tokens');
        // LM head weights, the embedding rows gathered, the logits written.
        const embRowBytes = dv.embeddingBytes / model.vocabSize;
        const bytes = dv.lmHeadBytes + t * (embRowBytes + model.vocabSize * ACTIVATION_BYTES);
        return gpuCost('lmHead', t, t * dv.lmHeadFlopsPerToken, bytes);
      }
      case 'cpuAttention':
        return cpuAttentionCost(op);
      case 'transfer':
        return transferCost(op);
      default: {
        const never: never = op;
        throw new RangeError(`unknown operation ${JSON.stringify(never)}`);
      }
    }
  }

  // ---- memo: per kind, nested Maps keyed by numbers (no string building on the hot path)
  let entries = 0;
  const oneD = {
    sharedExperts: new Map<number, Cost>(),
    denseFfn: new Map<number, Cost>(),
    attentionProj: new Map<number, Cost>(),
    router: new Map<number, Cost>(),
    lmHead: new Map<number, Cost>(),
    h2d: new Map<number, Cost>(),
    d2h: new Map<number, Cost>(),
    idleExperts: new Map<number, Cost>(),
  };
  const expertMemo = new Map<number, Map<number, Cost>>(); // fraction → tokens
  const attentionMemo = new Map<number, Map<number, Cost>>(); // tokens → contextTokens
  const crossMemo = new Map<number, Map<number, Cost>>(); // tokens → contextTokens
  const linearMemo = new Map<number, Map<number, Cost>>(); // tokens → sequences
  const cpuMemo = new Map<number, Map<number, Cost>>(); // cores → contextTokens

  function clearIfFull(): void {
    if (++entries <= MAX_MEMO_ENTRIES) return;
    for (const m of Object.values(oneD)) m.clear();
    expertMemo.clear();
    attentionMemo.clear();
    crossMemo.clear();
    linearMemo.clear();
    cpuMemo.clear();
    entries = 1;
  }
  function get1(map: Map<number, Cost>, key: number, op: Operation): Cost {
    let c = map.get(key);
    if (c === undefined) {
      c = compute(op);
      clearIfFull();
      map.set(key, c);
    }
    return c;
  }
  function get2(map: Map<number, Map<number, Cost>>, k1: number, k2: number, op: Operation): Cost {
    let inner = map.get(k1);
    let c = inner?.get(k2);
    if (c === undefined) {
      c = compute(op);
      clearIfFull();
      inner = map.get(k1); // clearIfFull may have emptied the outer map
      if (inner === undefined) {
        inner = new Map();
        map.set(k1, inner);
      }
      inner.set(k2, c);
    }
    return c;
  }

  return {
    estimate(op: Operation): Cost {
      switch (op.kind) {
        case 'expert':
          return get2(expertMemo, op.fraction ?? 1, op.tokens, op);
        case 'attention':
          return get2(attentionMemo, op.tokens, op.contextTokens, op);
        case 'crossAttention':
          return get2(crossMemo, op.tokens, op.contextTokens, op);
        case 'linearAttention':
          return get2(linearMemo, op.tokens, op.sequences, op);
        case 'idleExperts':
          return get1(oneD.idleExperts, op.count, op);
        case 'cpuAttention':
          // tokens do not enter the price (see header); key by cores and context only.
          return get2(cpuMemo, op.cores, op.contextTokens, op);
        case 'transfer':
          return get1(op.direction === 'h2d' ? oneD.h2d : oneD.d2h, op.bytes, op);
        default:
          return get1(oneD[op.kind], op.tokens, op);
      }
    },
  };
}

/**
 * Linear interpolation of a measured table (points sorted by tokens, ≥ 2 points) at `tokens`;
 * linear extrapolation from the two nearest points outside the range, with a warning text.
 */
export function interpolate(points: Points, tokens: number, kind: string): { ns: number; warning?: string } {
  const n = points.length;
  const first = points[0];
  const last = points[n - 1];
  if (n < 2 || first === undefined || last === undefined)
    throw new RangeError(`measured ${kind} table needs at least two points`);
  let lo: number;
  let warning: string | undefined;
  if (tokens < first[0]) {
    lo = 0;
    warning = `extrapolated ${kind} table below ${first[0]} tokens`;
  } else if (tokens > last[0]) {
    lo = n - 2;
    warning = `extrapolated ${kind} table beyond ${last[0]} tokens`;
  } else {
    // Binary search for the segment [points[lo], points[lo + 1]] containing tokens.
    let a = 0;
    let b = n - 1;
    while (b - a > 1) {
      const mid = (a + b) >> 1;
      if ((points[mid] as readonly [number, number])[0] <= tokens) a = mid;
      else b = mid;
    }
    lo = a;
  }
  const p = points[lo] as readonly [number, number];
  const q = points[lo + 1] as readonly [number, number];
  const ns = Math.max(1, p[1] + ((q[1] - p[1]) * (tokens - p[0])) / (q[0] - p[0]));
  return warning === undefined ? { ns } : { ns, warning };
}

function checkCount(v: number, name: string): number {
  if (!(v >= 0) || !Number.isFinite(v)) throw new RangeError(`${name} must be a finite non-negative number, got ${v}`);
  return v;
}
