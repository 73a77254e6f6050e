/**
 * The executor's eviction queries to MoE-Infinity's cache (`cache-priority.ts` keeps the
 * priorities and the ranked set; the order is `victim-order.ts`'s). Three ways to the same
 * victim (the first two only for a query whose candidates are the buffer's whole evictable set,
 * `EvictionQuery.allEvictable`, read through `EvictableSet`):
 * - a buffer under `keptOrderMinSlots` slots: one walk over it per query;
 * - a larger buffer that counts its evictable changes (`BufferView.evictableVersion`, the
 *   executor's): the first victims kept from one walk (`CheapestVictims`), while the buffer's
 *   only evictable changes are the releases of the victims handed out since, with nothing else
 *   the order reads changed and at the same simulated time. Its candidates are never listed;
 * - otherwise, the listed candidates: one scan, and from their second query on the first
 *   victims kept from them, while the candidates are the same less the victims handed out.
 * The executor's prefetches of one decision each evict one victim of the same candidates: a
 * walk or scan per query made these rounds quadratic in the buffer.
 */
import type { BufferView, EvictionQuery, ExpertKey } from '../../sim/serving/policy.ts';
import { EvictableSet } from '../cache/evictable-set.ts';
import { CheapestVictims } from './cheapest-victims.ts';
import { firstVictimByScan, firstVictimInBuffer, withoutKey, type ScannedVictim } from './victim-order.ts';

/**
 * Buffer size from which `victimInBuffer` keeps victims across queries rather than walking the
 * buffer per query. From CPU profiles, not tuned to a result (all give the same victims): on the
 * quickstart's 61 slots the victims cost 1.5 s walked against 4.7 s kept from listed candidates
 * (1.4 victims per kept order), and kept from walks the serving bench's MoE-Infinity step cost
 * 1.13–1.21× the walk's; on Switch-128 BF16's 953 slots 10.7 s walked against 8.0 s kept (40 per
 * order); 256 lies between.
 */
export const KEPT_ORDER_MIN_SLOTS = 256;

/** What the eviction order reads from the cache (`CachePriorities`). */
export interface VictimState {
  /** Urgency in the ranked set, valid where `rankGen[key] === generation`. */
  readonly rank: Float64Array;
  readonly rankGen: Uint32Array;
  readonly generation: number;
  /** Changes whenever the priorities, the ranked set or a use changes. */
  readonly orderVersion: number;
  /** Victims a kept order holds at first (speed only). */
  readonly firstVictims: number;
  /** Buffer size from which victims are kept across queries (speed only). */
  readonly keptOrderMinSlots: number;
  /** The priorities of victims outside the ranked set, or null (LRU: all 0). */
  victimPriorities(): Float64Array | null;
  /** Whether a prefetch declines `q`'s first victim. */
  declinesPrefetch(q: EvictionQuery, ranked: boolean, prio: number): boolean;
}

export class ExecutorVictims {
  /**
   * Counters for tests: queries, walks or scans of new candidates, orders kept from listed
   * candidates, orders extended for the next victims, orders started from an admission walk.
   */
  readonly stats = { queries: 0, builds: 0, orders: 0, reorders: 0, seeds: 0 };

  constructor(private readonly c: VictimState) {}

  // The executor's eviction order (`chooseVictim`): its candidates as last given, less the victims
  // handed out since, and the order built from them; valid while the candidates are exactly
  // these, nothing the order reads changed (`version`: priorities, the ranked set, uses) and the
  // simulated time is the same.
  private readonly order = new CheapestVictims();
  private expected = new Int32Array(64);
  private expectedCount = -1;
  private orderFor: BufferView | null = null;
  private orderVersion = -1;
  private orderNow = NaN;
  /** Whether `order` holds the remembered candidates (built on their second query). */
  private orderBuilt = false;

  /**
   * The victim for `q`: the lowest-priority candidate outside the ranked set, else (on-demand
   * only) the least urgent one inside it (highest rank). `undefined` declines a prefetch: when
   * only ranked experts are left, or when the victim's priority is not below the admitted
   * prefetch's expected activation frequency. `now` (the simulated time) lets successive
   * queries at one instant share one order: the prefetches of one decision each evict one
   * victim of the same candidates (the caller reports every use through `noteUse`).
   */
  chooseVictim(buffer: BufferView, q: EvictionQuery, now = NaN): ExpertKey | undefined {
    const cands = q.candidates;
    this.stats.queries++;
    let best: ExpertKey;
    let ranked: boolean;
    let prio: number;
    const o = this.order;
    if (this.orderValid(buffer, cands, now)) {
      // The same candidates again (less the victims handed out): their order, built once.
      if (!this.orderBuilt) this.buildOrder(buffer, this.c.firstVictims);
      let v = o.peek();
      if (v < 0 && o.mayHoldMore()) {
        // Every victim kept was handed out: the next ones (`expected` no longer lists those).
        this.buildOrder(buffer, 2 * o.limit);
        this.stats.reorders++;
        v = o.peek();
      }
      if (v < 0) return undefined;
      best = o.keyAt(v);
      ranked = o.rankedAt(v);
      prio = o.prioAt(v);
    } else {
      // New candidates: one scan (most are not asked again), remembered in case they are.
      this.remember(buffer, cands, now);
      const sc = this.scanned;
      if (
        !firstVictimByScan(buffer, cands, this.c.rankGen, this.c.generation, this.c.rank, this.c.victimPriorities(), sc)
      )
        return undefined;
      best = sc.key;
      ranked = sc.ranked;
      prio = sc.prio;
    }
    if (this.c.declinesPrefetch(q, ranked, prio)) return undefined;
    if (this.orderBuilt) o.pop();
    this.expectedCount = withoutKey(this.expected, this.expectedCount, best);
    return best;
  }

  /**
   * `chooseVictim` for the executor's query, whose candidates are the resident, unpinned entries
   * of `buffer` (`allEvictable`; other queries: `chooseVictim`): in a buffer under `keptOrderMinSlots` slots, found by one walk over it (the
   * executor lists no candidates); in a larger one, from the victims kept from one walk when it
   * counts its evictable changes, else from the order kept from the listed candidates.
   */
  victimInBuffer(buffer: BufferView, q: EvictionQuery, now = NaN): ExpertKey | undefined {
    // Candidates the executor did not say are the whole evictable set: the listed ones.
    if (!q.allEvictable) return this.chooseVictim(buffer, q, now);
    if (buffer.slots >= this.c.keptOrderMinSlots) {
      if (buffer.evictableVersion !== undefined) return this.victimWalked(buffer, q, now);
      return this.chooseVictim(buffer, q, now);
    }
    const sc = this.scanned;
    if (
      !firstVictimInBuffer(
        buffer,
        this.evictable,
        this.c.rankGen,
        this.c.generation,
        this.c.rank,
        this.c.victimPriorities(),
        sc,
      )
    )
      return undefined;
    return this.c.declinesPrefetch(q, sc.ranked, sc.prio) ? undefined : sc.key;
  }

  // The executor's eviction order read from the buffer itself (`victimWalked`, on a buffer that
  // counts its evictable changes): the first victims of its resident, unpinned entries, valid
  // while nothing the order reads changed (`version`), at the same simulated time, and while the
  // buffer's only evictable changes since the walk are the releases of the victims handed out.
  private readonly walked = new CheapestVictims();
  private walkedFor: BufferView | null = null;
  private walkedVersion = -1;
  private walkedNow = NaN;
  private walkedEvictable = -1;
  /** Victims handed out from `walked` since the walk. */
  private handed = new Int32Array(64);
  private handedCount = 0;

  /**
   * `chooseVictim` for the executor's query on a buffer with `evictableVersion`: its candidates
   * are never listed. An answer kept from the last walk stands when the buffer's evictable set
   * changed exactly by the victims handed out since, each released (each change is one entry
   * joining or leaving: as many changes as released victims leaves no room for another).
   */
  private victimWalked(buffer: BufferView, q: EvictionQuery, now: number): ExpertKey | undefined {
    this.stats.queries++;
    const o = this.walked;
    if (!this.walkValid(buffer, now)) {
      this.walkBuffer(buffer, now, this.c.firstVictims);
      this.stats.builds++;
    }
    let v = o.peek();
    if (v < 0 && o.mayHoldMore()) {
      // Every victim kept was handed out (and released): the next ones.
      this.walkBuffer(buffer, now, 2 * o.limit);
      this.stats.reorders++;
      v = o.peek();
    }
    if (v < 0) return undefined;
    const key = o.keyAt(v);
    if (this.c.declinesPrefetch(q, o.rankedAt(v), o.prioAt(v))) return undefined;
    o.pop();
    if (this.handedCount === this.handed.length) {
      const h = new Int32Array(this.handed.length * 2);
      h.set(this.handed);
      this.handed = h;
    }
    this.handed[this.handedCount++] = key;
    return key;
  }

  /**
   * Starts the kept victims from an admission round's walk (`unranked`: the first victims outside
   * the ranked set, as `walkBuffer` would keep them first) over `buffer` at `now`: the round's
   * prefetches then evict them without a walk of their own.
   */
  seed(buffer: BufferView, now: number, unranked: CheapestVictims): void {
    if (buffer.evictableVersion === undefined || now !== now || buffer.slots < this.c.keptOrderMinSlots) return;
    this.walked.copyFrom(unranked);
    this.walkedFor = buffer;
    this.walkedVersion = this.c.orderVersion;
    this.walkedNow = now;
    this.walkedEvictable = buffer.evictableVersion;
    this.handedCount = 0;
    this.stats.seeds++;
  }

  /** Whether the victims kept by the last walk still stand (see `victimWalked`). */
  private walkValid(buffer: BufferView, now: number): boolean {
    if (this.walkedFor !== buffer || this.walkedVersion !== this.c.orderVersion || this.walkedNow !== now) return false;
    const n = this.handedCount;
    if (buffer.evictableVersion! - this.walkedEvictable !== n) return false;
    for (let i = 0; i < n; i++) if (buffer.has(this.handed[i]!)) return false;
    return true;
  }

  /** Keeps the first `limit` victims among the buffer's resident, unpinned entries. */
  private walkBuffer(buffer: BufferView, now: number, limit: number): void {
    const o = this.walked;
    const rank = this.c.rank;
    const rankGen = this.c.rankGen;
    const gen = this.c.generation;
    const priority = this.c.victimPriorities();
    o.clear(limit);
    // The evictable keys, dense (the order is total: any walk order gives the same victims).
    const set = this.evictable.of(buffer);
    const keys = set.keys;
    const used = set.lastUsed;
    for (let i = 0, n = set.count; i < n; i++) {
      const k = keys[i]!;
      const prot = rankGen[k] === gen;
      o.offer(k, prot, prot ? -rank[k]! : priority ? priority[k]! : 0, used[k]!);
    }
    o.finish();
    this.walkedFor = buffer;
    this.walkedVersion = this.c.orderVersion;
    this.walkedNow = now;
    this.walkedEvictable = buffer.evictableVersion!;
    this.handedCount = 0;
  }

  // The first victim of new candidates (`firstVictimByScan`).
  private readonly scanned: ScannedVictim = { key: -1, ranked: false, prio: 0 };
  /** The buffer's evictable set, dense, for the walks. */
  private readonly evictable = new EvictableSet();

  /** Whether the candidates remembered last still stand for `cands` (same order of eviction). */
  private orderValid(buffer: BufferView, cands: readonly ExpertKey[], now: number): boolean {
    if (this.orderVersion !== this.c.orderVersion || this.orderFor !== buffer || this.orderNow !== now) return false;
    const n = this.expectedCount;
    if (cands.length !== n) return false;
    const exp = this.expected;
    for (let i = 0; i < n; i++) if (cands[i] !== exp[i]) return false;
    return true;
  }

  /** Remembers candidates `cands` (their order is built if they are asked again). */
  private remember(buffer: BufferView, cands: readonly ExpertKey[], now: number): void {
    const n = cands.length;
    if (this.expected.length < n) this.expected = new Int32Array(n * 2);
    const exp = this.expected;
    for (let i = 0; i < n; i++) exp[i] = cands[i]!;
    this.expectedCount = n;
    this.orderBuilt = false;
    this.orderFor = buffer;
    this.orderVersion = this.c.orderVersion;
    this.orderNow = now;
    this.stats.builds++;
  }

  /** Keeps the first `limit` of the remembered candidates (`expected`) in eviction order. */
  private buildOrder(buffer: BufferView, limit: number): void {
    const o = this.order;
    const keys = this.expected;
    const rank = this.c.rank;
    const rankGen = this.c.rankGen;
    const gen = this.c.generation;
    const priority = this.c.victimPriorities();
    o.clear(limit);
    for (let i = 0; i < this.expectedCount; i++) {
      const k = keys[i]!;
      const prot = rankGen[k] === gen;
      // Inside the ranked set the least urgent (highest rank) goes first.
      o.offer(k, prot, prot ? -rank[k]! : priority ? priority[k]! : 0, buffer.entry(k)?.lastUsedNs ?? -1);
    }
    o.finish();
    this.orderBuilt = true;
    this.stats.orders++;
  }
}
