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

export function minPlan(index: NeedIndex, keys: number, slots: number): MinPlan {
  const steps = index.trace.steps;
  const E = index.experts;
  const inSet = new Uint8Array(keys);
  const ver = new Int32Array(keys);
  const lastUse = new Int32Array(keys).fill(-1);
  // Max-heap of (next use, last use, key, version): furthest next use first; ties (typically
  // several never used again) the earliest last use — the victim free soonest, so its fetch can
  // start earliest — then the lowest key. Stale entries (version changed, or out of the set) are skipped.
  const hNext: number[] = [];
  const hLast: number[] = [];
  const hKey: number[] = [];
  const hVer: number[] = [];
  const above = (i: number, j: number) =>
    hNext[i]! > hNext[j]! ||
    (hNext[i] === hNext[j] && (hLast[i]! < hLast[j]! || (hLast[i] === hLast[j] && hKey[i]! < hKey[j]!)));
  const swap = (i: number, j: number) => {
    [hNext[i], hNext[j]] = [hNext[j]!, hNext[i]!];
    [hLast[i], hLast[j]] = [hLast[j]!, hLast[i]!];
    [hKey[i], hKey[j]] = [hKey[j]!, hKey[i]!];
    [hVer[i], hVer[j]] = [hVer[j]!, hVer[i]!];
  };
  const push = (next: number, last: number, key: number) => {
    hNext.push(next);
    hLast.push(last);
    hKey.push(key);
    hVer.push(ver[key]!);
    for (let i = hNext.length - 1; i > 0; ) {
      const up = (i - 1) >> 1;
      if (!above(i, up)) break;
      swap(i, up);
      i = up;
    }
  };
  const pop = () => {
    const last = hNext.length - 1;
    swap(0, last);
    hNext.pop();
    hLast.pop();
    hKey.pop();
    hVer.pop();
    for (let i = 0; ; ) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < hNext.length && above(l, m)) m = l;
      if (r < hNext.length && above(r, m)) m = r;
      if (m === i) break;
      swap(i, m);
      i = m;
    }
  };
  /** The valid top of the heap (stale entries dropped), or −1. */
  const top = (): number => {
    while (hNext.length > 0 && !(inSet[hKey[0]!] && hVer[0] === ver[hKey[0]!])) pop();
    return hNext.length > 0 ? 0 : -1;
  };
  const evictTop = (): number => {
    const k = hKey[0]!;
    pop();
    inSet[k] = 0;
    ver[k]!++;
    return k;
  };
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
      else if (top() >= 0 && hNext[0]! > p) v = evictTop();
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
      push(index.nextUse(k, p + 1), p, k);
    }
    while (size > slots && top() >= 0) {
      evictTop();
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
