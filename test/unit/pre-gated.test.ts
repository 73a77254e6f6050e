/**
 * Pre-gated MoE (policies/prefetch/pre-gated.ts) on a hand-built view whose answers are worked out
 * by hand: which entries a routed layer releases (evicts if resident, cancels if loading; pinned
 * ones and later layers' prefetches kept), what it prefetches for the next layer (the predictor's
 * first k, priorities 1, 2, …; nothing after the last MoE layer), the stale landing it evicts,
 * the victim it picks (stale first; a demand fetch takes any; a prefetch declines), and its buffer
 * size. Written for the survivors of the mutation run (docs/mutation/policies-prefetch-survivors.txt):
 * the folder's other tests never reached the victim choice. Also dependency-prefetch's replaceQueue
 * cancellations on the same view (no guarding test reached them).
 */
import { describe, expect, it } from 'vitest';
import { createDependencyPrefetch, DependencyPrefetchParams } from '../../policies/prefetch/dependency-prefetch.ts';
import { createPreGated, preGated } from '../../policies/prefetch/pre-gated.ts';
import type { BufferEntryView, ExpertKey, LayerRouting, ServingView } from '../../sim/serving/policy.ts';

/** 4 MoE layers of 8 experts: key = layer · 8 + expert. */
const E = 8;
const L = 4;

interface Ent {
  readonly key: ExpertKey;
  readonly state?: 'loading' | 'resident';
  readonly pinned?: boolean;
}

/** A view at MoE layer `layer` over a buffer holding `ents`; the predictor ranks `ranked` for every layer. */
function view(ents: readonly Ent[], layer: number, ranked: readonly number[] = [5, 2, 7, 1]): ServingView {
  const entries: BufferEntryView[] = ents.map((e) => ({
    key: e.key,
    state: e.state ?? 'resident',
    origin: 'prefetch',
    pinned: e.pinned ?? false,
    residentSinceNs: 0,
    lastUsedNs: -1,
    uses: 0,
  }));
  return {
    moeLayers: L,
    experts: E,
    topK: 2,
    layer,
    buffer: { entries: () => entries },
    keyOf: (l: number, e: number) => l * E + e,
    layerOf: (k: ExpertKey) => Math.floor(k / E),
    predict: () => ranked,
  } as unknown as ServingView;
}

const routing = (layer: number): LayerRouting => ({
  layer,
  tokensPerExpert: new Int32Array(E),
  perRequest: [],
  activated: [],
});

describe('pre-gated: a routed layer', () => {
  it('evicts resident and cancels loading entries of this and earlier layers, keeps pinned and later ones', () => {
    const p = createPreGated('pre-gated', {}, 2);
    const ents: Ent[] = [
      { key: 0 * E + 3 }, // layer 0, resident → evict
      { key: 1 * E + 4, state: 'loading' }, // layer 1 (this one), loading → cancel
      { key: 1 * E + 6, pinned: true }, // pinned (being computed) → kept
      { key: 1 * E + 1 }, // layer 1, resident → evict
      { key: 2 * E + 5, state: 'loading' }, // layer 2: a prefetch for later → kept
      { key: 3 * E + 0 }, // layer 3 → kept
    ];
    const out = p.onLayerRouted?.(view(ents, 1), routing(1));
    expect(out?.evict).toEqual([3, 9]);
    expect(out?.cancel).toEqual([12]);
  });

  it("prefetches the predictor's first top-k experts of the next layer, priorities 1, 2, …", () => {
    const out = createPreGated('pre-gated', {}, 2).onLayerRouted?.(view([], 1), routing(1));
    expect(out?.prefetch).toEqual([
      { key: 2 * E + 5, priority: 1 },
      { key: 2 * E + 2, priority: 2 },
    ]);
  });

  it('prefetchK overrides the top-k', () => {
    const out = createPreGated('pre-gated', { prefetchK: 3 }, 2).onLayerRouted?.(view([], 0), routing(0));
    expect(out?.prefetch?.map((r) => [r.key, r.priority])).toEqual([
      [E + 5, 1],
      [E + 2, 2],
      [E + 7, 3],
    ]);
  });

  it('prefetches nothing after the last MoE layer, and the layer before it still prefetches', () => {
    const p = createPreGated('pre-gated', {}, 2);
    expect(p.onLayerRouted?.(view([], L - 1), routing(L - 1))?.prefetch).toEqual([]);
    expect(p.onLayerRouted?.(view([], L - 2), routing(L - 2))?.prefetch).toHaveLength(2);
  });

  it('caches nothing after use', () => {
    expect(createPreGated('pre-gated', {}, 2).afterUse?.(view([], 0), 3)).toBe(false);
  });
});

describe('pre-gated: a landed prefetch', () => {
  const p = createPreGated('pre-gated', {}, 2);
  it('is evicted when its layer has already routed (this layer or an earlier one)', () => {
    expect(p.onPrefetchDone?.(view([], 2), 2 * E + 1)).toEqual({ evict: [2 * E + 1] });
    expect(p.onPrefetchDone?.(view([], 2), 1 * E + 1)).toEqual({ evict: [E + 1] });
    expect(p.onPrefetchDone?.(view([], 0), 0 * E + 6)).toEqual({ evict: [6] });
  });
  it('is kept for a later layer, and between iterations (layer −1)', () => {
    expect(p.onPrefetchDone?.(view([], 2), 3 * E + 1)).toBeUndefined();
    expect(p.onPrefetchDone?.(view([], -1), 0)).toBeUndefined();
  });
});

describe('pre-gated: the victim', () => {
  const p = createPreGated('pre-gated', {}, 2);
  const v = view([], 1);
  it('is the first stale candidate (a layer already routed), for either reason', () => {
    const candidates = [3 * E, 2 * E + 1, E + 4, 0 * E + 2];
    expect(p.chooseVictim?.(v, { reason: 'prefetch', forKey: 2 * E, candidates })).toBe(E + 4);
    expect(p.chooseVictim?.(v, { reason: 'demand', forKey: 2 * E, candidates })).toBe(E + 4);
  });
  it('with nothing stale: a demand fetch takes the first candidate, a prefetch declines', () => {
    const candidates = [3 * E, 2 * E + 1];
    expect(p.chooseVictim?.(v, { reason: 'demand', forKey: E, candidates })).toBe(3 * E);
    expect(p.chooseVictim?.(v, { reason: 'prefetch', forKey: E, candidates })).toBeUndefined();
  });
});

describe('pre-gated: the buffer', () => {
  const model = { topK: 2 } as Parameters<NonNullable<typeof preGated.bufferSlots>>[1];
  it('is capacitySlots when given, else 2 × top-k under a budget, else the executor default', () => {
    expect(preGated.bufferSlots?.({ capacitySlots: 7, budgetExperts: 100 }, model)).toBe(7);
    expect(preGated.bufferSlots?.({ budgetExperts: 100 }, model)).toBe(4);
    expect(preGated.bufferSlots?.({ budgetExperts: 0 }, model)).toBe(4);
    expect(preGated.bufferSlots?.({}, model)).toBeUndefined();
  });
});

describe('dependency-prefetch, replaceQueue, on the same view', () => {
  it('cancels loading unpinned entries of this and earlier layers only, then prefetches the next layer', () => {
    const p = createDependencyPrefetch('d', DependencyPrefetchParams.parse({ replaceQueue: true, cache: 'lru' }));
    p.init?.({ moeLayers: L, experts: E } as never);
    const ents: Ent[] = [
      { key: 0 * E + 2, state: 'loading' }, // layer 0, loading → cancel
      { key: 1 * E + 4, state: 'loading' }, // layer 1 (this one), loading → cancel
      { key: 1 * E + 6, state: 'loading', pinned: true }, // pinned → kept
      { key: 1 * E + 1 }, // resident → kept (LRU cache)
      { key: 2 * E + 5, state: 'loading' }, // layer 2: a later prefetch → kept
    ];
    const v = view(ents, 1);
    const has = new Set(ents.map((e) => e.key));
    (v.buffer as unknown as { has: (k: number) => boolean }).has = (k) => has.has(k);
    const out = p.onLayerRouted?.(v, routing(1));
    expect(out?.cancel).toEqual([2, 12]);
    expect(out?.evict).toEqual([]);
    expect(out?.prefetch?.map((r) => r.key)).toEqual([16, 17, 18, 19, 20, 22, 23]);
  });
});
