/**
 * `CapTotals` (see `cap.ts`) of a run of either family, from what its outcome records. The
 * simplifications are listed in `cap.ts`'s header.
 */
import type { ModelProfile } from '../../hardware-profiles/types.ts';
import type { ServingOutcome } from '../serving/serving-executor.ts';
import type { ThroughputOutcome } from '../throughput/throughput-executor.ts';
import type { CapTotals } from './cap.ts';

/** Serving family: passes = iterations; time = union of the requests' [admit, finish] intervals. */
export function servingCapTotals(o: ServingOutcome, m: ModelProfile): CapTotals {
  let tokens = 0;
  let context = 0;
  let kvTokens = 0;
  const spans: [number, number][] = [];
  for (const r of o.requests) {
    const p = r.promptTokens;
    const e = r.emittedTokens;
    // Prefill: p tokens, causal context p(p+1)/2, reads its prompt's KV once.
    tokens += p;
    context += (p * (p + 1)) / 2;
    kvTokens += p;
    // Decode steps j = 1 … e−1 each process one token over a context of p + j.
    const steps = Math.max(0, e - 1);
    tokens += steps;
    const ctx = steps * p + (steps * (steps + 1)) / 2;
    context += ctx;
    kvTokens += ctx;
    if (r.finishNs > r.admitNs) spans.push([r.admitNs, r.finishNs]);
  }
  spans.sort((a, b) => a[0] - b[0]);
  let forwardNs = 0;
  let curS = -1;
  let curE = -1;
  for (const [s, e] of spans) {
    if (s > curE) {
      if (curE > curS) forwardNs += curE - curS;
      curS = s;
      curE = e;
    } else if (e > curE) curE = e;
  }
  if (curE > curS) forwardNs += curE - curS;
  const c = o.counters;
  return {
    passes: c.iterations,
    tokens,
    contextTokenSum: context,
    activatedPairs: Math.round(c.activationRatioSum * m.experts),
    kvReadBytes: kvTokens * m.derived.kvBytesPerToken,
    forwardNs,
  };
}

/**
 * Throughput family: passes and activated pairs from the phase totals (each pair once per pass,
 * `passActivatedPairs`: an expert that several micro-batches of a pass compute is one activated
 * expert of that pass, MoE-CAP's indicator 1[l, i]); KV and contexts from the
 * padded prompt P and the longest output O (mean decode context P + O/2); ω and gpuLayers from
 * the plan, ω overridden by the execution's `attentionOnCpu` where it reports one (continuous runs
 * run prefill attention on the GPU under a plan whose one config says ω = 1); weighted by phase
 * time when both phases ran; when the two phases' fractions differ, `phases` carries each phase's
 * totals so that `capMetrics` charges each phase's bytes and FLOPs to the devices by its own
 * fractions. `only: 'decode'`: the decode passes alone (MoE-CAP defines both metrics on decoding).
 */
export function throughputCapTotals(o: ThroughputOutcome, m: ModelProfile, only?: 'decode'): CapTotals {
  const none = { ...o.prefill, passes: 0, ns: 0, processedTokens: 0, generatedTokens: 0, passActivatedPairs: 0 };
  const p = only === 'decode' ? none : o.prefill;
  const d = o.decode;
  // The padded prompt length P (the outcome's promptTokens is P, not a total).
  const P = o.promptTokens;
  const O = o.outputTokensMax;
  const decodeCtx = P + O / 2;
  // Per phase: tokens, Σ contexts (prefill: causal P(P+1)/2 per prompt) and KV tokens read.
  const tok = { prefill: p.processedTokens, decode: d.generatedTokens };
  const ctx = {
    prefill: (p.processedTokens / Math.max(1, P)) * ((P * (P + 1)) / 2),
    decode: d.generatedTokens * decodeCtx,
  };
  const kv = { prefill: p.processedTokens, decode: d.generatedTokens * decodeCtx };
  const tokens = tok.prefill + tok.decode;
  const context = ctx.prefill + ctx.decode;
  const kvTokens = kv.prefill + kv.decode;
  type Ph = 'prefill' | 'decode';
  const frac = (ph: Ph, f: (c: PhaseConfig) => number): number => (o.plan ? f(o.plan[ph].config) : 0);
  // Attention on the CPU: where the execution says it ran a phase's attention, that; else the plan's ω.
  const attention = (ph: Ph): number => o.attentionOnCpu?.[ph] ?? frac(ph, (c) => c.omega);
  const cpuLayers = (ph: Ph): number =>
    frac(ph, (c) => (m.layers > 0 ? Math.max(0, m.layers - Math.min(m.layers, c.gpuLayers)) / m.layers : 0));
  const w = (ph: Ph) => (ph === 'prefill' ? p.ns : d.ns);
  const total = p.ns + d.ns;
  const mix = (f: (ph: Ph) => number): number =>
    total > 0 ? (f('prefill') * w('prefill') + f('decode') * w('decode')) / total : 0;
  // Executors that do not record activations (a self-scheduling policy such as MoE-Lens leaves
  // expertLayerPairs at 0): the expected activated pairs under uniform independent routing of the
  // pass's tokens, E · (1 − (1 − k/E)^tokens per pass) per MoE layer, labelled as an estimate.
  const passes = p.passes + d.passes;
  const traced = p.expertLayerPairs + d.expertLayerPairs > 0 || passes === 0;
  const perPass = passes > 0 ? tokens / passes : 0;
  const estimateOf = (n: number) => n * m.moeLayers * m.experts * (1 - Math.pow(1 - m.topK / m.experts, perPass));
  // Both phases did work and split it between the devices differently: each phase by its own
  // fractions. Work, not time: a continuous run books its mixed iterations' time as decode, and its
  // prefill phase carries the prompt tokens those iterations processed (`policies/moe-lens/totals.ts`).
  const worked = (x: typeof p) => x.ns > 0 || x.processedTokens > 0 || x.generatedTokens > 0;
  const split =
    worked(p) &&
    worked(d) &&
    (attention('prefill') !== attention('decode') || cpuLayers('prefill') !== cpuLayers('decode'));
  const phase = (ph: 'prefill' | 'decode'): CapTotals => {
    const x = ph === 'prefill' ? p : d;
    return {
      passes: x.passes,
      tokens: tok[ph],
      contextTokenSum: ctx[ph],
      activatedPairs: traced ? x.passActivatedPairs : estimateOf(x.passes),
      kvReadBytes: kv[ph] * m.derived.kvBytesPerToken,
      forwardNs: x.ns,
      cpuAttentionFrac: attention(ph),
      cpuLayerFrac: cpuLayers(ph),
    };
  };
  return {
    passes,
    tokens,
    contextTokenSum: context,
    activatedPairs: traced ? p.passActivatedPairs + d.passActivatedPairs : estimateOf(passes),
    ...(traced ? {} : { activations: 'uniform-estimate' as const }),
    kvReadBytes: kvTokens * m.derived.kvBytesPerToken,
    forwardNs: total,
    cpuAttentionFrac: mix(attention),
    cpuLayerFrac: mix(cpuLayers),
    ...(split ? { phases: [phase('prefill'), phase('decode')] } : {}),
  };
}

type PhaseConfig = NonNullable<ThroughputOutcome['plan']>['decode']['config'];
