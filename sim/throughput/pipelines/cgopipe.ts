/**
 * The MoE-Lens paper's two baselines (arXiv 2504.09345 §7 "Baselines", Fig. 11) run on the
 * MoE-Lens executor's cost lookups (`costs.ts`: the same cost model, layer bytes, transfer times
 * and CPU-attention kernel) and page accounting (`PagePool`), so that a comparison with
 * `runLens` is a comparison of schedulers and pipelines only. Each is a pure scheduler (a state
 * machine whose `next()` decides one iteration; unit-tested on hand-made worlds) plus a closed-form
 * iteration cost.
 *
 * MoE-Lightning-like (`LightningScheduler`, `runLightning`) — MoE-Lightning (arXiv 2411.11217) as
 * the released artifact runs it (caoshiyi/artifacts, `fastmoe/backend/optimizer.py`):
 * - a FIXED batch of `batchSeqs` sequences (chosen by the caller with the HRM policy) whose KV is
 *   reserved in full at admission: ⌈(prompt + max generation)/b⌉ pages per sequence (the
 *   optimizer's host constraint holds (s + n) tokens of KV per sequence; no paging, no growth);
 * - the whole batch is prefilled (GPU attention, one pass over the weights: per layer
 *   max(GPU prefill work, next layer's transfer)), then decodes to the end (sequences that reach
 *   their own length stop computing; their reservation is held until the batch ends), then the
 *   next batch: no prefill/decode overlap;
 * - decode is CGOPipe with μ micro-batches per layer: CPU attention over the host KV, GPU
 *   projections + router + experts; stage = max(next layer's weight transfer, C + G/μ, G + C/μ)
 *   (the CPU and GPU work pipelined over μ micro-batches, one micro-batch of fill/drain), with
 *   the host-DRAM share of `sharedStage` between CPU attention and the weight DMA.
 *
 * vLLM-like (`VllmScheduler`, `runVllm`) — vLLM v0's default scheduler with `--cpu-offload-gb`:
 * - paged KV on the GPU (`gpuPages`, what VRAM leaves; the caller computes it), continuous
 *   batching: when nothing is swapped out, waiting prompts are admitted (FCFS, whole prompts, at
 *   most `maxNumBatchedTokens` tokens and `maxNumSeqs` running, and while the free pages stay
 *   above the 1 % watermark) in a prefill-only iteration; otherwise every running sequence
 *   decodes one token; when a decode step lacks a page the newest running sequence is preempted
 *   (swapped out to the CPU swap space while it has room, else recomputed later), and swapped
 *   sequences are swapped back in (oldest first) in iterations without preemption
 *   (vllm/core/scheduler.py `_schedule_default`);
 * - all attention and FFN on the GPU; the offloaded weights are copied to the GPU layer by layer
 *   right before that layer runs (no prefetch, no overlap: `functional_call` on `.to(device)`
 *   copies), so a layer costs transfer + compute; swap-outs (D2H) and swap-ins (H2D) are copied
 *   before the step, serially.
 *
 * Simplified (both): even routing; no KV write-back cost; scheduler time not modelled; the
 * token/time accounting is the same as `scheduler.ts` (a prefill of p tokens stores p KV and
 * generates one token; a decode step appends one KV and generates one token).
 */
import type { HardwareProfile, ModelProfile } from '../../hardware-profiles/types.ts';
import type { CostModel } from '../cost/types.ts';
import { ACTIVATION_BYTES } from '../cost/cost-model.ts';
import type { Ns } from '../kernel/time.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import { emptyGroup, lensCosts, type GroupLoad } from './costs.ts';
import { sharedStage } from './executor.ts';
import { PagePool } from './page-pool.ts';

export interface BaselineRequest {
  readonly id: number;
  readonly promptTokens: number;
  readonly outputTokens: number;
}

export interface BaseSeq {
  readonly id: number;
  readonly prompt: number;
  readonly output: number;
  generated: number;
  kvTokens: number;
  state: 'waiting' | 'running' | 'swapped' | 'done';
}

const seqsOf = (reqs: readonly { readonly promptTokens: number; readonly outputTokens: number }[]): BaseSeq[] =>
  reqs.map((r, id) => ({ id, prompt: r.promptTokens, output: Math.max(1, r.outputTokens), generated: 0, kvTokens: 0, state: 'waiting' }));

// ---------------------------------------------------------------------------------------------
// MoE-Lightning-like
// ---------------------------------------------------------------------------------------------

export interface LightningStep {
  readonly kind: 'prefill' | 'decode';
  /** Sequences computed this step (a prefill: the new batch; a decode: the unfinished ones). */
  readonly seqs: readonly BaseSeq[];
  /** Σ context tokens attended by the decode tokens (after appending theirs). */
  readonly decodeContextTokens: number;
  /** Prompt tokens prefilled (prefill steps). */
  readonly prefillTokens: number;
  /** Σ p(p+1)/2 over the prefilled prompts (GPU attention's context). */
  readonly prefillCtx: number;
}

export class LightningScheduler {
  readonly seqs: BaseSeq[];
  private head = 0;
  private batch: BaseSeq[] = [];
  finished = 0;
  generatedTokens = 0;
  batches = 0;

  constructor(
    reqs: readonly { readonly promptTokens: number; readonly outputTokens: number }[],
    readonly pool: PagePool,
    /** The HRM policy's batch size N. */
    readonly batchSeqs: number,
    /** Max generation reserved per sequence (default: each sequence's own output length). */
    readonly reserveOutput?: number,
    /** Prompt tokens reserved per sequence (padded; default: each sequence's own prompt, at least it). */
    readonly reservePrompt?: number,
  ) {
    if (!(Number.isSafeInteger(batchSeqs) && batchSeqs >= 1)) throw new Error(`LightningScheduler: invalid batchSeqs ${batchSeqs}`);
    this.seqs = seqsOf(reqs);
  }
  get done(): boolean {
    return this.finished === this.seqs.length;
  }
  /** Tokens of KV reserved for a sequence at admission: prompt + max generation. */
  reserveOf(s: BaseSeq): number {
    return Math.max(s.prompt, this.reservePrompt ?? 0) + Math.max(s.output, this.reserveOutput ?? 0);
  }

  next(nowNs = 0): LightningStep {
    const pool = this.pool;
    const active = this.batch.filter((s) => s.state === 'running');
    if (active.length === 0) {
      // Batch boundary: release the finished batch's reservations, admit the next fixed batch.
      for (const s of this.batch) pool.free(s.id, nowNs);
      this.batch = [];
      while (this.head < this.seqs.length && this.batch.length < this.batchSeqs) {
        const s = this.seqs[this.head]!;
        if (pool.pagesFor(this.reserveOf(s)) > pool.freePages) break;
        pool.grow(s.id, this.reserveOf(s), nowNs);
        this.head++;
        this.batch.push(s);
      }
      if (this.batch.length === 0) {
        const s = this.seqs[this.head]!;
        throw new Error(`LightningScheduler: sequence ${s.id} (reserve ${this.reserveOf(s)} tokens, ${pool.pagesFor(this.reserveOf(s))} pages) cannot fit an empty pool of ${pool.pages} pages`);
      }
      this.batches++;
      let tokens = 0;
      let ctx = 0;
      for (const s of this.batch) {
        s.kvTokens = s.prompt;
        s.state = 'running';
        tokens += s.prompt;
        ctx += (s.prompt * (s.prompt + 1)) / 2;
      }
      const seqs = this.batch.slice();
      this.step(seqs, nowNs);
      return { kind: 'prefill', seqs, decodeContextTokens: 0, prefillTokens: tokens, prefillCtx: ctx };
    }
    let ctx = 0;
    for (const s of active) {
      s.kvTokens += 1;
      ctx += s.kvTokens;
    }
    this.step(active, nowNs);
    return { kind: 'decode', seqs: active, decodeContextTokens: ctx, prefillTokens: 0, prefillCtx: 0 };
  }

  private step(stepped: readonly BaseSeq[], nowNs: number): void {
    for (const s of stepped) {
      s.generated++;
      this.generatedTokens++;
      if (s.generated >= s.output) {
        s.state = 'done';
        this.finished++;
      }
    }
    // The last batch's reservations are released as soon as it completes.
    if (this.done) {
      for (const s of this.batch) this.pool.free(s.id, nowNs);
      this.batch = [];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// vLLM-like
// ---------------------------------------------------------------------------------------------

export interface VllmStep {
  readonly kind: 'prefill' | 'decode';
  readonly prefill: readonly { readonly seq: BaseSeq; readonly tokens: number; readonly recomputed: number }[];
  readonly decode: readonly BaseSeq[];
  readonly decodeContextTokens: number;
  /** KV tokens copied GPU → CPU (swap-out) and CPU → GPU (swap-in) before the step. */
  readonly swapOutTokens: number;
  readonly swapInTokens: number;
  readonly swappedOut: readonly BaseSeq[];
  readonly swappedIn: readonly BaseSeq[];
  /** Sequences preempted for recomputation (their KV dropped). */
  readonly recomputePreempted: readonly BaseSeq[];
}

export interface VllmLimits {
  readonly maxNumSeqs: number;
  readonly maxNumBatchedTokens: number;
  /** Admission keeps at least this share of GPU pages free (vLLM's `watermark`, default 0.01). */
  readonly watermark: number;
  readonly preemption: 'swap' | 'recompute';
}

export class VllmScheduler {
  readonly seqs: BaseSeq[];
  private waiting: BaseSeq[] = [];
  private waitingHead = 0;
  private fresh = 0;
  private swapped: BaseSeq[] = [];
  private running: BaseSeq[] = [];
  finished = 0;
  generatedTokens = 0;
  preemptions = 0;
  swapOuts = 0;
  recomputedTokens = 0;

  constructor(
    reqs: readonly { readonly promptTokens: number; readonly outputTokens: number }[],
    /** Paged KV on the GPU. */
    readonly gpu: PagePool,
    /** CPU swap space (vLLM `--swap-space`), in pages of the same size. */
    readonly cpu: PagePool,
    readonly limits: VllmLimits,
  ) {
    this.seqs = seqsOf(reqs);
  }
  get done(): boolean {
    return this.finished === this.seqs.length;
  }
  get runningCount(): number {
    return this.running.length;
  }
  get swappedCount(): number {
    return this.swapped.length;
  }

  private peekWaiting(): BaseSeq | undefined {
    return this.waitingHead < this.waiting.length ? this.waiting[this.waitingHead] : this.seqs[this.fresh];
  }
  private popWaiting(): void {
    if (this.waitingHead < this.waiting.length) this.waitingHead++;
    else this.fresh++;
  }

  next(nowNs = 0): VllmStep {
    const gpu = this.gpu;
    const L = this.limits;
    const watermarkPages = Math.floor(L.watermark * gpu.pages);
    // 1. Prefills, only when nothing is swapped out.
    if (this.swapped.length === 0) {
      const prefill: { seq: BaseSeq; tokens: number; recomputed: number }[] = [];
      let budget = L.maxNumBatchedTokens;
      for (;;) {
        const s = this.peekWaiting();
        if (!s) break;
        const tokens = s.prompt + s.generated;
        const alone = prefill.length === 0 && this.running.length === 0;
        if (tokens > budget && !(alone && prefill.length === 0)) break;
        if (this.running.length + prefill.length >= L.maxNumSeqs) break;
        const need = gpu.pagesFor(tokens);
        if (gpu.freePages - need < (alone ? 0 : watermarkPages)) break;
        this.popWaiting();
        gpu.grow(s.id, tokens, nowNs);
        s.kvTokens = tokens;
        s.state = 'running';
        const recomputed = s.generated > 0 ? tokens - 1 : 0;
        this.recomputedTokens += recomputed;
        prefill.push({ seq: s, tokens, recomputed });
        budget -= tokens;
      }
      if (prefill.length > 0) {
        for (const p of prefill) this.running.push(p.seq);
        this.step(prefill.map((p) => p.seq), nowNs);
        return { kind: 'prefill', prefill, decode: [], decodeContextTokens: 0, swapOutTokens: 0, swapInTokens: 0, swappedOut: [], swappedIn: [], recomputePreempted: [] };
      }
    }
    // 2. Decode every running sequence (oldest first); preempt the newest when a page is missing.
    const swappedOut: BaseSeq[] = [];
    const recomputePreempted: BaseSeq[] = [];
    let swapOutTokens = 0;
    let need = 0;
    for (const s of this.running) need += gpu.extraFor(s.id, s.kvTokens + 1);
    while (need > gpu.freePages && this.running.length > 0) {
      const v = this.running.pop()!;
      need -= gpu.extraFor(v.id, v.kvTokens + 1);
      this.preemptions++;
      const pages = gpu.heldBy(v.id);
      if (L.preemption === 'swap' && pages <= this.cpu.freePages) {
        gpu.free(v.id, nowNs);
        this.cpu.grow(v.id, v.kvTokens, nowNs);
        v.state = 'swapped';
        swapOutTokens += v.kvTokens;
        this.swapOuts++;
        swappedOut.push(v);
      } else {
        gpu.free(v.id, nowNs);
        v.state = 'waiting';
        v.kvTokens = 0;
        recomputePreempted.push(v);
      }
    }
    // Swapped-out sequences resume before anything else (in preemption order, oldest admitted first);
    // recomputed ones go to the head of the waiting queue.
    for (let i = swappedOut.length - 1; i >= 0; i--) this.swapped.push(swappedOut[i]!);
    if (recomputePreempted.length > 0) {
      const rest = this.waiting.slice(this.waitingHead);
      this.waiting = [...recomputePreempted.slice().reverse(), ...rest];
      this.waitingHead = 0;
    }
    // 3. Swap in (oldest first) when nothing was preempted this step.
    const swappedIn: BaseSeq[] = [];
    let swapInTokens = 0;
    if (swappedOut.length === 0 && recomputePreempted.length === 0) {
      while (this.swapped.length > 0 && this.running.length < L.maxNumSeqs) {
        const s = this.swapped[0]!;
        const pages = gpu.pagesFor(s.kvTokens + 1);
        if (need + pages > gpu.freePages) break;
        this.swapped.shift();
        this.cpu.free(s.id, nowNs);
        gpu.grow(s.id, s.kvTokens, nowNs);
        need += gpu.extraFor(s.id, s.kvTokens + 1);
        s.state = 'running';
        swapInTokens += s.kvTokens;
        swappedIn.push(s);
        this.running.push(s);
      }
    }
    const decode = this.running.slice();
    let ctx = 0;
    for (const s of decode) {
      gpu.grow(s.id, s.kvTokens + 1, nowNs);
      s.kvTokens += 1;
      ctx += s.kvTokens;
    }
    if (decode.length === 0 && !this.done) {
      const s = this.peekWaiting() ?? this.swapped[0];
      throw new Error(`VllmScheduler: sequence ${s?.id} (${s ? s.prompt + s.generated : 0} tokens) cannot fit an empty GPU pool of ${gpu.pages} pages`);
    }
    this.step(decode, nowNs);
    return { kind: 'decode', prefill: [], decode, decodeContextTokens: ctx, swapOutTokens, swapInTokens, swappedOut, swappedIn, recomputePreempted };
  }

  private step(stepped: readonly BaseSeq[], nowNs: number): void {
    let anyDone = false;
    for (const s of stepped) {
      s.generated++;
      this.generatedTokens++;
      if (s.generated >= s.output) {
        s.state = 'done';
        this.gpu.free(s.id, nowNs);
        this.finished++;
        anyDone = true;
      }
    }
    if (anyDone) this.running = this.running.filter((s) => s.state !== 'done');
  }
}

// ---------------------------------------------------------------------------------------------
// Runs (iteration costs)
// ---------------------------------------------------------------------------------------------

export interface BaselineRunResult {
  readonly endNs: number;
  readonly iterations: number;
  readonly generatedTokens: number;
  readonly prefillTokens: number;
  readonly decodeTokens: number;
  readonly preemptions: number;
  readonly swapOuts: number;
  readonly recomputedTokens: number;
  readonly batches: number;
  readonly pages: number;
  readonly peakPages: number;
  readonly meanOccupancy: number;
  readonly gpuBusyNs: number;
  readonly cpuBusyNs: number;
  readonly h2dBusyNs: number;
  readonly h2dBytes: number;
  readonly d2hBytes: number;
  readonly hostDramBytes: number;
  readonly dramBoundStages: number;
  /** Tokens generated by each request (index = position in `requests`). */
  readonly generatedPerSeq: readonly number[];
  /** (time s, pages in use, generated tokens so far) every `timelineEvery` iterations. */
  readonly timeline: readonly (readonly [number, number, number])[];
  readonly throughputTokPerS: number;
}

interface CommonInput {
  readonly model: ModelProfile;
  readonly hardware: HardwareProfile;
  readonly cost: CostModel;
  readonly requests: readonly BaselineRequest[];
  readonly sink?: TraceSink;
  readonly pageTokens: number;
  readonly cpuCores?: number;
  readonly timelineEvery?: number;
}

export interface LightningRunInput extends CommonInput {
  /** Host KV budget (bytes) of the policy's memory setting. */
  readonly kvCapacityBytes: number;
  readonly batchSeqs: number;
  readonly microBatches: number;
  readonly contention: boolean;
  /** Max generation reserved per sequence (default: its own output length). */
  readonly reserveOutput?: number;
  /** Prompt tokens reserved per sequence (padding; default: its own prompt). */
  readonly reservePrompt?: number;
  /**
   * Non-expert weights resident on the GPU, only the experts streamed (the released optimiser
   * keeps `w_other` on the GPU and offloads only expert weights `wi`); default false (every
   * layer's bytes streamed, as MoE-Lens).
   */
  readonly residentDense?: boolean;
}

/**
 * CGOPipe per-layer decode stage (see the header): CPU attention `c` ns (reading `kvBytes`), GPU
 * work `g` ns, over μ micro-batches, beside the next layer's DMA (`dmaBytes`, `dmaNs` alone on the
 * link). With a DRAM capacity, the CPU window and the DMA share it as in `sharedStage` (the CPU
 * window first in the stage).
 */
export function cgoStage(c: number, kvBytes: number, g: number, mu: number, dmaBytes: number, dmaNs: number, capBytesPerNs: number | undefined): { stageNs: number; slowed: boolean } {
  const m = Math.max(1, mu);
  const free = Math.max(dmaNs, c + g / m, g + c / m);
  if (capBytesPerNs === undefined) return { stageNs: free, slowed: false };
  // max(stretched CPU window, DMA end) from the two-flow share; the window's stretch from its demand.
  const s = sharedStage(c, kvBytes, 0, 0, 0, 0, dmaBytes, dmaNs, capBytesPerNs);
  const rd = dmaNs > 0 ? dmaBytes / dmaNs : 0;
  const rc = c > 0 ? kvBytes / c : 0;
  const cs = c > 0 && kvBytes > 0 && rc + rd > capBytesPerNs ? (c * (rc + rd)) / capBytesPerNs : c;
  const stageNs = Math.max(s.stageNs, cs + g / m, g + cs / m, dmaNs);
  return { stageNs, slowed: stageNs > free + 1e-6 };
}

export function runLightning(x: LightningRunInput): BaselineRunResult {
  const { model, hardware: hw, cost } = x;
  const cores = x.cpuCores ?? hw.cpu.cores;
  const lc = lensCosts(model, hw, cost, cores);
  const { mm, gpuLayerNs, cpuNs, lmHead } = lc;
  const layerBytes = x.residentDense ? lc.layerBytes.map((_, l) => (mm.moeIndexOfLayer[l]! >= 0 ? mm.experts * mm.expertBytes : 0)) : lc.layerBytes;
  const transferNs = x.residentDense ? layerBytes.map((b) => (b > 0 ? lc.ns({ kind: 'transfer', bytes: b, direction: 'h2d' }) : 0)) : lc.transferNs;
  // Link ns per byte (activation copies ride the weight stream's rate).
  const nsPerByte = lc.transferNs[0]! / Math.max(1, lc.layerBytes[0]!);
  const kvTokBytes = model.derived.kvBytesPerTokenPerLayer;
  const kvBytesPerToken = model.derived.kvBytesPerToken;
  const h2dActBytesPerDecodeToken = model.hiddenSize * ACTIVATION_BYTES;
  const pages = Math.floor(x.kvCapacityBytes / (kvBytesPerToken * x.pageTokens));
  const pool = new PagePool(Math.max(1, pages), x.pageTokens);
  const sched = new LightningScheduler(x.requests, pool, x.batchSeqs, x.reserveOutput, x.reservePrompt);
  const cap = x.contention ? hw.cpu.dramBytesPerSec / 1e9 : undefined;
  const mu = Math.max(1, x.microBatches);
  const acc = newAcc();
  const every = x.timelineEvery ?? 1;
  const g: GroupLoad = emptyGroup();
  const mb: GroupLoad = emptyGroup();
  const layerCache = new Map<string, { stage: number; gpu: number; cpu: number; slowed: boolean }>();
  while (!sched.done) {
    const st = sched.next(acc.now);
    let t = transferNs[0]!;
    layerCache.clear();
    const n = st.seqs.length;
    if (st.kind === 'prefill') {
      Object.assign(g, { decode: 0, decodeCtx: 0, prefillTokens: st.prefillTokens, prefillCtx: st.prefillCtx });
      for (let l = 0; l < mm.layers; l++) {
        const gp = gpuLayerNs(l, g);
        const next = l + 1 < mm.layers ? transferNs[l + 1]! : 0;
        t += Math.max(gp, next);
        acc.gpu += gp;
        acc.h2dBusy += next;
        acc.h2dBytes += l + 1 < mm.layers ? layerBytes[l + 1]! : 0;
        acc.dram += l + 1 < mm.layers ? layerBytes[l + 1]! : 0;
      }
      acc.prefillTokens += st.prefillTokens;
    } else {
      // μ micro-batches of ⌈n/μ⌉ sequences: the cost of one, times μ.
      const m = Math.min(mu, n);
      const per = Math.ceil(n / m);
      Object.assign(g, { decode: n, decodeCtx: st.decodeContextTokens, prefillTokens: 0, prefillCtx: 0 });
      Object.assign(mb, { decode: per, decodeCtx: st.decodeContextTokens / m, prefillTokens: 0, prefillCtx: 0 });
      const actBytes = n * h2dActBytesPerDecodeToken;
      const kvRead = st.decodeContextTokens * kvTokBytes;
      const cAll = m * cpuNs(mb);
      for (let l = 0; l < mm.layers; l++) {
        const key = `${mm.moeIndexOfLayer[l]! >= 0 ? 'm' : 'd'}|${l + 1 < mm.layers ? layerBytes[l + 1] : -1}`;
        let c = layerCache.get(key);
        if (!c) {
          const gAll = m * gpuLayerNs(l, mb);
          const nextBytes = (l + 1 < mm.layers ? layerBytes[l + 1]! : 0) + actBytes;
          const linkNs = (l + 1 < mm.layers ? transferNs[l + 1]! : 0) + actBytes * nsPerByte;
          const s = cgoStage(cAll, kvRead, gAll, m, nextBytes, linkNs, cap);
          c = { stage: s.stageNs, gpu: gAll, cpu: cAll, slowed: s.slowed };
          layerCache.set(key, c);
        }
        t += c.stage;
        acc.gpu += c.gpu;
        acc.cpu += c.cpu;
        if (c.slowed) acc.dramBound++;
        const nb = (l + 1 < mm.layers ? layerBytes[l + 1]! : 0) + actBytes;
        acc.h2dBytes += nb;
        acc.h2dBusy += (l + 1 < mm.layers ? transferNs[l + 1]! : 0) + actBytes * nsPerByte;
        acc.dram += nb + kvRead;
      }
      acc.decodeTokens += n;
    }
    acc.h2dBusy += transferNs[0]!;
    acc.h2dBytes += layerBytes[0]!;
    acc.dram += layerBytes[0]!;
    t += lmHead(n);
    acc.gpu += lmHead(n);
    finishIteration(acc, pool, t, every, sched.generatedTokens, x, kvBytesPerToken, pages);
  }
  return result(acc, pool, pages, sched.seqs, sched.generatedTokens, { preemptions: 0, swapOuts: 0, recomputedTokens: 0, batches: sched.batches });
}

export interface VllmRunInput extends CommonInput {
  /** GPU KV pages (VRAM left after resident weights, the layer buffer and activations). */
  readonly gpuKvBytes: number;
  readonly swapSpaceBytes: number;
  /** Share of every layer's weights offloaded to host DRAM and copied before the layer runs (0..1). */
  readonly offloadedFraction: number;
  readonly limits: VllmLimits;
}

export function runVllm(x: VllmRunInput): BaselineRunResult {
  const { model, hardware: hw, cost } = x;
  const { mm, layerBytes, ns, gpuLayerNs, lmHead } = lensCosts(model, hw, cost, x.cpuCores ?? hw.cpu.cores);
  const kvBytesPerToken = model.derived.kvBytesPerToken;
  const pageBytes = kvBytesPerToken * x.pageTokens;
  const pages = Math.floor(x.gpuKvBytes / pageBytes);
  if (pages < 1) throw new Error(`runVllm: GPU KV of ${x.gpuKvBytes} bytes holds no page of ${pageBytes} bytes`);
  const pool = new PagePool(pages, x.pageTokens);
  const cpuPool = new PagePool(Math.max(1, Math.floor(x.swapSpaceBytes / pageBytes)), x.pageTokens);
  const sched = new VllmScheduler(x.requests, pool, cpuPool, x.limits);
  const offBytes = layerBytes.map((b) => Math.round(b * x.offloadedFraction));
  const offNs = offBytes.map((b) => (b > 0 ? ns({ kind: 'transfer', bytes: b, direction: 'h2d' }) : 0));
  const offTotalNs = offNs.reduce((a, b) => a + b, 0);
  const offTotalBytes = offBytes.reduce((a, b) => a + b, 0);
  const acc = newAcc();
  const every = x.timelineEvery ?? 1;
  const g: GroupLoad = emptyGroup();
  while (!sched.done) {
    const st = sched.next(acc.now);
    let t = 0;
    // Swaps first (the cache engine's copies before the model runs).
    if (st.swapOutTokens > 0) {
      const b = st.swapOutTokens * kvBytesPerToken;
      const d = ns({ kind: 'transfer', bytes: b, direction: 'd2h' });
      t += d;
      acc.d2hBytes += b;
      acc.dram += b;
    }
    if (st.swapInTokens > 0) {
      const b = st.swapInTokens * kvBytesPerToken;
      const d = ns({ kind: 'transfer', bytes: b, direction: 'h2d' });
      t += d;
      acc.h2dBusy += d;
      acc.h2dBytes += b;
      acc.dram += b;
    }
    // All attention on the GPU: one attention op over every token with its context.
    let tokens = 0;
    let ctx = 0;
    for (const p of st.prefill) {
      tokens += p.tokens;
      ctx += (p.tokens * (p.tokens + 1)) / 2;
    }
    tokens += st.decode.length;
    ctx += st.decodeContextTokens;
    Object.assign(g, { decode: 0, decodeCtx: 0, prefillTokens: tokens, prefillCtx: ctx });
    let gpu = 0;
    let lastKey = '';
    let lastNs = 0;
    for (let l = 0; l < mm.layers; l++) {
      const key = mm.moeIndexOfLayer[l]! >= 0 ? 'm' : 'd';
      if (key !== lastKey) {
        lastNs = gpuLayerNs(l, g);
        lastKey = key;
      }
      gpu += lastNs;
    }
    const n = st.prefill.length + st.decode.length;
    gpu += lmHead(n);
    t += offTotalNs + gpu;
    acc.gpu += gpu;
    acc.h2dBusy += offTotalNs;
    acc.h2dBytes += offTotalBytes;
    acc.dram += offTotalBytes;
    for (const p of st.prefill) acc.prefillTokens += p.tokens;
    acc.decodeTokens += st.decode.length;
    finishIteration(acc, pool, t, every, sched.generatedTokens, x, kvBytesPerToken, pages);
  }
  return result(acc, pool, pages, sched.seqs, sched.generatedTokens, { preemptions: sched.preemptions, swapOuts: sched.swapOuts, recomputedTokens: sched.recomputedTokens, batches: 0 });
}

interface Acc {
  now: number;
  iterations: number;
  gpu: number;
  cpu: number;
  h2dBusy: number;
  h2dBytes: number;
  d2hBytes: number;
  dram: number;
  dramBound: number;
  prefillTokens: number;
  decodeTokens: number;
  occIntegral: number;
  timeline: [number, number, number][];
}
const newAcc = (): Acc => ({ now: 0, iterations: 0, gpu: 0, cpu: 0, h2dBusy: 0, h2dBytes: 0, d2hBytes: 0, dram: 0, dramBound: 0, prefillTokens: 0, decodeTokens: 0, occIntegral: 0, timeline: [] });

function finishIteration(acc: Acc, pool: PagePool, t: number, every: number, generated: number, x: CommonInput, kvBytesPerToken: number, pages: number): void {
  acc.occIntegral += pool.usedPages * t;
  acc.now += t;
  acc.iterations++;
  if (acc.iterations % every === 0) acc.timeline.push([acc.now / 1e9, pool.usedPages, generated]);
  if (x.sink?.onMemory) {
    const used = pool.usedPages * x.pageTokens * kvBytesPerToken;
    x.sink.onMemory({ pool: 'host', category: 'kvPages', timeNs: acc.now as Ns, categoryUsedBytes: used, usedBytes: used, capacityBytes: pages * x.pageTokens * kvBytesPerToken });
  }
}

function result(acc: Acc, pool: PagePool, pages: number, seqs: readonly BaseSeq[], generated: number, extra: { preemptions: number; swapOuts: number; recomputedTokens: number; batches: number }): BaselineRunResult {
  const timeline = acc.timeline;
  if (timeline.length === 0 || timeline[timeline.length - 1]![0] !== acc.now / 1e9) timeline.push([acc.now / 1e9, pool.usedPages, generated]);
  return {
    endNs: acc.now,
    iterations: acc.iterations,
    generatedTokens: generated,
    prefillTokens: acc.prefillTokens,
    decodeTokens: acc.decodeTokens,
    ...extra,
    pages,
    peakPages: pool.peakUsed,
    meanOccupancy: acc.now > 0 ? acc.occIntegral / acc.now / pages : 0,
    gpuBusyNs: acc.gpu,
    cpuBusyNs: acc.cpu,
    h2dBusyNs: acc.h2dBusy,
    h2dBytes: acc.h2dBytes,
    d2hBytes: acc.d2hBytes,
    hostDramBytes: acc.dram,
    dramBoundStages: acc.dramBound,
    generatedPerSeq: seqs.map((s) => s.generated),
    timeline,
    throughputTokPerS: acc.now > 0 ? generated / (acc.now / 1e9) : 0,
  };
}
