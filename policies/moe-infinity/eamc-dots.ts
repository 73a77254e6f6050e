/**
 * Dot products a request's matchers already computed, handed to the EAMC's insertion
 * (`EamCollection.insert`) so it completes them instead of recomputing (see `eam-collection.ts`).
 */
import type { EamShape } from './eam.ts';
import type { EamCollection } from './eam-collection.ts';
import { INV_LANE, LANE, PACK_LIMIT } from './eamc-js-kernels.ts';

/**
 * Dot products of one request EAM (of one phase) with every entry of a collection, over some
 * of its rows, accumulated while the request's iterations were matched, for
 * `EamCollection.insert` to complete instead of recomputing (`similaritiesFromHint`): a request
 * alone in its matched group adds the matcher's dot products at the end of every iteration
 * (`IncrementalMatcher.exportDots`; free, the match computed them). A request sharing its group
 * (a batch's decode steps) is poisoned: its own dot products are not known (adding them after
 * each batch row update cost more than the insertions it saved: docs/PERFORMANCE.md; a decode
 * EAM repeats cells across steps, which one computation at insertion reads once). The dot
 * products are exact integers (valid only while every row had integer counts against a
 * packed collection), packed two entries per double like the matcher's while every lane is
 * bounded: a lane holds at most Σ counts added · max cell ≤ l1 · sqrt(max‖entry‖²) (an entry
 * replaced between iterations too), kept below 2^25.5 by l1² · max‖entry‖² ≤ 2^51; else plain.
 * - `dots`, entries n < `size`: Σ over the rows `rows` of (the request's rows) · entry n, for the
 *   entries as they were at `version` (the oldest version accumulated: an entry written since
 *   is recomputed at insertion);
 * - `rows[l]`: row l is covered (the same rows in every iteration, else the hint is poisoned).
 * The caller guarantees that the EAM later inserted with it is, on the covered rows, exactly the
 * sum of the rows accumulated.
 */
export class EamcDots {
  collection: EamCollection | null = null;
  /** Something was accumulated (or the hint was poisoned): `valid` says whether it can be used. */
  started = false;
  valid = false;
  version = 0;
  size = 0;
  /** `dots` packed (entry n in lane n & 1 of `dots[n >> 1]`) or plain. */
  packed = false;
  dots = new Float64Array(0);
  /** Σ of every count accumulated (all rows, all iterations): the lane bound. */
  private l1 = 0;
  /** The covered rows are known (set by the first iteration). */
  private rowsSet = false;
  readonly rows: Uint8Array;

  constructor(shape: EamShape) {
    this.rows = new Uint8Array(shape.layers);
  }

  /** Forgets everything (the next iteration starts afresh). */
  clear(): void {
    this.collection = null;
    this.started = false;
    this.valid = false;
    this.size = 0;
    this.l1 = 0;
    this.rowsSet = false;
  }

  /** Marks the hint unusable for good (until `clear`): its dot products are not known exactly. */
  poison(): void {
    this.started = true;
    this.valid = false;
  }

  /** Dot product of entry `n` (n < size). */
  dot(n: number): number {
    if (!this.packed) return this.dots[n]!;
    const p = this.dots[n >> 1]!;
    const hi = Math.floor(p * INV_LANE);
    return (n & 1) === 1 ? hi : p - hi * LANE;
  }

  /** Starts accumulating against `coll` at `version` with its first `size` entries; false if poisoned or another collection. */
  private begin(coll: EamCollection, version: number, size: number): boolean {
    if (!this.started) {
      this.started = true;
      this.valid = coll.lanes === 2;
      this.collection = coll;
      this.version = version;
      this.size = size;
      this.packed = true;
      this.l1 = 0;
      const need = (size >> 1) + 1;
      if (this.dots.length < need)
        this.dots = new Float64Array(Math.max(need, coll.capacity > 4 * size ? 2 * size : coll.capacity + 1));
      else this.dots.fill(0, 0, need);
    }
    if (this.valid && (this.collection !== coll || coll.lanes !== 2)) this.valid = false;
    return this.valid;
  }

  /** Adds `l1` to the counts accumulated; goes plain when the lanes could carry. */
  private addL1(l1: number, coll: EamCollection): void {
    this.l1 += l1;
    if (this.packed && this.l1 * this.l1 * coll.maxEntryNorm2 > PACK_LIMIT) {
      const size = this.size;
      const plain = new Float64Array(Math.max(size, 1));
      for (let n = 0; n < size; n++) plain[n] = this.dot(n);
      this.dots = plain;
      this.packed = false;
    }
  }

  /** Closes an iteration that covered rows `seen` (the same rows every iteration, else poisoned). */
  closeIteration(seen: Uint8Array): void {
    if (!this.valid) return;
    if (!this.rowsSet) {
      this.rows.set(seen);
      this.rowsSet = true;
    } else {
      for (let l = 0; l < seen.length; l++) {
        if (this.rows[l] !== seen[l]) {
          this.valid = false;
          return;
        }
      }
    }
  }

  /** Adds a matcher's dot products (one iteration): `n` entries at `version`, D packed or plain, rows `seen`, Σ counts `l1`. */
  addIteration(
    coll: EamCollection,
    version: number,
    n: number,
    dots: Float64Array | Int32Array,
    packed: boolean,
    seen: Uint8Array,
    l1: number,
  ): void {
    if (!this.begin(coll, version, n)) return;
    this.closeIteration(seen);
    if (!this.valid) return;
    this.addL1(l1, coll);
    const m = Math.min(n, this.size);
    const out = this.dots;
    if (this.packed && packed) {
      // Lane sums: both sides' lanes are bounded (the check above), so no carry.
      const w = (m + 1) >> 1;
      for (let i = 0; i < w; i++) out[i]! += dots[i]!;
      // An odd m's last double: the matcher's high lane is entry m (n > m), past this hint: leave it out.
      if ((m & 1) === 1 && n > m) {
        const p = dots[w - 1]!;
        out[w - 1]! -= Math.floor(p * INV_LANE) * LANE;
      }
    } else if (this.packed) {
      for (let i = 0; i < m; i++) out[i >> 1]! += (i & 1) === 1 ? dots[i]! * LANE : dots[i]!;
    } else if (packed) {
      for (let i = 0; i < m; i++) {
        const p = dots[i >> 1]!;
        const hi = Math.floor(p * INV_LANE);
        out[i]! += (i & 1) === 1 ? hi : p - hi * LANE;
      }
    } else for (let i = 0; i < m; i++) out[i]! += dots[i]!;
  }
}
