/**
 * Cache curves (`stats/cache-curves.ts`): the all-sizes LRU through the recency list agrees
 * with a direct per-size LRU simulation, Belady is never below LRU, per-request reset empties
 * the caches, and a hand-worked example gives the hits it should.
 */
import { describe, expect, it } from 'vitest';
import { Rng } from '../../sim/kernel/rng.ts';
import { cacheReport, hitCurves, type CacheTrace } from '../../workloads/stats/cache-curves.ts';

function randomTrace(seed: string, L: number, E: number, k: number, lens: number[]): CacheTrace {
  const rng = new Rng(seed);
  const requests = lens.map((T) => {
    const experts = new Int32Array(T * L * k);
    for (let i = 0; i < T * L; i++) {
      const pool = rng.shuffle(Array.from({ length: E }, (_, e) => e)).slice(0, k);
      // Skewed: half the time reuse low ids.
      experts.set(
        pool
          .map((e) => (rng.next() < 0.5 ? e % Math.max(k + 1, E >> 2) : e))
          .filter((e, j, a) => a.indexOf(e) === j)
          .concat(pool)
          .filter((e, j, a) => a.indexOf(e) === j)
          .slice(0, k),
        i * k,
      );
    }
    return { tokens: T, experts };
  });
  return { L, E, k, requests };
}

/** Direct LRU per size: token-granular (hits against the cache before the token, then insert all). */
function bruteLru(tr: CacheTrace, C: number, reset: boolean, perAccess: boolean): number {
  let hits = 0;
  let n = 0;
  for (let l = 0; l < tr.L; l++) {
    let cache: number[] = [];
    for (const r of tr.requests) {
      if (reset) cache = [];
      for (let t = 0; t < r.tokens; t++) {
        const set = Array.from(r.experts.subarray((t * tr.L + l) * tr.k, (t * tr.L + l + 1) * tr.k));
        if (perAccess) {
          for (const e of set) {
            n++;
            if (cache.includes(e)) hits++;
            cache = [e, ...cache.filter((x) => x !== e)].slice(0, C);
          }
        } else {
          for (const e of set) if (cache.includes(e)) hits++;
          n += set.length;
          cache = [...set, ...cache.filter((x) => !set.includes(x))].slice(0, C);
        }
      }
    }
  }
  return hits / n;
}

describe('cache curves', () => {
  const tr = randomTrace('cc', 3, 16, 2, [5, 40, 1, 17, 30]);
  it.each([
    ['request', false],
    ['never', false],
    ['request', true],
    ['never', true],
  ] as const)(
    'LRU for all sizes at once = per-size LRU (reset %s, per access %s); Belady ≥ LRU',
    (reset, perAccess) => {
      const sizes = perAccess ? [1, 2, 3, 4, 8, 12] : [2, 3, 4, 8, 12];
      const c = hitCurves(tr, sizes, reset, true, perAccess ? 'access' : 'token');
      sizes.forEach((C, i) => {
        expect(c.lru[i]).toBeCloseTo(bruteLru(tr, C, reset === 'request', perAccess), 12);
        expect(c.belady[i]!).toBeGreaterThanOrEqual(c.lru[i]! - 1e-12);
      });
    },
  );

  it('hand example: one layer, top-1, A B A C B', () => {
    const t: CacheTrace = { L: 1, E: 4, k: 1, requests: [{ tokens: 5, experts: Int32Array.from([0, 1, 0, 2, 1]) }] };
    const c = hitCurves(t, [1, 2], 'never');
    expect(c.lru).toEqual([0, 1 / 5]); // size 2: A hits at t=2; B evicted by C
    expect(c.belady).toEqual([0, 2 / 5]); // size 2: keep A and B, evict A for C (A not used again)
  });

  it('report: shuffled control, reuse distances summing to 1, groups covering the layers', () => {
    const r = cacheReport(tr, { sizes: [2, 4, 8], groups: 2 });
    expect(r.groups.map((g) => g.layers)).toEqual([
      [0, 0],
      [1, 2],
    ]);
    expect(Object.values(r.reuseDistance).reduce((a, b) => a + b, 0)).toBeCloseTo(1, 12);
    expect(r.shuffled?.all.lru).toHaveLength(3);
  });
});
