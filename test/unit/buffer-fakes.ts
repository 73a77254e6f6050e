/** A hand-built `BufferView` for policy unit tests: the given entries (resident, unpinned, used at 0 unless set), in key order, 64 slots, no dense evictable set. */
import type { BufferEntryView, BufferView } from '../../sim/serving/policy.ts';

export function fakeBuffer(entries: Record<number, Partial<BufferEntryView>>): BufferView {
  const map = new Map<number, BufferEntryView>();
  for (const [k, v] of Object.entries(entries)) {
    map.set(Number(k), {
      key: Number(k),
      state: 'resident',
      origin: 'cache',
      pinned: false,
      residentSinceNs: 0,
      lastUsedNs: 0,
      uses: 1,
      ...v,
    });
  }
  return {
    slots: 64,
    occupied: map.size,
    has: (k) => map.has(k),
    isResident: (k) => map.get(k)?.state === 'resident',
    isLoading: (k) => map.get(k)?.state === 'loading',
    entry: (k) => map.get(k),
    entries: () => map.values(),
  };
}
