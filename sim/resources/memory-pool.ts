/**
 * A byte-exact memory pool (VRAM or host DRAM) with categories.
 *
 * `tryAllocate` succeeds atomically or returns null; `allocate` throws `CapacityError`.
 * `used ≤ capacity` holds after every operation (checked). Peaks are recorded in total and
 * per category. Waiters (`whenFreed`) are woken after a free, so executors never poll.
 */
import { CapacityError, InvariantError } from '../kernel/errors.ts';
import type { Ns } from '../kernel/time.ts';
import type { TraceSink } from '../observe/trace-sink.ts';

export const MEMORY_CATEGORIES = [
  'denseWeights',
  'expertWeights',
  'expertCache',
  'prefetchBuffer',
  'kvCache',
  'activations',
  'workspace',
  /** Host DRAM left to the OS page cache (the SSD tier's third pool lives in it). */
  'pageCache',
] as const;
export type MemoryCategory = (typeof MEMORY_CATEGORIES)[number];

/** Index of each category in MEMORY_CATEGORIES (per-category sums live in arrays, not Maps). */
const CATEGORY_INDEX = Object.fromEntries(MEMORY_CATEGORIES.map((c, i) => [c, i])) as Record<MemoryCategory, number>;

export interface Allocation {
  readonly id: number;
  readonly bytes: number;
  readonly category: MemoryCategory;
  readonly label: string;
  freed: boolean;
}

export interface Clock {
  readonly now: Ns;
}

export class MemoryPool {
  private used = 0;
  private peak = 0;
  /** Bytes in use and peak bytes per category (index: CATEGORY_INDEX); a peak of −1: never used. */
  private readonly usedByCat = new Array<number>(MEMORY_CATEGORIES.length).fill(0);
  private readonly peakByCat = new Array<number>(MEMORY_CATEGORIES.length).fill(-1);
  private nextId = 0;
  private readonly freeListeners: (() => void)[] = [];
  private live = 0;

  constructor(
    readonly name: string,
    readonly capacityBytes: number,
    private readonly clock: Clock,
    private readonly sink?: TraceSink,
  ) {
    if (!(capacityBytes >= 0) || !Number.isSafeInteger(capacityBytes)) {
      throw new RangeError(`${name}: capacity must be a non-negative integer of bytes, got ${capacityBytes}`);
    }
  }

  get usedBytes(): number {
    return this.used;
  }
  get freeBytes(): number {
    return this.capacityBytes - this.used;
  }
  get peakBytes(): number {
    return this.peak;
  }
  get liveAllocations(): number {
    return this.live;
  }
  usedBy(category: MemoryCategory): number {
    return this.usedByCat[CATEGORY_INDEX[category]] ?? 0;
  }
  peakBy(category: MemoryCategory): number {
    return Math.max(0, this.peakByCat[CATEGORY_INDEX[category]] ?? 0);
  }
  /** Peak bytes per category that was ever used. */
  peaks(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const c of MEMORY_CATEGORIES) {
      const p = this.peakByCat[CATEGORY_INDEX[c]]!;
      if (p >= 0) out[c] = p;
    }
    return out;
  }

  canAllocate(bytes: number): boolean {
    return bytes <= this.capacityBytes - this.used;
  }

  /** Allocates `bytes` or returns null (nothing changes on failure). */
  tryAllocate(bytes: number, category: MemoryCategory, label = ''): Allocation | null {
    if (!Number.isSafeInteger(bytes) || bytes < 0) {
      throw new RangeError(`${this.name}: allocation must be a non-negative integer of bytes, got ${bytes}`);
    }
    // Checked before anything changes: an unknown category (from untyped code) leaves the pool as it was.
    const ci = CATEGORY_INDEX[category];
    if (ci === undefined) throw new RangeError(`${this.name}: unknown memory category ${category}`);
    if (bytes > this.capacityBytes - this.used) return null;
    this.used += bytes;
    const catUsed = this.usedByCat[ci]! + bytes;
    this.usedByCat[ci] = catUsed;
    if (this.used > this.peak) this.peak = this.used;
    if (catUsed > this.peakByCat[ci]!) this.peakByCat[ci] = catUsed;
    this.live++;
    this.report(category);
    return { id: this.nextId++, bytes, category, label, freed: false };
  }

  /** Allocates `bytes` or throws CapacityError naming the pool, the request and the free bytes. */
  allocate(bytes: number, category: MemoryCategory, label = ''): Allocation {
    const a = this.tryAllocate(bytes, category, label);
    if (!a) {
      throw new CapacityError(
        `${this.name}: cannot allocate ${bytes} B for ${category}${label ? ` (${label})` : ''}: ${this.freeBytes} B free of ${this.capacityBytes}`,
        this.clock.now,
        this.name,
        bytes,
        this.freeBytes,
      );
    }
    return a;
  }

  free(a: Allocation): void {
    if (a.freed) throw new InvariantError(`double free of allocation ${a.id} (${a.label})`, this.clock.now, this.name);
    a.freed = true;
    this.used -= a.bytes;
    this.usedByCat[CATEGORY_INDEX[a.category]]! -= a.bytes;
    this.live--;
    this.report(a.category);
    if (this.freeListeners.length > 0) {
      const ls = this.freeListeners.splice(0);
      for (const l of ls) l();
    }
  }

  /** Registers a one-shot callback run after the next free. */
  whenFreed(listener: () => void): void {
    this.freeListeners.push(listener);
  }

  private report(category: MemoryCategory): void {
    if (this.used > this.capacityBytes || this.used < 0) {
      throw new InvariantError(`used ${this.used} B outside [0, ${this.capacityBytes}]`, this.clock.now, this.name);
    }
    this.sink?.onMemory?.({
      pool: this.name,
      category,
      timeNs: this.clock.now,
      categoryUsedBytes: this.usedByCat[CATEGORY_INDEX[category]] ?? 0,
      usedBytes: this.used,
      capacityBytes: this.capacityBytes,
    });
  }
}
