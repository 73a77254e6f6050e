/**
 * Belady's MIN as a fetch plan (`minPlan`): the fetches the fewest-fetches cache makes over a
 * recorded need sequence, each with its victim and the first step it could be issued at. The
 * oracle prefetcher's `conservative` caching mode (`oracle-prefetch.ts`) issues them as early as
 * their victims allow.
 */
import type { NeedIndex } from './belady.ts';

/**
 * Belady's MIN over a need sequence with `slots` slots: the fetches it makes, in need order.
 * Each fetch is (step, key, victim or −1 for a free slot, the first step at which the victim's
 * last use before it is over). Victim: the furthest next use; ties (several never needed
 * again) the earliest last use, then the lowest key. Within a step, needed experts are pinned
 * (never victims); a step needing more experts than slots overflows: its extra fetches are
 * marked (the executor makes them on demand) and the excess is evicted after the step,
 * furthest next use first.
 */
export interface MinPlan {
  readonly step: Int32Array;
  readonly key: Int32Array;
  readonly victim: Int32Array;
  readonly readyAt: Int32Array;
  readonly overflow: Uint8Array;
  /** Plan entries ordered by (readyAt, step). */
  readonly byReady: Int32Array;
}

/**
 * Max-heap of (next use, last use, key, version): furthest next use first; ties (typically
 * several never used again) the earliest last use — the victim free soonest, so its fetch can
 * start earliest — then the lowest key. Stale entries (version changed, or out of the set) are
 * skipped. `inSet` and `ver` are the plan's, shared.
 */
class VictimHeap {
  private readonly hNext: number[] = [];
  private readonly hLast: number[] = [];
  private readonly hKey: number[] = [];
  private readonly hVer: number[] = [];

  constructor(
    private readonly inSet: Uint8Array,
    private readonly ver: Int32Array,
  ) {}

  private above(i: number, j: number): boolean {
    const { hNext, hLast, hKey } = this;
    return (
      hNext[i]! > hNext[j]! ||
      (hNext[i] === hNext[j] && (hLast[i]! < hLast[j]! || (hLast[i] === hLast[j] && hKey[i]! < hKey[j]!)))
    );
  }

  private swap(i: number, j: number): void {
    const { hNext, hLast, hKey, hVer } = this;
    [hNext[i], hNext[j]] = [hNext[j]!, hNext[i]!];
    [hLast[i], hLast[j]] = [hLast[j]!, hLast[i]!];
    [hKey[i], hKey[j]] = [hKey[j]!, hKey[i]!];
    [hVer[i], hVer[j]] = [hVer[j]!, hVer[i]!];
  }

  push(next: number, last: number, key: number): void {
    const hNext = this.hNext;
    hNext.push(next);
    this.hLast.push(last);
    this.hKey.push(key);
    this.hVer.push(this.ver[key]!);
    for (let i = hNext.length - 1; i > 0; ) {
      const up = (i - 1) >> 1;
      if (!this.above(i, up)) break;
      this.swap(i, up);
      i = up;
    }
  }

  private pop(): void {
    const hNext = this.hNext;
    const last = hNext.length - 1;
    this.swap(0, last);
    hNext.pop();
    this.hLast.pop();
    this.hKey.pop();
    this.hVer.pop();
    for (let i = 0; ; ) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < hNext.length && this.above(l, m)) m = l;
      if (r < hNext.length && this.above(r, m)) m = r;
      if (m === i) break;
      this.swap(i, m);
      i = m;
    }
  }

  /** The valid top of the heap (stale entries dropped), or −1. */
  top(): number {
    const { hNext, hKey, hVer, inSet, ver } = this;
    while (hNext.length > 0 && !(inSet[hKey[0]!] && hVer[0] === ver[hKey[0]!])) this.pop();
    return hNext.length > 0 ? 0 : -1;
  }

  /** The next use of the top entry (call `top()` first). */
  topNext(): number {
    return this.hNext[0]!;
  }

  /** Evicts the top entry's key (call `top()` first) and returns it. */
  evictTop(): number {
    const k = this.hKey[0]!;
    this.pop();
    this.inSet[k] = 0;
    this.ver[k]!++;
    return k;
  }
}

export function minPlan(index: NeedIndex, keys: number, slots: number): MinPlan {
  const steps = index.trace.steps;
  const E = index.experts;
  const inSet = new Uint8Array(keys);
  const ver = new Int32Array(keys);
  const lastUse = new Int32Array(keys).fill(-1);
  const heap = new VictimHeap(inSet, ver);
  const step: number[] = [];
  const key: number[] = [];
  const victim: number[] = [];
  const readyAt: number[] = [];
  const overflow: number[] = [];
  let size = 0;
  for (let p = 0; p < steps.length; p++) {
    const s = steps[p]!;
    for (const e of s.experts) {
      const k = s.layer * E + e;
      if (inSet[k]) continue;
      let v = -1;
      let over = 0;
      if (size < slots) size++;
      else if (heap.top() >= 0 && heap.topNext() > p) v = heap.evictTop();
      else {
        over = 1;
        size++;
      }
      step.push(p);
      key.push(k);
      victim.push(v);
      readyAt.push(v >= 0 ? lastUse[v]! + 1 : 0);
      overflow.push(over);
      inSet[k] = 1;
      ver[k]!++;
    }
    for (const e of s.experts) {
      const k = s.layer * E + e;
      lastUse[k] = p;
      ver[k]!++;
      heap.push(index.nextUse(k, p + 1), p, k);
    }
    while (size > slots && heap.top() >= 0) {
      heap.evictTop();
      size--;
    }
  }
  const byReady = Int32Array.from(step.keys()).sort((a, b) => readyAt[a]! - readyAt[b]! || a - b);
  return {
    step: Int32Array.from(step),
    key: Int32Array.from(key),
    victim: Int32Array.from(victim),
    readyAt: Int32Array.from(readyAt),
    overflow: Uint8Array.from(overflow),
    byReady,
  };
}
