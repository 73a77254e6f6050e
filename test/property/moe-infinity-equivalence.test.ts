/**
 * moe-infinity's fast paths against the straightforward reference implementations they
 * replaced (kept here verbatim in substance), bit for bit:
 * - `ScoreAccumulator` (one-group coefficients, row cache across preparations, blocked row
 *   sums) gives the same bounds and row scores (Object.is) as the coefficient-matrix version,
 *   over sequences of preparations with repeated, permuted and changed matches, duplicates,
 *   several groups and collections changing in between;
 * - `selectPrefetch` gives the same keys, scores and urgencies as the sort-based version, with
 *   full scores and with a row source;
 * - `PrefetchQueue.plan` gives the same decisions and outstanding keys as the Set-based version;
 * - `CachePriorities` chooses the same victims, the same minimum victim priority and the same
 *   admissions as the buffer-scanning version, and resets priorities to the same values as the
 *   per-request lookups.
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Rng } from '../../sim/kernel/rng.ts';
import type {
  BufferEntryView,
  BufferView,
  EvictionQuery,
  ExpertKey,
  PolicyDecision,
  PrefetchRequest,
} from '../../sim/serving/policy.ts';
import { CachePriorities } from '../../policies/moe-infinity/cache-priority.ts';
import { RequestEams } from '../../policies/moe-infinity/eam.ts';
import { EamCollection } from '../../policies/moe-infinity/eam-collection.ts';
import {
  FLOOR_GUESS,
  PrefetchQueue,
  RankScratch,
  ScoreAccumulator,
  selectPrefetch,
  type MatchedGroup,
  type RankOptions,
  type RowSource,
  type Selection,
} from '../../policies/moe-infinity/prefetcher.ts';
import { bufferOf } from '../unit/buffer-fakes.ts';

// ---------------------------------------------------------------------------- references

class RefAccumulator implements RowSource {
  private readonly perCollection = new Map<EamCollection, { slot: Int32Array; stamp: Uint32Array }>();
  private gen = 0;
  private coef = new Float64Array(0);
  private bounds = new Float64Array(0);
  private readonly entryColl: EamCollection[] = [];
  private entryN = new Int32Array(16);
  private entries = 0;
  private from = 0;
  private rows = 0;
  constructor(
    private readonly L: number,
    private readonly E: number,
  ) {}
  private slots(coll: EamCollection): { slot: Int32Array; stamp: Uint32Array } {
    let s = this.perCollection.get(coll);
    if (!s || s.slot.length < coll.size) {
      const n = Math.max(16, coll.stride);
      s = { slot: new Int32Array(n), stamp: new Uint32Array(n) };
      this.perCollection.set(coll, s);
    }
    return s;
  }
  prepare(groups: readonly MatchedGroup[], from: number, to: number): void {
    const L = this.L;
    const rows = Math.max(0, to - from);
    this.from = from;
    this.rows = rows;
    this.entries = 0;
    const gen = ++this.gen;
    let memberships = 0;
    for (const g of groups) memberships += g.count;
    if (this.coef.length < memberships * rows) this.coef = new Float64Array(memberships * rows * 2);
    if (this.entryN.length < memberships) this.entryN = new Int32Array(memberships * 2);
    if (this.bounds.length < rows) this.bounds = new Float64Array(L);
    const coef = this.coef;
    for (const g of groups) {
      if (g.count === 0 || !(g.weight > 0)) continue;
      const coll = g.collection;
      const { rowTotal } = coll.internals;
      const sl = this.slots(coll);
      for (let i = from; i < to; i++) {
        let tot = 0;
        for (let j = 0; j < g.count; j++) tot += rowTotal[g.top[j]! * L + i]!;
        if (!(tot > 0)) continue;
        const c = g.weight / tot;
        for (let j = 0; j < g.count; j++) {
          const n = g.top[j]!;
          let u: number;
          if (sl.stamp[n] === gen) {
            u = sl.slot[n]!;
          } else {
            u = this.entries++;
            this.entryColl[u] = coll;
            this.entryN[u] = n;
            sl.stamp[n] = gen;
            sl.slot[n] = u;
            coef.fill(0, u * rows, (u + 1) * rows);
          }
          coef[u * rows + (i - from)]! += c;
        }
      }
    }
    const bounds = this.bounds;
    bounds.fill(0, 0, rows);
    for (let u = 0; u < this.entries; u++) {
      const n = this.entryN[u]!;
      const rowMax = this.entryColl[u]!.internals.rowMax;
      for (let r = 0; r < rows; r++) bounds[r]! += coef[u * rows + r]! * rowMax[n * L + from + r]!;
    }
  }
  bound(i: number): number {
    const r = i - this.from;
    return r >= 0 && r < this.rows ? this.bounds[r]! : 0;
  }
  fill(i: number, out: Float64Array): void {
    const { L, E } = this;
    const rb = i * E;
    out.fill(0, rb, rb + E);
    const r = i - this.from;
    if (r < 0 || r >= this.rows) return;
    const rows = this.rows;
    for (let u = 0; u < this.entries; u++) {
      const c = this.coef[u * rows + r]!;
      if (c === 0) continue;
      const stored = this.entryColl[u]!.internals.rows;
      const base = this.entryN[u]! * L * E + rb;
      for (let e = 0; e < E; e++) out[rb + e]! += c * stored[base + e]!;
    }
  }
}

const refBefore = (sa: number, ka: number, sb: number, kb: number): boolean => sa > sb || (sa === sb && ka < kb);

function refSiftDown(k: Int32Array, v: Float64Array, size: number, j: number): void {
  for (;;) {
    const l = 2 * j + 1;
    if (l >= size) return;
    const r = l + 1;
    const w = r < size && refBefore(v[l]!, k[l]!, v[r]!, k[r]!) ? r : l;
    if (!refBefore(v[j]!, k[j]!, v[w]!, k[w]!)) return;
    const tk = k[j]!;
    k[j] = k[w]!;
    k[w] = tk;
    const tv = v[j]!;
    v[j] = v[w]!;
    v[w] = tv;
    j = w;
  }
}

function refSelect(
  scores: Float64Array,
  layer: number,
  budget: number,
  o: RankOptions,
  source?: RowSource,
): { keys: number[]; scores: number[]; urgency: number[] } {
  const E = o.experts;
  const from = layer + 1;
  const to = Math.min(o.layers, layer + 1 + o.horizon);
  const maxCells = Math.max(0, to - from) * E;
  const cap = Math.max(0, Math.min(budget, maxCells));
  if (cap <= 0) return { keys: [], scores: [], urgency: [] };
  const ok: number[] = [];
  const os: number[] = [];
  if (cap === maxCells) {
    for (let i = from; i < to; i++) {
      if (source) source.fill(i, scores);
      const f = o.proximity ? 1 - (i - layer) / o.layers : 1;
      for (let e = 0; e < E; e++) {
        const raw = scores[i * E + e]!;
        if (!(raw > 0)) continue;
        ok.push(i * E + e);
        os.push(raw * f);
      }
    }
  } else {
    const hk = new Int32Array(cap + 1);
    const hv = new Float64Array(cap + 1);
    let size = 0;
    let isHeap = false;
    for (let i = from; i < to; i++) {
      const f = o.proximity ? 1 - (i - layer) / o.layers : 1;
      if (source) {
        if (isHeap && !(source.bound(i) * f > hv[0]!)) continue;
        source.fill(i, scores);
      }
      for (let e = 0; e < E; e++) {
        const raw = scores[i * E + e]!;
        if (!(raw > 0)) continue;
        const s = raw * f;
        const key = i * E + e;
        if (!isHeap) {
          hk[size] = key;
          hv[size] = s;
          if (++size === cap) {
            for (let j = (size >> 1) - 1; j >= 0; j--) refSiftDown(hk, hv, size, j);
            isHeap = true;
          }
          continue;
        }
        if (!refBefore(s, key, hv[0]!, hk[0]!)) continue;
        hk[0] = key;
        hv[0] = s;
        refSiftDown(hk, hv, size, 0);
      }
    }
    if (!isHeap) {
      for (let j = 0; j < size; j++) {
        ok.push(hk[j]!);
        os.push(hv[j]!);
      }
    } else {
      const byKey = new Map<number, number>();
      for (let j = 0; j < size; j++) byKey.set(hk[j]!, hv[j]!);
      for (const k of hk.subarray(0, size).slice().sort()) {
        ok.push(k);
        os.push(byKey.get(k)!);
      }
    }
  }
  let sMax = 0;
  for (const s of os) if (s > sMax) sMax = s;
  const urgency = os.map((s, j) => {
    const rel = 1 - s / sMax;
    return o.order === 'nearest-first' ? Math.floor(ok[j]! / E) - layer + rel : 1 + rel;
  });
  return { keys: ok, scores: os, urgency };
}

class RefQueue {
  readonly issued = new Set<ExpertKey>();
  private readonly urgencyOf: Float64Array;
  private readonly stamp: Uint32Array;
  private gen = 0;
  constructor(cells: number) {
    this.urgencyOf = new Float64Array(cells);
    this.stamp = new Uint32Array(cells);
  }
  plan(buffer: BufferView, sel: Selection, admitted: readonly ExpertKey[]): PolicyDecision {
    const gen = ++this.gen;
    for (let j = 0; j < sel.count; j++) {
      this.urgencyOf[sel.keys[j]!] = sel.urgency[j]!;
      this.stamp[sel.keys[j]!] = gen;
    }
    const cancel: ExpertKey[] = [];
    const prefetch: PrefetchRequest[] = [];
    for (const k of this.issued) {
      const e = buffer.entry(k);
      if (!e || e.state !== 'loading' || e.pinned) {
        this.issued.delete(k);
      } else if (this.stamp[k] !== gen) {
        cancel.push(k);
        this.issued.delete(k);
      } else {
        prefetch.push({ key: k, priority: this.urgencyOf[k]! });
      }
    }
    const fresh = admitted.filter((k) => this.stamp[k] === gen && !buffer.has(k));
    fresh.sort((a, b) => this.urgencyOf[a]! - this.urgencyOf[b]! || a - b);
    for (const k of fresh) {
      prefetch.push({ key: k, priority: this.urgencyOf[k]! });
      this.issued.add(k);
    }
    return { cancel, prefetch };
  }
}

/** The reference cache decisions, reading the priorities and ranked set of a `CachePriorities`. */
class RefCache {
  readonly rank = new Map<number, number>();
  readonly admitted = new Map<number, number>();
  constructor(
    readonly priority: Float64Array,
    readonly requestPriorities: boolean,
  ) {}
  setRanked(keys: ArrayLike<number>, urgency: ArrayLike<number>, count: number): void {
    this.rank.clear();
    this.admitted.clear();
    for (let j = 0; j < count; j++) this.rank.set(keys[j]!, urgency[j]!);
  }
  private victimPriority(k: number): number {
    return this.requestPriorities ? this.priority[k]! : 0;
  }
  minVictimPriority(buffer: BufferView): number {
    let min = Infinity;
    for (const e of buffer.entries()) {
      if (e.state !== 'resident' || e.pinned || this.rank.has(e.key)) continue;
      const p = this.victimPriority(e.key);
      if (p < min) min = p;
    }
    return min;
  }
  private cheapest(buffer: BufferView, limit: number): number[] {
    const all: { k: number; p: number; u: number }[] = [];
    for (const e of buffer.entries()) {
      if (e.state !== 'resident' || e.pinned || this.rank.has(e.key)) continue;
      all.push({ k: e.key, p: this.victimPriority(e.key), u: e.lastUsedNs });
    }
    all.sort((a, b) => (a.p !== b.p ? (a.p < b.p ? -1 : 1) : a.u !== b.u ? (a.u < b.u ? -1 : 1) : a.k - b.k));
    return all.slice(0, limit).map((x) => x.k);
  }
  admission(buffer: BufferView, maxAdmissions = Infinity): (key: ExpertKey, freq: number) => boolean {
    let free = buffer.slots - buffer.occupied;
    let victims: number[] | null = null;
    let vi = 0;
    return (key, freq) => {
      if (free > 0) {
        free--;
        this.admitted.set(key, Infinity);
        return true;
      }
      if (!victims) victims = this.cheapest(buffer, maxAdmissions);
      const v = victims[vi];
      if (v === undefined || !(this.victimPriority(v) < freq)) return false;
      vi++;
      this.admitted.set(key, freq);
      return true;
    };
  }
  chooseVictim(buffer: BufferView, q: EvictionQuery): ExpertKey | undefined {
    let best: ExpertKey | undefined;
    let bestProt = true;
    let bestPrio = Infinity;
    let bestUsed = Infinity;
    for (const k of q.candidates) {
      const rank = this.rank.get(k);
      const prot = rank !== undefined;
      const prio = prot ? -rank : this.victimPriority(k);
      const used = buffer.entry(k)?.lastUsedNs ?? -1;
      const better =
        best === undefined ||
        (bestProt && !prot) ||
        (prot === bestProt &&
          (prio < bestPrio || (prio === bestPrio && (used < bestUsed || (used === bestUsed && k < best)))));
      if (better) {
        best = k;
        bestProt = prot;
        bestPrio = prio;
        bestUsed = used;
      }
    }
    if (best !== undefined && q.reason === 'prefetch') {
      if (bestProt) return undefined;
      const a = this.admitted.get(q.forKey);
      if (a !== undefined && !(bestPrio < a)) return undefined;
    }
    return best;
  }
}

// ---------------------------------------------------------------------------- helpers

const makeBuffer = bufferOf;

function randomBuffer(rng: Rng, cells: number, slots: number, fill: number): BufferView {
  const n = Math.min(cells, slots, fill);
  const keys = new Set<number>();
  while (keys.size < n) keys.add(rng.int(cells));
  const entries: BufferEntryView[] = [...keys].map((key) => ({
    key,
    state: rng.next() < 0.25 ? 'loading' : 'resident',
    origin: 'cache',
    pinned: rng.next() < 0.15,
    residentSinceNs: 0,
    lastUsedNs: rng.int(4) - 1,
    uses: 1,
  }));
  return makeBuffer(slots, entries);
}

const same = (a: number, b: number): boolean => Object.is(a, b);

// ---------------------------------------------------------------------------- properties

describe('moe-infinity fast paths equal the reference implementations', () => {
  it('ScoreAccumulator: same bounds and row scores over sequences of preparations', () => {
    let keptPreparations = 0;
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 6 }), fc.integer({ min: 1, max: 11 }), fc.integer(), (L, E, seed) => {
        const rng = new Rng(`acc-${seed}`);
        const cap = 1 + rng.int(6);
        const colls = [0, 1].map(
          () => new EamCollection({ layers: L, experts: E }, cap, rng.next() < 0.5 ? 'most-similar' : 'lfu-access'),
        );
        const insert = (c: EamCollection) => {
          const m = Float64Array.from({ length: L * E }, () => (rng.next() < 0.5 ? 0 : rng.int(9)));
          m[rng.int(L * E)] = 1 + rng.int(5);
          c.insert(m);
        };
        for (const c of colls) for (let i = 0; i < 1 + rng.int(cap + 2); i++) insert(c);
        const fast = new ScoreAccumulator({ layers: L, experts: E });
        const ref = new RefAccumulator(L, E);
        const outF = new Float64Array(L * E);
        const outR = new Float64Array(L * E);
        let groups: MatchedGroup[] = [];
        const randomTop = (c: EamCollection): number[] => {
          const k = rng.int(Math.min(c.size, 5) + 1);
          const top: number[] = [];
          for (let j = 0; j < k; j++) top.push(rng.int(c.size));
          if (rng.next() < 0.7) return [...new Set(top)];
          return top;
        };
        for (let step = 0; step < 12; step++) {
          const what = rng.int(6);
          if (step === 0 || what === 0) {
            const ng = rng.next() < 0.7 ? 1 : 1 + rng.int(3);
            groups = Array.from({ length: ng }, () => {
              const collection = colls[rng.int(2)]!;
              const top = randomTop(collection);
              return { collection, top, count: top.length, weight: rng.next() < 0.1 ? 0 : 1 + rng.int(4) };
            });
          } else if (what === 1) {
            // Same matches, permuted.
            groups = groups.map((g) => {
              const top = [...(g.top as number[])];
              for (let j = top.length - 1; j > 0; j--) {
                const t = rng.int(j + 1);
                [top[j], top[t]] = [top[t]!, top[j]!];
              }
              return { ...g, top };
            });
          } else if (what === 2) {
            insert(colls[rng.int(2)]!);
            groups = groups
              .map((g) => ({ ...g, top: (g.top as number[]).filter((n) => n < g.collection.size) }))
              .map((g) => ({ ...g, count: g.top.length }));
          } else if (what === 3) {
            groups = groups.map((g) => ({ ...g, weight: 1 + rng.int(4) }));
          }
          // what 4, 5: the very same matches (a new array of the same values).
          if (what >= 4) groups = groups.map((g) => ({ ...g, top: [...(g.top as number[])] }));
          const from = rng.int(L + 1);
          const to = Math.min(L, from + rng.int(L + 1));
          fast.prepare(groups, from, to);
          ref.prepare(groups, from, to);
          // Repeated matches: rows kept from the last preparation (the path read back below).
          if ((fast as unknown as { keeping: boolean }).keeping) keptPreparations++;
          for (let i = 0; i < L; i++) expect(same(fast.bound(i), ref.bound(i))).toBe(true);
          // Rows in any order and subset (a ranking skips some), some twice.
          const order = Array.from({ length: L }, (_, i) => i).filter(() => rng.next() < 0.8);
          if (rng.next() < 0.5) order.reverse();
          if (order.length > 0) order.push(order[0]!);
          for (const i of order) {
            outF.fill(-3);
            outR.fill(-5);
            fast.fill(i, outF);
            ref.fill(i, outR);
            for (let e = 0; e < E; e++) expect(same(outF[i * E + e]!, outR[i * E + e]!)).toBe(true);
          }
        }
      }),
      { numRuns: 300 },
    );
    expect(keptPreparations).toBeGreaterThan(50);
  });

  it('selectPrefetch: same keys, scores and urgencies, with full scores and with a row source', () => {
    fc.assert(
      fc.property(
        fc.record({
          L: fc.integer({ min: 1, max: 8 }),
          E: fc.integer({ min: 1, max: 9 }),
          budget: fc.integer({ min: 0, max: 40 }),
          horizon: fc.integer({ min: 1, max: 8 }),
          proximity: fc.boolean(),
          order: fc.constantFrom('nearest-first' as const, 'score' as const),
          seed: fc.integer(),
        }),
        ({ L, E, budget, horizon, proximity, order, seed }) => {
          const rng = new Rng(`sel-${seed}`);
          const o = { layers: L, experts: E, horizon, proximity, order };
          const layer = rng.int(L);
          const coarse = rng.next() < 0.5;
          const scores = Float64Array.from({ length: L * E }, () =>
            rng.next() < 0.3 ? 0 : coarse ? rng.int(4) / 4 : rng.next(),
          );
          const scratch = new RankScratch();
          for (let rep = 0; rep < 2; rep++) {
            const got = selectPrefetch(scores, layer, budget, o, scratch);
            const want = refSelect(scores, layer, budget, o);
            expect(got.count).toBe(want.keys.length);
            for (let j = 0; j < got.count; j++) {
              expect(got.keys[j]).toBe(want.keys[j]);
              expect(same(got.scores[j]!, want.scores[j]!)).toBe(true);
              expect(same(got.urgency[j]!, want.urgency[j]!)).toBe(true);
            }
          }
          // With a row source (collections of random EAMs, one or two groups).
          const coll = new EamCollection({ layers: L, experts: E }, 8, 'most-similar');
          for (let n = 0; n < 6; n++)
            coll.insert(Float64Array.from({ length: L * E }, () => (rng.next() < 0.4 ? 0 : rng.int(7))));
          if (coll.size === 0) return;
          const ng = 1 + rng.int(2);
          const groups = Array.from({ length: ng }, () => {
            const top = [...new Set(Array.from({ length: 1 + rng.int(4) }, () => rng.int(coll.size)))];
            return { collection: coll, top, count: top.length, weight: 1 + rng.int(3) };
          });
          const fast = new ScoreAccumulator({ layers: L, experts: E });
          const ref = new RefAccumulator(L, E);
          const { from, to } = { from: layer + 1, to: Math.min(L, layer + 1 + horizon) };
          for (let rep = 0; rep < 2; rep++) {
            fast.prepare(groups, from, to);
            ref.prepare(groups, from, to);
            const got = selectPrefetch(new Float64Array(L * E), layer, budget, o, scratch, fast);
            const want = refSelect(new Float64Array(L * E), layer, budget, o, ref);
            expect(got.count).toBe(want.keys.length);
            for (let j = 0; j < got.count; j++) {
              expect(got.keys[j]).toBe(want.keys[j]);
              expect(same(got.scores[j]!, want.scores[j]!)).toBe(true);
              expect(same(got.urgency[j]!, want.urgency[j]!)).toBe(true);
            }
          }
        },
      ),
      { numRuns: 400 },
    );
  });

  it('selectPrefetch: the same over sequences of rankings sharing a scratch', () => {
    fc.assert(
      fc.property(
        fc.record({
          L: fc.integer({ min: 2, max: 10 }),
          E: fc.integer({ min: 1, max: 9 }),
          proximity: fc.boolean(),
          order: fc.constantFrom('nearest-first' as const, 'score' as const),
          withSource: fc.boolean(),
          seed: fc.integer(),
        }),
        ({ L, E, proximity, order, withSource, seed }) => {
          const rng = new Rng(`seq-${seed}`);
          const o = { layers: L, experts: E, horizon: L, proximity, order };
          const coarse = rng.next() < 0.3;
          let scores = Float64Array.from({ length: L * E }, () =>
            rng.next() < 0.2 ? 0 : coarse ? rng.int(4) / 4 : rng.next(),
          );
          const scratch = new RankScratch();
          const coll = new EamCollection({ layers: L, experts: E }, 8, 'most-similar');
          for (let n = 0; n < 6; n++)
            coll.insert(Float64Array.from({ length: L * E }, () => (rng.next() < 0.3 ? 0 : rng.int(9))));
          // Matches that mostly stay (the next ranking's threshold is then near the last one's).
          let top = [...new Set(Array.from({ length: 1 + rng.int(4) }, () => rng.int(Math.max(1, coll.size))))];
          let weight = 1 + rng.int(3);
          for (let step = 0; step < 25; step++) {
            const layer = rng.int(L - 1);
            const budget = 1 + rng.int(2 * E * (L - layer));
            // Scores drift (the guess is near), jump (far off) or stay.
            const jump = rng.next();
            scores = scores.map((v) =>
              jump < 0.15 ? v * (0.2 + 3 * rng.next()) : jump < 0.8 ? v * (0.9 + 0.2 * rng.next()) : v,
            );
            if (rng.next() < 0.1) scores[rng.int(L * E)] = 0;
            let got: Selection;
            let want: ReturnType<typeof refSelect>;
            if (withSource && coll.size > 0) {
              if (rng.next() < 0.2)
                top = [...new Set(Array.from({ length: 1 + rng.int(4) }, () => rng.int(coll.size)))];
              if (rng.next() < 0.3) weight = 1 + rng.int(3);
              const groups = [{ collection: coll, top, count: top.length, weight }];
              const fast = new ScoreAccumulator({ layers: L, experts: E });
              const ref = new RefAccumulator(L, E);
              const from = layer + 1;
              fast.prepare(groups, from, L);
              ref.prepare(groups, from, L);
              got = selectPrefetch(new Float64Array(L * E), layer, budget, o, scratch, fast);
              want = refSelect(new Float64Array(L * E), layer, budget, o, ref);
            } else {
              got = selectPrefetch(scores, layer, budget, o, scratch);
              want = refSelect(scores, layer, budget, o);
            }
            expect(got.count).toBe(want.keys.length);
            for (let j = 0; j < got.count; j++) {
              expect(got.keys[j]).toBe(want.keys[j]);
              expect(same(got.scores[j]!, want.scores[j]!)).toBe(true);
              expect(same(got.urgency[j]!, want.urgency[j]!)).toBe(true);
            }
          }
        },
      ),
      { numRuns: 400 },
    );
  });

  it('selectPrefetch: layer after layer (the floor from the last ranking), with drifting, jumping and tied scores, wide rows', () => {
    let floored = 0;
    let failed = 0;
    let wide = 0;
    // The ways the code took (`RankScratch.paths`), summed over every scratch.
    const took = { all: 0, dropWorst: 0, heapOfCandidates: 0, rescan: 0, scan: 0, rowsReused: 0 };
    fc.assert(
      fc.property(
        fc.record({
          L: fc.integer({ min: 3, max: 12 }),
          E: fc.constantFrom(1, 2, 5, 8, 31, 32, 33, 70),
          proximity: fc.boolean(),
          order: fc.constantFrom('nearest-first' as const, 'score' as const),
          withSource: fc.boolean(),
          seed: fc.integer(),
        }),
        ({ L, E, proximity, order, withSource, seed }) => {
          const rng = new Rng(`floor-${seed}`);
          const o = { layers: L, experts: E, horizon: L, proximity, order };
          const coarse = rng.next() < 0.3;
          let scores = Float64Array.from({ length: L * E }, () =>
            rng.next() < 0.2 ? 0 : coarse ? rng.int(4) / 4 : rng.next(),
          );
          const scratch = new RankScratch();
          const coll = new EamCollection({ layers: L, experts: E }, 8, 'most-similar');
          for (let n = 0; n < 6; n++)
            coll.insert(Float64Array.from({ length: L * E }, () => (rng.next() < 0.3 ? 0 : rng.int(9))));
          let top = [...new Set(Array.from({ length: 1 + rng.int(4) }, () => rng.int(Math.max(1, coll.size))))];
          const weight = 1 + rng.int(3);
          const budget = 1 + rng.int(Math.max(1, Math.floor((E * L) / 2)));
          for (let sweep = 0; sweep < 2; sweep++) {
            for (let layer = 0; layer < L - 1; layer++) {
              const jump = rng.next();
              scores = scores.map((v) =>
                jump < 0.15
                  ? v * (0.2 + 3 * rng.next())
                  : jump < 0.3
                    ? v * 0.5
                    : jump < 0.8
                      ? v * (0.9 + 0.2 * rng.next())
                      : v,
              );
              const guess = scratch.lastLayer === layer - 1 ? scratch.lastWorst * FLOOR_GUESS : 0;
              let got: Selection;
              let want: ReturnType<typeof refSelect>;
              let all: ReturnType<typeof refSelect>;
              if (withSource && coll.size > 0) {
                if (rng.next() < 0.3)
                  top = [...new Set(Array.from({ length: 1 + rng.int(4) }, () => rng.int(coll.size)))];
                const groups = [{ collection: coll, top, count: top.length, weight }];
                const fast = new ScoreAccumulator({ layers: L, experts: E });
                const ref = new RefAccumulator(L, E);
                fast.prepare(groups, layer + 1, L);
                ref.prepare(groups, layer + 1, L);
                got = selectPrefetch(new Float64Array(L * E), layer, budget, o, scratch, fast);
                const sc = new Float64Array(L * E);
                want = refSelect(sc, layer, budget, o, ref);
                all = refSelect(sc, layer, L * E, o, ref);
              } else {
                got = selectPrefetch(scores, layer, budget, o, scratch);
                want = refSelect(scores, layer, budget, o);
                all = refSelect(scores, layer, L * E, o);
              }
              // The code floors a ranking whose budget is below the horizon's cells (positive or
              // not); exactly `budget` positive cells reaching the floor drop none.
              if (guess > 0 && budget < (L - layer - 1) * E && all.keys.length >= budget) {
                floored++;
                const reached = all.scores.filter((s) => s >= guess).length;
                if (reached < budget) failed++;
                else if (reached - budget > budget) wide++;
              }
              expect(got.count).toBe(want.keys.length);
              for (let j = 0; j < got.count; j++) {
                expect(got.keys[j]).toBe(want.keys[j]);
                expect(same(got.scores[j]!, want.scores[j]!)).toBe(true);
                expect(same(got.urgency[j]!, want.urgency[j]!)).toBe(true);
              }
            }
          }
          for (const k of Object.keys(took) as (keyof typeof took)[]) took[k] += scratch.paths[k];
        },
      ),
      { numRuns: 150 },
    );
    // Every outcome of the floor was exercised: up to twice the budget reached it (the worst
    // dropped), more (a heap of the best), too few (rescan without it).
    expect(floored - failed - wide).toBeGreaterThan(50);
    expect(wide).toBeGreaterThan(10);
    expect(failed).toBeGreaterThan(10);
    // And the code took exactly those ways (a floor that fell short for want of positive cells
    // rescans too); the plain scan, every cell fitting, and a rescan reading the rows the floored
    // scan computed were reached as well. A way disabled (the floor never guessed, a heap instead
    // of the drop) gives the same selection, so only these counts can tell.
    expect(took.dropWorst).toBe(floored - failed - wide);
    expect(took.heapOfCandidates).toBe(wide);
    expect(took.rescan).toBeGreaterThanOrEqual(failed);
    expect(took.scan).toBeGreaterThan(50);
    expect(took.all).toBeGreaterThan(10);
    expect(took.rowsReused).toBeGreaterThan(10);
  });

  it('PrefetchQueue.plan: same decisions and outstanding keys over sequences of re-rankings', () => {
    fc.assert(
      fc.property(fc.integer({ min: 2, max: 40 }), fc.integer(), (cells, seed) => {
        const rng = new Rng(`plan-${seed}`);
        const fast = new PrefetchQueue(cells);
        const ref = new RefQueue(cells);
        for (let step = 0; step < 15; step++) {
          // The ranked set: distinct keys with urgencies (some tied).
          const keys = [...new Set(Array.from({ length: rng.int(cells) }, () => rng.int(cells)))];
          const sel: Selection = {
            count: keys.length,
            keys: Int32Array.from(keys),
            scores: new Float64Array(keys.length).fill(1),
            urgency: Float64Array.from(keys, () => 1 + rng.int(4) / 2),
          };
          // Buffer: our outstanding keys in random states, plus others.
          const entries = new Map<number, BufferEntryView>();
          const put = (key: number) =>
            entries.set(key, {
              key,
              state: rng.next() < 0.6 ? 'loading' : 'resident',
              origin: 'prefetch',
              pinned: rng.next() < 0.15,
              residentSinceNs: 0,
              lastUsedNs: 0,
              uses: 0,
            });
          for (const k of ref.issued) if (rng.next() < 0.8) put(k);
          for (let j = 0; j < 3; j++) if (rng.next() < 0.5) put(rng.int(cells));
          const buffer = makeBuffer(cells, [...entries.values()]);
          const admitted = keys.filter(() => rng.next() < 0.6);
          if (rng.next() < 0.2) admitted.push(rng.int(cells));
          const a = Int32Array.from(admitted);
          const got = fast.plan(buffer, sel, a, a.length);
          const want = ref.plan(buffer, sel, admitted);
          expect({ cancel: [...(got.cancel ?? [])], prefetch: [...(got.prefetch ?? [])] }).toEqual(want);
          expect([...fast.outstanding]).toEqual([...ref.issued]);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('CachePriorities: same victims, minimum victim priority and admissions', () => {
    const stats = { walks: 0, rewalks: 0, fromMin: 0 };
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 5 }),
        fc.integer({ min: 1, max: 8 }),
        fc.boolean(),
        fc.integer(),
        (L, E, requestPriorities, seed) => {
          const rng = new Rng(`cache-${seed}`);
          const cells = L * E;
          // Admission walks keep 1–3 victims or the default: rounds often need more than one walk.
          const firstVictims = rng.next() < 0.75 ? 1 + rng.int(3) : undefined;
          const fast = new CachePriorities({
            layers: L,
            experts: E,
            requestPriorities,
            initialLayerBoost: 1,
            firstVictims,
            // Small worlds: kept victims and the first walk's limit apply from 0 slots when a limit is drawn.
            keptOrderMinSlots: firstVictims === undefined ? undefined : 0,
            allVictimsMaxSlots: firstVictims === undefined ? undefined : 0,
          });
          const ref = new RefCache(fast.priority, requestPriorities);
          for (let step = 0; step < 10; step++) {
            for (let k = 0; k < cells; k++) fast.priority[k] = rng.next() < 0.4 ? 0 : rng.int(5) / 4;
            const ranked = [...new Set(Array.from({ length: rng.int(cells) }, () => rng.int(cells)))];
            const urgency = Float64Array.from(ranked, () => rng.int(6) / 2);
            fast.setRanked(ranked, urgency, ranked.length);
            ref.setRanked(ranked, urgency, ranked.length);
            const slots = 1 + rng.int(cells + 2);
            const buffer = randomBuffer(rng, cells, slots, rng.int(slots + 1));
            const evictable = [...buffer.entries()]
              .filter((e) => e.state === 'resident' && !e.pinned)
              .map((e) => e.key);
            expect(same(fast.minVictimPriority(buffer), ref.minVictimPriority(buffer))).toBe(true);
            // Admission round over the absent ranked keys in random order and frequencies.
            const absent = ranked.filter((k) => !buffer.has(k));
            const limit = rng.next() < 0.5 ? absent.length : Infinity;
            // Sometimes the ranked set changes between the minimum and the round.
            if (rng.next() < 0.2) {
              const again = [...new Set(Array.from({ length: rng.int(cells) }, () => rng.int(cells)))];
              const u2 = Float64Array.from(again, () => rng.int(6) / 2);
              fast.setRanked(again, u2, again.length);
              ref.setRanked(again, u2, again.length);
            }
            // The round may start from the victims the minimum's walk kept (stale after a re-ranking).
            fast.beginAdmission(buffer, limit, rng.next() < 0.7);
            const gate = ref.admission(buffer, limit);
            for (const k of absent) {
              const freq = rng.int(6) / 4;
              const a = fast.admitNext(buffer, k, freq);
              expect(a).toBe(gate(k, freq));
              if (!a && rng.next() < 0.7) break;
            }
            // Victims for the executor's queries: its candidate lists and arbitrary subsets.
            for (let q = 0; q < 6; q++) {
              const candidates = q === 0 ? evictable : evictable.filter(() => rng.next() < 0.6);
              const forKey = absent.length > 0 && rng.next() < 0.7 ? absent[rng.int(absent.length)]! : rng.int(cells);
              for (const reason of ['demand', 'prefetch'] as const) {
                const query = { reason, forKey, candidates };
                expect(fast.chooseVictim(buffer, query)).toBe(ref.chooseVictim(buffer, query));
              }
            }
            // The closure form keeps its own victims.
            const g1 = fast.admission(buffer, limit);
            const g2 = ref.admission(buffer, limit);
            for (const k of absent) {
              const freq = rng.int(6) / 4;
              expect(g1(k, freq)).toBe(g2(k, freq));
            }
          }
          for (const k of ['walks', 'rewalks', 'fromMin'] as const) stats[k] += fast.admissionStats[k];
        },
      ),
      { numRuns: 300 },
    );
    // Coverage: rounds started from the minimum's walk, and rounds that needed more victims than one walk kept.
    expect(stats.fromMin).toBeGreaterThan(800);
    expect(stats.rewalks).toBeGreaterThan(60);
    expect(stats.walks).toBeGreaterThan(stats.fromMin);
  });

  it('CachePriorities: the same priorities after layer and key resets as per-request lookups', () => {
    const refLayer = (
      pr: Float64Array,
      eams: RequestEams,
      ids: readonly number[],
      layer: number,
      E: number,
      boost: number,
    ): void => {
      const base = layer * E;
      pr.fill(0, base, base + E);
      let tokens = 0;
      for (const id of ids) {
        tokens += eams.tokens(id);
        for (const phase of ['prefill', 'decode'] as const) {
          const m = eams.get(id, phase);
          if (m) for (let e = 0; e < E; e++) pr[base + e]! += m[base + e]!;
        }
      }
      const f = tokens > 0 ? boost / tokens : 0;
      for (let e = 0; e < E; e++) pr[base + e]! *= f;
    };
    const refKey = (
      eams: RequestEams,
      ids: readonly number[],
      layer: number,
      expert: number,
      boost: number,
    ): number => {
      let count = 0;
      let tokens = 0;
      for (const id of ids) {
        count += eams.count(id, layer, expert);
        tokens += eams.tokens(id);
      }
      return tokens > 0 ? count * (boost / tokens) : 0;
    };
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 5 }), fc.integer({ min: 1, max: 8 }), fc.integer(), (L, E, seed) => {
        const rng = new Rng(`reset-${seed}`);
        const eams = new RequestEams({ layers: L, experts: E });
        const fast = new CachePriorities({
          layers: L,
          experts: E,
          requestPriorities: true,
          initialLayerBoost: rng.int(3) / 2,
        });
        const ref = new Float64Array(L * E);
        let ids: number[] = [0];
        let nextId = 1;
        for (let step = 0; step < 60; step++) {
          const op = rng.int(12);
          if (op === 0) {
            // A new batch: some requests stay, some join.
            ids = ids.filter(() => rng.next() < 0.6);
            while (ids.length < 2 || rng.next() < 0.3) ids.push(nextId++);
            for (const id of ids) eams.addTokens(id, rng.next() < 0.5 ? 'prefill' : 'decode', 1 + rng.int(5));
          } else if (op === 1 && ids.length > 0) {
            // The batch array changed in place.
            ids[rng.int(ids.length)] = rng.next() < 0.5 ? nextId++ : ids[0]!;
          } else if (op === 2 && ids.length > 0) {
            eams.take(ids[rng.int(ids.length)]!, () => {});
          } else if (op <= 8) {
            const l = rng.int(L);
            for (const id of ids) {
              const counts = Array.from({ length: E }, () => (rng.next() < 0.5 ? 0 : rng.int(4)));
              const row =
                rng.next() < 0.7 ? Int32Array.from(counts) : counts.map((c) => c + Math.sqrt(2 + rng.int(1000)) / 7);
              eams.addRow(id, rng.next() < 0.5 ? 'prefill' : 'decode', l, row);
            }
            fast.resetLayer(eams, ids, l);
            refLayer(ref, eams, ids, l, E, fast.boost(l));
            // Experts of that layer used right after (the executor's order).
            while (rng.next() < 0.6) {
              const key = l * E + rng.int(E);
              fast.resetKey(eams, ids, key);
              ref[key] = refKey(eams, ids, l, key % E, fast.boost(l));
            }
          } else {
            const key = rng.int(L * E);
            fast.resetKey(eams, ids, key);
            ref[key] = refKey(eams, ids, Math.floor(key / E), key % E, fast.boost(Math.floor(key / E)));
          }
          for (let k = 0; k < L * E; k++) expect(same(fast.priority[k]!, ref[k]!)).toBe(true);
        }
      }),
      { numRuns: 300 },
    );
  });
});
