/**
 * The throughput executor (DESIGN §7, offline batch): runs a whole workload as a sequence of
 * passes whose work is a task graph, with the policy's plan deciding batch sizes, splits and
 * buffers.
 *
 * 1. **Plan.** The policy's `plan` (once per run) gives the host batch N (sequences whose KV is
 *    held at once), the sequences per prefill pass, and each phase's `PassConfig`; or says the
 *    model cannot run on this machine (`feasible: false` and why), which is reported, not
 *    thrown. The executor checks the plan: valid configurations, host DRAM (weights + KV of N
 *    sequences) and VRAM of the largest prefill and decode pass within capacity; a violation is
 *    a `PolicyError`.
 * 2. **Host batches.** Requests are taken in order in groups of N. Prompts are padded (or
 *    truncated, as MoE-Gen does) to P = `padPromptTo`, default the longest prompt. A group is
 *    prefilled in passes of the plan's prefill batch, then decoded step by step: step s runs
 *    every sequence still generating (output length > s) with s − 1 + P tokens of past KV.
 *    Groups run one after another (no overlap between a group's decode and the next prefill).
 * 3. **Passes.** Each pass is the task DAG of `pass-dag.ts`, simulated by `pass-sim.ts` on a
 *    fresh machine (passes run back to back; nothing overlaps across a pass boundary). Routing
 *    counts come from the workload's aggregate router (or a uniform multinomial fallback).
 * 4. **Memoisation** (a simplification, on by default): a pass is simulated once per shape —
 *    (phase, sequences, past KV rounded *up* to a multiple of `contextBucketTokens`) — and its
 *    result reused for every later pass of the same shape: a long decode costs a few
 *    simulations per host batch, and identical host batches cost nothing. The routing sampled
 *    for the first pass of a shape stands for all of them.
 *
 * Phases: `prefill` simulates prefill passes only (each sequence's first token comes from
 * prefill); `decode` simulates decode passes only, as if the KV of the prompts were already in
 * place (decode throughput); `both`, the whole run. Arrival times are ignored (offline batch).
 * KV layout: `contiguous` reserves P + O tokens per sequence in host DRAM; `paged` allocates
 * pages of `kvPageTokens` as contexts grow (the host batch is still sized for the longest
 * output).
 */
import type { HardwareProfile, ModelProfile } from '../../hardware-profiles/types.ts';
import type { CostModel } from '../cost/types.ts';
import { PolicyError, SimError } from '../kernel/errors.ts';
import type { Rng } from '../kernel/rng.ts';
import type { Ns } from '../kernel/time.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import type { AggregateRouter, Workload } from '../workload.ts';
import { hostKvBytesPerSeq, hostNeeded, vramNeeded } from './memory-model.ts';
import { passConfigProblem, type CountsFn } from './pass-dag.ts';
import { simulatePass, type PassResult } from './pass-sim.ts';
import type { ThroughputPolicy } from './policy.ts';
import { UniformMultinomialCounts } from './routing-counts.ts';
import type { Phase, PassConfig, PassShape, PhasePlan, RunPlan, WorkloadSummary } from './types.ts';

export interface ThroughputConfig {
  readonly phase: 'prefill' | 'decode' | 'both';
  /** Fixed host/decode batch B (policies use it where their memory can hold it). */
  readonly batchSeqs?: number;
  /** Simulate only the first n host batches (the rest of the workload is not run). */
  readonly maxHostBatches?: number;
  /** Prompts are padded or truncated to this many tokens (default: the longest prompt). */
  readonly padPromptTo?: number;
  readonly contextBucketTokens: number;
  readonly kvLayout: 'contiguous' | 'paged';
  readonly kvPageTokens: number;
  readonly packetBytes: number;
  readonly memoise: boolean;
}

export interface ThroughputInput {
  readonly model: ModelProfile;
  readonly hardware: HardwareProfile;
  readonly cost: CostModel;
  readonly workload: Workload;
  readonly policy: ThroughputPolicy;
  readonly config: ThroughputConfig;
  /** Stream for the multinomial fallback when the workload has no aggregate router. */
  readonly fallbackRng: Rng;
  readonly sink?: TraceSink;
}

/** Totals over every pass of a phase (memoised passes counted as many times as they occur). */
export interface PhaseTotals {
  passes: number;
  ns: number;
  /** Tokens processed (prefill: sequences × P) and tokens generated. */
  processedTokens: number;
  generatedTokens: number;
  gpuBusyNs: number;
  gpuBusyNsByCategory: Record<string, number>;
  h2dBusyNs: number;
  d2hBusyNs: number;
  h2dBytes: number;
  d2hBytes: number;
  cpuBusyCoreNs: number;
  hostDramBytes: number;
  routedTokenSlots: number;
  expertLayerPairs: number;
  activatedPairs: number;
}

/** The search's prediction beside the simulation of the same pass shape. */
export interface PredictionCheck {
  readonly shape: PassShape;
  readonly simulatedNs: number;
  /** Critical path of the simulated DAG (sampled routing). */
  readonly criticalPathNs: number;
}

export interface ThroughputOutcome {
  readonly feasible: boolean;
  readonly infeasibleReason?: string;
  readonly policy: string;
  readonly plan?: RunPlan;
  /** Sequences simulated (all of the workload's, or the first `maxHostBatches` host batches'). */
  readonly requests: number;
  readonly promptTokens: number;
  readonly outputTokensMax: number;
  readonly hostBatches: number;
  readonly prefill: PhaseTotals;
  readonly decode: PhaseTotals;
  readonly endNs: number;
  readonly simulatedPasses: number;
  readonly memoHits: number;
  readonly events: number;
  readonly peaks: Record<'vram' | 'host', Record<string, number>>;
  readonly checks: Partial<Record<Phase, PredictionCheck>>;
  readonly routing: 'aggregate' | 'fallback';
  readonly hardware: HardwareProfile;
  /** Self-scheduling policies (`ThroughputPolicy.run`): their analytic model and own counters, reported as-is. */
  readonly analytic?: Readonly<Record<string, number | string>>;
  readonly schedule?: Readonly<Record<string, unknown>>;
}

const emptyTotals = (): PhaseTotals => ({
  passes: 0,
  ns: 0,
  processedTokens: 0,
  generatedTokens: 0,
  gpuBusyNs: 0,
  gpuBusyNsByCategory: {},
  h2dBusyNs: 0,
  d2hBusyNs: 0,
  h2dBytes: 0,
  d2hBytes: 0,
  cpuBusyCoreNs: 0,
  hostDramBytes: 0,
  routedTokenSlots: 0,
  expertLayerPairs: 0,
  activatedPairs: 0,
});

export class ThroughputExecutor {
  private readonly memo = new Map<string, PassResult>();
  private simulated = 0;
  private hits = 0;
  private events = 0;
  private nowNs = 0;
  private readonly peaks: Record<'vram' | 'host', Record<string, number>> = { vram: {}, host: {} };
  private readonly counts: CountsFn;
  private readonly routing: 'aggregate' | 'fallback';
  /** Tokens of KV reserved per sequence: P + longest output. */
  private reserve = 1;

  constructor(private readonly x: ThroughputInput) {
    const agg: AggregateRouter = x.workload.aggregate ?? new UniformMultinomialCounts(x.model.experts, x.model.topK, x.fallbackRng);
    this.routing = x.workload.aggregate ? 'aggregate' : 'fallback';
    this.counts = (layer, tokens, out) => agg.counts(layer, tokens, out);
  }

  run(): ThroughputOutcome {
    const { model, hardware: hw, workload, policy, config: cfg } = this.x;
    const reqs = workload.requests;
    const phases = { prefill: cfg.phase !== 'decode', decode: cfg.phase !== 'prefill' };
    let maxPrompt = 1;
    let maxOut = 1;
    for (const r of reqs) {
      if (r.promptTokens > maxPrompt) maxPrompt = r.promptTokens;
      if (r.outputTokens > maxOut) maxOut = r.outputTokens;
    }
    const P = cfg.padPromptTo ?? maxPrompt;
    const summary: WorkloadSummary = {
      sequences: reqs.length,
      promptTokens: P,
      outputTokens: maxOut,
      phases,
      ...(cfg.batchSeqs !== undefined ? { fixedBatchSeqs: cfg.batchSeqs } : {}),
    };
    const base = {
      policy: policy.name,
      requests: reqs.length,
      promptTokens: P,
      outputTokensMax: maxOut,
      routing: this.routing,
      hardware: hw,
    };
    if (policy.run) {
      try {
        return policy.run({ model, hardware: hw, cost: this.x.cost, workload: summary, requests: reqs, ...(this.x.sink ? { sink: this.x.sink } : {}) });
      } catch (e) {
        if (e instanceof SimError) throw e;
        const err = new PolicyError(e instanceof Error ? e.message : String(e), 0, policy.name, 'run');
        err.cause = e;
        throw err;
      }
    }
    let result;
    try {
      result = policy.plan({ model, hardware: hw, cost: this.x.cost, workload: summary });
    } catch (e) {
      if (e instanceof SimError) throw e;
      const err = new PolicyError(e instanceof Error ? e.message : String(e), 0, policy.name, 'plan');
      err.cause = e;
      throw err;
    }
    if (!result.feasible) {
      return { ...base, feasible: false, infeasibleReason: result.reason, hostBatches: 0, prefill: emptyTotals(), decode: emptyTotals(), endNs: 0, simulatedPasses: 0, memoHits: 0, events: 0, peaks: this.peaks, checks: {} };
    }
    const plan = result.plan;
    this.checkPlan(plan, summary);

    const N = plan.hostBatchSeqs;
    const reserve = P + maxOut;
    this.reserve = reserve;
    const prefill = emptyTotals();
    const decode = emptyTotals();
    let groups = 0;
    const outputs = reqs.map((r) => r.outputTokens);
    let sequencesRun = 0;
    for (let g = 0; g < reqs.length; g += N) {
      if (cfg.maxHostBatches !== undefined && groups >= cfg.maxHostBatches) break;
      groups++;
      const size = Math.min(N, reqs.length - g);
      const outs = outputs.slice(g, g + size).sort((a, b) => b - a);
      sequencesRun += size;
      if (phases.prefill) {
        const Bp = plan.prefill.batchSeqs;
        for (let off = 0; off < size; off += Bp) {
          const seqs = Math.min(Bp, size - off);
          const shape: PassShape = { phase: 'prefill', seqs, newTokens: P, pastTokens: 0, hostSeqs: N, reserveTokens: reserve };
          this.pass(plan.prefill, shape, this.hostKv(plan.prefill.config, size, P), prefill);
          prefill.processedTokens += seqs * P;
          prefill.generatedTokens += seqs;
        }
      }
      if (phases.decode) {
        const longest = outs[0]!;
        let active = size;
        for (let s = 1; s < longest; s++) {
          while (active > 0 && outs[active - 1]! <= s) active--;
          const past = P + s - 1;
          const bucket = cfg.contextBucketTokens;
          const pastB = cfg.memoise ? Math.min(reserve - 1, Math.ceil(past / bucket) * bucket) : past;
          const shape: PassShape = { phase: 'decode', seqs: active, newTokens: 1, pastTokens: pastB, hostSeqs: N, reserveTokens: reserve };
          this.pass(plan.decode, shape, this.hostKv(plan.decode.config, size, past + 1), decode);
          decode.processedTokens += active;
          decode.generatedTokens += active;
        }
      }
      if (this.x.sink?.onRequest) for (let i = 0; i < size; i++) this.x.sink.onRequest(reqs[g + i]!.id, 'finish', this.nowNs as Ns);
    }

    const checks: Partial<Record<Phase, PredictionCheck>> = {};
    for (const ph of ['prefill', 'decode'] as const) {
      const pp = plan[ph];
      if (!phases[ph] || !pp.search) continue;
      const shape: PassShape =
        ph === 'prefill'
          ? { phase: 'prefill', seqs: pp.search.B, newTokens: P, pastTokens: 0, hostSeqs: N, reserveTokens: reserve }
          : { phase: 'decode', seqs: pp.search.B, newTokens: 1, pastTokens: pp.search.refPastTokens, hostSeqs: N, reserveTokens: reserve };
      const r = this.simulate(pp.config, shape, this.hostKv(pp.config, N, shape.pastTokens + 1), false);
      checks[ph] = { shape, simulatedNs: r.durationNs, criticalPathNs: r.criticalPathNs };
    }

    return {
      ...base,
      requests: sequencesRun,
      feasible: true,
      plan,
      hostBatches: groups,
      prefill,
      decode,
      endNs: this.nowNs,
      simulatedPasses: this.simulated,
      memoHits: this.hits,
      events: this.events,
      peaks: this.peaks,
      checks,
    };
  }

  /** Host KV bytes of `seqs` resident sequences holding `tokens` tokens each (contiguous: reserved for P + O). */
  private hostKv(c: PassConfig, seqs: number, tokens: number): number {
    const { model, config: cfg } = this.x;
    const page = cfg.kvPageTokens;
    const held = cfg.kvLayout === 'contiguous' ? this.reserve : Math.min(this.reserve, Math.ceil(tokens / page) * page);
    return seqs * hostKvBytesPerSeq(model, held, c.kvGpuLayers);
  }

  private checkPlan(plan: RunPlan, w: WorkloadSummary): void {
    const { model, hardware: hw, policy } = this.x;
    const fail = (m: string): never => {
      throw new PolicyError(`invalid plan: ${m}`, 0, policy.name, 'plan');
    };
    const N = plan.hostBatchSeqs;
    if (!(Number.isSafeInteger(N) && N >= 1)) fail(`hostBatchSeqs must be an integer ≥ 1 (got ${N})`);
    const reserve = w.promptTokens + w.outputTokens;
    for (const ph of ['prefill', 'decode'] as const) {
      const pp: PhasePlan = plan[ph];
      if (!(Number.isSafeInteger(pp.batchSeqs) && pp.batchSeqs >= 1)) fail(`${ph}.batchSeqs must be an integer ≥ 1 (got ${pp.batchSeqs})`);
      const problem = passConfigProblem(pp.config, model);
      if (problem) fail(`${ph}: ${problem}`);
      if (pp.config.cpuCores > hw.cpu.cores) fail(`${ph}: cpuCores ${pp.config.cpuCores} > the CPU's ${hw.cpu.cores}`);
      if (!w.phases[ph]) continue;
      const seqs = ph === 'decode' ? Math.min(N, w.sequences) : Math.min(pp.batchSeqs, N, w.sequences);
      const shape: PassShape =
        ph === 'prefill'
          ? { phase: ph, seqs, newTokens: w.promptTokens, pastTokens: 0, hostSeqs: N, reserveTokens: reserve }
          : { phase: ph, seqs, newTokens: 1, pastTokens: reserve - 1, hostSeqs: N, reserveTokens: reserve };
      const v = vramNeeded(model, shape, pp.config);
      if (v.totalBytes > hw.gpu.vramBytes) fail(`${ph} pass needs ${(v.totalBytes / 1e9).toFixed(2)} GB of VRAM, the GPU has ${(hw.gpu.vramBytes / 1e9).toFixed(2)} GB`);
    }
    const kvGpu = Math.min(plan.prefill.config.kvGpuLayers, plan.decode.config.kvGpuLayers);
    const host = hostNeeded(model, N, reserve, kvGpu);
    if (host > hw.hostDramBytes) fail(`host batch of ${N} needs ${(host / 1e9).toFixed(1)} GB of host DRAM, the host has ${(hw.hostDramBytes / 1e9).toFixed(1)} GB`);
  }

  private pass(pp: PhasePlan, shape: PassShape, hostKvBytes: number, into: PhaseTotals): void {
    const key = `${shape.phase}|${shape.seqs}|${shape.pastTokens}`;
    let r = this.x.config.memoise ? this.memo.get(key) : undefined;
    if (r) this.hits++;
    else {
      r = this.simulate(pp.config, shape, hostKvBytes, true);
      if (this.x.config.memoise) this.memo.set(key, r);
    }
    into.passes++;
    into.ns += r.durationNs;
    into.gpuBusyNs += r.gpuBusyNs;
    for (const [k, v] of Object.entries(r.gpuBusyNsByCategory)) into.gpuBusyNsByCategory[k] = (into.gpuBusyNsByCategory[k] ?? 0) + v;
    into.h2dBusyNs += r.h2dBusyNs;
    into.d2hBusyNs += r.d2hBusyNs;
    into.h2dBytes += r.h2dBytes;
    into.d2hBytes += r.d2hBytes;
    into.cpuBusyCoreNs += r.cpuBusyCoreNs;
    into.hostDramBytes += r.hostDramBytes;
    into.routedTokenSlots += r.routedTokenSlots;
    into.expertLayerPairs += r.expertLayerPairs;
    into.activatedPairs += r.activatedPairs;
    this.nowNs += r.durationNs;
  }

  private simulate(c: PassConfig, shape: PassShape, hostKvBytes: number, counted: boolean): PassResult {
    const { model, hardware, cost, config } = this.x;
    const sink = counted && this.x.sink ? offsetSink(this.x.sink, this.nowNs) : undefined;
    const r = simulatePass({
      model,
      hardware,
      cost,
      shape,
      config: c,
      counts: this.counts,
      packetBytes: config.packetBytes,
      hostKvBytes,
      ...(sink ? { sink } : {}),
      criticalPath: !counted,
    });
    if (counted) {
      this.simulated++;
      this.events += r.events;
    }
    for (const pool of ['vram', 'host'] as const) {
      const into = this.peaks[pool];
      for (const [k, v] of Object.entries(r.peaks[pool])) into[k] = Math.max(into[k] ?? 0, v);
    }
    return r;
  }
}

/** A sink whose records are shifted by `offsetNs` (a pass simulated from 0 placed in the run). */
export function offsetSink(s: TraceSink, offsetNs: number): TraceSink {
  const o = offsetNs;
  const t = (x: number) => (x + o) as Ns;
  const out: TraceSink = {};
  if (s.onKernel) out.onKernel = (r) => s.onKernel!({ ...r, startNs: t(r.startNs), endNs: t(r.endNs) });
  if (s.onTransfer) out.onTransfer = (r) => s.onTransfer!({ ...r, submitNs: t(r.submitNs), startNs: t(r.startNs), endNs: t(r.endNs) });
  if (s.onPacket) out.onPacket = (r) => s.onPacket!({ ...r, startNs: t(r.startNs), endNs: t(r.endNs) });
  if (s.onCpuTask) out.onCpuTask = (r) => s.onCpuTask!({ ...r, startNs: t(r.startNs), endNs: t(r.endNs) });
  if (s.onMemory) out.onMemory = (r) => s.onMemory!({ ...r, timeNs: t(r.timeNs) });
  if (s.onBlocked) out.onBlocked = (r) => s.onBlocked!({ ...r, startNs: t(r.startNs), endNs: t(r.endNs) });
  return out;
}
