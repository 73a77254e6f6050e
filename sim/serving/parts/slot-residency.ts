/**
 * Whole experts in the GPU slot buffer (the `Residency` of every policy without a segment
 * cache). An activated expert must be resident in a slot before it computes. Resident ones are
 * ready at once; a missing one is fetched on demand at the top priority of the H2D link (a
 * loading prefetch it needs is re-prioritised: it jumps the queue, unless the policy opts out);
 * prefetches the policy decides overlap compute on the link. Buffer hits are counted at routing
 * time (DESIGN §7). When the buffer is full the policy chooses the victim (default: least
 * recently used); a demand fetch with nothing evictable takes the slot of the least urgent
 * loading prefetch nobody waits for, or waits for a slot.
 */
import type { Transfer } from '../../resources/pcie-link.ts';
import { ExpertBuffer, type BufferEntry } from '../expert-buffer.ts';
import type { EvictionQuery, ExpertKey, PolicyDecision, SegmentCacheView, ServingHook } from '../policy.ts';
import type { Kernels } from './kernels.ts';
import type { ExpertSource, PieceWork, ReadyListener, Residency } from './residency.ts';
import type { IterationState, ServingContext } from './state.ts';

export const DEMAND_PRIORITY = 0;

export class SlotResidency implements Residency {
  readonly buffer: ExpertBuffer;
  protected readonly bytesPerExpert: number;
  protected readonly waitingForSlot: ExpertKey[] = [];
  /** Eviction candidates of the current `acquireSlot` (EvictionQuery.candidates: valid during the call). */
  private readonly candidateScratch: ExpertKey[] = [];
  private readonly absentScratch: ExpertKey[] = [];
  /** Expert transfers carry their key (top segments: key + span) as their tag: one stored callback serves all. */
  protected readonly onFetchDone = (t: Transfer): void => this.onArrived(t.tag);
  /** Where fetches come from: the H2D link (host DRAM), or the SSD tier in front of it. */
  protected readonly source: ExpertSource;

  constructor(
    protected readonly ctx: ServingContext,
    protected readonly kernels: Kernels,
    protected readonly ready: ReadyListener,
    slots: number,
    source?: ExpertSource,
  ) {
    this.source = source ?? ctx.res.h2d;
    const m = ctx.model;
    this.bytesPerExpert = m.derived.bytesPerExpert;
    const shape = { experts: ctx.E, moeLayers: m.moeLayers };
    this.buffer = new ExpertBuffer(slots, this.bytesPerExpert, ctx.res.vram, ctx.sim, ctx.sink, shape);
  }

  get segments(): SegmentCacheView | undefined {
    return undefined;
  }

  reservedFreeBytes(): number {
    return this.buffer.free * this.bytesPerExpert;
  }

  start(): void {
    if (this.ctx.cfg.preloadAllExperts) {
      for (let k = 0; k < this.ctx.model.moeLayers * this.ctx.E; k++) this.buffer.occupy(k, 'cache', true);
    }
  }

  claimLayer(it: IterationState, moeLayer: number, activated: readonly number[]): void {
    it.remaining = activated.length;
    // Experts already in the buffer (resident or loading) are claimed (pinned) before any miss
    // looks for a slot, so a miss can never evict — or cancel the prefetch of — an expert this
    // same layer needs (the router's choices are known all at once, as in Mixtral-Offloading's
    // `load_experts`, which marks every requested expert used before loading).
    const absent = this.absentScratch;
    while (absent.length > 0) absent.pop();
    const E = this.ctx.E;
    for (const e of activated) {
      const key = moeLayer * E + e;
      if (this.buffer.has(key)) this.need(it, key);
      else absent.push(key);
    }
    for (const key of absent) this.need(it, key);
  }

  /** One activated expert of the current layer. */
  private need(it: IterationState, key: ExpertKey): void {
    const c = this.ctx.counters;
    c.needs++;
    if (it.decodeOnly) c.decodeNeeds++;
    const e = this.buffer.entry(key);
    if (e && e.state === 'resident') {
      if (e.prefetchUnused) {
        c.prefetchHits++;
        if (it.decodeOnly) c.decodePrefetchHits++;
        this.markPrefetchUsed(e);
      } else {
        c.cacheHits++;
        if (it.decodeOnly) c.decodeCacheHits++;
      }
      this.buffer.pin(e, true);
      this.ready.markReady(key);
      return;
    }
    if (e) {
      // Loading (a prefetch): it jumps the queue, unless the policy opts out (`queueJump: false`).
      this.buffer.pin(e, true);
      if (e.prefetchUnused) this.markPrefetchUsed(e);
      if (e.transfer && this.ctx.driver.policy.queueJump !== false) {
        this.source.reprioritize(e.transfer, DEMAND_PRIORITY);
      }
      return;
    }
    if (this.acquireSlot(key, 'demand')) this.fetch(key, 'demand', DEMAND_PRIORITY, true);
    else this.waitingForSlot.push(key);
  }

  protected markPrefetchUsed(e: BufferEntry): void {
    e.prefetchUnused = false;
    this.ctx.counters.prefetchesUsed++;
  }

  protected fetch(key: ExpertKey, origin: 'demand' | 'prefetch', priority: number, pinned: boolean): void {
    const e = this.buffer.occupy(key, origin);
    this.submitFetch(e, origin, priority, pinned, this.kernels.expertLabel(key));
  }

  protected submitFetch(
    e: BufferEntry,
    origin: 'demand' | 'prefetch',
    priority: number,
    pinned: boolean,
    label: string,
  ): void {
    this.buffer.pin(e, pinned);
    if (origin === 'demand') this.ctx.counters.demandFetches++;
    else this.ctx.counters.prefetchesIssued++;
    const category = origin === 'demand' ? 'expert-demand' : 'expert-prefetch';
    e.transfer = this.source.submitTransfer(e.bytes, priority, label, category, this.onFetchDone, e.key);
  }

  /** A fetch (tag: the piece id) completed. */
  protected onArrived(key: ExpertKey): void {
    const e = this.buffer.arrived(key);
    if (e.origin === 'prefetch') this.ctx.counters.prefetchesCompleted++;
    if (e.pinned) {
      this.ready.markReady(key);
      this.ready.pump();
    } else {
      const d = this.ctx.driver;
      this.apply(
        'onPrefetchDone',
        d.call('onPrefetchDone', () => d.policy.onPrefetchDone?.(this.ctx.view, key)),
      );
    }
  }

  describe(piece: number, out: PieceWork): void {
    out.key = piece;
    out.fraction = 1;
    out.label = this.kernels.expertLabel(piece);
    out.reportKey = piece;
    out.resident = this.buffer.entry(piece)?.state === 'resident';
    out.placement = 'gpu-slot';
  }

  /** Marks a slot entry used now. */
  protected used(e: BufferEntry): void {
    this.buffer.pin(e, false);
    e.uses++;
    this.buffer.markUsed(e);
    e.origin = 'cache';
  }

  afterCompute(key: ExpertKey): void {
    this.used(this.buffer.entry(key)!);
    const ctx = this.ctx;
    const policyKeeps = ctx.driver.policy.afterUse ? ctx.driver.afterUse(ctx.view, key) !== false : true;
    const keep = ctx.cfg.preloadAllExperts || (policyKeeps && ctx.cfg.releaseAfterUse !== true);
    if (!keep) this.evict(key, false);
    this.serveSlotWaiters();
  }

  /** Makes room for `key`. Returns false when no slot can be freed now. */
  protected acquireSlot(key: ExpertKey, reason: 'demand' | 'prefetch'): boolean {
    if (this.buffer.free > 0) return true;
    if (!this.buffer.hasEvictable()) return reason === 'demand' && this.takeLoadingSlot();
    const query = new LazyEvictionQuery(reason, key, this.buffer, this.candidateScratch);
    let victim: ExpertKey | undefined;
    const driver = this.ctx.driver;
    if (driver.policy.chooseVictim) {
      victim = driver.chooseVictim(this.ctx.view, query);
      if (victim === undefined) {
        if (reason === 'prefetch') return false;
        throw driver.error(`declined to evict for an on-demand fetch of ${key}`, 'chooseVictim');
      }
      // A candidate is exactly a resident, unpinned entry (`ExpertBuffer.evictable`): checked on the entry.
      const ve = this.buffer.entry(victim);
      if (ve === undefined || ve.state !== 'resident' || ve.pinned) {
        throw driver.error(`chose ${victim}, which is not an evictable candidate`, 'chooseVictim');
      }
    } else {
      const b = this.buffer;
      victim = query.candidates.reduce((best, c) => (b.entry(c)!.lastUsedNs < b.entry(best)!.lastUsedNs ? c : best));
    }
    this.evict(victim, true);
    return true;
  }

  /** A demand fetch may take the slot of the least urgent loading prefetch nobody waits for. */
  private takeLoadingSlot(): boolean {
    let victim: BufferEntry | undefined;
    for (const e of this.buffer.entries()) {
      if (e.state !== 'loading' || e.pinned || !e.transfer) continue;
      const v = victim?.transfer;
      const t = e.transfer;
      if (!v || t.priority > v.priority || (t.priority === v.priority && t.seq > v.seq)) victim = e;
    }
    if (!victim) return false;
    this.cancelPrefetch(victim.key);
    return true;
  }

  protected evict(key: ExpertKey, countEviction: boolean): void {
    const e = this.buffer.release(key);
    if (e.prefetchUnused) this.ctx.counters.prefetchWastedBytes += e.bytes;
    if (countEviction) this.ctx.counters.evictions++;
  }

  protected cancelPrefetch(key: ExpertKey): void {
    const e = this.buffer.entry(key)!;
    this.source.cancel(e.transfer!);
    this.ctx.counters.prefetchesCancelled++;
    // The bytes it already sent (and the packet on the wire, when it lands) are counted by the
    // link as cancelledSentBytes; the metrics add them to the wasted bytes.
    e.prefetchUnused = false;
    e.transfer = null;
    this.buffer.release(key);
  }

  protected serveSlotWaiters(): void {
    while (this.waitingForSlot.length > 0) {
      const key = this.waitingForSlot[0]!;
      if (!this.acquireSlot(key, 'demand')) return;
      this.waitingForSlot.shift();
      this.fetch(key, 'demand', DEMAND_PRIORITY, true);
    }
  }

  apply(hook: ServingHook, d: PolicyDecision | void): void {
    if (!d) return;
    const driver = this.ctx.driver;
    for (const key of d.cancel ?? []) {
      if (!driver.validKey(key, hook)) continue;
      const e = this.buffer.entry(key);
      if (e && e.state === 'loading' && !e.pinned) this.cancelPrefetch(key);
    }
    for (const key of d.evict ?? []) {
      if (!driver.validKey(key, hook)) continue;
      const e = this.buffer.entry(key);
      if (e && e.state === 'resident' && !e.pinned && !this.ctx.cfg.preloadAllExperts) this.evict(key, true);
    }
    // Once every request has finished nobody can use a prefetch. Dropping them lets the run end:
    // a policy that prefetches again from onPrefetchDone would otherwise keep the link busy forever.
    const workloadDone = this.ctx.workloadDone();
    this.applyDrops(hook, d);
    for (const p of d.prefetch ?? []) {
      if (!driver.validKey(p.key, hook)) continue;
      if (workloadDone || this.complete(p.key)) continue;
      const priority = Math.max(1, Number.isFinite(p.priority) ? p.priority : 1);
      const e = this.buffer.entry(p.key);
      if (e) {
        if (e.state === 'loading' && !e.pinned && e.transfer) this.source.reprioritize(e.transfer, priority);
        continue;
      }
      if (this.acquireSlot(p.key, 'prefetch')) this.fetch(p.key, 'prefetch', priority, false);
    }
    if (!workloadDone) this.applyLoads(hook, d);
    if ((d.cancel?.length ?? 0) + (d.evict?.length ?? 0) + (d.dropTops?.length ?? 0) > 0) this.serveSlotWaiters();
  }

  /** Decision parts other residencies act on before prefetches (split experts: dropped tops). */
  protected applyDrops(_hook: ServingHook, _d: PolicyDecision): void {}

  /** ...and after them (split experts: loaded tops). */
  protected applyLoads(_hook: ServingHook, _d: PolicyDecision): void {}

  /** Whether `key` already needs nothing more on the GPU (split experts: a top that is the whole expert). */
  protected complete(_key: ExpertKey): boolean {
    return false;
  }

  finish(): void {
    // Prefetched experts never used by the end of the run were wasted.
    for (const e of this.buffer.entries()) if (e.prefetchUnused) this.ctx.counters.prefetchWastedBytes += e.bytes;
  }
}

/**
 * An eviction query whose candidates are listed on their first read: a policy that finds its
 * victim in its own index (per-layer caches, through the buffer's per-layer entries) never pays
 * the walk over a buffer of hundreds of slots on each miss. The list is the one
 * `ExpertBuffer.evictable` gives, so what a policy reads is unchanged.
 */
class LazyEvictionQuery implements EvictionQuery {
  private listed: readonly ExpertKey[] | null = null;
  /** Its candidates are the buffer's evictable set (`ExpertBuffer.evictable`). */
  readonly allEvictable = true;

  constructor(
    readonly reason: 'demand' | 'prefetch',
    readonly forKey: ExpertKey,
    private readonly buffer: ExpertBuffer,
    private readonly scratch: ExpertKey[],
  ) {}

  get candidates(): readonly ExpertKey[] {
    this.listed ??= this.buffer.evictable(this.scratch);
    return this.listed;
  }
}
