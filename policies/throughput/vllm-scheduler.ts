/**
 * vLLM v0's default scheduler (vllm/core/scheduler.py `_schedule_default`), the iteration
 * scheduler of `vllm-like`: paged KV on the GPU (`KvPages`), continuous batching. When nothing is
 * swapped out, waiting prompts are admitted (FCFS, whole prompts, at most `maxNumBatchedTokens`
 * tokens and `maxNumSeqs` running, while the free pages stay above the watermark) in a
 * prefill-only iteration; otherwise every running sequence decodes one token. When a decode step
 * lacks a page the newest running sequence is preempted (swapped out to the CPU swap space while
 * it has room, else recomputed later); swapped sequences come back (oldest first) in iterations
 * without preemption. A prefill of p tokens stores p KV and generates one token; a decode step
 * appends one KV and generates one token.
 */
import type { Iteration, IterationScheduler } from '../../sim/throughput/iteration.ts';
import type { KvPages } from '../../sim/throughput/kv-pages.ts';
import { seqsOf, type BaseSeq } from './sequences.ts';

export interface VllmStep extends Iteration {
  readonly kind: 'prefill' | 'decode';
  readonly prefill: readonly { readonly seq: BaseSeq; readonly tokens: number; readonly recomputed: number }[];
  readonly decode: readonly BaseSeq[];
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

export class VllmScheduler implements IterationScheduler {
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
    readonly gpu: KvPages,
    /** CPU swap space (vLLM `--swap-space`), in pages of the same size. */
    readonly cpu: KvPages,
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
    // 1. Prefills, only when nothing is swapped out.
    if (this.swapped.length === 0) {
      const prefillStep = this.admitPrefills(nowNs);
      if (prefillStep) return prefillStep;
    }
    // 2. Decode every running sequence (oldest first); preempt the newest when a page is missing.
    const { swappedOut, recomputePreempted, swapOutTokens, need } = this.preemptForDecode(nowNs);
    // 3. Swap in (oldest first) when nothing was preempted this step.
    const swappedIn: BaseSeq[] = [];
    let swapInTokens = 0;
    if (swappedOut.length === 0 && recomputePreempted.length === 0) swapInTokens = this.swapIn(need, swappedIn, nowNs);
    const gpu = this.gpu;
    const decode = this.running.slice();
    let ctx = 0;
    for (const s of decode) {
      gpu.grow(s.id, s.kvTokens + 1, nowNs);
      s.kvTokens += 1;
      ctx += s.kvTokens;
    }
    if (decode.length === 0 && !this.done) {
      const s = this.peekWaiting() ?? this.swapped[0];
      throw new Error(
        `VllmScheduler: sequence ${s?.id} (${s ? s.prompt + s.generated : 0} tokens) cannot fit an empty GPU pool of ${gpu.pages} pages`,
      );
    }
    const finished = this.step(decode, nowNs);
    const preempted = [...swappedOut, ...recomputePreempted];
    return {
      kind: 'decode',
      prefill: [],
      decode,
      preempted,
      finished,
      decodeContextTokens: ctx,
      swapOutTokens,
      swapInTokens,
      swappedOut,
      swappedIn,
      recomputePreempted,
    };
  }

  /**
   * Admits waiting prompts (FCFS, whole prompts) within the token budget, the sequence limit and
   * the watermark, and runs them as one prefill step; undefined when none fits.
   */
  private admitPrefills(nowNs: number): VllmStep | undefined {
    const gpu = this.gpu;
    const L = this.limits;
    const watermarkPages = Math.floor(L.watermark * gpu.pages);
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
    if (prefill.length === 0) return undefined;
    for (const p of prefill) this.running.push(p.seq);
    const finished = this.step(
      prefill.map((p) => p.seq),
      nowNs,
    );
    return {
      kind: 'prefill',
      prefill,
      decode: [],
      preempted: [],
      finished,
      decodeContextTokens: 0,
      swapOutTokens: 0,
      swapInTokens: 0,
      swappedOut: [],
      swappedIn: [],
      recomputePreempted: [],
    };
  }

  /**
   * Preempts the newest running sequences until every running one has a page for its next token
   * (swapped out while the CPU swap space has room, else dropped for recomputation), and queues
   * them; returns them with the pages the decode step still needs.
   */
  private preemptForDecode(nowNs: number): {
    swappedOut: BaseSeq[];
    recomputePreempted: BaseSeq[];
    swapOutTokens: number;
    need: number;
  } {
    const gpu = this.gpu;
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
      if (this.limits.preemption === 'swap' && pages <= this.cpu.freePages) {
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
    return { swappedOut, recomputePreempted, swapOutTokens, need };
  }

  /**
   * Swaps sequences back in (oldest first) while the GPU has pages for them beside the `decodeNeed`
   * pages of the decode step; appends them to `swappedIn` and returns their KV tokens.
   */
  private swapIn(decodeNeed: number, swappedIn: BaseSeq[], nowNs: number): number {
    const gpu = this.gpu;
    let need = decodeNeed;
    let swapInTokens = 0;
    while (this.swapped.length > 0 && this.running.length < this.limits.maxNumSeqs) {
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
    return swapInTokens;
  }

  private step(stepped: readonly BaseSeq[], nowNs: number): number[] {
    const finished: number[] = [];
    for (const s of stepped) {
      s.generated++;
      this.generatedTokens++;
      if (s.generated >= s.output) {
        s.state = 'done';
        this.gpu.free(s.id, nowNs);
        this.finished++;
        finished.push(s.id);
      }
    }
    if (finished.length > 0) this.running = this.running.filter((s) => s.state !== 'done');
    return finished;
  }
}
