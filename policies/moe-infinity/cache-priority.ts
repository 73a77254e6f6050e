/**
 * MoE-Infinity's activation-aware expert cache (DESIGN §8, "Cache").
 *
 * Every expert has a cache priority; when a slot is needed the resident, unpinned expert with
 * the lowest priority is evicted.
 * - Experts in the prefetcher's current ranked set (being prefetched, or resident and
 *   predicted for a coming layer) have maximal priority: a prefetch never evicts them (the
 *   executor never evicts a loading one anyway); an on-demand fetch evicts one only when
 *   nothing else is evictable.
 * - After use, or once known unused (its layer was routed in this iteration and did not pick
 *   it), an expert's priority resets to its frequency in the current request EAM: its count
 *   summed over the requests of the batch (prefill and decode together), divided by the tokens
 *   those requests have routed so far. Dividing by the tokens keeps priorities set in
 *   different iterations comparable (a long prompt's raw counts would otherwise outrank every
 *   later decode step for ever); within one reset it ranks exactly as the raw counts do.
 * - Initial-layer boost (the first layers benefit least from prefetching, DESIGN §8):
 *   priority = frequency × (1 + boost × (1 − layer / L)); boost 0 disables it. Multiplicative,
 *   so it re-weights used experts across layers without lifting an expert the request never
 *   used above one it did.
 * - Ties: least recently used first, then lowest key (deterministic).
 * - Prefetch admission (`admission`, the policy's `prefetchAdmission: 'priority'`): when the
 *   buffer is full a prefetch may evict a cached expert only if that expert's priority is
 *   below the prefetch's expected activation frequency (same unit: activations per token).
 *   The paper says prefetched experts have maximal priority but not when a prediction may
 *   displace a cached expert; without this rule a ranked set as large as the buffer flushes
 *   the cache (measurements in the policy header).
 *
 * With `cachePriorities` off the cache is LRU (still never evicting the ranked set for a
 * prefetch; every prefetch is admitted) — the ablation "without activation-aware caching".
 */
import type { BufferView, EvictionQuery, ExpertKey } from '../../sim/serving/policy.ts';
import type { Phase, RequestEams } from './eam.ts';

const PHASES: readonly Phase[] = ['prefill', 'decode'];

export interface CachePriorityOptions {
  readonly layers: number;
  readonly experts: number;
  /** Request-EAM priorities (true) or LRU (false). */
  readonly requestPriorities: boolean;
  /** Boost of the first layers: priority × (1 + boost·(1 − layer/L)). */
  readonly initialLayerBoost: number;
}

export class CachePriorities {
  /** Priority per expert key (request-EAM frequency × boost), set at the last reset. */
  readonly priority: Float64Array;
  private readonly boostFactor: Float64Array;
  /** Rank in the prefetcher's current ranked set, valid where `rankGen[key] === gen`. */
  private readonly rank: Float64Array;
  private readonly rankGen: Uint32Array;
  private gen = 1;
  /** Expected activation frequency of the prefetches admitted in the current ranking (same generation). */
  private readonly admitted: Float64Array;
  private readonly admittedGen: Uint32Array;

  constructor(private readonly o: CachePriorityOptions) {
    const n = o.layers * o.experts;
    this.priority = new Float64Array(n);
    this.boostFactor = new Float64Array(o.layers);
    for (let l = 0; l < o.layers; l++) this.boostFactor[l] = 1 + o.initialLayerBoost * (1 - l / o.layers);
    this.rank = new Float64Array(n);
    this.rankGen = new Uint32Array(n);
    this.admitted = new Float64Array(n);
    this.admittedGen = new Uint32Array(n);
  }

  /** Multiplier of layer `layer`'s priorities. */
  boost(layer: number): number {
    return this.boostFactor[layer]!;
  }

  /**
   * Sets the prefetcher's ranked set: maximal priority. `urgency[j]` (default: j) orders it,
   * lower most urgent. Clears the admissions of the previous set.
   */
  setRanked(keys: ArrayLike<ExpertKey>, urgency?: ArrayLike<number>, count = keys.length): void {
    this.gen++;
    for (let j = 0; j < count; j++) {
      this.rank[keys[j]!] = urgency ? urgency[j]! : j;
      this.rankGen[keys[j]!] = this.gen;
    }
  }

  /** Urgency (rank) of `key` in the current ranked set, or undefined. */
  rankOf(key: ExpertKey): number | undefined {
    return this.rankGen[key] === this.gen ? this.rank[key]! : undefined;
  }

  /** Records that a prefetch of `key` with expected activation frequency `freq` was admitted. */
  markAdmitted(key: ExpertKey, freq: number): void {
    this.admitted[key] = freq;
    this.admittedGen[key] = this.gen;
  }

  /** The priority (layer, expert) resets to now, for the requests `batchIds` of the batch. */
  valueFor(eams: RequestEams, batchIds: readonly number[], layer: number, expert: number): number {
    let count = 0;
    let tokens = 0;
    for (const id of batchIds) {
      count += eams.count(id, layer, expert);
      tokens += eams.tokens(id);
    }
    return tokens > 0 ? count * (this.boostFactor[layer]! / tokens) : 0;
  }

  /** Resets every expert of `layer` (its routing is known: each one is used or known unused). */
  resetLayer(eams: RequestEams, batchIds: readonly number[], layer: number): void {
    const E = this.o.experts;
    const base = layer * E;
    const p = this.priority;
    p.fill(0, base, base + E);
    let tokens = 0;
    for (const id of batchIds) {
      tokens += eams.tokens(id);
      for (const phase of PHASES) {
        const m = eams.get(id, phase);
        if (m) for (let e = 0; e < E; e++) p[base + e]! += m[base + e]!;
      }
    }
    const f = tokens > 0 ? this.boostFactor[layer]! / tokens : 0;
    for (let e = 0; e < E; e++) p[base + e]! *= f;
  }

  /** Resets one expert (after use). */
  resetKey(eams: RequestEams, batchIds: readonly number[], key: ExpertKey): void {
    const E = this.o.experts;
    this.priority[key] = this.valueFor(eams, batchIds, Math.floor(key / E), key % E);
  }

  /** Priority a prefetch must beat to evict `key` (request priorities; LRU: 0). */
  private victimPriority(key: ExpertKey): number {
    return this.o.requestPriorities ? this.priority[key]! : 0;
  }

  /**
   * Prefetch admission for one re-ranking (call in queue order, after `setRanked`): a ranked
   * expert that is not in the buffer is admitted while a slot is free, or when the
   * lowest-priority evictable expert outside the ranked set has a cache priority below
   * `freq` (its expected activation frequency, the cache priorities' unit); that victim is
   * then spoken for. The executor's later `chooseVictim` calls pick the same victims, in the
   * same order, and decline if they do not.
   */
  admission(buffer: BufferView, maxAdmissions = Infinity): (key: ExpertKey, freq: number) => boolean {
    let free = buffer.slots - buffer.occupied;
    let victims: ExpertKey[] | null = null;
    let vi = 0;
    return (key, freq) => {
      if (free > 0) {
        free--;
        this.markAdmitted(key, Infinity);
        return true;
      }
      if (!victims) victims = this.cheapestVictims(buffer, maxAdmissions);
      const v = victims[vi];
      if (v === undefined || !(this.victimPriority(v) < freq)) return false;
      vi++;
      this.markAdmitted(key, freq);
      return true;
    };
  }

  /**
   * The cache priority of the cheapest victim a prefetch could evict now (resident, unpinned,
   * outside the ranked set), or Infinity when there is none — a prefetch into a full buffer
   * needs a higher expected activation frequency than this.
   */
  minVictimPriority(buffer: BufferView): number {
    let min = Infinity;
    for (const e of buffer.entries()) {
      if (e.state !== 'resident' || e.pinned || this.rankGen[e.key] === this.gen) continue;
      const p = this.victimPriority(e.key);
      if (p < min) min = p;
    }
    return min;
  }

  /**
   * The `limit` cheapest resident, unpinned experts outside the ranked set, in eviction order
   * (priority, last use, key): a bounded heap over the buffer, O(slots · log limit).
   */
  private cheapestVictims(buffer: BufferView, limit: number): ExpertKey[] {
    const h = new VictimHeap(true);
    for (const e of buffer.entries()) {
      if (e.state !== 'resident' || e.pinned || this.rankGen[e.key] === this.gen) continue;
      const p = this.victimPriority(e.key);
      if (h.size < limit) h.push(e.key, p, e.lastUsedNs);
      else if (h.size > 0 && h.ranksBeforeTop(e.key, p, e.lastUsedNs)) h.replaceTop(e.key, p, e.lastUsedNs);
    }
    const out: ExpertKey[] = [];
    while (h.size > 0) out.push(h.pop());
    return out.reverse();
  }

  /**
   * The victim for `q`: the lowest-priority candidate outside the ranked set, else (on-demand
   * only) the least urgent one inside it (highest rank). `undefined` declines a prefetch: when
   * only ranked experts are left, or when the victim's priority is not below the admitted
   * prefetch's expected activation frequency.
   */
  chooseVictim(buffer: BufferView, q: EvictionQuery): ExpertKey | undefined {
    let best: ExpertKey | undefined;
    let bestProt = true;
    let bestPrio = Infinity;
    let bestUsed = Infinity;
    for (const k of q.candidates) {
      const rank = this.rankOf(k);
      const prot = rank !== undefined;
      // Inside the ranked set the least urgent (highest rank) goes first.
      const prio = prot ? -rank : this.victimPriority(k);
      const used = buffer.entry(k)?.lastUsedNs ?? -1;
      const better =
        best === undefined ||
        (bestProt && !prot) ||
        (prot === bestProt && (prio < bestPrio || (prio === bestPrio && (used < bestUsed || (used === bestUsed && k < best)))));
      if (better) {
        best = k;
        bestProt = prot;
        bestPrio = prio;
        bestUsed = used;
      }
    }
    if (best !== undefined && q.reason === 'prefetch') {
      if (bestProt) return undefined;
      if (this.admittedGen[q.forKey] === this.gen && !(bestPrio < this.admitted[q.forKey]!)) return undefined;
    }
    return best;
  }
}

/**
 * A binary heap of eviction candidates ordered by (priority, last use, key): a min-heap, or
 * with `max` a max-heap (the last of the cheapest kept on top, for bounded selection).
 */
class VictimHeap {
  private readonly keys: number[] = [];
  private readonly prio: number[] = [];
  private readonly used: number[] = [];

  constructor(private readonly max = false) {}

  get size(): number {
    return this.keys.length;
  }

  /** (k, p, u) is evicted before (k2, p2, u2). */
  private static first(k: number, p: number, u: number, k2: number, p2: number, u2: number): boolean {
    return p !== p2 ? p < p2 : u !== u2 ? u < u2 : k < k2;
  }

  /** Node a belongs above node b. */
  private above(a: number, b: number): boolean {
    const f = VictimHeap.first(this.keys[a]!, this.prio[a]!, this.used[a]!, this.keys[b]!, this.prio[b]!, this.used[b]!);
    return this.max ? !f : f;
  }

  /** The candidate is evicted before the top (max-heap: it belongs among the cheapest kept). */
  ranksBeforeTop(key: number, priority: number, lastUsedNs: number): boolean {
    return VictimHeap.first(key, priority, lastUsedNs, this.keys[0]!, this.prio[0]!, this.used[0]!);
  }

  private swap(a: number, b: number): void {
    for (const arr of [this.keys, this.prio, this.used]) {
      const t = arr[a]!;
      arr[a] = arr[b]!;
      arr[b] = t;
    }
  }

  private up(j: number): void {
    while (j > 0) {
      const p = (j - 1) >> 1;
      if (!this.above(j, p)) return;
      this.swap(j, p);
      j = p;
    }
  }

  private down(j: number): void {
    const n = this.keys.length;
    for (;;) {
      const l = 2 * j + 1;
      if (l >= n) return;
      const r = l + 1;
      const m = r < n && this.above(r, l) ? r : l;
      if (!this.above(m, j)) return;
      this.swap(m, j);
      j = m;
    }
  }

  push(key: number, priority: number, lastUsedNs: number): void {
    this.keys.push(key);
    this.prio.push(priority);
    this.used.push(lastUsedNs);
    this.up(this.keys.length - 1);
  }

  replaceTop(key: number, priority: number, lastUsedNs: number): void {
    this.keys[0] = key;
    this.prio[0] = priority;
    this.used[0] = lastUsedNs;
    this.down(0);
  }

  pop(): number {
    const top = this.keys[0]!;
    const last = this.keys.length - 1;
    this.swap(0, last);
    this.keys.pop();
    this.prio.pop();
    this.used.pop();
    if (this.keys.length > 0) this.down(0);
    return top;
  }
}
