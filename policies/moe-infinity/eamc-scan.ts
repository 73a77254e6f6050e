/**
 * The EAMC matcher's top-M scans (see `eam-collection.ts`, `eamc-matcher.ts`): after the last
 * columns of a row are added, the best M entries by D_n / sqrt(Q_n), ties to the lower index,
 * rejecting most entries by a conservative pre-filter before any square root. Numeric kernels:
 * fixed arities and one loop each, for V8.
 */
import { INV_LANE, LANE } from './eamc-js-kernels.ts';

/**
 * After D_n += c0·column o0 + c1·column o1 (both 0 for none), the best `M` entries by
 * D_n / sqrt(Q_n) (D_n > 0) into `top` / `score`, best first, ties to the lower index; returns
 * how many. Rejects an entry by D_n² ≤ floor²·Q_n (with a relative margin) before taking a
 * square root.
 */
// prettier-ignore
export function selectTop(
  dots: Float64Array,
  qArr: Float64Array,
  qOff: number,
  n: number,
  M: number,
  top: Int32Array,
  score: Float64Array,
  cols: Float64Array,
  c0: number,
  c1: number,
  o0: number,
  o1: number,
): number {
  const add = c0 !== 0 || c1 !== 0;
  let count = 0;
  let floor = 0; // score of the worst kept match once `count === M`
  let floor2 = 0; // floor² × (1 − 1e-9): a safe pre-filter
  for (let i = 0; i < n; i++) {
    let d = dots[i]!;
    if (add) {
      d += c0 * cols[o0 + i]! + c1 * cols[o1 + i]!;
      dots[i] = d;
    }
    if (d <= 0) continue;
    const q = qArr[qOff + i]!;
    if (count === M && d * d <= floor2 * q) continue;
    const s = d / Math.sqrt(q);
    if (count === M && s <= floor) continue;
    count = insertTop(top, score, count, M, i, s);
    if (count === M) {
      floor = score[M - 1]!;
      floor2 = floor * floor * (1 - 1e-9);
    }
  }
  return count;
}

/**
 * `selectTop` on packed D (entries 2m and 2m+1 in `dots[m]`: the same scan, in the same entry
 * order), after D += c0·column o0 + c1·column o1: each double is unpacked into its two exact
 * integers. Until M entries are kept every positive one is taken; after that an entry is a
 * candidate only if D_n · r_n > floor · (1 − 1e-6), r_n = 1/sqrt(Q_n) rounded to Float32
 * (`rArr`, relative error < 1.3e-7: a candidate test that never rejects an entry whose exact
 * score D_n / sqrt(Q_n) beats the floor, and reads half the bytes of Q), and is kept by the
 * exact score, strictly above the floor.
 */
// prettier-ignore
export function scanPacked2(
  dots: Float64Array,
  qArr: Float64Array,
  rArr: Float32Array,
  qOff: number,
  n: number,
  M: number,
  top: Int32Array,
  score: Float64Array,
  cols: Float64Array,
  c0: number,
  c1: number,
  o0: number,
  o1: number,
): number {
  const pairs = (n + 1) >> 1;
  let count = 0;
  let m = 0;
  for (; m < pairs && count < M; m++) {
    const p = dots[m]! + (c0 * cols[o0 + m]! + c1 * cols[o1 + m]!);
    dots[m] = p;
    count = takePair(p, 2 * m, qArr, qOff, M, top, score, count);
  }
  if (m >= pairs) return count;
  let floor = score[M - 1]!;
  let thr = floor * (1 - 1e-6);
  for (; m < pairs; m++) {
    const p = dots[m]! + (c0 * cols[o0 + m]! + c1 * cols[o1 + m]!);
    dots[m] = p;
    const hi = Math.floor(p * INV_LANE);
    const lo = p - hi * LANE;
    const i = 2 * m;
    // An odd n's last double has no entry 2m+1: its lane is 0 (never a candidate; `rArr`
    // has a spare value past the last entry).
    if (lo * rArr[qOff + i]! > thr || hi * rArr[qOff + i + 1]! > thr) {
      floor = takeCandidates(lo, hi, i, qArr, qOff, M, top, score, floor);
      thr = floor * (1 - 1e-6);
    }
  }
  return M;
}

/** `scanPacked2` with four columns added. */
// prettier-ignore
export function scanPacked4(
  dots: Float64Array,
  qArr: Float64Array,
  rArr: Float32Array,
  qOff: number,
  n: number,
  M: number,
  top: Int32Array,
  score: Float64Array,
  cols: Float64Array,
  c0: number,
  c1: number,
  c2: number,
  c3: number,
  o0: number,
  o1: number,
  o2: number,
  o3: number,
): number {
  const pairs = (n + 1) >> 1;
  let count = 0;
  let m = 0;
  for (; m < pairs && count < M; m++) {
    const p = dots[m]! + (c0 * cols[o0 + m]! + c1 * cols[o1 + m]! + (c2 * cols[o2 + m]! + c3 * cols[o3 + m]!));
    dots[m] = p;
    count = takePair(p, 2 * m, qArr, qOff, M, top, score, count);
  }
  if (m >= pairs) return count;
  let floor = score[M - 1]!;
  let thr = floor * (1 - 1e-6);
  for (; m < pairs; m++) {
    const p = dots[m]! + (c0 * cols[o0 + m]! + c1 * cols[o1 + m]! + (c2 * cols[o2 + m]! + c3 * cols[o3 + m]!));
    dots[m] = p;
    const hi = Math.floor(p * INV_LANE);
    const lo = p - hi * LANE;
    const i = 2 * m;
    if (lo * rArr[qOff + i]! > thr || hi * rArr[qOff + i + 1]! > thr) {
      floor = takeCandidates(lo, hi, i, qArr, qOff, M, top, score, floor);
      thr = floor * (1 - 1e-6);
    }
  }
  return M;
}

/**
 * Entries `i` (D = lo) and i + 1 (D = hi) of a candidate pair with M entries kept: each replaces
 * the worst if its exact score is strictly above the floor; returns the new floor.
 */
// prettier-ignore
function takeCandidates(
  lo: number,
  hi: number,
  i: number,
  qArr: Float64Array,
  qOff: number,
  M: number,
  top: Int32Array,
  score: Float64Array,
  floor: number,
): number {
  if (lo > 0) {
    const s = lo / Math.sqrt(qArr[qOff + i]!);
    if (s > floor) {
      insertTop(top, score, M, M, i, s);
      floor = score[M - 1]!;
    }
  }
  if (hi > 0) {
    const s = hi / Math.sqrt(qArr[qOff + i + 1]!);
    if (s > floor) {
      insertTop(top, score, M, M, i + 1, s);
      floor = score[M - 1]!;
    }
  }
  return floor;
}

/**
 * The entries 2m = `i` and i + 1 of packed D value `p` while fewer than M are kept (once M
 * are, a later entry must beat the worst strictly); returns the new count.
 */
// prettier-ignore
function takePair(
  p: number,
  i: number,
  qArr: Float64Array,
  qOff: number,
  M: number,
  top: Int32Array,
  score: Float64Array,
  count: number,
): number {
  if (p <= 0) return count;
  const hi = Math.floor(p * INV_LANE);
  const lo = p - hi * LANE;
  if (lo > 0) count = insertTop(top, score, count, M, i, lo / Math.sqrt(qArr[qOff + i]!));
  if (hi > 0) {
    const s = hi / Math.sqrt(qArr[qOff + i + 1]!);
    if (count < M || s > score[M - 1]!) count = insertTop(top, score, count, M, i + 1, s);
  }
  return count;
}

/** Inserts entry `i` with score `s` into the sorted list (strict >: an equal later index never displaces an earlier one); returns the new count. */
function insertTop(top: Int32Array, score: Float64Array, count: number, M: number, i: number, s: number): number {
  let j = count < M ? count++ : M - 1;
  while (j > 0 && score[j - 1]! < s) {
    score[j] = score[j - 1]!;
    top[j] = top[j - 1]!;
    j--;
  }
  score[j] = s;
  top[j] = i;
  return count;
}
