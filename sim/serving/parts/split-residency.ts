/**
 * Split experts (MoEpic, DESIGN §8), a `Residency` for policies that declare
 * `segmentCacheBytes`: beside the slot buffer a top-segment cache holds, per expert, its first
 * `fraction` of bytes and compute. An activated expert is computed as up to two pieces — its top
 * (piece id key + span) and its whole-or-bottom entry in a slot (piece id key) — each as soon as
 * it is resident; fetches of an expert whose top is cached move only its bottom; `afterUse` may
 * keep a top of a whole expert just computed (no bytes move), and decisions may load (reshape)
 * or drop tops.
 */
import { TopSegmentCache, type BufferEntry, type TopEntry } from '../expert-buffer.ts';
import type { ExpertKey, KeepTop, ModelShapeView, PolicyDecision, SegmentCacheView, ServingHook } from '../policy.ts';
import type { Kernels } from './kernels.ts';
import type { PieceWork, ReadyListener } from './residency.ts';
import { DEMAND_PRIORITY, SlotResidency } from './slot-residency.ts';
import type { IterationState, ServingContext } from './state.ts';

export class SplitResidency extends SlotResidency {
  private readonly tops: IndexedTopSegmentCache;
  /** moeLayers × experts: a piece id ≥ span is the top segment of expert (id − span). */
  private readonly span: number;
  /** Pieces (top, whole/bottom) of each expert of the current layer still to compute. */
  private readonly piecesLeft: Int8Array;
  private readonly fetchScratch: ExpertKey[] = [];

  constructor(
    ctx: ServingContext,
    kernels: Kernels,
    ready: ReadyListener,
    slots: number,
    private readonly capBytes: number,
  ) {
    super(ctx, kernels, ready, slots);
    this.span = ctx.model.moeLayers * ctx.E;
    this.tops = new IndexedTopSegmentCache(capBytes, this.bytesPerExpert, this.span, ctx.res.vram, ctx.sim, ctx.sink);
    this.buffer.segmentKeySpan = this.span;
    this.piecesLeft = new Int8Array(ctx.E);
  }

  override get segments(): SegmentCacheView {
    return this.tops;
  }

  override reservedFreeBytes(): number {
    return super.reservedFreeBytes() + this.tops.freeBytes;
  }

  /** Tops resident before the run (the policy's `initialTops`, loaded with the model). */
  override start(): void {
    super.start();
    const d = this.ctx.driver;
    const p = d.policy;
    if (!p.initialTops) return;
    const shape: ModelShapeView = this.ctx.shape;
    const initial = d.call('initialTops', () => p.initialTops!(shape));
    for (const t of initial) {
      if (!d.validKey(t.key, 'initialTops')) continue;
      if (this.tops.entry(t.key)) throw d.error(`initial top of ${t.key} given twice`, 'initialTops');
      if (this.tops.topBytes(t.fraction) > this.tops.freeBytes) {
        throw d.error(`initial tops exceed the segment cache (${this.capBytes} B)`, 'initialTops');
      }
      if (this.tops.topBytes(t.fraction) > 0) this.tops.add(t.key, t.fraction, true);
    }
  }

  override claimLayer(it: IterationState, moeLayer: number, activated: readonly number[]): void {
    // Every segment already cached or in flight is claimed before any fetch.
    it.remaining = 0;
    const fetches = this.fetchScratch;
    while (fetches.length > 0) fetches.pop();
    const E = this.ctx.E;
    for (const e of activated) if (this.needPieces(it, moeLayer * E + e)) fetches.push(moeLayer * E + e);
    for (const key of fetches) {
      if (this.acquireSlot(key, 'demand')) this.fetch(key, 'demand', DEMAND_PRIORITY, true);
      else this.waitingForSlot.push(key);
    }
  }

  /**
   * One activated expert: pins its top segment (if cached) and its whole/bottom entry (if in the
   * buffer), marks the resident pieces ready, counts the need. Returns true when its whole/bottom
   * part must be fetched on demand (done after every present piece of the layer is claimed).
   */
  private needPieces(it: IterationState, key: ExpertKey): boolean {
    const c = this.ctx.counters;
    c.needs++;
    if (it.decodeOnly) c.decodeNeeds++;
    const e = this.buffer.entry(key);
    // A whole expert in the buffer is computed whole (a top cached meanwhile is not used for it).
    const t = e?.part === 'whole' ? undefined : this.tops.entry(key);
    let pieces = 0;
    let allResident = true;
    let fromPrefetch = false;
    let mustFetch = false;
    if (t) {
      t.pinned = true;
      pieces++;
      if (t.state === 'resident') this.ready.markReady(key + this.span);
      else allResident = false;
    }
    if (!t || t.fraction < 1) {
      pieces++;
      if (e) {
        this.buffer.pin(e, true);
        if (e.prefetchUnused) {
          fromPrefetch = e.state === 'resident';
          this.markPrefetchUsed(e);
        }
        if (e.state === 'resident') this.ready.markReady(key);
        else {
          allResident = false;
          if (e.transfer && this.ctx.driver.policy.queueJump !== false) {
            this.ctx.res.h2d.reprioritize(e.transfer, DEMAND_PRIORITY);
          }
        }
      } else {
        allResident = false;
        mustFetch = true;
      }
    }
    this.piecesLeft[key % this.ctx.E] = pieces;
    it.remaining += pieces;
    if (allResident) {
      if (fromPrefetch) c.prefetchHits++;
      else c.cacheHits++;
      if (it.decodeOnly) {
        if (fromPrefetch) c.decodePrefetchHits++;
        else c.decodeCacheHits++;
      }
    } else if (t && t.state === 'resident') {
      c.partialHits++;
    }
    return mustFetch;
  }

  /** With its top cached (or loading), only the bottom moves. */
  protected override fetch(key: ExpertKey, origin: 'demand' | 'prefetch', priority: number, pinned: boolean): void {
    const top = this.tops.entry(key);
    if (!top) {
      super.fetch(key, origin, priority, pinned);
      return;
    }
    const e = this.buffer.occupy(key, origin, false, this.bytesPerExpert - top.bytes);
    this.submitFetch(e, origin, priority, pinned, this.kernels.segmentLabel(key, false));
  }

  protected override onArrived(piece: number): void {
    if (piece < this.span) {
      super.onArrived(piece);
      return;
    }
    // A top segment finished loading.
    const t = this.tops.arrived(piece - this.span);
    if (t.pinned) {
      this.ready.markReady(piece);
      this.ready.pump();
    }
  }

  override describe(piece: number, out: PieceWork): void {
    const isTop = piece >= this.span;
    const key = isTop ? piece - this.span : piece;
    const t = this.tops.entry(key);
    out.key = key;
    out.placement = 'gpu-slot';
    if (isTop) {
      out.fraction = t!.fraction;
      out.label = this.kernels.segmentLabel(key, true);
      out.reportKey = piece;
      out.resident = t!.state === 'resident';
      return;
    }
    const e = this.buffer.entry(key)!;
    out.fraction = e.part === 'bottom' ? 1 - t!.fraction : 1;
    out.label = e.part === 'bottom' ? this.kernels.segmentLabel(key, false) : this.kernels.expertLabel(key);
    out.reportKey = this.buffer.reportKey(e);
    out.resident = e.state === 'resident';
  }

  /** A piece finished; once every piece of the expert has, the policy's `afterUse`. */
  override afterCompute(piece: number): void {
    const isTop = piece >= this.span;
    const key = isTop ? piece - this.span : piece;
    if (isTop) this.tops.entry(key)!.pinned = false;
    else this.used(this.buffer.entry(key)!);
    if (--this.piecesLeft[key % this.ctx.E]! > 0) return;
    const ctx = this.ctx;
    const r: boolean | void | KeepTop = ctx.driver.policy.afterUse ? ctx.driver.afterUse(ctx.view, key) : true;
    const e = this.buffer.entry(key);
    if (typeof r === 'object' && r !== null) this.keepTop(key, r, e);
    else if (e && !e.pinned) {
      const keep = r !== false && ctx.cfg.releaseAfterUse !== true;
      if (!keep) this.evict(key, false);
    }
    this.serveSlotWaiters();
  }

  /** `afterUse` returned a `KeepTop`: drops what it names, then keeps the top of `key` (`e`: its entry before). */
  private keepTop(key: ExpertKey, r: KeepTop, e: BufferEntry | undefined): void {
    const d = this.ctx.driver;
    for (const k of r.dropTops ?? []) if (d.validKey(k, 'afterUse')) this.dropTop(k);
    if (!e || e.pinned) return;
    const whole = e.part === 'whole' && e.state === 'resident';
    this.evict(key, false);
    if (!whole || this.tops.entry(key)) return;
    const f = r.keepTop;
    if (!(f > 0 && f <= 1)) throw d.error(`keepTop ${f} outside (0, 1]`, 'afterUse');
    const bytes = this.tops.topBytes(f);
    if (bytes > this.tops.freeBytes) {
      const free = this.tops.freeBytes;
      throw d.error(`keepTop of ${key} needs ${bytes} B, the segment cache has ${free} B free`, 'afterUse');
    }
    // The top's bytes are already on the GPU (they were part of the whole expert): no transfer.
    if (bytes > 0) this.tops.add(key, f, true);
  }

  /** Drops the top segment of `key` (and its bottom entry); ignored while either is pinned. */
  private dropTop(key: ExpertKey): void {
    const t = this.tops.entry(key);
    if (!t || t.pinned) return;
    const e = this.buffer.entry(key);
    if (e && e.part === 'bottom') {
      if (e.pinned) return;
      if (e.state === 'loading') this.cancelPrefetch(key);
      else this.evict(key, true);
    }
    if (t.transfer) {
      this.ctx.res.h2d.cancel(t.transfer);
      t.transfer = null;
    }
    this.tops.release(key);
  }

  /** Loads a top segment of `fraction` for `key` over the link (reshaping); see `PolicyDecision.loadTops`. */
  private loadTop(key: ExpertKey, fraction: number, priority: number): void {
    const tops = this.tops;
    if (!(fraction > 0 && fraction <= 1)) {
      throw this.ctx.driver.error(`top fraction ${fraction} outside (0, 1]`, 'loadTops');
    }
    const cur = tops.entry(key);
    if (cur) {
      if (cur.fraction === fraction) return;
      this.dropTop(key);
      if (tops.entry(key)) return;
    }
    // A whole expert in the buffer already has these bytes on the GPU; it becomes the top's source later (afterUse).
    const e = this.buffer.entry(key);
    if (e && e.part === 'whole') return;
    const bytes = tops.topBytes(fraction);
    if (bytes === 0 || bytes > tops.freeBytes) return;
    const t = tops.add(key, fraction, false);
    this.ctx.counters.topLoads++;
    this.ctx.counters.topLoadBytes += bytes;
    const label = this.kernels.segmentLabel(key, true);
    const tag = key + this.span;
    const category = 'expert-reshape';
    t.transfer = this.ctx.res.h2d.submit({ bytes, priority, label, category, onDone: this.onFetchDone, tag });
  }

  protected override applyDrops(hook: ServingHook, d: PolicyDecision): void {
    for (const key of d.dropTops ?? []) if (this.ctx.driver.validKey(key, hook)) this.dropTop(key);
  }

  protected override applyLoads(hook: ServingHook, d: PolicyDecision): void {
    if (!d.loadTops) return;
    const priority = Math.max(1, Number.isFinite(d.topPriority) ? d.topPriority! : Number.MAX_SAFE_INTEGER);
    for (const t of d.loadTops) if (this.ctx.driver.validKey(t.key, hook)) this.loadTop(t.key, t.fraction, priority);
  }

  /** An expert whose top is all of it needs nothing more. */
  protected override complete(key: ExpertKey): boolean {
    return this.tops.topFraction(key) === 1;
  }
}

/**
 * The segment cache with its lookups by key read from a dense array (keys are 0 … span − 1)
 * instead of the cache's Map: the executor and MoEpic ask `entry` / `topFraction` for every
 * needed expert and every prefetch candidate. The Map stays the record (insertion order for
 * `keys` / `entries`, the checks of `add` / `arrived` / `release`); the array follows it.
 */
export class IndexedTopSegmentCache extends TopSegmentCache {
  private readonly byKey: (TopEntry | undefined)[];

  constructor(...args: ConstructorParameters<typeof TopSegmentCache>) {
    super(...args);
    // Filled with `undefined` up to the key span (a packed array, not a sparse one).
    this.byKey = Array.from({ length: args[2] }, () => undefined);
  }

  override entry(key: ExpertKey): TopEntry | undefined {
    return this.byKey[key];
  }
  override topFraction(key: ExpertKey): number {
    return this.byKey[key]?.fraction ?? 0;
  }
  override topState(key: ExpertKey): 'loading' | 'resident' | undefined {
    return this.byKey[key]?.state;
  }
  override topPinned(key: ExpertKey): boolean {
    return this.byKey[key]?.pinned ?? false;
  }
  override add(key: ExpertKey, fraction: number, resident: boolean): TopEntry {
    const t = super.add(key, fraction, resident);
    this.byKey[key] = t;
    return t;
  }
  override release(key: ExpertKey): TopEntry {
    const t = super.release(key);
    this.byKey[key] = undefined;
    return t;
  }
}
