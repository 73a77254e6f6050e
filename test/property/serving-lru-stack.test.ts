/**
 * Property: LRU is a stack algorithm (DESIGN §10) — its hit rate never falls when its
 * capacity grows.
 *
 * Why it must hold under the executor's semantics, not only for textbook LRU over a reference
 * string: with offline arrivals and static batching the batches, and so the sequence of
 * (iteration, layer, set of activated experts) and the routing random stream, do not depend on
 * timing or capacity. The executor takes each layer's needs as a *set*: resident ones are hits
 * and get pinned, then each miss evicts the least recently used resident, unpinned expert
 * (so never one of the current layer), and after routing the LRU policy touches the whole set
 * in ascending expert order — an order that does not depend on the capacity. With capacity
 * c ≥ experts per layer (a whole layer fits; no miss ever waits for a slot), induction over
 * layers shows the buffer always holds exactly the c most recent experts of one
 * capacity-independent recency stack: a set S (|S| ≤ c) keeps S's residents, and its misses
 * evict the oldest non-S experts, leaving S ∪ the top c − |S| of the old stack minus S, which
 * is the top c of the new stack (S on top). A need is then a hit iff its expert is within the
 * top c of that stack, which is monotone in c.
 *
 * Admission is the one place the buffer could feed back into batching (KV admission keeps the
 * buffer's free slots in reserve), so the test also checks that both capacities admitted the
 * same batches; worlds where that differs are discarded (`fc.pre`), and the test requires that
 * most were kept.
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { servingMetrics } from '../../sim/metrics/serving-metrics.ts';
import type { TraceSink } from '../../sim/observe/trace-sink.ts';
import { buildWorld, shrinkArb, worldArb, worldModel, type WorldSpec } from '../helpers/serving-world.ts';

/** Groups of request ids admitted at the same instant, in order. */
function admissionRecorder(): { sink: TraceSink; batches: () => string } {
  const groups: { t: number; ids: number[] }[] = [];
  return {
    sink: {
      onRequest(id, phase, t) {
        if (phase !== 'admit') return;
        const last = groups[groups.length - 1];
        if (last && last.t === t) last.ids.push(id);
        else groups.push({ t, ids: [id] });
      },
    },
    batches: () => JSON.stringify(groups.map((g) => g.ids)),
  };
}

async function lruRun(
  w: WorldSpec,
  capacitySlots: number,
): Promise<{ hits: number; needs: number; hitRate: number; batches: string }> {
  const rec = admissionRecorder();
  const { executor } = await buildWorld({ ...w, policy: { kind: 'lru', capacitySlots } }, rec.sink);
  const o = executor.run();
  return {
    hits: o.counters.cacheHits + o.counters.prefetchHits,
    needs: o.counters.needs,
    hitRate: servingMetrics(o).bufferHitRate,
    batches: rec.batches(),
  };
}

// Shrunk models on GPUs with room to spare, so every capacity fits and KV admission never waits.
const stackWorldArb = fc
  .tuple(
    worldArb({ offlineOnly: true, batching: 'static' }),
    shrinkArb,
    fc.constantFrom('a100-80gb', 'a6000-pcie4-512gb', 'h100', 'h200'),
    fc.double({ min: 0, max: 1, noNaN: true }),
    fc.double({ min: 0, max: 1, noNaN: true }),
  )
  .map(([w, shrink, hardwareId, f1, f2]) => {
    const world: WorldSpec = { ...w, modelId: w.modelId === 'mixtral-8x7b' ? 'olmoe' : w.modelId, shrink, hardwareId };
    const m = worldModel(world);
    const all = m.moeLayers * m.experts;
    // Capacities in [experts per layer, all experts], c1 < c2 (equal when the range is one value).
    const at = (f: number) => m.experts + Math.floor(f * (all - m.experts));
    const [c1, c2] = [at(Math.min(f1, f2)), at(Math.max(f1, f2))];
    return { world, c1, c2: c2 > c1 ? c2 : Math.min(all, c1 + 1) };
  });

describe('LRU is a stack algorithm', () => {
  it('hit rate never falls when the capacity grows (offline arrivals, static batching)', async () => {
    let kept = 0;
    let discarded = 0;
    await fc.assert(
      fc.asyncProperty(stackWorldArb, async ({ world, c1, c2 }) => {
        const small = await lruRun(world, c1);
        const large = await lruRun(world, c2);
        if (small.batches !== large.batches) discarded++;
        fc.pre(small.batches === large.batches);
        kept++;
        expect(large.needs).toBe(small.needs);
        expect(large.hits, `hits at ${c2} slots vs ${c1} slots`).toBeGreaterThanOrEqual(small.hits);
        expect(large.hitRate).toBeGreaterThanOrEqual(small.hitRate);
      }),
      { numRuns: 60, endOnFailure: true },
    );
    expect(kept).toBeGreaterThan(discarded * 4);
  });

  it('a whole model fits: only compulsory misses (one per expert ever needed)', async () => {
    await fc.assert(
      fc.asyncProperty(stackWorldArb, async ({ world }) => {
        const m = worldModel(world);
        const distinct = new Set<number>();
        const { executor } = await buildWorld(
          { ...world, policy: { kind: 'lru', capacitySlots: m.moeLayers * m.experts } },
          { onExpertCompute: (key) => distinct.add(key) },
        );
        const o = executor.run();
        expect(o.counters.needs - o.counters.cacheHits).toBe(distinct.size);
        expect(o.counters.demandFetches).toBe(distinct.size);
        expect(o.counters.evictions).toBe(0);
      }),
      { numRuns: 20, endOnFailure: true },
    );
  });
});
