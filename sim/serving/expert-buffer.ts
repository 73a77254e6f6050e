/**
 * The GPU expert buffer of the serving executor: a fixed number of slots, one expert each,
 * shared by cached and prefetched experts. Each occupied slot is an allocation in the VRAM
 * pool (category `expertCache`), so memory accounting is byte-exact; the slot count is an
 * additional cap the executor enforces.
 *
 * The buffer only keeps state; the executor decides (with the policy) what to load and evict.
 */
import { InvariantError } from '../kernel/errors.ts';
import type { Scheduler } from '../kernel/simulation.ts';
import type { Allocation, MemoryPool } from '../resources/memory-pool.ts';
import type { Transfer } from '../resources/pcie-link.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import type { BufferEntryView, BufferView, EntryOrigin, ExpertKey, SegmentCacheView } from './policy.ts';

export interface BufferEntry extends BufferEntryView {
  state: 'loading' | 'resident';
  origin: EntryOrigin;
  /** Read-only outside the buffer: pins go through `ExpertBuffer.pin` (it counts `evictableVersion`). */
  readonly pinned: boolean;
  residentSinceNs: number;
  /** Read-only outside the buffer: uses go through `ExpertBuffer.markUsed` (it keeps `lastUsedByKey`). */
  readonly lastUsedNs: number;
  uses: number;
  allocation: Allocation;
  transfer: Transfer | null;
  /** Set when a prefetch was issued for it and it has not been used yet (for precision / waste). */
  prefetchUnused: boolean;
  part: 'whole' | 'bottom';
  bytes: number;
}

export class ExpertBuffer implements BufferView {
  /**
   * Entries by key (keys are dense, 0 … moeLayers · experts): an array lookup rather than a
   * Map's hash, on the executor's every need, arrival and release. `size` counts the entries.
   */
  private byKey: (BufferEntry | undefined)[] = [];
  private size = 0;
  /**
   * The entries in insertion order (as the Map's), as an array: the executor's eviction
   * candidates and policies' walks over `entries()` iterate it on every slot they need, and an
   * array walks faster than a Map. A release leaves `undefined` at the entry's position
   * (`posByKey`), found without a search; the holes are squeezed out, keeping the order, from
   * the first one on, when `entries()` is read or when they are half the array (a buffer of a
   * thousand slots evicts on most misses: finding and shifting out each victim was a walk over
   * the whole array).
   */
  private readonly list: (BufferEntry | undefined)[] = [];
  /** Position in `list` by key (valid while the key is in the buffer). */
  private readonly posByKey: number[] = [];
  /** `undefined` slots in `list`, and the first one's position (`NO_HOLE` when there is none). */
  private holes = 0;
  private firstHole = NO_HOLE;
  /** VRAM allocation labels by key, built once (a slot is occupied once per fetch). */
  private readonly labels: string[] = [];
  /**
   * Entries per MoE layer (key = layer · experts + expert): built on the first `layerEntries` /
   * `layerCount` call when the shape is given, then kept up to date (policies that never ask
   * pay nothing).
   */
  private byLayer: BufferEntry[][] | null = null;
  /** The loading entries in insertion order: built on the first `loadingEntries` call, then kept up to date. */
  private loadingList: BufferEntry[] | null = null;
  /**
   * Entries that joined or left the evictable set (resident and unpinned) so far, one per
   * change: an occupancy as resident, an unpinned arrival, a pin or unpin of a resident entry, a
   * release of an evictable one (`BufferView.evictableVersion`).
   */
  private evictableChanges = 0;
  /**
   * The evictable entries' keys, the first `evictableCount`, in no particular order (a release
   * moves the last one into its place; `evictablePos` finds it): a policy whose order is total
   * walks these instead of every entry object.
   */
  private readonly evictableSet: Int32Array;
  private evictableN = 0;
  /** Position in `evictableSet` by key (−1: not evictable). */
  private evictablePos = new Int32Array(0);
  /** Last use by key (−1: never used or not in the buffer), as the entries' `lastUsedNs`. */
  private lastUsed = new Float64Array(0);

  constructor(
    readonly slots: number,
    private readonly bytesPerExpert: number,
    private readonly vram: MemoryPool,
    private readonly clock: Pick<Scheduler<unknown>, 'now'>,
    private readonly sink?: TraceSink,
    /** Experts per MoE layer and MoE layers: `layerEntries` / `layerCount` from an index kept up to date. */
    private readonly shape?: { readonly experts: number; readonly moeLayers: number },
  ) {
    this.evictableSet = new Int32Array(Math.max(0, slots));
    if (shape) this.growKeys(shape.experts * shape.moeLayers);
  }

  /** Room for keys below `n` in the by-key arrays (doubling). */
  private growKeys(n: number): void {
    let size = Math.max(16, this.evictablePos.length);
    while (size < n) size *= 2;
    if (size === this.evictablePos.length) return;
    const pos = new Int32Array(size).fill(-1);
    pos.set(this.evictablePos);
    this.evictablePos = pos;
    const used = new Float64Array(size).fill(-1);
    used.set(this.lastUsed);
    this.lastUsed = used;
  }

  /** The evictable keys (the first `evictableCount`; see `BufferView.evictableKeys`). */
  evictableKeys(): Int32Array {
    return this.evictableSet;
  }
  get evictableCount(): number {
    return this.evictableN;
  }
  /** Last use by key (see `BufferView.lastUsedByKey`). */
  lastUsedByKey(): Float64Array {
    return this.lastUsed;
  }

  /** Records that `e` was used now. */
  markUsed(e: BufferEntry): void {
    (e as { lastUsedNs: number }).lastUsedNs = this.clock.now;
    this.lastUsed[e.key] = this.clock.now;
  }

  /** `e` (resident, unpinned) joins the evictable set, or leaves it. */
  private evictableJoin(key: ExpertKey): void {
    this.evictableChanges++;
    this.evictablePos[key] = this.evictableN;
    this.evictableSet[this.evictableN++] = key;
  }
  private evictableLeave(key: ExpertKey): void {
    this.evictableChanges++;
    const p = this.evictablePos[key]!;
    const last = this.evictableSet[--this.evictableN]!;
    this.evictableSet[p] = last;
    this.evictablePos[last] = p;
    this.evictablePos[key] = -1;
  }

  private layerIndex(): BufferEntry[][] {
    if (this.byLayer === null) {
      if (!this.shape)
        throw new InvariantError(
          'per-layer entries need the model shape (ExpertBuffer constructor)',
          this.clock.now,
          'expert buffer',
        );
      this.byLayer = Array.from({ length: this.shape.moeLayers }, () => [] as BufferEntry[]);
      for (const e of this.list) if (e !== undefined) this.layerSet(e.key).push(e);
    }
    return this.byLayer;
  }

  layerEntries(layer: number): Iterable<BufferEntry> {
    return this.layerIndex()[layer] ?? [];
  }

  layerCount(layer: number): number {
    return this.layerIndex()[layer]?.length ?? 0;
  }

  loadingEntries(): Iterable<BufferEntry> {
    this.loadingList ??= this.list.filter((e): e is BufferEntry => e !== undefined && e.state === 'loading');
    return this.loadingList;
  }

  get occupied(): number {
    return this.size;
  }
  get evictableVersion(): number {
    return this.evictableChanges;
  }

  /** Pins `e` (being computed or awaited: not evictable) or unpins it. */
  pin(e: BufferEntry, pinned: boolean): void {
    if (e.pinned === pinned) return;
    (e as { pinned: boolean }).pinned = pinned;
    if (e.state !== 'resident') return;
    if (pinned) this.evictableLeave(e.key);
    else this.evictableJoin(e.key);
  }
  get free(): number {
    return this.slots - this.size;
  }
  has(key: ExpertKey): boolean {
    return this.byKey[key] !== undefined;
  }
  isResident(key: ExpertKey): boolean {
    return this.byKey[key]?.state === 'resident';
  }
  isLoading(key: ExpertKey): boolean {
    return this.byKey[key]?.state === 'loading';
  }
  entry(key: ExpertKey): BufferEntry | undefined {
    return this.byKey[key];
  }
  entries(): IterableIterator<BufferEntry> {
    if (this.holes > 0) this.compact();
    return (this.list as BufferEntry[]).values();
  }

  /** Squeezes the holes out of `list`, keeping the order (the entries before the first hole stay put). */
  private compact(): void {
    const list = this.list;
    const pos = this.posByKey;
    let n = this.firstHole;
    for (let i = n; i < list.length; i++) {
      const e = list[i];
      if (e === undefined) continue;
      list[n] = e;
      pos[e.key] = n;
      n++;
    }
    list.length = n;
    this.holes = 0;
    this.firstHole = NO_HOLE;
  }

  /**
   * Occupies a free slot for `key` (state loading, or resident when `resident`). Throws if none
   * is free. `bottomBytes` (split experts): the slot holds only the expert's bottom segment of
   * that many bytes (its residency is reported under the key + 2 × `segmentKeySpan`).
   */
  occupy(key: ExpertKey, origin: EntryOrigin, resident = false, bottomBytes?: number): BufferEntry {
    if (this.size >= this.slots) {
      throw new InvariantError(
        `expert buffer full (${this.slots} slots) when occupying ${key}`,
        this.clock.now,
        'expert buffer',
      );
    }
    if (!(Number.isInteger(key) && key >= 0))
      throw new InvariantError(`expert key ${key} is not a non-negative integer`, this.clock.now, 'expert buffer');
    if (this.byKey[key] !== undefined)
      throw new InvariantError(`expert ${key} already in buffer`, this.clock.now, 'expert buffer');
    const bytes = bottomBytes ?? this.bytesPerExpert;
    const allocation = this.vram.allocate(bytes, 'expertCache', (this.labels[key] ??= `expert ${key}`));
    const e: BufferEntry = {
      key,
      state: resident ? 'resident' : 'loading',
      origin,
      pinned: false,
      residentSinceNs: resident ? this.clock.now : -1,
      lastUsedNs: -1,
      uses: 0,
      allocation,
      transfer: null,
      prefetchUnused: origin === 'prefetch',
      part: bottomBytes === undefined ? 'whole' : 'bottom',
      bytes,
    };
    const byKey = this.byKey;
    // Grown densely (holes would turn the array into a dictionary).
    while (byKey.length <= key) {
      byKey.push(undefined);
      this.posByKey.push(-1);
    }
    byKey[key] = e;
    this.size++;
    this.posByKey[key] = this.list.length;
    this.list.push(e);
    if (this.byLayer) this.layerSet(key).push(e);
    if (this.loadingList && !resident) this.loadingList.push(e);
    if (key >= this.evictablePos.length) this.growKeys(key + 1);
    this.lastUsed[key] = -1;
    if (resident) {
      this.evictableJoin(key);
      this.sink?.onExpertResidency?.(this.reportKey(e), true, this.clock.now);
    }
    return e;
  }

  /** The entries of `key`'s layer in insertion order (arrays: a layer holds a handful; add and remove as a Set would, in order). */
  private layerSet(key: ExpertKey): BufferEntry[] {
    const set = this.byLayer![Math.floor(key / this.shape!.experts)];
    if (!set)
      throw new InvariantError(`expert key ${key} beyond the model's MoE layers`, this.clock.now, 'expert buffer');
    return set;
  }

  segmentKeySpan = 0;
  /**
   * Key under which residency and compute of an entry are reported to trace sinks: the expert
   * key for a whole expert; for split experts, key + span (top) or key + 2·span (bottom), where
   * span = `segmentKeySpan` (moeLayers × experts).
   */
  reportKey(e: { key: ExpertKey; part: 'whole' | 'bottom' }): number {
    return e.part === 'whole' ? e.key : e.key + 2 * this.segmentKeySpan;
  }

  /** Marks a loading entry resident (its transfer completed). */
  arrived(key: ExpertKey): BufferEntry {
    const e = this.byKey[key];
    if (!e || e.state !== 'loading')
      throw new InvariantError(`arrival of expert ${key}, which is not loading`, this.clock.now, 'expert buffer');
    e.state = 'resident';
    e.residentSinceNs = this.clock.now;
    e.transfer = null;
    if (!e.pinned) this.evictableJoin(key);
    if (this.loadingList) removeInOrder(this.loadingList, e);
    this.sink?.onExpertResidency?.(this.reportKey(e), true, this.clock.now);
    return e;
  }

  /** Frees the slot of `key`. */
  release(key: ExpertKey): BufferEntry {
    const e = this.byKey[key];
    if (!e) throw new InvariantError(`release of absent expert ${key}`, this.clock.now, 'expert buffer');
    if (e.pinned) throw new InvariantError(`release of pinned expert ${key}`, this.clock.now, 'expert buffer');
    this.byKey[key] = undefined;
    this.size--;
    this.unlist(key);
    if (this.byLayer) removeInOrder(this.layerSet(key), e);
    if (this.loadingList && e.state === 'loading') removeInOrder(this.loadingList, e);
    this.vram.free(e.allocation);
    this.lastUsed[key] = -1;
    if (e.state === 'resident') {
      // Not pinned (checked above): it was evictable.
      this.evictableLeave(key);
      this.sink?.onExpertResidency?.(this.reportKey(e), false, this.clock.now);
    }
    return e;
  }

  /** Takes `key`'s entry out of `list` (a hole; trailing holes popped, half-empty squeezed). */
  private unlist(key: ExpertKey): void {
    const list = this.list;
    const p = this.posByKey[key]!;
    list[p] = undefined;
    this.posByKey[key] = -1;
    this.holes++;
    if (p < this.firstHole) this.firstHole = p;
    while (list.length > 0 && list[list.length - 1] === undefined) {
      list.pop();
      this.holes--;
    }
    if (this.holes === 0) this.firstHole = NO_HOLE;
    else if (this.holes > 16 && this.holes * 2 > list.length) this.compact();
  }

  /** Whether some entry is resident and unpinned (what `evictable` would list): the dense evictable set is not empty. */
  hasEvictable(): boolean {
    return this.evictableN > 0;
  }

  /** Resident, unpinned keys in insertion order (into `out`, emptied first, when given). */
  evictable(out: ExpertKey[] = []): ExpertKey[] {
    // Written by index over the previous contents, the length cut once at the end (popping
    // dozens of old candidates one by one cost more than the one runtime call).
    const list = this.list;
    let n = 0;
    for (let i = 0; i < list.length; i++) {
      const e = list[i];
      if (e === undefined || e.state !== 'resident' || e.pinned) continue;
      if (n < out.length) out[n] = e.key;
      else out.push(e.key);
      n++;
    }
    if (out.length > n) out.length = n;
    return out;
  }
}

/** `ExpertBuffer.firstHole` when the list has no hole (past any position; a small integer for V8). */
const NO_HOLE = 0x3fffffff;

/** Removes `e` from `list` in place, keeping the order (`splice` would allocate the array of removed items). */
function removeInOrder(list: BufferEntry[], e: BufferEntry): void {
  const i = list.indexOf(e);
  if (i < 0) return;
  const n = list.length - 1;
  for (let j = i; j < n; j++) list[j] = list[j + 1]!;
  list.pop();
}

/** A top segment in the segment cache (split experts, MoEpic). */
export interface TopEntry {
  readonly key: ExpertKey;
  state: 'loading' | 'resident';
  /** Fraction of the expert (bytes and compute) it holds. */
  readonly fraction: number;
  readonly bytes: number;
  pinned: boolean;
  allocation: Allocation;
  transfer: Transfer | null;
}

/**
 * The top-segment cache of split experts: one allocation per top segment in the VRAM pool
 * (category `expertCache`), within a byte capacity the executor enforces. Residency is reported
 * to sinks under key + `span` (see `ExpertBuffer.reportKey`).
 */
export class TopSegmentCache implements SegmentCacheView {
  private readonly map = new Map<ExpertKey, TopEntry>();
  usedBytes = 0;

  constructor(
    readonly capacityBytes: number,
    private readonly bytesPerExpert: number,
    private readonly span: number,
    private readonly vram: MemoryPool,
    private readonly clock: Pick<Scheduler<unknown>, 'now'>,
    private readonly sink?: TraceSink,
  ) {}

  topBytes(fraction: number): number {
    return Math.min(this.bytesPerExpert, Math.max(0, Math.round(fraction * this.bytesPerExpert)));
  }
  get freeBytes(): number {
    return this.capacityBytes - this.usedBytes;
  }
  entry(key: ExpertKey): TopEntry | undefined {
    return this.map.get(key);
  }
  topFraction(key: ExpertKey): number {
    return this.map.get(key)?.fraction ?? 0;
  }
  topState(key: ExpertKey): 'loading' | 'resident' | undefined {
    return this.map.get(key)?.state;
  }
  topPinned(key: ExpertKey): boolean {
    return this.map.get(key)?.pinned ?? false;
  }
  keys(): IterableIterator<ExpertKey> {
    return this.map.keys();
  }
  entries(): IterableIterator<TopEntry> {
    return this.map.values();
  }
  get size(): number {
    return this.map.size;
  }

  /** Adds a top of `fraction` (loading, or resident without a transfer when `resident`). Throws past the capacity. */
  add(key: ExpertKey, fraction: number, resident: boolean): TopEntry {
    if (!(fraction > 0 && fraction <= 1))
      throw new InvariantError(
        `top fraction ${fraction} of expert ${key} outside (0, 1]`,
        this.clock.now,
        'segment cache',
      );
    if (this.map.has(key))
      throw new InvariantError(`top of expert ${key} already cached`, this.clock.now, 'segment cache');
    const bytes = this.topBytes(fraction);
    if (this.usedBytes + bytes > this.capacityBytes) {
      throw new InvariantError(
        `segment cache full (${this.usedBytes} + ${bytes} B > ${this.capacityBytes} B) adding the top of ${key}`,
        this.clock.now,
        'segment cache',
      );
    }
    const allocation = this.vram.allocate(bytes, 'expertCache', `top ${key}`);
    const t: TopEntry = {
      key,
      state: resident ? 'resident' : 'loading',
      // The bytes decide the split: a fraction that rounds to every byte (0.9999999999999996 from a
      // configurator's arithmetic) is the whole expert, with no bottom left to move or compute.
      fraction: bytes === this.bytesPerExpert ? 1 : fraction,
      bytes,
      pinned: false,
      allocation,
      transfer: null,
    };
    this.map.set(key, t);
    this.usedBytes += bytes;
    if (resident) this.sink?.onExpertResidency?.(key + this.span, true, this.clock.now);
    return t;
  }

  arrived(key: ExpertKey): TopEntry {
    const t = this.map.get(key);
    if (!t || t.state !== 'loading')
      throw new InvariantError(`arrival of top ${key}, which is not loading`, this.clock.now, 'segment cache');
    t.state = 'resident';
    t.transfer = null;
    this.sink?.onExpertResidency?.(key + this.span, true, this.clock.now);
    return t;
  }

  release(key: ExpertKey): TopEntry {
    const t = this.map.get(key);
    if (!t) throw new InvariantError(`release of absent top ${key}`, this.clock.now, 'segment cache');
    if (t.pinned) throw new InvariantError(`release of pinned top ${key}`, this.clock.now, 'segment cache');
    this.map.delete(key);
    this.usedBytes -= t.bytes;
    this.vram.free(t.allocation);
    if (t.state === 'resident') this.sink?.onExpertResidency?.(key + this.span, false, this.clock.now);
    return t;
  }
}
