/**
 * Host DRAM as the OS page cache (the SSD tier's third memory pool): an LRU of files — one per
 * expert — read from the NVMe drive into a byte-exact pool whose capacity is the RAM the
 * engine leaves free (flash-moe, colibri and llama.cpp's mmap read experts with `pread()` /
 * page faults through it).
 *
 * - `acquire(file)` pins a file for a user (a copy to VRAM, a CPU kernel). A cached file is a
 *   hit: pinned at once (the call returns a ticket already `ready`). A file being read is
 *   joined. Otherwise its pages are allocated (evicting the least recently used unpinned cached
 *   files until they fit) and a read is submitted to the NVMe link; the ticket's `onReady` runs
 *   when the read lands. When nothing evictable is left the acquisition waits for room
 *   (queued in order, served after each release or eviction chance).
 * - `release(ticket)` unpins (the file stays cached, most recently used). Releasing a ticket
 *   before its read landed withdraws it; a read nobody waits for any more is cancelled unless
 *   its bytes are already flowing (a `pread()` in progress completes into the cache).
 * - Pages: a file occupies its bytes rounded up to the drive's read granularity.
 *
 * Simplification: pure LRU over whole files (Linux keeps active / inactive lists and reads
 * ahead); no dirty pages (experts are only read).
 */
import { CapacityError, SimError } from '../kernel/errors.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import type { Allocation, Clock } from './memory-pool.ts';
import { MemoryPool } from './memory-pool.ts';
import { deviceBytes, type NvmeLink, type NvmeRead } from './nvme-link.ts';

type FileState = 'waiting' | 'reading' | 'cached';

interface PageFile {
  readonly key: number;
  readonly bytes: number;
  readonly label: string;
  state: FileState;
  alloc: Allocation | null;
  pins: number;
  read: NvmeRead | null;
  priority: number;
  readonly waiters: PageTicket[];
}

export interface PageTicket {
  readonly key: number;
  /** The file is in the cache and pinned for this ticket. */
  ready: boolean;
  /** Released (or withdrawn before ready). */
  released: boolean;
  readonly onReady: () => void;
}

export interface PageCacheStats {
  /** Acquisitions; of them, files already cached (hits), joined while being read, and reads started. */
  accesses: number;
  hits: number;
  joins: number;
  reads: number;
  evictions: number;
  evictedBytes: number;
  /** Acquisitions that had to wait for room (every cached file pinned). */
  roomWaits: number;
}

export class PageCache {
  readonly pool: MemoryPool;
  /** Files by key; Map order is recency for cached files (oldest first). */
  private readonly files = new Map<number, PageFile>();
  private readonly roomQueue: PageFile[] = [];
  readonly stats: PageCacheStats = {
    accesses: 0,
    hits: 0,
    joins: 0,
    reads: 0,
    evictions: 0,
    evictedBytes: 0,
    roomWaits: 0,
  };

  constructor(
    capacityBytes: number,
    private readonly nvme: NvmeLink,
    private readonly clock: Clock,
    private readonly sink?: TraceSink,
  ) {
    this.pool = new MemoryPool('pageCache', capacityBytes, clock, sink);
  }

  /** Bytes a file of `bytes` occupies (whole pages). */
  pageBytes(bytes: number): number {
    return deviceBytes(bytes, this.nvme.granularityBytes);
  }

  /** Whether `key` is cached now (tests, policies' cost estimates). */
  has(key: number): boolean {
    return this.files.get(key)?.state === 'cached';
  }

  /** Pins file `key` of `bytes`, reading it from the drive if needed (see the module comment). */
  acquire(key: number, bytes: number, priority: number, label: string, onReady: () => void): PageTicket {
    this.stats.accesses++;
    const t: PageTicket = { key, ready: false, released: false, onReady };
    let f = this.files.get(key);
    if (f?.state === 'cached') {
      this.stats.hits++;
      f.pins++;
      this.touch(f);
      t.ready = true;
      return t;
    }
    if (f) {
      this.stats.joins++;
      f.waiters.push(t);
      if (priority < f.priority) this.reprioritizeFile(f, priority);
      return t;
    }
    const size = this.pageBytes(bytes);
    if (size > this.pool.capacityBytes) {
      throw new CapacityError(
        `pageCache: a file of ${size} B cannot fit in ${this.pool.capacityBytes} B`,
        this.clock.now,
        'pageCache',
        size,
        this.pool.freeBytes,
      );
    }
    f = { key, bytes: size, label, state: 'waiting', alloc: null, pins: 0, read: null, priority, waiters: [t] };
    this.files.set(key, f);
    if (!this.startRead(f)) {
      this.stats.roomWaits++;
      this.roomQueue.push(f);
    }
    return t;
  }

  /** Raises (lowers the number of) the priority of a pending acquisition's read. */
  reprioritize(t: PageTicket, priority: number): void {
    const f = this.files.get(t.key);
    if (f && !t.ready && !t.released && priority < f.priority) this.reprioritizeFile(f, priority);
  }

  /** Unpins a ready ticket, or withdraws a pending one. Idempotent. */
  release(t: PageTicket): void {
    if (t.released) return;
    t.released = true;
    const f = this.files.get(t.key);
    if (!f) throw new SimError(`page cache: release of unknown file ${t.key}`, this.clock.now, 'pageCache');
    if (t.ready) {
      f.pins--;
      this.touch(f);
      this.serveRoomQueue();
      return;
    }
    const i = f.waiters.indexOf(t);
    if (i >= 0) f.waiters.splice(i, 1);
    if (f.waiters.length > 0 || f.pins > 0) return;
    if (f.state === 'waiting') {
      this.files.delete(f.key);
      const q = this.roomQueue.indexOf(f);
      if (q >= 0) this.roomQueue.splice(q, 1);
    } else if (f.state === 'reading' && f.read && f.read.state !== 'active') {
      this.nvme.cancel(f.read);
      this.files.delete(f.key);
      this.freePages(f);
      this.serveRoomQueue();
    }
    // A read whose bytes are flowing completes into the cache (see onReadDone).
  }

  private reprioritizeFile(f: PageFile, priority: number): void {
    f.priority = priority;
    if (f.read) this.nvme.reprioritize(f.read, priority);
  }

  /** Allocates `f`'s pages (evicting as needed) and submits its read; false when there is no room. */
  private startRead(f: PageFile): boolean {
    if (!this.makeRoom(f.bytes)) return false;
    f.alloc = this.pool.allocate(f.bytes, 'expertWeights', f.label);
    f.state = 'reading';
    this.stats.reads++;
    f.read = this.nvme.submitRead(f.bytes, f.priority, f.label, 'expert-read', () => this.onReadDone(f), f.key);
    return true;
  }

  private onReadDone(f: PageFile): void {
    f.read = null;
    f.state = 'cached';
    this.touch(f);
    this.sink?.onPageCache?.(f.key, true, this.clock.now);
    const ws = f.waiters.splice(0);
    f.pins += ws.length;
    for (const w of ws) w.ready = true;
    // Nobody waits any more (every waiter withdrew while the bytes flowed): cached, unpinned.
    for (const w of ws) w.onReady();
  }

  /** Evicts least recently used unpinned cached files until `bytes` fit; false (nothing evicted) if they cannot. */
  private makeRoom(bytes: number): boolean {
    const pool = this.pool;
    if (pool.canAllocate(bytes)) return true;
    let evictable = pool.freeBytes;
    for (const f of this.files.values()) {
      if (f.state === 'cached' && f.pins === 0) evictable += f.bytes;
      if (evictable >= bytes) break;
    }
    if (evictable < bytes) return false;
    for (const f of this.files.values()) {
      if (pool.canAllocate(bytes)) break;
      if (f.state !== 'cached' || f.pins > 0) continue;
      this.files.delete(f.key);
      this.freePages(f);
      this.stats.evictions++;
      this.stats.evictedBytes += f.bytes;
      this.sink?.onPageCache?.(f.key, false, this.clock.now);
    }
    return true;
  }

  private freePages(f: PageFile): void {
    if (f.alloc) this.pool.free(f.alloc);
    f.alloc = null;
  }

  private serveRoomQueue(): void {
    while (this.roomQueue.length > 0) {
      const f = this.roomQueue[0]!;
      if (!this.startRead(f)) return;
      this.roomQueue.shift();
    }
  }

  private touch(f: PageFile): void {
    this.files.delete(f.key);
    this.files.set(f.key, f);
  }
}
