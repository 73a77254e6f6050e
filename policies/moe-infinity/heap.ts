/**
 * The binary heaps of MoE-Infinity's prefetch ranking and admission, in one place: a heap of
 * positions into score and key arrays with the best on top (`siftBest`, `MaxScoreHeap`), and a
 * heap of (key, value) pairs with the worst on top (`siftWorst`, the best-`cap` scan). Typed
 * arrays and no comparator callbacks: they run for every layer of every iteration. Ties always
 * go to the lower key, so every heap's result is a deterministic function of its input.
 */

/**
 * Restores the heap of positions `a` (best on top: higher `score`, then lower `key`) of `size`
 * below `j`, placing position `x` in the hole at `j` (a hole moves down; no double crosses a call).
 */
export function siftBest(
  a: Int32Array,
  score: Float64Array,
  key: Int32Array,
  size: number,
  j: number,
  x: number,
): void {
  const sx = score[x]!;
  const kx = key[x]!;
  for (;;) {
    const l = 2 * j + 1;
    if (l >= size) break;
    const r = l + 1;
    let m = l;
    let pm = a[l]!;
    let sm = score[pm]!;
    if (r < size) {
      const pr = a[r]!;
      const sr = score[pr]!;
      if (sr > sm || (sr === sm && key[pr]! < key[pm]!)) {
        m = r;
        pm = pr;
        sm = sr;
      }
    }
    if (!(sm > sx || (sm === sx && key[pm]! < kx))) break;
    a[j] = pm;
    j = m;
  }
  a[j] = x;
}

/**
 * Restores the min-heap (worst cell on top) below `j`: the cell at `j` moves down past every
 * child it ranks before (a hole moves down; no double crosses a call).
 */
export function siftWorst(k: Int32Array, v: Float64Array, size: number, j: number): void {
  const key = k[j]!;
  const val = v[j]!;
  for (;;) {
    const l = 2 * j + 1;
    if (l >= size) break;
    const r = l + 1;
    // The worse child (the one that ranks after the other).
    let w = l;
    let kw = k[l]!;
    let vw = v[l]!;
    if (r < size) {
      const kr = k[r]!;
      const vr = v[r]!;
      if (vw > vr || (vw === vr && kw < kr)) {
        w = r;
        kw = kr;
        vw = vr;
      }
    }
    if (!(val > vw || (val === vw && key < kw))) break;
    k[j] = kw;
    v[j] = vw;
    j = w;
  }
  k[j] = key;
  v[j] = val;
}

/**
 * A max-heap of selection positions by score (ties: lower key first): the admission order.
 * Reusable: write the positions into `a`, then `build`.
 */
export class MaxScoreHeap {
  /** The positions (the heap once built). */
  a = new Int32Array(64);
  size = 0;
  private score: Float64Array = new Float64Array(0);
  private key: Int32Array = new Int32Array(0);

  /** Room for `n` positions in `a` (its content is lost when it grows). */
  ensure(n: number): Int32Array {
    if (this.a.length < n) this.a = new Int32Array(n * 2);
    return this.a;
  }

  /** Orders positions a[0 … count) by `score` (then `key`). */
  build(count: number, score: Float64Array, key: Int32Array): void {
    this.size = count;
    this.score = score;
    this.key = key;
    for (let j = (count >> 1) - 1; j >= 0; j--) siftBest(this.a, score, key, count, j, this.a[j]!);
  }

  pop(): number {
    const a = this.a;
    const top = a[0]!;
    const last = a[--this.size]!;
    if (this.size > 0) siftBest(a, this.score, this.key, this.size, 0, last);
    return top;
  }
}
