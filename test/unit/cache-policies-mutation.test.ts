/**
 * The expert caches (policies/cache: lru, lfu, lcp, rnd, on-demand and the shared victim choice)
 * on hand-built buffers whose answer is worked out by hand: which pool a victim comes from under
 * per-layer caps (own layer full, layers over their cap, the fallback), tie order (first minimum,
 * least recent, never used, lowest key), the evictions that bring layers back to their caps,
 * LFU's counts, LRU's recency order, LCP's μ, ν and P = μ·ρ^(ν/ω) and RND's draws. Written to kill
 * the mutants the mutation run left in these files (docs/MUTATION.md); each case runs in
 * milliseconds on a fake view (no executor).
 */
import { describe, expect, it } from 'vitest';
import { UserError } from '../../sim/kernel/errors.ts';
import { Rng } from '../../sim/kernel/rng.ts';
import type { BufferEntryView, ExpertKey, LayerRouting, ServingView } from '../../sim/serving/policy.ts';
import { createLcp, iterationTokens, LCP_OMEGA, LCP_RHO, lcp, LcpParams, LcpScores } from '../../policies/cache/lcp.ts';
import { createLfu, lfu, LfuParams } from '../../policies/cache/lfu.ts';
import { createLru, lru, LruOrder, LruParams, lruSlots } from '../../policies/cache/lru.ts';
import { onDemand } from '../../policies/cache/on-demand.ts';
import { createRnd, rnd, RndParams } from '../../policies/cache/rnd.ts';
import {
  evictable,
  firstBy,
  firstVictimBy,
  layerCounts,
  trimToCaps,
  victimPool,
} from '../../policies/cache/victims.ts';

/** 3 MoE layers of 4 experts: key = layer · 4 + expert. */
const E = 4;
const L = 3;

interface Ent {
  readonly key: ExpertKey;
  readonly state?: 'loading' | 'resident';
  readonly pinned?: boolean;
  readonly lastUsedNs?: number;
  readonly uses?: number;
}

/**
 * A view over a buffer holding `ents` (in that insertion order). `indexed`: the buffer also offers
 * `layerEntries` / `layerCount`, as the executor's does. `batch`: tokens of each request this iteration.
 */
function view(ents: readonly Ent[], indexed = false, batch: readonly number[] = [1]): ServingView {
  const entries: BufferEntryView[] = ents.map((e) => ({
    key: e.key,
    state: e.state ?? 'resident',
    origin: 'demand',
    pinned: e.pinned ?? false,
    residentSinceNs: 0,
    lastUsedNs: e.lastUsedNs ?? -1,
    uses: e.uses ?? 0,
  }));
  const byKey = new Map(entries.map((e) => [e.key, e]));
  const layerOf = (k: ExpertKey) => Math.floor(k / E);
  const buffer = {
    slots: 99,
    occupied: entries.length,
    has: (k: ExpertKey) => byKey.has(k),
    isResident: (k: ExpertKey) => byKey.get(k)?.state === 'resident',
    isLoading: (k: ExpertKey) => byKey.get(k)?.state === 'loading',
    entry: (k: ExpertKey) => byKey.get(k),
    entries: () => entries,
    ...(indexed
      ? {
          layerEntries: (l: number) => entries.filter((e) => layerOf(e.key) === l),
          layerCount: (l: number) => entries.filter((e) => layerOf(e.key) === l).length,
        }
      : {}),
  };
  return {
    moeLayers: L,
    experts: E,
    topK: 2,
    bytesPerExpert: 1000,
    slots: 99,
    nowNs: 0,
    buffer,
    batch: batch.map((n) => ({ iterationTokens: n })),
    iteration: 0,
    layer: 0,
    firstLayer: 0,
    keyOf: (l: number, e: number) => l * E + e,
    layerOf,
    expertOf: (k: ExpertKey) => k % E,
    predict: () => [],
  } as unknown as ServingView;
}

/** A routing of `layer` with `tokens[e]` tokens to expert e. */
function routing(layer: number, tokens: readonly number[]): LayerRouting {
  const t = Int32Array.from(tokens);
  return { layer, tokensPerExpert: t, perRequest: [t], activated: tokens.flatMap((n, e) => (n > 0 ? [e] : [])) };
}

/** An Rng whose `next()` returns the given values in order. */
class ScriptedRng extends Rng {
  used = 0;
  constructor(private readonly draws: readonly number[]) {
    super('scripted');
  }
  override next(): number {
    const u = this.draws[this.used++];
    if (u === undefined) throw new Error(`draw ${this.used} was not scripted`);
    return u;
  }
}

const byKey = (a: ExpertKey, b: ExpertKey) => a - b;
const cap2 = () => 2;

describe('victims: the pool a victim comes from', () => {
  // Layer 0 holds 0, 1 (2 = its cap); layer 1 holds 4, 5, 6 (over a cap of 2); layer 2 holds 8.
  const ents: Ent[] = [{ key: 0 }, { key: 1 }, { key: 4 }, { key: 5 }, { key: 6 }, { key: 8 }];
  const all = ents.map((e) => e.key);

  for (const indexed of [false, true]) {
    const v = view(ents, indexed);
    it(`counts entries per layer, loading or resident (indexed buffer: ${indexed})`, () => {
      expect(Array.from(layerCounts(view([...ents, { key: 9, state: 'loading' }], indexed)))).toEqual([2, 3, 2]);
    });

    it(`a full layer replaces one of its own; at count + 1 = cap it is not full (indexed: ${indexed})`, () => {
      // Layer 0: 2 + 1 > 2, full: its own. Layer 2: 1 + 1 = 2, not full: layers over their cap (layer 1).
      expect(victimPool(v, all, 3, cap2)).toEqual([0, 1]);
      expect(victimPool(v, all, 10, cap2)).toEqual([4, 5, 6]);
      expect(firstVictimBy(v, all, 3, cap2, (a, b) => b - a)).toBe(1);
      expect(firstVictimBy(v, all, 10, cap2, (a, b) => b - a)).toBe(6);
      // Layer 1 is full and over: its own.
      expect(victimPool(v, [8, 5, 0], 7, cap2)).toEqual([5]);
      expect(firstVictimBy(v, [8, 5, 0], 7, cap2, byKey)).toBe(5);
    });

    it(`a full layer without candidates of its own takes from a layer over its cap (indexed: ${indexed})`, () => {
      expect(victimPool(v, [8, 6, 4], 3, cap2)).toEqual([6, 4]);
      expect(firstVictimBy(v, [8, 6, 4], 3, cap2, byKey)).toBe(4);
    });

    it(`a layer exactly at its cap is not over it; without any over, all or none (indexed: ${indexed})`, () => {
      // Caps 3: layer 1 (3 entries) is at its cap, not over; nobody over → every candidate.
      const cap3 = () => 3;
      expect(victimPool(v, [8, 0, 4], 10, cap3)).toEqual([8, 0, 4]);
      expect(firstVictimBy(v, [8, 0, 4], 10, cap3, byKey)).toBe(0);
      expect(victimPool(v, [8, 0, 4], 10, cap3, false)).toEqual([]);
      expect(firstVictimBy(v, [8, 0, 4], 10, cap3, byKey, false)).toBeUndefined();
      // Cap 1 of layer 2 only (8 is alone: at its cap); layer 0's 2 entries are over a cap of 1.
      const capL = (l: number) => (l === 1 ? 9 : 1);
      expect(victimPool(v, [8, 4, 1, 0], 5, capL)).toEqual([1, 0]);
      expect(firstVictimBy(v, [8, 4, 1, 0], 5, capL, byKey)).toBe(0);
    });
  }

  it('without caps or candidates the candidates are the pool', () => {
    const v = view(ents);
    const cands = [6, 0];
    expect(victimPool(v, cands, 3)).toBe(cands);
    expect(victimPool(v, [], 3, cap2)).toEqual([]);
    expect(firstVictimBy(v, [], 3, cap2, byKey)).toBeUndefined();
    expect(firstVictimBy(v, cands, 3, undefined, byKey)).toBe(0);
  });

  it('firstBy keeps the first of equal keys and the first minimum', () => {
    expect(firstBy([], byKey)).toBeUndefined();
    expect(firstBy([7, 3, 9, 3], byKey)).toBe(3);
    const tie = () => 0;
    expect(firstBy([7, 3, 9], tie)).toBe(7);
    expect(firstVictimBy(view(ents), [5, 4, 6], 3, cap2, tie)).toBe(5);
    expect(firstVictimBy(view(ents), [1, 0], 3, cap2, tie)).toBe(1);
    expect(firstVictimBy(view(ents), [8, 0], 10, () => 5, tie)).toBe(8);
  });

  it('evictable: resident and unpinned only', () => {
    const v = view([{ key: 0 }, { key: 1, pinned: true }, { key: 2, state: 'loading' }]);
    expect([0, 1, 2, 3].map((k) => evictable(v.buffer, k))).toEqual([true, false, false, false]);
  });
});

describe('victims: trimToCaps', () => {
  // Layer 0: 4 entries (one pinned, one loading), layer 1: 3, layer 2: 1.
  const ents: Ent[] = [
    { key: 0 },
    { key: 1, pinned: true },
    { key: 2, state: 'loading' },
    { key: 3 },
    { key: 4 },
    { key: 5 },
    { key: 6 },
    { key: 8 },
  ];
  const lowest = (pool: readonly ExpertKey[]) => firstBy(pool, byKey)!;
  const highest = (pool: readonly ExpertKey[]) => firstBy(pool, (a, b) => b - a)!;

  it('evicts each layer’s excess among its resident unpinned experts, layer by layer', () => {
    // Cap 2: layer 0 has 2 too many (only 0 and 3 evictable), layer 1 one too many.
    expect(trimToCaps(view(ents), cap2, lowest)).toEqual([0, 3, 4]);
    expect(trimToCaps(view(ents), cap2, highest)).toEqual([3, 0, 6]);
    // Cap 1: layer 0 would give 3, has only 2 evictable; layer 1 gives 2.
    expect(trimToCaps(view(ents), () => 1, lowest)).toEqual([0, 3, 4, 5]);
    // Cap 3: layer 0 gives one, layer 1 is at its cap.
    expect(trimToCaps(view(ents), () => 3, lowest)).toEqual([0]);
    expect(trimToCaps(view(ents), () => 4, lowest)).toEqual([]);
    // Only a later layer over its cap.
    expect(trimToCaps(view(ents), (l) => (l === 1 ? 1 : 9), highest)).toEqual([6, 5]);
  });

  for (const indexed of [false, true]) {
    it(`with one layer named, trims that layer only (indexed buffer: ${indexed})`, () => {
      const v = view(ents, indexed);
      expect(trimToCaps(v, cap2, lowest, 0)).toEqual([0, 3]);
      expect(trimToCaps(v, () => 3, highest, 0)).toEqual([3]);
      expect(trimToCaps(v, () => 1, lowest, 1)).toEqual([4, 5]);
      expect(trimToCaps(v, () => 3, lowest, 1)).toEqual([]);
      expect(trimToCaps(v, () => 1, lowest, 2)).toEqual([]);
      expect(trimToCaps(v, () => 0, lowest, 2)).toEqual([8]);
    });
  }

  for (const indexed of [false, true]) {
    it(`one layer over its cap with too few evictable experts gives what it has (indexed: ${indexed})`, () => {
      // Layer 0 holds 4 (one pinned, one loading): cap 0 wants 4 back, only 0 and 3 can go; a
      // layer whose entries are all pinned or loading gives nothing (never an undefined victim).
      const v = view(ents, indexed);
      expect(trimToCaps(v, () => 0, lowest, 0)).toEqual([0, 3]);
      const stuck = view([{ key: 4, pinned: true }, { key: 5, state: 'loading' }, { key: 0 }], indexed);
      expect(trimToCaps(stuck, () => 0, lowest, 1)).toEqual([]);
    });
  }
});

describe('lru', () => {
  it('LruOrder: stamps, recency order, removal, and no order when built without one', () => {
    const o = new LruOrder();
    expect(o.stampOf(5)).toBe(0);
    o.touch(5);
    o.touch(2);
    o.touch(9);
    o.touch(5);
    expect([o.stampOf(5), o.stampOf(2), o.stampOf(9)]).toEqual([4, 2, 3]);
    expect([...o.keys()]).toEqual([2, 9, 5]);
    expect(o.oldest(() => true)).toBe(2);
    expect(o.oldest((k) => k !== 2)).toBe(9);
    expect(o.oldest(() => false)).toBeUndefined();
    o.remove(9);
    expect([o.stampOf(9), ...o.keys()]).toEqual([0, 2, 5]);
    const u = new LruOrder(false);
    u.touch(3);
    u.touch(1);
    expect([u.stampOf(3), u.stampOf(1)]).toEqual([1, 2]);
    u.remove(3);
    expect(u.stampOf(3)).toBe(0);
    expect(() => u.keys()).toThrow('LruOrder built without order: use stampOf');
    expect(() => u.oldest(() => true)).toThrow('LruOrder built without order: use stampOf');
  });

  it('lruSlots: slots, bytes in whole slots (at least 1), per-layer slots plus top-k staging', () => {
    const model = { moeLayers: 3, topK: 2, derived: { bytesPerExpert: 1000 } } as Parameters<typeof lruSlots>[1];
    expect(lruSlots({ capacitySlots: 7, capacityBytes: 5000, perLayerSlots: 1 }, model)).toBe(7);
    expect(lruSlots({ capacityBytes: 2999, perLayerSlots: 1 }, model)).toBe(2);
    expect(lruSlots({ capacityBytes: 999 }, model)).toBe(1);
    expect(lruSlots({ perLayerSlots: 4 }, model)).toBe(14);
    expect(lruSlots({}, model)).toBeUndefined();
  });

  it('global: the least recently routed evictable expert, which then leaves the order', () => {
    const p = createLru('lru', {});
    const v = view([{ key: 0 }, { key: 1 }, { key: 2, pinned: true }, { key: 3 }, { key: 4 }]);
    p.onLayerRouted!(v, routing(0, [1, 0, 1, 1])); // touch 0, 2, 3
    p.onLayerRouted!(v, routing(1, [1, 0, 0, 0])); // touch 4
    p.onLayerRouted!(v, routing(0, [1, 1, 0, 0])); // touch 0, 1: order 2, 3, 4, 0, 1
    const q = { reason: 'demand' as const, forKey: 9, candidates: [0, 1, 3, 4] };
    expect(p.chooseVictim!(v, q)).toBe(3); // 2 is pinned
    expect(p.chooseVictim!(v, q)).toBe(4); // 3 left the order
    expect(p.chooseVictim!(v, q)).toBe(0);
    expect(p.chooseVictim!(v, q)).toBe(1);
    // Nothing evictable left in the order: the first candidate.
    expect(p.chooseVictim!(v, q)).toBe(0);
    expect(p.chooseVictim!(v, { ...q, candidates: [] })).toBeUndefined();
    expect(p.onLayerDone!(v, 0)).toBeUndefined();
  });

  it('per layer: least recent of the pool (never routed first, then lowest key); a layer over its cap trims when done', () => {
    const p = createLru('lru', { perLayerSlots: 2 });
    const v = view([{ key: 0 }, { key: 1 }, { key: 2 }, { key: 4 }], true);
    p.onLayerRouted!(v, routing(0, [1, 1, 0, 0])); // 0 then 1
    p.onLayerRouted!(v, routing(0, [1, 0, 0, 0])); // 0 again: 1 is least recent
    // Layer 0 (3 entries) is full for key 3: its own, 2 never routed first.
    expect(p.chooseVictim!(v, { reason: 'demand', forKey: 3, candidates: [0, 1, 2, 4] })).toBe(2);
    // The executor's candidates are exactly the evictable entries: with 2 pinned they are 0, 1 and 4.
    const pinned2 = view([{ key: 0 }, { key: 1 }, { key: 2, pinned: true }, { key: 4 }], true);
    expect(p.chooseVictim!(pinned2, { reason: 'demand', forKey: 3, candidates: [0, 1, 4] })).toBe(1);
    // Stamps are not removed by a per-layer choice.
    expect(p.chooseVictim!(pinned2, { reason: 'demand', forKey: 3, candidates: [0, 1, 4] })).toBe(1);
    expect(p.onLayerDone!(v, 0)).toEqual({ evict: [2] });
    expect(p.onLayerDone!(v, 1)).toEqual({ evict: [] });
    // Never-routed ties: lowest key.
    const w = view([{ key: 5 }, { key: 6 }, { key: 4 }], true);
    expect(p.chooseVictim!(w, { reason: 'demand', forKey: 7, candidates: [6, 5, 4] })).toBe(4);
  });
});

describe('lfu', () => {
  const ents: Ent[] = [
    { key: 0, lastUsedNs: 50, uses: 1 },
    { key: 1, lastUsedNs: 10, uses: 3 },
    { key: 2, lastUsedNs: 30, uses: 2 },
    { key: 3, uses: 0 },
  ];

  it('since start: fewest uses, counted per routing (not per token) and kept across evictions', () => {
    const p = createLfu('lfu', LfuParams.parse({}));
    p.init!({ moeLayers: L, experts: E, topK: 2, bytesPerExpert: 1000, slots: 8 });
    const v = view(ents);
    expect(p.onLayerRouted!(v, routing(0, [5, 1, 1, 0]))).toBeUndefined();
    p.onLayerRouted!(v, routing(0, [0, 1, 1, 0]));
    p.onLayerRouted!(v, routing(0, [0, 1, 0, 0]));
    p.onLayerRouted!(v, routing(1, [9, 9, 9, 9]));
    // Counts 0:1, 1:3, 2:2, 3:0 — 3 first, then 0, then 2, then 1.
    const q = (candidates: number[]) => p.chooseVictim!(v, { reason: 'demand', forKey: 9, candidates });
    expect(q([0, 1, 2, 3])).toBe(3);
    expect(q([1, 2, 0])).toBe(0);
    expect(q([1, 2])).toBe(2);
    // Counts are kept for every layer's keys (key 8 = layer 2, expert 0: 2 uses; 9: none).
    p.onLayerRouted!(v, routing(2, [1, 0, 0, 0]));
    p.onLayerRouted!(v, routing(2, [1, 0, 0, 0]));
    expect(q([8, 9])).toBe(9);
  });

  it('ties: least recently used first (never used before used), then the lowest key', () => {
    const p = createLfu('lfu', LfuParams.parse({}));
    p.init!({ moeLayers: L, experts: E, topK: 2, bytesPerExpert: 1000, slots: 8 });
    // Nobody routed: all counts 0. lastUsed 0:50, 1:10, 2:30, 3:never; 5, 6 not in the buffer.
    const v = view(ents);
    const q = (candidates: number[]) => p.chooseVictim!(v, { reason: 'demand', forKey: 9, candidates });
    expect(q([0, 1, 2, 3])).toBe(3);
    expect(q([0, 1, 2])).toBe(1);
    expect(q([0, 2])).toBe(2);
    expect(q([6, 5, 0])).toBe(5);
  });

  it('in buffer: the entry’s own uses', () => {
    const p = createLfu('lfu', LfuParams.parse({ counts: 'in-buffer' }));
    p.init!({ moeLayers: L, experts: E, topK: 2, bytesPerExpert: 1000, slots: 8 });
    const v = view(ents);
    p.onLayerRouted!(v, routing(0, [0, 0, 0, 9])); // ignored by in-buffer counts
    const q = (candidates: number[]) => p.chooseVictim!(v, { reason: 'demand', forKey: 9, candidates });
    expect(q([1, 2, 3, 0])).toBe(3);
    expect(q([1, 2, 0])).toBe(0);
    expect(q([1, 2])).toBe(2);
    expect(q([7, 1])).toBe(7); // not in the buffer: 0 uses
  });

  it('per layer: a layer over its cap gives back its least used experts when it routes', () => {
    const p = createLfu('lfu', LfuParams.parse({ perLayerSlots: 2 }));
    p.init!({ moeLayers: L, experts: E, topK: 2, bytesPerExpert: 1000, slots: 8 });
    const v = view(ents, true);
    p.onLayerRouted!(v, routing(0, [1, 1, 0, 0]));
    // Counts 0:1, 1:2 (1 more below), 2:0, 3:0 — over by 2: 3 (never used) then 2.
    expect(p.onLayerRouted!(v, routing(0, [0, 1, 0, 0]))).toEqual({ evict: [3, 2] });
    // Once 3 and 2 have left, the candidates (the evictable entries) are 0 and 1: 0 is used least.
    const after = view(
      ents.filter((e) => e.key !== 2 && e.key !== 3),
      true,
    );
    expect(p.chooseVictim!(after, { reason: 'demand', forKey: 3, candidates: [1, 0] })).toBe(0);
  });
});

describe('lcp', () => {
  it('defaults are the paper’s: ω 128, ρ 0.25', () => {
    expect([LCP_OMEGA, LCP_RHO]).toEqual([128, 0.25]);
    expect(LcpParams.parse({})).toMatchObject({ omega: 128, rho: 0.25 });
    const s = new LcpScores(1, 2);
    expect([s.omega, s.rho]).toEqual([128, 0.25]);
  });

  it('μ, ν and P = μ·ρ^(ν/ω) by hand (ω 2, ρ 0.25)', () => {
    const s = new LcpScores(2, 3, 2, 0.25);
    expect([s.nu(0), s.priority(0), s.last[0]]).toEqual([0, 0, -1]);
    s.observe(0, [3, 0, 1], 2); // clock 2: μ 3, 0, 1; last 2, −1, 2
    s.observe(0, [0, 0, 2], 4); // clock 6: μ 3, 0, 3; last 2, −1, 6
    s.observe(1, [1, 0, 0], 5); // other layer only
    expect(Array.from(s.mu)).toEqual([3, 0, 3, 1, 0, 0]);
    expect(Array.from(s.last)).toEqual([2, -1, 6, 5, -1, -1]);
    expect(Array.from(s.clock)).toEqual([6, 5]);
    expect([s.nu(0), s.nu(1), s.nu(2), s.nu(3), s.nu(4)]).toEqual([4, 6, 0, 0, 5]);
    // P(0) = 3 · 0.25^(4/2) = 3/16; P(2) = 3 · 1; never activated: 0.
    expect([s.priority(0), s.priority(1), s.priority(2), s.priority(3)]).toEqual([0.1875, 0, 3, 1]);
    // Asked again (cached decay), the same.
    expect([s.priority(0), s.priority(2)]).toEqual([0.1875, 3]);
    expect(s.ranked(0)).toEqual([2, 0, 1]);
    const rank = new Int32Array(3);
    s.rankInto(0, rank);
    expect(Array.from(rank)).toEqual([1, 2, 0]);
  });

  it('ν beyond the cached range, fractional and huge, still gives ρ^(ν/ω)', () => {
    const s = new LcpScores(1, 2, 4, 0.5);
    s.observe(0, [2, 0], 1);
    s.observe(0, [0, 1], 2000); // ν(0) = 2000: the cache grows past 1024
    expect(s.priority(0)).toBe(2 * Math.pow(0.5, 500));
    expect(s.priority(1)).toBe(1);
    s.observe(0, [0, 0], 0.5); // fractional ν
    expect(s.priority(1)).toBe(Math.pow(0.5, 0.125));
    expect(s.priority(0)).toBe(2 * Math.pow(0.5, 2000.5 / 4));
    s.observe(0, [0, 1], 2.5); // back to integers: ν = 0 for 1 (μ now 2), 2003 for 0
    expect(s.priority(1)).toBe(2);
    expect(s.priority(0)).toBe(2 * Math.pow(0.5, 2003 / 4));
    const big = new LcpScores(1, 1, 1e6, 0.5);
    big.observe(0, [1], 1);
    big.observe(0, [0], 5_000_000); // ν ≥ 2²²: not cached
    expect(big.priority(0)).toBe(Math.pow(0.5, 5));
    expect(big.priority(0)).toBe(Math.pow(0.5, 5));
  });

  it('a ν far past the cache (2⁴⁰ tokens) is computed, never tabled (a table that size cannot exist)', () => {
    const s = new LcpScores(1, 1, 1, 0.5);
    s.observe(0, [1], 1);
    s.observe(0, [0], 2 ** 40);
    expect(s.nu(0)).toBe(2 ** 40);
    expect(s.priority(0)).toBe(0); // 0.5^(2⁴⁰) underflows
  });

  it('ranking from the kept order: equal P, the more recent first, whatever the previous order', () => {
    // ω 1, ρ 0.25: expert 0 (μ 4, ν 1) and expert 1 (μ 1, ν 0) both have P = 1 exactly.
    const s = new LcpScores(1, 2, 1, 0.25);
    s.observe(0, [4, 0], 1);
    s.observe(0, [0, 1], 1);
    expect([s.priority(0), s.priority(1)]).toEqual([1, 1]);
    expect(s.ranked(0)).toEqual([1, 0]);
    // The second ranking starts from [1, 0]: 0 (older, lower id) must not move ahead of 1.
    expect(s.ranked(0)).toEqual([1, 0]);
    const rank = new Int32Array(2);
    s.rankInto(0, rank);
    expect(Array.from(rank)).toEqual([1, 0]);
  });

  it('evicts the lowest P, then the least recently activated, then the lowest key', () => {
    const s = new LcpScores(1, 4, 2, 0.25);
    s.observe(0, [1, 1, 0, 0], 1); // μ 1, 1; last 1
    s.observe(0, [0, 0, 0, 1], 1); // 3: μ 1, last 2; 0 and 1: ν 1
    expect(s.evictFirst(2, 0)).toBeLessThan(0); // P 0 first
    expect(s.evictFirst(0, 3)).toBeLessThan(0); // P 0.25^0.5 < 1
    expect(s.evictFirst(1, 0)).toBeGreaterThan(0); // equal P and last: lowest key first
    expect(s.evictFirst(0, 1)).toBeLessThan(0);
    const t = new LcpScores(1, 3, 1e9, 0.25); // ω huge: P = μ, ties on P
    t.observe(0, [1, 0, 0], 1);
    t.observe(0, [0, 1, 0], 1);
    expect(t.evictFirst(1, 0)).toBeGreaterThan(0); // 0 activated earlier: first
    expect(firstBy([2, 1, 0], t.evictFirst)).toBe(2);
    // Equal P exactly (μ 1, ν 0) in two layers whose clocks differ: the earlier activation first.
    const u = new LcpScores(2, 2, 2, 0.25);
    u.observe(1, [1, 0], 5); // key 2: last 5
    u.observe(0, [0, 1], 1); // key 1: last 1
    expect([u.priority(1), u.priority(2)]).toEqual([1, 1]);
    expect(u.evictFirst(2, 1)).toBeGreaterThan(0);
    expect(firstBy([2, 1], u.evictFirst)).toBe(1);
  });

  it('createLcp: scores over the batch’s tokens, per-layer trims and victims', () => {
    expect(iterationTokens(view([], false, [3, 1, 4]))).toBe(8);
    const p = createLcp('lcp', LcpParams.parse({ perLayerSlots: 2, omega: 2 }));
    p.init!({ moeLayers: L, experts: E, topK: 2, bytesPerExpert: 1000, slots: 8 });
    const v = view([{ key: 0 }, { key: 1 }, { key: 2 }, { key: 3 }], true, [2, 2]);
    expect(p.onLayerRouted!(v, routing(0, [1, 3, 0, 2]))).toEqual({ evict: [2, 0] });
    expect(Array.from(p.scores().clock)).toEqual([4, 0, 0]);
    expect(p.scores().priority(1)).toBe(3);
    // The query's candidates are the buffer's resident, unpinned entries (key 2 trimmed above).
    const trimmed = view([{ key: 0 }, { key: 1 }, { key: 3 }], true, [2, 2]);
    expect(p.chooseVictim!(trimmed, { reason: 'demand', forKey: 9, candidates: [1, 3, 0] })).toBe(0);
    const g = createLcp('lcp', LcpParams.parse({}));
    g.init!({ moeLayers: L, experts: E, topK: 2, bytesPerExpert: 1000, slots: 8 });
    expect(g.onLayerRouted!(v, routing(0, [1, 3, 0, 2]))).toBeUndefined();
    expect(g.chooseVictim!(v, { reason: 'demand', forKey: 9, candidates: [1, 3] })).toBe(3);
  });
});

describe('rnd and on-demand', () => {
  it('evict: a uniform draw over the victim pool, none from an empty pool', () => {
    const rng = new ScriptedRng([0.99, 0.5, 0]);
    const p = createRnd('rnd', RndParams.parse({}), rng);
    const v = view([{ key: 0 }, { key: 1 }, { key: 2 }]);
    const q = { reason: 'demand' as const, forKey: 9, candidates: [2, 0, 1] };
    expect([p.chooseVictim!(v, q), p.chooseVictim!(v, q), p.chooseVictim!(v, q)]).toEqual([1, 0, 2]);
    expect(p.chooseVictim!(v, { ...q, candidates: [] })).toBeUndefined();
    expect(p.onLayerRouted!(v, routing(0, [1, 1, 1, 0]))).toBeUndefined();
    expect(rng.used).toBe(3);
  });

  it('evict, per layer: the draw is over the layer’s own pool; a layer over its cap trims by draws', () => {
    const rng = new ScriptedRng([0.5, 0.9]);
    const p = createRnd('rnd', RndParams.parse({ perLayerSlots: 2 }), rng);
    const v = view([{ key: 0 }, { key: 1 }, { key: 2 }, { key: 4 }], true);
    expect(p.chooseVictim!(v, { reason: 'demand', forKey: 3, candidates: [4, 0, 1, 2] })).toBe(1);
    // Layer 0 is over by one: a draw of 0.9 over [0, 1, 2].
    expect(p.onLayerRouted!(v, routing(0, [1, 0, 0, 0]))).toEqual({ evict: [2] });
  });

  it('static: a fixed random set per layer (partial Fisher–Yates), cached experts are kept and not evicted', () => {
    expect(() => createRnd('rnd', RndParams.parse({ mode: 'static' }), new ScriptedRng([]))).toThrow(UserError);
    expect(() => createRnd('rnd', RndParams.parse({ mode: 'static' }), new ScriptedRng([]))).toThrow(
      'rnd mode static needs perLayerSlots',
    );
    // The error names the field and value it rejects.
    expect(() => createRnd('rnd', RndParams.parse({ mode: 'static' }), new ScriptedRng([]))).toThrow(
      expect.objectContaining({ field: 'mode', value: 'static' }),
    );
    // 3 layers: draws i + ⌊u·(4 − i)⌋ for i = 0, 1.
    const rng = new ScriptedRng([0.75, 0, 0, 0.99, 0.5, 0.5]);
    const p = createRnd('rnd', RndParams.parse({ mode: 'static', perLayerSlots: 2 }), rng);
    p.init!({ moeLayers: L, experts: E, topK: 2, bytesPerExpert: 1000, slots: 8 });
    expect(rng.used).toBe(6);
    // Layer 0: swap 0↔3 → [3,1,2,0], then 1↔1: cached {3, 1}. Layer 1: 0↔0, 1↔3: {0, 3}.
    // Layer 2: 0↔2 → [2,1,0,3], then 1↔⌊1 + 1.5⌋ = 2: {2, 0}.
    const v = view([]);
    const cached = Array.from({ length: L * E }, (_, k) => p.afterUse!(v, k));
    expect(cached.flatMap((c, k) => (c ? [k] : []))).toEqual([1, 3, 4, 7, 8, 10]);
    const w = view([{ key: 1 }, { key: 2 }, { key: 3 }]);
    expect(p.chooseVictim!(w, { reason: 'prefetch', forKey: 0, candidates: [1, 3, 2] })).toBe(2);
    expect(p.chooseVictim!(w, { reason: 'prefetch', forKey: 0, candidates: [1, 3] })).toBeUndefined();
    const rng2 = new ScriptedRng([0.75, 0, 0, 0.99, 0.5, 0.5, 0.6]);
    const p2 = createRnd('rnd', RndParams.parse({ mode: 'static', perLayerSlots: 9 }), rng2);
    p2.init!({ moeLayers: 1, experts: E, topK: 2, bytesPerExpert: 1000, slots: 8 });
    expect(rng2.used).toBe(4); // min(9, 4 experts) draws
    const rng3 = new ScriptedRng([0.75, 0, 0, 0.99, 0.5, 0.5, 0.6]);
    const p3 = createRnd('rnd', RndParams.parse({ mode: 'static', perLayerSlots: 2 }), rng3);
    p3.init!({ moeLayers: L, experts: E, topK: 2, bytesPerExpert: 1000, slots: 8 });
    // Every candidate cached, on demand: a draw over the victim pool (layer 0 full for key 0 → its own).
    expect(p3.chooseVictim!(w, { reason: 'demand', forKey: 0, candidates: [1, 3] })).toBe(3);
  });

  it('on-demand keeps an expert after use only when told', () => {
    const v = view([]);
    const ctx = {} as Parameters<typeof onDemand.create>[1];
    expect(onDemand.create(onDemand.params.parse({}), ctx).afterUse!(v, 0)).toBe(false);
    expect(onDemand.create(onDemand.params.parse({ keep: true }), ctx).afterUse!(v, 0)).toBe(true);
    expect(onDemand.create(onDemand.params.parse({}), ctx).name).toBe('on-demand');
  });
});

describe('the cache definitions', () => {
  const model = { moeLayers: 3, topK: 2, derived: { bytesPerExpert: 1000 } } as Parameters<typeof lruSlots>[1];
  const ctx = { rng: new ScriptedRng([0.5]) } as unknown as Parameters<typeof lru.create>[1];

  it('are serving policies named as configs name them, with their capacity as buffer slots', () => {
    const defs = [lru, lfu, lcp, rnd, onDemand] as const;
    expect(defs.map((d) => [d.name, d.family])).toEqual([
      ['lru', 'serving'],
      ['lfu', 'serving'],
      ['lcp', 'serving'],
      ['rnd', 'serving'],
      ['on-demand', 'serving'],
    ]);
    for (const d of defs) expect(d.summary.length).toBeGreaterThan(20);
    expect(lru.summary).toMatch(/^LRU/);
    expect(lfu.summary).toMatch(/^LFU/);
    expect(lcp.summary).toMatch(/LCP.*ω 128, ρ 0\.25/);
    expect(rnd.summary).toMatch(/^random-eviction/);
    expect(onDemand.summary).toMatch(/^fetch activated experts/);
    for (const d of [lru, lfu, lcp, rnd]) {
      expect(d.bufferSlots!({ perLayerSlots: 4 } as never, model as never)).toBe(14);
      expect(d.bufferSlots!({} as never, model as never)).toBeUndefined();
    }
    expect(lru.create(lru.params.parse({}), ctx).name).toBe('lru');
    expect(lfu.create(lfu.params.parse({}), ctx).name).toBe('lfu');
    expect(lcp.create(lcp.params.parse({}), ctx).name).toBe('lcp');
    expect(rnd.create(rnd.params.parse({}), ctx).name).toBe('rnd');
  });

  it('parameters: defaults, allowed values, and nothing unknown', () => {
    expect(LruParams.parse({})).toEqual({});
    expect(() => LruParams.parse({ capacitySlots: 0 })).toThrow();
    expect(() => LruParams.parse({ capacityBytes: 1.5 })).toThrow();
    expect(() => LruParams.parse({ perLayerSlots: -1 })).toThrow();
    expect(() => LruParams.parse({ slots: 3 })).toThrow();
    expect(LfuParams.parse({})).toEqual({ counts: 'since-start' });
    expect(LfuParams.parse({ counts: 'in-buffer' }).counts).toBe('in-buffer');
    expect(() => LfuParams.parse({ counts: 'ever' })).toThrow();
    expect(() => LfuParams.parse({ extra: 1 })).toThrow();
    expect(RndParams.parse({})).toEqual({ mode: 'evict' });
    expect(RndParams.parse({ mode: 'static', perLayerSlots: 2 }).mode).toBe('static');
    expect(() => RndParams.parse({ mode: 'lru' })).toThrow();
    expect(() => RndParams.parse({ extra: 1 })).toThrow();
    expect(LcpParams.parse({ omega: 0.5, rho: 0.9 })).toMatchObject({ omega: 0.5, rho: 0.9 });
    for (const bad of [{ omega: 0 }, { rho: 0 }, { rho: 1 }, { extra: 1 }])
      expect(() => LcpParams.parse(bad)).toThrow();
    expect(onDemand.params.parse({})).toEqual({ keep: false });
    expect(() => onDemand.params.parse({ keep: true, extra: 1 })).toThrow();
  });
});
