/**
 * MoE-Lens paged KV cache in host DRAM (DESIGN §8 "MoE-Lens"; paper §6.2): N pages of b token
 * slots; a sequence holds ⌈kvTokens/b⌉ pages, allocated one page at a time as it grows, and all
 * of them are freed exactly once (when it finishes or is preempted). Invariants (checked, a
 * violation throws): never over capacity, no double free, no growth of an unknown sequence.
 * Occupancy (pages in use / N) is a metric; `samples` is its timeline (time ns, pages in use).
 */
export class PagePool {
  private readonly held = new Map<number, number>();
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
  heldBy(seq: number): number {
    return this.held.get(seq) ?? 0;
  }
  /** Extra pages `seq` needs to hold `tokens` tokens. */
  extraFor(seq: number, tokens: number): number {
    return Math.max(0, this.pagesFor(tokens) - this.heldBy(seq));
  }

  /** Grow `seq` to hold `tokens` tokens (allocating pages one by one). Throws when over capacity. */
  grow(seq: number, tokens: number, nowNs = 0): void {
    const extra = this.extraFor(seq, tokens);
    if (extra === 0) {
      if (!this.held.has(seq)) this.held.set(seq, 0);
      return;
    }
    if (this.used + extra > this.pages) throw new Error(`PagePool: over capacity (${this.used} + ${extra} > ${this.pages}) for seq ${seq}`);
    this.held.set(seq, this.heldBy(seq) + extra);
    this.used += extra;
    this.allocs += extra;
    if (this.used > this.peakUsed) this.peakUsed = this.used;
    if (this.record) this.samples.push([nowNs, this.used]);
  }

  /** Free every page of `seq`. Throws if `seq` holds nothing (freed twice or never allocated). */
  free(seq: number, nowNs = 0): number {
    const n = this.held.get(seq);
    if (n === undefined) throw new Error(`PagePool: free of seq ${seq} that holds no pages (double free?)`);
    this.held.delete(seq);
    this.used -= n;
    this.frees += n;
    if (this.record) this.samples.push([nowNs, this.used]);
    return n;
  }
}
