/**
 * MoE-Lens scheduler and page pool (DESIGN §8): the decisions on a hand-made 4-sequence world
 * (admission, preemption of the newest, re-prefill ahead of new prompts, recomputed tokens), the
 * pool's invariants, and properties over random worlds (pages never over capacity — the pool
 * throws —, every sequence generates exactly its tokens after preemption, recomputed tokens
 * counted once per preemption, every page freed exactly once).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { KvPages } from '../../sim/throughput/kv-pages.ts';
import { LensScheduler } from '../../policies/moe-lens/scheduler.ts';

describe('KvPages (pages as MemoryPool allocations)', () => {
  it('grows by pages, refuses over capacity and double frees', () => {
    const p = new KvPages(3, 4, 1);
    p.grow(1, 5);
    expect(p.usedPages).toBe(2);
    p.grow(1, 8);
    expect(p.usedPages).toBe(2);
    expect(() => p.grow(2, 9)).toThrow(/cannot allocate/);
    expect(p.pool.usedBytes).toBe(2 * p.pageBytes);
    expect(p.free(1)).toBe(2);
    expect(() => p.free(1)).toThrow(/double free/);
    expect(p.usedPages).toBe(0);
  });
});

describe('LensScheduler on a hand-made 4-sequence world', () => {
  // b = 4 slots/page, 6 pages, n_real = 100; A, B, C: p = 4, g = 6; D: p = 4, g = 2.
  const world = () =>
    new LensScheduler(
      [
        { promptTokens: 4, outputTokens: 6 },
        { promptTokens: 4, outputTokens: 6 },
        { promptTokens: 4, outputTokens: 6 },
        { promptTokens: 4, outputTokens: 2 },
      ],
      new KvPages(6, 4, 1),
      100,
    );

  it('admits, preempts the newest, re-prefills the preempted first', () => {
    const s = world();
    const ids = (xs: readonly { id: number }[]) => xs.map((x) => x.id);
    // 1: empty decode; all four prompts admitted (1 page each), each generates token 1.
    let it = s.next();
    expect(ids(it.prefill.map((p) => p.seq))).toEqual([0, 1, 2, 3]);
    expect(s.pool.usedPages).toBe(4);
    // 2: the four decodes need 4 new pages, 2 free → D (newest) preempted; no prefill.
    it = s.next();
    expect(ids(it.preempted)).toEqual([3]);
    expect(ids(it.decode)).toEqual([0, 1, 2]);
    expect(it.prefill).toEqual([]);
    expect(it.decodeContextTokens).toBe(15);
    expect(s.pool.usedPages).toBe(6);
    // 3–5: decode A, B, C within their second pages; D (5 tokens, 2 pages) cannot be admitted.
    for (let i = 0; i < 3; i++) {
      it = s.next();
      expect(ids(it.decode)).toEqual([0, 1, 2]);
      expect(it.prefill).toEqual([]);
    }
    // 6: A, B, C need a third page each, none free → C preempted; A, B generate their last token.
    it = s.next();
    expect(ids(it.preempted)).toEqual([2]);
    expect(s.seqs[0]!.state).toBe('done');
    expect(s.seqs[1]!.state).toBe('done');
    expect(s.pool.usedPages).toBe(0);
    // 7: re-prefill D (4 + 1 tokens, 4 recomputed) then C (4 + 5 tokens, 8 recomputed); both finish.
    it = s.next();
    expect(it.prefill.map((p) => [p.seq.id, p.tokens, p.recomputed])).toEqual([
      [3, 5, 4],
      [2, 9, 8],
    ]);
    expect(s.done).toBe(true);
    expect(s.preemptions).toBe(2);
    expect(s.recomputedTokens).toBe(12);
    expect(s.generatedTokens).toBe(20);
    expect(s.seqs.map((q) => q.generated)).toEqual([6, 6, 6, 2]);
    expect(s.pool.allocs).toBe(s.pool.frees);
  });

  it('caps an iteration at n_real tokens', () => {
    const s = new LensScheduler(
      [
        { promptTokens: 4, outputTokens: 3 },
        { promptTokens: 4, outputTokens: 3 },
        { promptTokens: 4, outputTokens: 3 },
      ],
      new KvPages(100, 4, 1),
      9,
    );
    expect(s.next().prefill.length).toBe(2); // 4 + 4 ≤ 9 < 12
    const it = s.next(); // 2 decode + 4 ≤ 9
    expect(it.decode.length).toBe(2);
    expect(it.prefill.length).toBe(1);
  });
});

describe('LensScheduler properties over random worlds', () => {
  it('exact tokens, counted recomputation, pages freed exactly once', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({ promptTokens: fc.integer({ min: 1, max: 20 }), outputTokens: fc.integer({ min: 1, max: 30 }) }),
          { minLength: 1, maxLength: 25 },
        ),
        fc.integer({ min: 1, max: 8 }),
        fc.integer({ min: 0, max: 40 }),
        fc.integer({ min: 1, max: 80 }),
        (reqs, b, extraPages, nReal) => {
          // Enough pages for the longest sequence alone, plus some.
          const longest = Math.max(...reqs.map((r) => r.promptTokens + r.outputTokens));
          const pool = new KvPages(Math.ceil(longest / b) + extraPages, b, 1);
          const s = new LensScheduler(reqs, pool, nReal);
          let recomputed = 0;
          let guard = 0;
          while (!s.done) {
            const before = new Map(s.seqs.map((q) => [q.id, q.generated]));
            const it = s.next();
            for (const v of it.preempted) recomputed += v.prompt + before.get(v.id)! - 1;
            expect(pool.usedPages).toBeLessThanOrEqual(pool.pages);
            expect(it.decode.length + it.prefill.reduce((a, p) => a + p.tokens, 0)).toBeLessThanOrEqual(
              Math.max(nReal, ...it.prefill.map((p) => p.tokens + it.decode.length)),
            );
            if (++guard > 100_000) throw new Error('no progress');
          }
          expect(s.seqs.every((q, i) => q.generated === Math.max(1, reqs[i]!.outputTokens))).toBe(true);
          expect(s.recomputedTokens).toBe(recomputed);
          expect(pool.usedPages).toBe(0);
          expect(pool.allocs).toBe(pool.frees);
        },
      ),
      { numRuns: 200, seed: 10 },
    );
  });
});
