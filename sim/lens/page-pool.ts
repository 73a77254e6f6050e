/**
 * MoE-Lens paged KV cache in host DRAM (DESIGN §8 "MoE-Lens"; paper §6.2): N pages of b token
 * slots; a sequence holds ⌈kvTokens/b⌉ pages, allocated one page at a time as it grows, and all
 * of them are freed exactly once (when it finishes or is preempted). Invariants (checked, a
 * violation throws): never over capacity, no double free, no growth of an unknown sequence.
 * Occupancy (pages in use / N) is a metric; `samples` is its timeline (time ns, pages in use).
 * Sequence ids are non-negative integers (indices of the run's requests): the pages held are a
 * dense typed array indexed by id (−1: holds nothing), grown on demand.
 */
export class PagePool {
  /** Pages held by each sequence id, −1 when it holds none (not allocated, or freed). */
  private held = new Int32Array(64).fill(-1);
  private used = 0;
  peakUsed = 0;
  allocs = 0;
  frees = 0;
  /** (time ns, pages in use) after every change of occupancy, when `record` is on. */
  readonly samples: [number, number][] = [];

  constructor(readonly pages: number, readonly pageTokens: number, private readonly record = false) {
    if (!(Number.isSafeInteger(pages) && pages >= 1 && Number.isSafeInteger(pageTokens) && pageTokens >= 1)) {
      throw new Error(`PagePool: invalid pages ${pages} / pageTokens ${pageTokens}`);
    }
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
  private slot(seq: number): number {
    if (!(Number.isInteger(seq) && seq >= 0)) throw new Error(`PagePool: sequence id ${seq} is not a non-negative integer`);
    if (seq >= this.held.length) {
      let n = this.held.length;
      while (n <= seq) n *= 2;
      const a = new Int32Array(n).fill(-1);
      a.set(this.held);
      this.held = a;
    }
    return seq;
  }
  heldBy(seq: number): number {
    const h = seq < this.held.length ? this.held[seq]! : -1;
    return h < 0 ? 0 : h;
  }
  /** Extra pages `seq` needs to hold `tokens` tokens. */
  extraFor(seq: number, tokens: number): number {
    return Math.max(0, this.pagesFor(tokens) - this.heldBy(seq));
  }

  /** Grow `seq` to hold `tokens` tokens (allocating pages one by one). Throws when over capacity. */
  grow(seq: number, tokens: number, nowNs = 0): void {
    const i = this.slot(seq);
    const h = this.held[i]!;
    const have = h < 0 ? 0 : h;
    const extra = Math.max(0, Math.ceil(tokens / this.pageTokens) - have);
    if (extra === 0) {
      if (h < 0) this.held[i] = 0;
      return;
    }
    if (this.used + extra > this.pages) throw new Error(`PagePool: over capacity (${this.used} + ${extra} > ${this.pages}) for seq ${seq}`);
    this.held[i] = have + extra;
    this.used += extra;
    this.allocs += extra;
    if (this.used > this.peakUsed) this.peakUsed = this.used;
    if (this.record) this.samples.push([nowNs, this.used]);
  }

  /** Free every page of `seq`. Throws if `seq` holds nothing (freed twice or never allocated). */
  free(seq: number, nowNs = 0): number {
    const n = seq >= 0 && seq < this.held.length ? this.held[seq]! : -1;
    if (!(n >= 0)) throw new Error(`PagePool: free of seq ${seq} that holds no pages (double free?)`);
    this.held[seq] = -1;
    this.used -= n;
    this.frees += n;
    if (this.record) this.samples.push([nowNs, this.used]);
    return n;
  }
}
