/** Hand-built `BufferView`s for policy tests: entries only (no dense evictable set, no per-layer index). */
import type { BufferEntryView, BufferView } from '../../sim/serving/policy.ts';

/** A view of `entries` (in the given order) with `slots` slots. */
export function bufferOf(slots: number, entries: readonly BufferEntryView[]): BufferView {
  const map = new Map<number, BufferEntryView>();
  for (const e of entries) map.set(e.key, e);
  return {
    slots,
    occupied: map.size,
    has: (k) => map.has(k),
    isResident: (k) => map.get(k)?.state === 'resident',
    isLoading: (k) => map.get(k)?.state === 'loading',
    entry: (k) => map.get(k),
    entries: () => map.values(),
  };
}

/** 64 slots holding the given entries by key (resident, unpinned, used at 0 unless set), in key order. */
export function fakeBuffer(entries: Record<number, Partial<BufferEntryView>>): BufferView {
  return bufferOf(
    64,
    Object.entries(entries).map(([k, v]) => ({
      key: Number(k),
      state: 'resident',
      origin: 'cache',
      pinned: false,
      residentSinceNs: 0,
      lastUsedNs: 0,
      uses: 1,
      ...v,
    })),
  );
}
