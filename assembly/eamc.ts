// EAMC kernels in WebAssembly SIMD (policies/moe-infinity/eam-collection.ts, issue #12).
//
// The collection's column-major counts are u16 (entry n of column j at `col_j + 2n`, columns
// padded to a multiple of 8 entries with zeros) and the matcher's dot products D_n are i32
// (`d + 4n`), all in the linear memory the JS side owns (imported). Every product is a u16 count
// times a u16 coefficient and every sum non-negative, so the JS side guarantees no i32 overflow
// by Cauchy–Schwarz before calling (D_n ≤ sqrt(‖x‖² · ‖entry n‖²) < 2^31): D_n is the exact
// integer in any order of the additions.
//
// Fixed region (below the JS side's first 64 KiB): the best matches of the last `scan`, entry
// indices (i32) at RES_TOP and scores (f64) at RES_SCORE, best first, up to 1024.

const RES_TOP: usize = 8192;
const RES_SCORE: usize = 12288;

/** D[i] += Σ_{t<k} c_t · column_t[i] for the 8·blocks entries from 0 (k ≤ 8; unused columns may be anything). */
export function addColumns(
  d: usize, blocks: i32, k: i32,
  o0: usize, o1: usize, o2: usize, o3: usize, o4: usize, o5: usize, o6: usize, o7: usize,
  c0: i32, c1: i32, c2: i32, c3: i32, c4: i32, c5: i32, c6: i32, c7: i32,
): void {
  const s0 = i16x8.splat(<i16>c0);
  const s1 = i16x8.splat(<i16>c1);
  const s2 = i16x8.splat(<i16>c2);
  const s3 = i16x8.splat(<i16>c3);
  const s4 = i16x8.splat(<i16>c4);
  const s5 = i16x8.splat(<i16>c5);
  const s6 = i16x8.splat(<i16>c6);
  const s7 = i16x8.splat(<i16>c7);
  if (k > 4) {
    for (let b = 0; b < blocks; b++) {
      const off = (<usize>b) << 4;
      const dp = d + ((<usize>b) << 5);
      let v0 = v128.load(o0 + off);
      let v1 = v128.load(o1 + off);
      let v2 = v128.load(o2 + off);
      let v3 = v128.load(o3 + off);
      let lo = i32x4.add(i32x4.add(i32x4.extmul_low_i16x8_u(v0, s0), i32x4.extmul_low_i16x8_u(v1, s1)), i32x4.add(i32x4.extmul_low_i16x8_u(v2, s2), i32x4.extmul_low_i16x8_u(v3, s3)));
      let hi = i32x4.add(i32x4.add(i32x4.extmul_high_i16x8_u(v0, s0), i32x4.extmul_high_i16x8_u(v1, s1)), i32x4.add(i32x4.extmul_high_i16x8_u(v2, s2), i32x4.extmul_high_i16x8_u(v3, s3)));
      v0 = v128.load(o4 + off);
      v1 = v128.load(o5 + off);
      v2 = v128.load(o6 + off);
      v3 = v128.load(o7 + off);
      lo = i32x4.add(lo, i32x4.add(i32x4.add(i32x4.extmul_low_i16x8_u(v0, s4), i32x4.extmul_low_i16x8_u(v1, s5)), i32x4.add(i32x4.extmul_low_i16x8_u(v2, s6), i32x4.extmul_low_i16x8_u(v3, s7))));
      hi = i32x4.add(hi, i32x4.add(i32x4.add(i32x4.extmul_high_i16x8_u(v0, s4), i32x4.extmul_high_i16x8_u(v1, s5)), i32x4.add(i32x4.extmul_high_i16x8_u(v2, s6), i32x4.extmul_high_i16x8_u(v3, s7))));
      v128.store(dp, i32x4.add(v128.load(dp), lo));
      v128.store(dp, i32x4.add(v128.load(dp, 16), hi), 16);
    }
  } else if (k > 2) {
    for (let b = 0; b < blocks; b++) {
      const off = (<usize>b) << 4;
      const dp = d + ((<usize>b) << 5);
      const v0 = v128.load(o0 + off);
      const v1 = v128.load(o1 + off);
      const v2 = v128.load(o2 + off);
      const v3 = v128.load(o3 + off);
      const lo = i32x4.add(i32x4.add(i32x4.extmul_low_i16x8_u(v0, s0), i32x4.extmul_low_i16x8_u(v1, s1)), i32x4.add(i32x4.extmul_low_i16x8_u(v2, s2), i32x4.extmul_low_i16x8_u(v3, s3)));
      const hi = i32x4.add(i32x4.add(i32x4.extmul_high_i16x8_u(v0, s0), i32x4.extmul_high_i16x8_u(v1, s1)), i32x4.add(i32x4.extmul_high_i16x8_u(v2, s2), i32x4.extmul_high_i16x8_u(v3, s3)));
      v128.store(dp, i32x4.add(v128.load(dp), lo));
      v128.store(dp, i32x4.add(v128.load(dp, 16), hi), 16);
    }
  } else if (k > 0) {
    for (let b = 0; b < blocks; b++) {
      const off = (<usize>b) << 4;
      const dp = d + ((<usize>b) << 5);
      const v0 = v128.load(o0 + off);
      const v1 = v128.load(o1 + off);
      const lo = i32x4.add(i32x4.extmul_low_i16x8_u(v0, s0), i32x4.extmul_low_i16x8_u(v1, s1));
      const hi = i32x4.add(i32x4.extmul_high_i16x8_u(v0, s0), i32x4.extmul_high_i16x8_u(v1, s1));
      v128.store(dp, i32x4.add(v128.load(dp), lo));
      v128.store(dp, i32x4.add(v128.load(dp, 16), hi), 16);
    }
  }
}

/** Inserts entry `i` with score `s` into the sorted best list (strict >: ties keep the lower index); returns the new count. */
// @ts-ignore: decorator
@inline function insertTop(count: i32, M: i32, i: i32, s: f64): i32 {
  let j = count < M ? count++ : M - 1;
  while (j > 0) {
    const prev = load<f64>(RES_SCORE + ((<usize>(j - 1)) << 3));
    if (!(prev < s)) break;
    store<f64>(RES_SCORE + ((<usize>j) << 3), prev);
    store<i32>(RES_TOP + ((<usize>j) << 2), load<i32>(RES_TOP + ((<usize>(j - 1)) << 2)));
    j--;
  }
  store<f64>(RES_SCORE + ((<usize>j) << 3), s);
  store<i32>(RES_TOP + ((<usize>j) << 2), i);
  return count;
}

/**
 * After D += Σ_{t<k} c_t · column_t (k ≤ 4; as `addColumns`), the best M (≤ 1024) of entries
 * 0 … n−1 by D_n / sqrt(Q_n) (D_n > 0; Q_n the f64 at `q + 8n`) into the result region, best
 * first, ties to the lower index; returns how many. Entries are visited in index order: until
 * M are kept every positive one is taken; after that an entry is kept only if its exact score
 * is strictly above the worst kept. A block of 8 entries is looked at only if one of them
 * passes the conservative pre-filter f32(D_n) · r_n > f32(floor · (1 − 1e-6)), r_n =
 * fround(1/sqrt(Q_n)) at `r + 4n` (relative error of the product < 2e-7: never rejects an
 * entry that beats the floor). D of entries n … (8·ceil(n/8) − 1) must be 0.
 */
export function scan(
  d: usize, n: i32, M: i32, q: usize, r: usize, k: i32,
  o0: usize, o1: usize, o2: usize, o3: usize,
  c0: i32, c1: i32, c2: i32, c3: i32,
): i32 {
  const s0 = i16x8.splat(<i16>c0);
  const s1 = i16x8.splat(<i16>c1);
  const s2 = i16x8.splat(<i16>c2);
  const s3 = i16x8.splat(<i16>c3);
  const blocks = (n + 7) >> 3;
  let count = 0;
  let floor: f64 = 0;
  let thr = f32x4.splat(0);
  for (let b = 0; b < blocks; b++) {
    const off = (<usize>b) << 4;
    const dp = d + ((<usize>b) << 5);
    let lo = v128.load(dp);
    let hi = v128.load(dp, 16);
    if (k > 2) {
      const v0 = v128.load(o0 + off);
      const v1 = v128.load(o1 + off);
      const v2 = v128.load(o2 + off);
      const v3 = v128.load(o3 + off);
      lo = i32x4.add(lo, i32x4.add(i32x4.add(i32x4.extmul_low_i16x8_u(v0, s0), i32x4.extmul_low_i16x8_u(v1, s1)), i32x4.add(i32x4.extmul_low_i16x8_u(v2, s2), i32x4.extmul_low_i16x8_u(v3, s3))));
      hi = i32x4.add(hi, i32x4.add(i32x4.add(i32x4.extmul_high_i16x8_u(v0, s0), i32x4.extmul_high_i16x8_u(v1, s1)), i32x4.add(i32x4.extmul_high_i16x8_u(v2, s2), i32x4.extmul_high_i16x8_u(v3, s3))));
      v128.store(dp, lo);
      v128.store(dp, hi, 16);
    } else if (k > 0) {
      const v0 = v128.load(o0 + off);
      const v1 = v128.load(o1 + off);
      lo = i32x4.add(lo, i32x4.add(i32x4.extmul_low_i16x8_u(v0, s0), i32x4.extmul_low_i16x8_u(v1, s1)));
      hi = i32x4.add(hi, i32x4.add(i32x4.extmul_high_i16x8_u(v0, s0), i32x4.extmul_high_i16x8_u(v1, s1)));
      v128.store(dp, lo);
      v128.store(dp, hi, 16);
    }
    const i0 = b << 3;
    if (count === M) {
      const rp = r + ((<usize>b) << 5);
      const plo = f32x4.mul(f32x4.convert_i32x4_s(lo), v128.load(rp));
      const phi = f32x4.mul(f32x4.convert_i32x4_s(hi), v128.load(rp, 16));
      if (!v128.any_true(v128.or(f32x4.gt(plo, thr), f32x4.gt(phi, thr)))) continue;
      const end = min(i0 + 8, n);
      for (let i = i0; i < end; i++) {
        const dv = load<i32>(d + ((<usize>i) << 2));
        if (dv <= 0) continue;
        const s = (<f64>dv) / sqrt<f64>(load<f64>(q + ((<usize>i) << 3)));
        if (s > floor) {
          insertTop(M, M, i, s);
          floor = load<f64>(RES_SCORE + ((<usize>(M - 1)) << 3));
        }
      }
      thr = f32x4.splat(<f32>(floor * (1 - 1e-6)));
    } else {
      const end = min(i0 + 8, n);
      for (let i = i0; i < end; i++) {
        const dv = load<i32>(d + ((<usize>i) << 2));
        if (dv <= 0) continue;
        const s = (<f64>dv) / sqrt<f64>(load<f64>(q + ((<usize>i) << 3)));
        if (count < M) count = insertTop(count, M, i, s);
        else if (s > floor) insertTop(M, M, i, s);
        if (count === M) floor = load<f64>(RES_SCORE + ((<usize>(M - 1)) << 3));
      }
      thr = f32x4.splat(<f32>(floor * (1 - 1e-6)));
    }
  }
  return count;
}
