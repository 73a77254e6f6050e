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
import type { BufferEntryView, BufferView, EntryOrigin, ExpertKey } from './policy.ts';

export interface BufferEntry extends BufferEntryView {
  state: 'loading' | 'resident';
  origin: EntryOrigin;
  pinned: boolean;
  residentSinceNs: number;
  lastUsedNs: number;
  uses: number;
  allocation: Allocation;
  transfer: Transfer | null;
  /** Set when a prefetch was issued for it and it has not been used yet (for precision / waste). */
  prefetchUnused: boolean;
}

export class ExpertBuffer implements BufferView {
  private readonly map = new Map<ExpertKey, BufferEntry>();
  /** VRAM allocation labels by key, built once (a slot is occupied once per fetch). */
  private readonly labels: string[] = [];

  constructor(
    readonly slots: number,
    private readonly bytesPerExpert: number,
    private readonly vram: MemoryPool,
    private readonly clock: Pick<Scheduler<unknown>, 'now'>,
    private readonly sink?: TraceSink,
  ) {}

  get occupied(): number {
    return this.map.size;
  }
  get free(): number {
    return this.slots - this.map.size;
  }
  has(key: ExpertKey): boolean {
    return this.map.has(key);
  }
  isResident(key: ExpertKey): boolean {
    return this.map.get(key)?.state === 'resident';
  }
  isLoading(key: ExpertKey): boolean {
    return this.map.get(key)?.state === 'loading';
  }
  entry(key: ExpertKey): BufferEntry | undefined {
    return this.map.get(key);
  }
  entries(): IterableIterator<BufferEntry> {
    return this.map.values();
  }

  /** Occupies a free slot for `key` (state loading, or resident when `resident`). Throws if none is free. */
  occupy(key: ExpertKey, origin: EntryOrigin, resident = false): BufferEntry {
    if (this.map.size >= this.slots) {
      throw new InvariantError(`expert buffer full (${this.slots} slots) when occupying ${key}`, this.clock.now, 'expert buffer');
    }
    if (this.map.has(key)) throw new InvariantError(`expert ${key} already in buffer`, this.clock.now, 'expert buffer');
    const allocation = this.vram.allocate(this.bytesPerExpert, 'expertCache', (this.labels[key] ??= `expert ${key}`));
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
    };
    this.map.set(key, e);
    if (resident) this.sink?.onExpertResidency?.(key, true, this.clock.now);
    return e;
  }

  /** Marks a loading entry resident (its transfer completed). */
  arrived(key: ExpertKey): BufferEntry {
    const e = this.map.get(key);
    if (!e || e.state !== 'loading') throw new InvariantError(`arrival of expert ${key}, which is not loading`, this.clock.now, 'expert buffer');
    e.state = 'resident';
    e.residentSinceNs = this.clock.now;
    e.transfer = null;
    this.sink?.onExpertResidency?.(key, true, this.clock.now);
    return e;
  }

  /** Frees the slot of `key`. */
  release(key: ExpertKey): BufferEntry {
    const e = this.map.get(key);
    if (!e) throw new InvariantError(`release of absent expert ${key}`, this.clock.now, 'expert buffer');
    if (e.pinned) throw new InvariantError(`release of pinned expert ${key}`, this.clock.now, 'expert buffer');
    this.map.delete(key);
    this.vram.free(e.allocation);
    if (e.state === 'resident') this.sink?.onExpertResidency?.(key, false, this.clock.now);
    return e;
  }

  /** Resident, unpinned entries: what may be evicted, in insertion order. */
  evictable(): ExpertKey[] {
    const out: ExpertKey[] = [];
    for (const e of this.map.values()) if (e.state === 'resident' && !e.pinned) out.push(e.key);
    return out;
  }
}
