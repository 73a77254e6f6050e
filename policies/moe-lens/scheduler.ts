/**
 * MoE-Lens resource-aware scheduler (DESIGN §8 "MoE-Lens"; paper §6.2–6.3), the `moe-lens`
 * policy's iteration scheduler: a decode scheduler and a prefill scheduler over a paged host KV
 * pool (`KvPages`). State machine: `next()` decides one iteration and applies it (tokens
 * generated, pages grown, sequences finished).
 *
 * - Normal mode: every decoding sequence is scheduled (1 token each), then whole prompts are
 *   taken from the head of the prefill queue while the iteration's tokens stay ≤ n_real and the
 *   pool has the prompt's pages (head-of-line: the first that does not fit stops admission).
 * - Preemption mode: when the next decode step needs more pages than are free, the newest
 *   decoding sequences (latest admitted) are preempted one by one until it fits: their pages are
 *   freed, and they go to the head of the prefill queue (ahead of new prompts, in admission
 *   order) for re-prefill; no prefill is admitted in that iteration.
 * - Token accounting: a sequence of g output tokens is done after g generated tokens. Prefill of
 *   p prompt tokens stores p tokens of KV and generates token 1; each decode step feeds the last
 *   generated token (KV + 1) and generates the next. Re-prefill after preemption with j tokens
 *   generated processes p + j tokens (prompt + generated; the KV of p + j − 1 of them is
 *   recomputed — counted once per preemption — and the last one's is new) and generates token
 *   j + 1.
 *
 * Simplifications (the paper does not state them; settings card §9a item 12): whole prompts (no
 * chunked prefill); preempted sequences are admitted before new prompts; a sequence whose
 * prompt alone exceeds n_real is admitted alone when nothing else is scheduled (so the run
 * cannot stall); the iteration's token budget counts prefill tokens + decode tokens; an optional
 * cap on sequences holding KV at once (`maxRunning`, the experiment's fixed batch) stops admission.
 */
import type { Iteration as RunIteration, IterationScheduler } from '../../sim/throughput/iteration.ts';
import type { KvPages } from '../../sim/throughput/kv-pages.ts';

export interface LensSeq {
  readonly id: number;
  readonly prompt: number;
  readonly output: number;
  generated: number;
  /** Tokens whose KV is stored. */
  kvTokens: number;
  state: 'waiting' | 'decoding' | 'done';
  /** Admission order (newest = largest), set at every (re-)admission. */
  admitted: number;
  preemptions: number;
}

export interface Iteration extends RunIteration {
  /** Decoding sequences stepped this iteration. */
  readonly decode: readonly LensSeq[];
  /** Sequences (re-)prefilled, with the tokens processed for each. */
  readonly prefill: readonly { readonly seq: LensSeq; readonly tokens: number; readonly recomputed: number }[];
  readonly preempted: readonly LensSeq[];
  /** Σ KV tokens attended by the decode tokens (after appending theirs). */
  readonly decodeContextTokens: number;
}

export class LensScheduler implements IterationScheduler {
  readonly seqs: LensSeq[];
  /** Preempted sequences waiting for re-prefill (oldest admission first), ahead of new prompts. */
  private requeued: LensSeq[] = [];
  private requeuedHead = 0;
  /** Next new prompt (index into `seqs`, in arrival order). */
  private freshHead = 0;
  private decoding: LensSeq[] = [];
  private admitCounter = 0;
  preemptions = 0;
  recomputedTokens = 0;
  finished = 0;
  generatedTokens = 0;

  constructor(
    reqs: readonly { readonly promptTokens: number; readonly outputTokens: number }[],
    readonly pool: KvPages,
    readonly nReal: number,
    /** Cap on sequences holding KV at once (the experiment's fixed batch, executor.batchSeqs); default none. */
    readonly maxRunning = Number.POSITIVE_INFINITY,
  ) {
    this.seqs = reqs.map((r, id) => ({
      id,
      prompt: r.promptTokens,
      output: Math.max(1, r.outputTokens),
      generated: 0,
      kvTokens: 0,
      state: 'waiting',
      admitted: -1,
      preemptions: 0,
    }));
  }

  get done(): boolean {
    return this.finished === this.seqs.length;
  }
  get waiting(): number {
    return this.requeued.length - this.requeuedHead + this.seqs.length - this.freshHead;
  }
  get decodingCount(): number {
    return this.decoding.length;
  }

  private peek(): LensSeq | undefined {
    return this.requeuedHead < this.requeued.length ? this.requeued[this.requeuedHead] : this.seqs[this.freshHead];
  }
  private pop(): void {
    if (this.requeuedHead < this.requeued.length) this.requeuedHead++;
    else this.freshHead++;
  }

  /** Decide (and apply) the next iteration. `nowNs` stamps the pool's occupancy samples. */
  next(nowNs = 0): Iteration {
    const pool = this.pool;
    const preempted: LensSeq[] = [];
    // Decode scheduler: pages for every decoding sequence's next token.
    let need = 0;
    const dec = this.decoding;
    for (let i = 0; i < dec.length; i++) {
      const s = dec[i]!;
      need += pool.extraFor(s.id, s.kvTokens + 1);
    }
    if (need > pool.freePages) {
      // Preemption mode: newest first.
      this.decoding.sort((a, b) => a.admitted - b.admitted);
      while (need > pool.freePages && this.decoding.length > 0) {
        const v = this.decoding.pop()!;
        need -= pool.extraFor(v.id, v.kvTokens + 1);
        pool.free(v.id, nowNs);
        v.state = 'waiting';
        v.kvTokens = 0;
        v.preemptions++;
        this.preemptions++;
        preempted.push(v);
      }
      // Re-queued ahead of new prompts, after earlier preempted ones, oldest first.
      if (this.requeuedHead > 0) {
        this.requeued = this.requeued.slice(this.requeuedHead);
        this.requeuedHead = 0;
      }
      for (let i = preempted.length - 1; i >= 0; i--) this.requeued.push(preempted[i]!);
    }
    const decode = this.decoding.slice();
    let ctx = 0;
    for (let i = 0; i < decode.length; i++) {
      const s = decode[i]!;
      pool.grow(s.id, s.kvTokens + 1, nowNs);
      s.kvTokens += 1;
      ctx += s.kvTokens;
    }
    // Prefill scheduler (normal mode only).
    const prefill: { seq: LensSeq; tokens: number; recomputed: number }[] = [];
    if (preempted.length === 0) {
      let budget = this.nReal - decode.length;
      for (;;) {
        const s = this.peek();
        if (!s) break;
        const tokens = s.prompt + s.generated;
        const alone = decode.length === 0 && prefill.length === 0;
        if (tokens > budget && !alone) break;
        if (decode.length + prefill.length >= this.maxRunning) break;
        if (pool.pagesFor(tokens) > pool.freePages) break;
        this.pop();
        pool.grow(s.id, tokens, nowNs);
        const recomputed = s.generated > 0 ? tokens - 1 : 0;
        prefill.push({ seq: s, tokens, recomputed });
        s.kvTokens = tokens;
        s.admitted = this.admitCounter++;
        budget -= tokens;
      }
    }
    const head = this.peek();
    if (decode.length === 0 && prefill.length === 0 && head) {
      const s = head;
      throw new Error(
        `LensScheduler: sequence ${s.id} (${s.prompt + s.generated} tokens, ${pool.pagesFor(s.prompt + s.generated)} pages) cannot fit an empty pool of ${pool.pages} pages`,
      );
    }
    // Commit: every scheduled sequence generates one token.
    for (const p of prefill) {
      this.recomputedTokens += p.recomputed;
      p.seq.state = 'decoding';
      this.decoding.push(p.seq);
    }
    // Decode sequences first, then the prefilled ones (the order tokens are counted in).
    const finished: number[] = [];
    for (let i = 0; i < decode.length; i++) if (this.stepOne(decode[i]!, nowNs)) finished.push(decode[i]!.id);
    for (let i = 0; i < prefill.length; i++)
      if (this.stepOne(prefill[i]!.seq, nowNs)) finished.push(prefill[i]!.seq.id);
    if (finished.length > 0) this.decoding = this.decoding.filter((s) => s.state !== 'done');
    return { decode, prefill, preempted, decodeContextTokens: ctx, finished };
  }

  /** One generated token for `s`; true when that finishes it (its pages are freed). */
  private stepOne(s: LensSeq, nowNs: number): boolean {
    s.generated++;
    this.generatedTokens++;
    if (s.generated < s.output) return false;
    s.state = 'done';
    this.pool.free(s.id, nowNs);
    this.finished++;
    return true;
  }
}
