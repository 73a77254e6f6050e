/**
 * A paged KV cache as `MemoryPool` allocations (DESIGN §7; MoE-Lens §6.2, vLLM's block manager):
 * N pages of b token slots in a pool of exactly N pages' bytes. A sequence holds ⌈kvTokens/b⌉
 * pages, allocated as it grows and all freed at once (when it finishes, is preempted or swapped
 * out). The pool keeps the byte-exact books (never over capacity, no double free, peaks) and
 * reports every change to the trace sink, so the invariant checker sees KV like any memory.
 * Sequence ids are non-negative integers (indices of the run's requests).
 */
import { InvariantError } from '../kernel/errors.ts';
import type { Ns } from '../kernel/time.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import { MemoryPool, type Allocation } from '../resources/memory-pool.ts';

export class KvPages {
  readonly pool: MemoryPool;
  readonly pageBytes: number;
  private readonly clock = { now: 0 as Ns };
  /** Pages held by each sequence id (0: none). */
  private held = new Int32Array(64);
  /** Allocations of each sequence (one per growth). */
  private readonly bySeq: (Allocation[] | undefined)[] = [];
  private used = 0;
  peakUsed = 0;
  /** Pages allocated and freed over the run (equal at the end of a complete run). */
  allocs = 0;
  frees = 0;

  constructor(
    readonly pages: number,
    readonly pageTokens: number,
    bytesPerToken: number,
    name = 'kv',
    sink?: TraceSink,
  ) {
    if (!(Number.isSafeInteger(pages) && pages >= 1 && Number.isSafeInteger(pageTokens) && pageTokens >= 1)) {
      throw new RangeError(`KvPages: invalid pages ${pages} / pageTokens ${pageTokens}`);
    }
    this.pageBytes = Math.max(1, Math.ceil(bytesPerToken * pageTokens));
    this.pool = new MemoryPool(name, pages * this.pageBytes, this.clock, sink);
  }

  get usedPages(): number {
    return this.used;
  }
  get freePages(): number {
    return this.pages - this.used;
  }
  pagesFor(tokens: number): number {
    return Math.ceil(tokens / this.pageTokens);
  }
  heldBy(seq: number): number {
    return seq < this.held.length ? this.held[seq]! : 0;
  }
  /** Extra pages `seq` needs to hold `tokens` tokens. */
  extraFor(seq: number, tokens: number): number {
    return Math.max(0, this.pagesFor(tokens) - this.heldBy(seq));
  }

  /** Grows `seq` to hold `tokens` tokens; throws (`CapacityError`) when the pages are not free. */
  grow(seq: number, tokens: number, nowNs = 0): void {
    if (!(Number.isInteger(seq) && seq >= 0)) {
      throw new RangeError(`KvPages: sequence id ${seq} is not a non-negative integer`);
    }
    const extra = this.extraFor(seq, tokens);
    if (!this.bySeq[seq]) this.bySeq[seq] = [];
    if (extra === 0) return;
    if (seq >= this.held.length) {
      let n = this.held.length;
      while (n <= seq) n *= 2;
      const a = new Int32Array(n);
      a.set(this.held);
      this.held = a;
    }
    this.clock.now = nowNs as Ns;
    this.bySeq[seq]!.push(this.pool.allocate(extra * this.pageBytes, 'kvCache', 'kv pages'));
    this.held[seq] = this.held[seq]! + extra;
    this.used += extra;
    this.allocs += extra;
    if (this.used > this.peakUsed) this.peakUsed = this.used;
  }

  /** Frees every page of `seq`; throws if it holds none (freed twice or never grown). */
  free(seq: number, nowNs = 0): number {
    const list = this.bySeq[seq];
    if (!list) {
      const why = `KvPages: free of sequence ${seq} that holds no pages (double free?)`;
      throw new InvariantError(why, nowNs as Ns, this.pool.name);
    }
    this.clock.now = nowNs as Ns;
    for (const a of list) this.pool.free(a);
    this.bySeq[seq] = undefined;
    const n = this.heldBy(seq);
    if (n > 0) this.held[seq] = 0;
    this.used -= n;
    this.frees += n;
    return n;
  }
}
