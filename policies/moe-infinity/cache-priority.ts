/**
 * MoE-Infinity's activation-aware expert cache (DESIGN §8, "Cache").
 *
 * Every expert has a cache priority; when a slot is needed the resident, unpinned expert with
 * the lowest priority is evicted.
 * - Experts in the prefetcher's current ranked set (being prefetched, or resident and
 *   predicted for a coming layer) have maximal priority: a prefetch never evicts them (the
 *   executor never evicts a loading one anyway); an on-demand fetch evicts one only when
 *   nothing else is evictable.
 * - After use, or once known unused (its layer was routed in this iteration and did not pick
 *   it), an expert's priority resets to its frequency in the current request EAM: its count
 *   summed over the requests of the batch (prefill and decode together), divided by the tokens
 *   those requests have routed so far. Dividing by the tokens keeps priorities set in
 *   different iterations comparable (a long prompt's raw counts would otherwise outrank every
 *   later decode step for ever); within one reset it ranks exactly as the raw counts do.
 * - Initial-layer boost (the first layers benefit least from prefetching, DESIGN §8):
 *   priority = frequency × (1 + boost × (1 − layer / L)); boost 0 disables it. Multiplicative,
 *   so it re-weights used experts across layers without lifting an expert the request never
 *   used above one it did.
 * - Ties: least recently used first, then lowest key (deterministic).
 * - Prefetch admission (`admission`, the policy's `prefetchAdmission: 'priority'`): when the
 *   buffer is full a prefetch may evict a cached expert only if that expert's priority is
 *   below the prefetch's expected activation frequency (same unit: activations per token).
 *   The paper says prefetched experts have maximal priority but not when a prediction may
 *   displace a cached expert; without this rule a ranked set as large as the buffer flushes
 *   the cache (measurements in the policy header).
 *
 * With `cachePriorities` off the cache is LRU (still never evicting the ranked set for a
 * prefetch; every prefetch is admitted) — the ablation "without activation-aware caching".
 */
import type { BufferView, EvictionQuery, ExpertKey } from '../../sim/serving/policy.ts';
import type { Phase, RequestEams } from './eam.ts';
import { EvictableSet } from '../cache/evictable-set.ts';
import { CheapestVictims } from './cheapest-victims.ts';
import { ExecutorVictims, KEPT_ORDER_MIN_SLOTS, type VictimState } from './executor-victims.ts';

const PHASES: readonly Phase[] = ['prefill', 'decode'];

export interface CachePriorityOptions {
  readonly layers: number;
  readonly experts: number;
  /** Request-EAM priorities (true) or LRU (false). */
  readonly requestPriorities: boolean;
  /** Boost of the first layers: priority × (1 + boost·(1 − layer/L)). */
  readonly initialLayerBoost: number;
  /** Buffers of at least this many slots answer the executor from a kept order (`victimInBuffer`); default `KEPT_ORDER_MIN_SLOTS`. */
  readonly keptOrderMinSlots?: number;
  /** Victims an admission round's first walk keeps (speed only); default `FIRST_VICTIMS`. */
  readonly firstVictims?: number;
  /** Buffers under this many slots keep every victim in an admission walk (speed only); default `ALL_VICTIMS_MAX_SLOTS`. */
  readonly allVictimsMaxSlots?: number;
}

/**
 * Victims an admission round's first walk keeps (`CachePriorities.admitNext`). Speed only (any
 * value gives the same victims): at a thousand slots a round hands out 3–4 on average (MoEpic's
 * min-vram, Qwen, V_e 720 and 1200: 174 121 rounds), so 8 serve most rounds with one walk.
 */
export const FIRST_VICTIMS = 8;

/**
 * Buffers under this many slots keep every victim in an admission round's first walk (a few
 * dozen: walking again for more cost more than ordering them all on the serving bench's 61
 * slots); larger ones keep `FIRST_VICTIMS`. Speed only (any value gives the same victims): at
 * MoEpic's min-vram, Qwen, V_e 240 (244 slots) ordering all of them took ~40 % of the run's
 * CPU profile (heap sifts).
 */
export const ALL_VICTIMS_MAX_SLOTS = 128;

export class CachePriorities implements VictimState {
  /** Priority per expert key (request-EAM frequency × boost), set at the last reset. */
  readonly priority: Float64Array;
  private readonly boostFactor: Float64Array;
  /** Rank in the prefetcher's current ranked set, valid where `rankGen[key] === gen`. */
  readonly rank: Float64Array;
  /** Where `rankGen[key] === generation`, `key` is in the ranked set (at urgency `rank[key]`). */
  readonly rankGen: Uint32Array;
  private gen = 1;
  /** Expected activation frequency of the prefetches admitted in the current ranking (same generation). */
  private readonly admitted: Float64Array;
  private readonly admittedGen: Uint32Array;

  constructor(private readonly o: CachePriorityOptions) {
    const n = o.layers * o.experts;
    this.priority = new Float64Array(n);
    this.boostFactor = new Float64Array(o.layers);
    for (let l = 0; l < o.layers; l++) this.boostFactor[l] = 1 + o.initialLayerBoost * (1 - l / o.layers);
    this.rank = new Float64Array(n);
    this.rankGen = new Uint32Array(n);
    this.admitted = new Float64Array(n);
    this.admittedGen = new Uint32Array(n);
    this.batchCount = new Float64Array(n);
    this.countVersion = new Float64Array(o.layers).fill(-1);
  }

  /** Multiplier of layer `layer`'s priorities. */
  boost(layer: number): number {
    return this.boostFactor[layer]!;
  }

  /**
   * Sets the prefetcher's ranked set: maximal priority. `urgency[j]` (default: j) orders it,
   * lower most urgent. Clears the admissions of the previous set.
   */
  setRanked(keys: ArrayLike<ExpertKey>, urgency?: ArrayLike<number>, count = keys.length): void {
    const gen = ++this.gen;
    this.version++;
    const rank = this.rank;
    const rankGen = this.rankGen;
    if (urgency) {
      for (let j = 0; j < count; j++) {
        const k = keys[j]!;
        rank[k] = urgency[j]!;
        rankGen[k] = gen;
      }
    } else {
      for (let j = 0; j < count; j++) {
        const k = keys[j]!;
        rank[k] = j;
        rankGen[k] = gen;
      }
    }
  }

  /** Urgency (rank) of `key` in the current ranked set, or undefined. */
  rankOf(key: ExpertKey): number | undefined {
    return this.rankGen[key] === this.gen ? this.rank[key]! : undefined;
  }

  /** Records that a prefetch of `key` with expected activation frequency `freq` was admitted. */
  markAdmitted(key: ExpertKey, freq: number): void {
    this.admitted[key] = freq;
    this.admittedGen[key] = this.gen;
  }

  /** The priority (layer, expert) resets to now, for the requests `batchIds` of the batch. */
  valueFor(eams: RequestEams, batchIds: readonly number[], layer: number, expert: number): number {
    let count = 0;
    let tokens = 0;
    for (const id of batchIds) {
      count += eams.count(id, layer, expert);
      tokens += eams.tokens(id);
    }
    return tokens > 0 ? count * (this.boostFactor[layer]! / tokens) : 0;
  }

  // The batch as `resetLayer` last saw it: its requests' EAMs (prefill then decode, in batch
  // order) and routed tokens, valid while the request EAMs' layout and the ids are the same.
  private bEams: RequestEams | null = null;
  private bIds: number[] = [];
  private bLayout = -1;
  private readonly bArrays: Float64Array[] = [];
  private bTokens = 0;
  /**
   * Σ over the batch of each key's count (both phases), as `resetLayer` summed it: valid for
   * `layer` while the request EAMs are at version `countVersion[layer]` (integer counts only,
   * whose sums are exact in any order).
   */
  private readonly batchCount: Float64Array = new Float64Array(0);
  private readonly countVersion: Float64Array = new Float64Array(0);

  private sameBatch(eams: RequestEams, batchIds: readonly number[]): boolean {
    if (this.bEams !== eams || this.bLayout !== eams.layoutVersion || this.bIds.length !== batchIds.length)
      return false;
    for (let i = 0; i < batchIds.length; i++) if (this.bIds[i] !== batchIds[i]) return false;
    return true;
  }

  private useBatch(eams: RequestEams, batchIds: readonly number[]): void {
    if (this.sameBatch(eams, batchIds)) return;
    this.bEams = eams;
    this.bLayout = eams.layoutVersion;
    this.bIds = batchIds.slice();
    this.bArrays.length = 0;
    let tokens = 0;
    for (const id of batchIds) {
      tokens += eams.tokens(id);
      for (const phase of PHASES) {
        const m = eams.get(id, phase);
        if (m) this.bArrays.push(m);
      }
    }
    this.bTokens = tokens;
    this.countVersion.fill(-1);
  }

  /** Resets every expert of `layer` (its routing is known: each one is used or known unused). */
  resetLayer(eams: RequestEams, batchIds: readonly number[], layer: number): void {
    const E = this.o.experts;
    const base = layer * E;
    const p = this.priority;
    this.version++;
    this.useBatch(eams, batchIds);
    p.fill(0, base, base + E);
    const arrays = this.bArrays;
    for (let a = 0; a < arrays.length; a++) {
      const m = arrays[a]!;
      for (let e = 0; e < E; e++) p[base + e]! += m[base + e]!;
    }
    if (eams.integral) {
      for (let e = 0; e < E; e++) this.batchCount[base + e] = p[base + e]!;
      this.countVersion[layer] = eams.version;
    }
    const tokens = this.bTokens;
    const f = tokens > 0 ? this.boostFactor[layer]! / tokens : 0;
    for (let e = 0; e < E; e++) p[base + e]! *= f;
  }

  /** Resets one expert (after use). */
  resetKey(eams: RequestEams, batchIds: readonly number[], key: ExpertKey): void {
    const E = this.o.experts;
    const layer = Math.floor(key / E);
    this.version++;
    if (this.countVersion[layer] === eams.version && this.sameBatch(eams, batchIds)) {
      // Nothing changed since the layer's reset: its summed count is `valueFor`'s count (exact).
      const tokens = this.bTokens;
      this.priority[key] = tokens > 0 ? this.batchCount[key]! * (this.boostFactor[layer]! / tokens) : 0;
      return;
    }
    this.priority[key] = this.valueFor(eams, batchIds, layer, key % E);
  }

  /** Priority a prefetch must beat to evict `key` (request priorities; LRU: 0). */
  private victimPriority(key: ExpertKey): number {
    return this.o.requestPriorities ? this.priority[key]! : 0;
  }

  // The cheapest victims a prefetch could evict now (resident, unpinned, outside the ranked set),
  // collected by `scanVictims` for one admission round in eviction order; the ones handed out are
  // popped. A round hands out a few (3–4 on average at a thousand slots): the first walk keeps
  // `FIRST_VICTIMS`, and a round that needs more walks again for twice as many.
  private readonly adm = new CheapestVictims();
  private readonly evictable = new EvictableSet();
  private vFor: BufferView | null = null;
  /** What `vFor`'s walk read: the ranked set (`gen`) and the priorities (`version`). */
  private vGen = -1;
  private vVersion = -1;
  // The admission round (`beginAdmission` / `admitNext`): free slots left, victims handed out, cap.
  private admFree = 0;
  private admVi = 0;
  private admLimit = 0;
  /** The simulated time of the round (NaN: not given); its walks start the executor's kept victims. */
  private admNow = NaN;
  /** Counters for tests: victim walks of admission rounds, walks again for more, rounds started from `minVictimPriority`'s walk. */
  readonly admissionStats = { walks: 0, rewalks: 0, fromMin: 0 };

  /**
   * Victims an admission round's first walk keeps: `firstVictims`, or all of them in a buffer
   * under `ALL_VICTIMS_MAX_SLOTS` slots.
   */
  private firstWalkLimit(buffer: BufferView): number {
    return buffer.slots < (this.o.allVictimsMaxSlots ?? ALL_VICTIMS_MAX_SLOTS) ? Infinity : this.firstVictims;
  }

  /** Collects the `limit` cheapest victims a prefetch could evict now (resident, unpinned, outside the ranked set). */
  private scanVictims(buffer: BufferView, limit: number): void {
    const req = this.o.requestPriorities;
    const prio = this.priority;
    const rankGen = this.rankGen;
    const gen = this.gen;
    const adm = this.adm;
    adm.clear(limit);
    // The evictable keys, dense (the order is total: any walk order gives the same victims).
    const set = this.evictable.of(buffer);
    const keys = set.keys;
    const used = set.lastUsed;
    const n = set.count;
    let bound = adm.unrankedBound();
    for (let i = 0; i < n; i++) {
      const k = keys[i]!;
      if (rankGen[k] === gen) continue;
      const p = req ? prio[k]! : 0;
      if (p > bound) continue;
      adm.offer(k, false, p, used[k]!);
      bound = adm.unrankedBound();
    }
    adm.finish();
    this.admissionStats.walks++;
    this.victims.seed(buffer, this.admNow, adm);
    this.vFor = buffer;
    this.vGen = gen;
    this.vVersion = this.version;
  }

  /**
   * Starts a prefetch admission round: the policy's allocation-free form of `admission` (same
   * decisions; call after `setRanked`, then `admitNext` in queue order, with the buffer
   * unchanged in between). `afterMinVictim`: `minVictimPriority(buffer)` was the last call
   * before this one, with the buffer unchanged since: the round starts from the victims its
   * walk kept. `now`, the simulated time (NaN: not given): the round's walks also start the
   * executor's kept victims (`ExecutorVictims.seed`), which its prefetches evict at this time.
   */
  beginAdmission(buffer: BufferView, maxAdmissions = Infinity, afterMinVictim = false, now = NaN): void {
    this.admNow = now;
    this.admFree = buffer.slots - buffer.occupied;
    this.admVi = 0;
    this.admLimit = maxAdmissions;
    const kept = afterMinVictim && this.vFor === buffer && this.vGen === this.gen && this.vVersion === this.version;
    if (kept) this.admissionStats.fromMin++;
    else this.vFor = null;
  }

  /** One step of the admission round begun by `beginAdmission`: see `admission`. */
  admitNext(buffer: BufferView, key: ExpertKey, freq: number): boolean {
    if (this.admFree > 0) {
      this.admFree--;
      this.markAdmitted(key, Infinity);
      return true;
    }
    if (this.admVi >= this.admLimit) return false;
    const adm = this.adm;
    if (this.vFor !== buffer) this.scanVictims(buffer, Math.min(this.firstWalkLimit(buffer), this.admLimit));
    let v = adm.peek();
    if (v < 0 && adm.mayHoldMore()) {
      // Every victim kept was handed out and more may exist: walk again for twice as many, and
      // pass over the ones handed out (the first ones again: nothing the order reads changed).
      this.scanVictims(buffer, Math.min(2 * adm.limit, this.admLimit));
      this.admissionStats.rewalks++;
      for (let i = 0; i < this.admVi; i++) adm.pop();
      v = adm.peek();
    }
    // Not spoken for when refused: a next call sees the same victim first.
    if (v < 0 || !(adm.prioAt(v) < freq)) return false;
    adm.pop();
    this.admVi++;
    this.markAdmitted(key, freq);
    return true;
  }

  /**
   * Prefetch admission for one re-ranking (call in queue order, after `setRanked`): a ranked
   * expert that is not in the buffer is admitted while a slot is free, or when the
   * lowest-priority evictable expert outside the ranked set has a cache priority below
   * `freq` (its expected activation frequency, the cache priorities' unit); that victim is
   * then spoken for. The executor's later `chooseVictim` calls pick the same victims, in the
   * same order, and decline if they do not.
   */
  admission(buffer: BufferView, maxAdmissions = Infinity): (key: ExpertKey, freq: number) => boolean {
    let free = buffer.slots - buffer.occupied;
    let victims: ExpertKey[] | null = null;
    let vi = 0;
    return (key, freq) => {
      if (free > 0) {
        free--;
        this.markAdmitted(key, Infinity);
        return true;
      }
      if (!victims) victims = this.cheapestVictims(buffer, maxAdmissions);
      const v = victims[vi];
      if (v === undefined || !(this.victimPriority(v) < freq)) return false;
      vi++;
      this.markAdmitted(key, freq);
      return true;
    };
  }

  /**
   * The cache priority of the cheapest victim a prefetch could evict now (resident, unpinned,
   * outside the ranked set), or Infinity when there is none — a prefetch into a full buffer
   * needs a higher expected activation frequency than this.
   */
  minVictimPriority(buffer: BufferView, now = NaN): number {
    // `now`: as `beginAdmission`'s.
    this.admNow = now;
    // The walk keeps the first victims too: most rounds that follow need a few (`beginAdmission`).
    this.scanVictims(buffer, this.firstWalkLimit(buffer));
    const v = this.adm.peek();
    return v < 0 ? Infinity : this.adm.prioAt(v);
  }

  /** The `limit` cheapest resident, unpinned experts outside the ranked set, in eviction order (priority, last use, key). */
  private cheapestVictims(buffer: BufferView, limit: number): ExpertKey[] {
    this.admNow = NaN;
    this.scanVictims(buffer, limit);
    this.vFor = null;
    const out: ExpertKey[] = [];
    while (out.length < limit) {
      const v = this.adm.peek();
      if (v < 0) break;
      out.push(this.adm.keyAt(v));
      this.adm.pop();
    }
    return out;
  }

  /** Bumped whenever something the eviction order reads changes (see `noteUse`). */
  private version = 0;
  /** An expert was used (its last use changed): the eviction order must be rebuilt. */
  noteUse(): void {
    this.version++;
  }

  /** Whether something the eviction order reads changed since `version` was read (priorities, the ranked set, uses). */
  get orderVersion(): number {
    return this.version;
  }
  /** The current ranked set's generation (`rankGen[key] === generation`: ranked). */
  get generation(): number {
    return this.gen;
  }
  get firstVictims(): number {
    return this.o.firstVictims ?? FIRST_VICTIMS;
  }
  get keptOrderMinSlots(): number {
    return this.o.keptOrderMinSlots ?? KEPT_ORDER_MIN_SLOTS;
  }

  // The executor's eviction queries (`executor-victims.ts`).
  private readonly victims: ExecutorVictims = new ExecutorVictims(this);
  /** Counters for tests: queries, walks or scans on new candidates, orders kept, orders extended for the next victims. */
  get victimStats(): ExecutorVictims['stats'] {
    return this.victims.stats;
  }

  /** See `ExecutorVictims.chooseVictim`. */
  chooseVictim(buffer: BufferView, q: EvictionQuery, now = NaN): ExpertKey | undefined {
    return this.victims.chooseVictim(buffer, q, now);
  }

  /** See `ExecutorVictims.victimInBuffer`. */
  victimInBuffer(buffer: BufferView, q: EvictionQuery, now = NaN): ExpertKey | undefined {
    return this.victims.victimInBuffer(buffer, q, now);
  }

  /** A prefetch is declined when only ranked experts are left or the victim's priority is not below its own. */
  declinesPrefetch(q: EvictionQuery, ranked: boolean, prio: number): boolean {
    if (q.reason !== 'prefetch') return false;
    return ranked || (this.admittedGen[q.forKey] === this.gen && !(prio < this.admitted[q.forKey]!));
  }

  /** The priorities a victim outside the ranked set is ordered by: the cache priorities, or none (LRU). */
  victimPriorities(): Float64Array | null {
    return this.o.requestPriorities ? this.priority : null;
  }
}
