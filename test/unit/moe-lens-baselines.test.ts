/**
 * The MoE-Lens paper's baselines (`fixed-batch-scheduler.ts`, `vllm-scheduler.ts`, `cgopipe.ts`): scheduling
 * decisions on hand-made small worlds — MoE-Lightning-like batch formation and KV reservation
 * (prompt + max generation, held until the batch ends), vLLM-like admission, preemption of the
 * newest by swapping, swap-in before new prompts, recompute when the swap space is full — and the
 * CGOPipe stage's closed form.
 */
import { describe, expect, it } from 'vitest';
import { cgoStage } from '../../sim/throughput/pipelines/cgopipe.ts';
import { LightningScheduler } from '../../policies/throughput/fixed-batch-scheduler.ts';
import { VllmScheduler, type VllmLimits } from '../../policies/throughput/vllm-scheduler.ts';
import { KvPages } from '../../sim/throughput/kv-pages.ts';

const ids = (xs: readonly { id: number }[]) => xs.map((x) => x.id);

describe('LightningScheduler (fixed batches, KV reserved for p + g)', () => {
  // b = 4; A: p 4, g 3 (reserve 7 → 2 pages); B: p 6, g 2 (8 → 2 pages); C: p 3, g 1 (4 → 1 page).
  const reqs = [
    { promptTokens: 4, outputTokens: 3 },
    { promptTokens: 6, outputTokens: 2 },
    { promptTokens: 3, outputTokens: 1 },
  ];

  it('prefills the whole batch, decodes it to the end, then admits the next batch', () => {
    const s = new LightningScheduler(reqs, new KvPages(10, 4, 1), 2);
    let st = s.next();
    expect(st.kind).toBe('prefill');
    expect(ids(st.seqs)).toEqual([0, 1]);
    expect(st.prefillTokens).toBe(10);
    expect(st.prefillCtx).toBe(10 + 21);
    // The whole reservation is taken at admission, not grown.
    expect(s.pool.usedPages).toBe(4);
    st = s.next();
    expect(st.kind).toBe('decode');
    expect(ids(st.seqs)).toEqual([0, 1]);
    expect(st.decodeContextTokens).toBe(5 + 7);
    // B is done (2 tokens); A decodes alone; B's pages stay reserved until the batch ends.
    st = s.next();
    expect(ids(st.seqs)).toEqual([0]);
    expect(st.decodeContextTokens).toBe(6);
    expect(s.pool.usedPages).toBe(4);
    // Batch boundary: A and B released, C admitted and prefilled (its one token), then all done.
    st = s.next();
    expect(st.kind).toBe('prefill');
    expect(ids(st.seqs)).toEqual([2]);
    expect(s.done).toBe(true);
    expect(s.pool.usedPages).toBe(0);
    expect(s.batches).toBe(2);
    expect(s.seqs.map((q) => q.generated)).toEqual([3, 2, 1]);
  });

  it('reserves the max generation of the run and stops a batch at the pool', () => {
    // reserveOutput 5: A reserves 9 (3 pages), B 11 (3 pages); a pool of 5 pages admits only A.
    const s = new LightningScheduler(reqs, new KvPages(5, 4, 1), 3, 5);
    const st = s.next();
    expect(ids(st.seqs)).toEqual([0]);
    expect(s.pool.usedPages).toBe(3);
  });

  it('pads the reservation to the planned prompt', () => {
    const s = new LightningScheduler(reqs, new KvPages(20, 4, 1), 3, undefined, 8);
    s.next();
    // A: 8 + 3 = 11 → 3 pages; B: 8 + 2 = 10 → 3; C: 8 + 1 = 9 → 3.
    expect(s.pool.usedPages).toBe(9);
  });

  it('throws when one reservation cannot fit an empty pool', () => {
    const s = new LightningScheduler([{ promptTokens: 30, outputTokens: 3 }], new KvPages(2, 4, 1), 4);
    expect(() => s.next()).toThrow(/cannot fit an empty pool/);
  });
});

describe('VllmScheduler (continuous batching, paged GPU KV, swapping)', () => {
  const limits: VllmLimits = { maxNumSeqs: 8, maxNumBatchedTokens: 100, watermark: 0, preemption: 'swap' };
  // b = 4, 4 GPU pages, 2 CPU swap pages; A, B, C: p 4, g 4.
  const reqs = [
    { promptTokens: 4, outputTokens: 4 },
    { promptTokens: 4, outputTokens: 4 },
    { promptTokens: 4, outputTokens: 4 },
  ];

  it('admits prompts in a prefill-only step, swaps out the newest, swaps it back in before new prompts', () => {
    const s = new VllmScheduler(reqs, new KvPages(4, 4, 1), new KvPages(2, 4, 1), limits);
    // 1: prefill-only: A, B, C (1 page each), each generates token 1.
    let st = s.next();
    expect(st.kind).toBe('prefill');
    expect(ids(st.prefill.map((p) => p.seq))).toEqual([0, 1, 2]);
    expect(s.gpu.usedPages).toBe(3);
    // 2: decode needs 3 new pages, 1 free → C (newest) swapped out (4 tokens), A and B decode.
    st = s.next();
    expect(ids(st.swappedOut)).toEqual([2]);
    expect(st.swapOutTokens).toBe(4);
    expect(ids(st.decode)).toEqual([0, 1]);
    expect(st.decodeContextTokens).toBe(10);
    expect(s.gpu.usedPages).toBe(4);
    expect(s.cpu.usedPages).toBe(1);
    // 3: nothing is admitted while C is swapped; A and B decode within their pages; no room to swap in.
    st = s.next();
    expect(st.kind).toBe('decode');
    expect(ids(st.decode)).toEqual([0, 1]);
    expect(st.swappedIn).toEqual([]);
    // 4: A and B generate their 4th token and finish, freeing 4 pages.
    st = s.next();
    expect(ids(st.decode)).toEqual([0, 1]);
    expect(s.gpu.usedPages).toBe(0);
    // 5: C is swapped back in (4 tokens H2D) and decodes.
    st = s.next();
    expect(ids(st.swappedIn)).toEqual([2]);
    expect(st.swapInTokens).toBe(4);
    expect(ids(st.decode)).toEqual([2]);
    expect(s.cpu.usedPages).toBe(0);
    while (!s.done) s.next();
    expect(s.seqs.map((q) => q.generated)).toEqual([4, 4, 4]);
    expect(s.preemptions).toBe(1);
    expect(s.swapOuts).toBe(1);
    expect(s.recomputedTokens).toBe(0);
    expect(s.gpu.usedPages).toBe(0);
  });

  it('recomputes when the swap space is full, re-prefilling prompt + generated tokens', () => {
    const s = new VllmScheduler(reqs, new KvPages(4, 4, 1), new KvPages(1, 4, 1), { ...limits, preemption: 'swap' });
    s.next();
    // Fill the one swap page first: C swapped out.
    let st = s.next();
    expect(ids(st.swappedOut)).toEqual([2]);
    while (!s.done) st = s.next();
    expect(s.seqs.map((q) => q.generated)).toEqual([4, 4, 4]);
    // Recompute mode: the preempted sequence goes back to the waiting queue.
    const r = new VllmScheduler(reqs, new KvPages(4, 4, 1), new KvPages(2, 4, 1), {
      ...limits,
      preemption: 'recompute',
    });
    r.next();
    st = r.next();
    expect(ids(st.recomputePreempted)).toEqual([2]);
    expect(st.swapOutTokens).toBe(0);
    expect(r.gpu.usedPages).toBe(4);
    while (!r.done) {
      st = r.next();
      if (st.kind === 'prefill' && st.prefill.some((p) => p.seq.id === 2)) {
        // Re-prefill of C: prompt 4 + 1 generated token; 4 of them recomputed.
        const p = st.prefill.find((q) => q.seq.id === 2)!;
        expect(p.tokens).toBe(5);
        expect(p.recomputed).toBe(4);
      }
    }
    expect(r.recomputedTokens).toBe(4);
    expect(r.seqs.map((q) => q.generated)).toEqual([4, 4, 4]);
  });

  it('caps a prefill step by maxNumBatchedTokens and maxNumSeqs', () => {
    const s = new VllmScheduler(reqs, new KvPages(40, 4, 1), new KvPages(2, 4, 1), {
      ...limits,
      maxNumBatchedTokens: 9,
    });
    expect(ids(s.next().prefill.map((p) => p.seq))).toEqual([0, 1]);
    const t = new VllmScheduler(reqs, new KvPages(40, 4, 1), new KvPages(2, 4, 1), { ...limits, maxNumSeqs: 1 });
    expect(ids(t.next().prefill.map((p) => p.seq))).toEqual([0]);
  });
});

describe('cgoStage', () => {
  it('is max(transfer, C + G/μ, G + C/μ) without contention', () => {
    expect(cgoStage(100, 0, 60, 1, 0, 50, undefined).stageNs).toBe(160);
    expect(cgoStage(100, 0, 60, 4, 0, 50, undefined).stageNs).toBe(115);
    expect(cgoStage(10, 0, 10, 2, 0, 500, undefined).stageNs).toBe(500);
  });
  it('stretches the CPU window when DRAM is oversubscribed', () => {
    // CPU demand 10 B/ns + DMA 10 B/ns on a 10 B/ns socket: the window doubles (100 → 200).
    const s = cgoStage(100, 1000, 0, 1, 1000, 100, 10);
    expect(s.slowed).toBe(true);
    expect(s.stageNs).toBeGreaterThanOrEqual(200);
    expect(cgoStage(100, 1000, 0, 1, 1000, 100, 1000).slowed).toBe(false);
  });
});
