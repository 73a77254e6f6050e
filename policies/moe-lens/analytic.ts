/**
 * MoE-Lens analytic throughput model (DESIGN §8 "MoE-Lens", paper §5 Eqs. 1–14), as a pure
 * module: no simulation state, no I/O. Computed beside every MoE-Lens run and reported as
 * `analytic.*` in results.
 *
 * Source of every formula: Yuan, Ma, Talati, "MoE-Lens" (arXiv 2504.09345), §5, as transcribed
 * and checked in `../shared/reference/settings-moe-lens.md` §8. Decisions the paper leaves open
 * (settings card §8 items 1–7), made here and stated once:
 *
 * 1. Units of T_GPU: Stage 1 (Eq. 4) uses T_GPU in tokens/s; Stage 2 (Eqs. 11–12) needs it in
 *    tokens per iteration, `tGpuItTokens` (= the profiler's n_real; default T_GPU·δ).
 * 2. Stage 2 regime: T2 is computed only when T_GPU,it < q(p+g) (GPU-bound) AND It > 2g;
 *    otherwise T = T1 (the literal min(T1, T2) can go negative or describe a regime that does
 *    not hold). `stage2Regime` says which branch was taken.
 * 3. PME: the closed form 2(p+g)/((2p+g)·g) (DESIGN) is the Stage 1 value; the sum form
 *    (p+g)/Σ_{j=0..g}(p+j) is reported beside it as `pmeSum`.
 * 4. Token counts: T_max counts processed tokens (p+g per sequence); `tMaxGenTokPerS` =
 *    T_max·g/(p+g) is the comparable generation throughput. T1, T2, T count generated tokens.
 * 5. Eq. 7's overlap enlargement (p+g)/(p+g/2) is reported (`kvEffFactor`), not folded into M.
 * 6. Eq. 2 is evaluated with the B_IO given (the caller passes the link it uses for δ).
 * 7. N = ⌊M/b⌋ pages; q is real-valued; p and g are the batch means (g = g_max in the paper's
 *    rows, which generate exactly g_max tokens).
 */

export interface LensAnalyticInput {
  /** Mean prompt tokens p. */
  readonly promptTokens: number;
  /** Generated tokens per sequence g. */
  readonly genTokens: number;
  /** Page size b, token slots per page. */
  readonly pageTokens: number;
  /** KV capacity M, in tokens. */
  readonly kvCapacityTokens: number;
  /** Sequences in the offline batch K. */
  readonly sequences: number;
  /** Bytes of weights streamed per pass (model size). */
  readonly modelBytes: number;
  /** CPU→GPU bandwidth B_IO, bytes/s. */
  readonly ioBytesPerS: number;
  /** GPU maximum throughput T_GPU, tokens/s (Eq. 4). */
  readonly tGpuTokPerS: number;
  /** T_GPU in tokens per iteration for Stage 2 (n_real); default T_GPU·δ. */
  readonly tGpuItTokens?: number;
  /** Optional for Eq. 1/2: experts per layer E (N_e), active per token k (N_k), GPU FLOP/s. */
  readonly experts?: number;
  readonly topK?: number;
  readonly gpuFlops?: number;
  /** Optional for Eq. 5: KV capacity in bytes (host memory = KV + weights). */
  readonly kvCapacityBytes?: number;
}

export interface LensAnalytic {
  /** δ = model bytes / B_IO, seconds per iteration (one weight stream). */
  readonly deltaS: number;
  /** Eq. 3 closed form. */
  readonly pme: number;
  /** Eq. 3 as a sum over g+1 steps. */
  readonly pmeSum: number;
  /** Eq. 4: T_max = min(PME·M/δ, T_GPU), processed tokens/s. */
  readonly tMaxTokPerS: number;
  /** PME·M/δ, the memory bound of Eq. 4. */
  readonly tMemTokPerS: number;
  /** T_max·g/(p+g): Stage 1 as generation throughput. */
  readonly tMaxGenTokPerS: number;
  /** Eq. 7: (p+g)/(p+g/2). */
  readonly kvEffFactor: number;
  /** N = ⌊M/b⌋. */
  readonly pages: number;
  /** Σ_{i=0..g} ⌈(p+i)/b⌉. */
  readonly pagesPerSeqSum: number;
  /** Eq. 8: q, new sequences per iteration. */
  readonly q: number;
  /** q(p+g): tokens per iteration the memory allows. */
  readonly qTokensPerIt: number;
  /** Eq. 10, generated tokens/s. */
  readonly t1: number;
  readonly tGpuItTokens: number;
  /** Eq. 11 (tokens/iteration), Eq. 12 (iterations), Eq. 13 (tokens/s); undefined outside the GPU-bound regime. */
  readonly tPrefillTokensPerIt?: number;
  readonly iterations?: number;
  readonly t2?: number;
  readonly stage2Regime: 'memory' | 'gpu' | 'gpu-formula-invalid';
  /** Eq. 14 (with the regime rule above), generated tokens/s. */
  readonly t: number;
  /** Eq. 1 approximation n·k/E per token (I/n), and Eq. 2 tokens to saturate the GPU. */
  readonly intensityPerToken?: number;
  readonly saturateTokens?: number;
  /** Eq. 5: host bandwidth needed (M_total/M_weight)·B_IO, bytes/s. */
  readonly hostBwNeededBytesPerS?: number;
}

/** Σ_{i=0..g} ⌈(p+i)/b⌉: pages a sequence holds summed over its g+1 steps (Eq. 8 denominator). */
export function pagesPerSeqSum(p: number, g: number, b: number): number {
  let s = 0;
  for (let i = 0; i <= g; i++) s += Math.ceil((p + i) / b);
  return s;
}

export function lensAnalytic(x: LensAnalyticInput): LensAnalytic {
  const p = x.promptTokens;
  const g = x.genTokens;
  const b = x.pageTokens;
  const M = x.kvCapacityTokens;
  const K = x.sequences;
  if (!(p >= 0 && g >= 1 && b >= 1 && M > 0 && K >= 1 && x.modelBytes > 0 && x.ioBytesPerS > 0 && x.tGpuTokPerS > 0)) {
    throw new Error(`lensAnalytic: invalid input ${JSON.stringify(x)}`);
  }
  const deltaS = x.modelBytes / x.ioBytesPerS;
  // Eq. 3
  const pme = (2 * (p + g)) / ((2 * p + g) * g);
  let kvSum = 0;
  for (let j = 0; j <= g; j++) kvSum += p + j;
  const pmeSum = (p + g) / kvSum;
  // Eq. 4
  const tMemTokPerS = (pme * M) / deltaS;
  const tMaxTokPerS = Math.min(tMemTokPerS, x.tGpuTokPerS);
  const tMaxGenTokPerS = (tMaxTokPerS * g) / (p + g);
  // Eq. 7
  const kvEffFactor = (p + g) / (p + g / 2);
  // Eq. 8
  const pages = Math.floor(M / b);
  const denom = pagesPerSeqSum(p, g, b);
  const q = pages / denom;
  const qTokensPerIt = q * (p + g);
  // Eq. 10
  const t1 = (K * g) / ((K / q + g) * deltaS);
  // Eqs. 11–13
  const tGpuItTokens = x.tGpuItTokens ?? x.tGpuTokPerS * deltaS;
  let stage2Regime: LensAnalytic['stage2Regime'] = 'memory';
  let tPrefillTokensPerIt: number | undefined;
  let iterations: number | undefined;
  let t2: number | undefined;
  let t = t1;
  if (tGpuItTokens < qTokensPerIt) {
    tPrefillTokensPerIt = (tGpuItTokens * p) / (p + g);
    iterations = 2 * g + (K * p - ((tPrefillTokensPerIt + tGpuItTokens) / 2) * g) / tPrefillTokensPerIt;
    if (iterations > 2 * g) {
      t2 = (K * g) / (iterations * deltaS);
      stage2Regime = 'gpu';
      t = Math.min(t1, t2);
    } else {
      stage2Regime = 'gpu-formula-invalid';
    }
  }
  const out: { -readonly [k in keyof LensAnalytic]: LensAnalytic[k] } = {
    deltaS,
    pme,
    pmeSum,
    tMaxTokPerS,
    tMemTokPerS,
    tMaxGenTokPerS,
    kvEffFactor,
    pages,
    pagesPerSeqSum: denom,
    q,
    qTokensPerIt,
    t1,
    tGpuItTokens,
    tPrefillTokensPerIt,
    iterations,
    t2,
    stage2Regime,
    t,
  };
  if (x.experts !== undefined && x.topK !== undefined) {
    out.intensityPerToken = x.topK / x.experts;
    if (x.gpuFlops !== undefined) out.saturateTokens = (x.gpuFlops / x.ioBytesPerS) * (x.experts / x.topK);
  }
  if (x.kvCapacityBytes !== undefined) {
    out.hostBwNeededBytesPerS = ((x.kvCapacityBytes + x.modelBytes) / x.modelBytes) * x.ioBytesPerS;
  }
  return out;
}

/**
 * Pipeline profiler (paper §6.3, Fig. 7): fit GPU time vs tokens as a line t = a + s·n and
 * return the token count where one layer's GPU time equals its weight-transfer time:
 * n_real = (t_transfer − a)/s (settings card §9a item 13: the use of the intercept is not stated
 * by the paper; this is the natural reading). Points are (tokens, seconds) per layer.
 */
export function profilerNReal(
  points: readonly (readonly [number, number])[],
  layerTransferS: number,
): { nReal: number; slopeS: number; interceptS: number } {
  if (points.length < 2) throw new Error('profilerNReal: need ≥ 2 points');
  const n = points.length;
  let sx = 0,
    sy = 0,
    sxx = 0,
    sxy = 0;
  for (const [x, y] of points) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const slopeS = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  const interceptS = (sy - slopeS * sx) / n;
  if (!(slopeS > 0)) throw new Error('profilerNReal: non-positive slope');
  const nReal = Math.max(1, Math.floor((layerTransferS - interceptS) / slopeS));
  return { nReal, slopeS, interceptS };
}
