/**
 * MoE-Lightning's fixed-batch scheduler (the released artifact, caoshiyi/artifacts
 * `fastmoe/backend/optimizer.py`), the iteration scheduler of `moe-lightning-like` in its MoE-Lens
 * setup: a FIXED batch of `batchSeqs` sequences whose KV is reserved in full at admission
 * (⌈(prompt + max generation)/b⌉ pages per sequence: no paging, no growth); the whole batch is
 * prefilled, then decodes to the end (sequences that reach their own length stop computing, their
 * reservation held until the batch ends), then the next batch: no prefill/decode overlap.
 */
import type { Iteration, IterationScheduler } from '../../sim/throughput/iteration.ts';
import type { KvPages } from '../../sim/throughput/kv-pages.ts';
import { seqsOf, type BaseSeq } from './sequences.ts';

export interface LightningStep extends Iteration {
  readonly kind: 'prefill' | 'decode';
  /** Sequences computed this step (a prefill: the new batch; a decode: the unfinished ones). */
  readonly seqs: readonly BaseSeq[];
  /** Prompt tokens prefilled (prefill steps). */
  readonly prefillTokens: number;
  /** Σ p(p+1)/2 over the prefilled prompts (GPU attention's context). */
  readonly prefillCtx: number;
}

export class LightningScheduler implements IterationScheduler {
  readonly seqs: BaseSeq[];
  private head = 0;
  private batch: BaseSeq[] = [];
  finished = 0;
  generatedTokens = 0;
  batches = 0;

  constructor(
    reqs: readonly { readonly promptTokens: number; readonly outputTokens: number }[],
    readonly pool: KvPages,
    /** The HRM policy's batch size N. */
    readonly batchSeqs: number,
    /** Max generation reserved per sequence (default: each sequence's own output length). */
    readonly reserveOutput?: number,
    /** Prompt tokens reserved per sequence (padded; default: each sequence's own prompt, at least it). */
    readonly reservePrompt?: number,
  ) {
    if (!(Number.isSafeInteger(batchSeqs) && batchSeqs >= 1))
      throw new Error(`LightningScheduler: invalid batchSeqs ${batchSeqs}`);
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
        throw new Error(
          `LightningScheduler: sequence ${s.id} (reserve ${this.reserveOf(s)} tokens, ${pool.pagesFor(this.reserveOf(s))} pages) cannot fit an empty pool of ${pool.pages} pages`,
        );
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
      const finished = this.step(seqs, nowNs);
      const prefill = seqs.map((s) => ({ seq: s, tokens: s.prompt, recomputed: 0 }));
      return {
        kind: 'prefill',
        seqs,
        prefill,
        decode: [],
        preempted: [],
        finished,
        decodeContextTokens: 0,
        prefillTokens: tokens,
        prefillCtx: ctx,
      };
    }
    let ctx = 0;
    for (const s of active) {
      s.kvTokens += 1;
      ctx += s.kvTokens;
    }
    const finished = this.step(active, nowNs);
    return {
      kind: 'decode',
      seqs: active,
      prefill: [],
      decode: active,
      preempted: [],
      finished,
      decodeContextTokens: ctx,
      prefillTokens: 0,
      prefillCtx: 0,
    };
  }

  private step(stepped: readonly BaseSeq[], nowNs: number): number[] {
    const finished: number[] = [];
    for (const s of stepped) {
      s.generated++;
      this.generatedTokens++;
      if (s.generated >= s.output) {
        s.state = 'done';
        this.finished++;
        finished.push(s.id);
      }
    }
    // The last batch's reservations are released as soon as it completes.
    if (this.done) {
      for (const s of this.batch) this.pool.free(s.id, nowNs);
      this.batch = [];
    }
    return finished;
  }
}
