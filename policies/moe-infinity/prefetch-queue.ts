/**
 * MoE-Infinity's prefetch queue (DESIGN §8, "Prefetch", step 4): the prefetches the policy has in
 * flight, and the decision that turns a new ranked set into cancellations, re-prioritisations
 * and new prefetches.
 */
import type { BufferView, ExpertKey, PolicyDecision, PrefetchRequest } from '../../sim/serving/policy.ts';
import type { Selection } from './rank-scratch.ts';

/**
 * The prefetches this policy has in flight, and the decision that turns a new ranked set into
 * cancellations, re-prioritisations and new prefetches.
 */
export class PrefetchQueue {
  /** Keys this policy asked to prefetch that may still be loading, in the order they were issued. */
  private issued: Int32Array;
  private issuedCount = 0;
  /** Urgency of the current ranked set's keys, valid where `stamp[key] === gen`. */
  private readonly urgencyOf: Float64Array;
  private readonly stamp: Uint32Array;
  private gen = 0;
  private fresh: Int32Array;
  /** Marks keys added to `issued` by the current call (an admitted key listed twice is issued once). */
  private readonly issuedGen: Uint32Array;

  /** @param cells L × E (keys are below it). */
  constructor(cells: number) {
    this.urgencyOf = new Float64Array(cells);
    this.stamp = new Uint32Array(cells);
    this.issued = new Int32Array(Math.max(16, cells));
    this.fresh = new Int32Array(Math.max(16, cells));
    this.issuedGen = new Uint32Array(cells);
  }

  /** Keys possibly still loading on this policy's behalf (for tests and metrics). */
  get outstanding(): ReadonlySet<ExpertKey> {
    return new Set(this.issued.subarray(0, this.issuedCount));
  }

  /**
   * Decision for the ranked set `sel`: cancel loading prefetches of ours that left it,
   * re-prioritise the loading members to their urgency, and prefetch the `admitted` keys
   * (absent members of the set; the first `admittedCount`), most urgent first, at their urgency.
   */
  plan(
    buffer: BufferView,
    sel: Selection,
    admitted: ArrayLike<ExpertKey>,
    admittedCount = admitted.length,
  ): PolicyDecision {
    const gen = ++this.gen;
    const urgencyOf = this.urgencyOf;
    const stamp = this.stamp;
    const selKeys = sel.keys;
    const selUrgency = sel.urgency;
    for (let j = 0, n = sel.count; j < n; j++) {
      const k = selKeys[j]!;
      urgencyOf[k] = selUrgency[j]!;
      stamp[k] = gen;
    }
    const cancel: ExpertKey[] = [];
    const prefetch: PrefetchRequest[] = [];
    // In issue order; keys no longer ours are dropped, the others keep their order.
    const issued = this.issued;
    let kept = 0;
    for (let r = 0; r < this.issuedCount; r++) {
      const k = issued[r]!;
      const e = buffer.entry(k);
      // Completed, dropped, cancelled, or now needed by the GPU (pinned): no longer ours.
      if (!e || e.state !== 'loading' || e.pinned) continue;
      if (stamp[k] !== gen) {
        cancel.push(k);
        continue;
      }
      prefetch.push({ key: k, priority: urgencyOf[k]! });
      issued[kept++] = k;
    }
    this.issuedCount = kept;
    // Fresh prefetches, most urgent first (ties: lower key); few, so an insertion sort.
    if (this.fresh.length < admittedCount) this.fresh = new Int32Array(admittedCount * 2);
    const fresh = this.fresh;
    let f = 0;
    for (let j = 0; j < admittedCount; j++) {
      const k = admitted[j]!;
      if (stamp[k] !== gen || buffer.has(k)) continue;
      const u = urgencyOf[k]!;
      let p = f++;
      while (p > 0) {
        const q = fresh[p - 1]!;
        const uq = urgencyOf[q]!;
        if (!(u < uq || (u === uq && k < q))) break;
        fresh[p] = q;
        p--;
      }
      fresh[p] = k;
    }
    if (this.issuedCount + f > issued.length) {
      const grown = new Int32Array((this.issuedCount + f) * 2);
      grown.set(issued.subarray(0, this.issuedCount));
      this.issued = grown;
    }
    for (let j = 0; j < f; j++) {
      const k = fresh[j]!;
      prefetch.push({ key: k, priority: urgencyOf[k]! });
      if (this.issuedGen[k] === gen) continue;
      this.issuedGen[k] = gen;
      this.issued[this.issuedCount++] = k;
    }
    return { cancel, prefetch };
  }

  /** Forgets everything (keys no longer loading are dropped lazily anyway). */
  clear(): void {
    this.issuedCount = 0;
  }
}
