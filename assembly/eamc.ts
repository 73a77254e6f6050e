// EAMC kernels in WebAssembly SIMD for policies/moe-infinity/eam-collection.ts (matching must not dominate a run).
//
// The collection's column-major counts are u8 (entry n of column j at `col_j + n`, columns
// padded to a multiple of 16 entries with zeros; a count above 254 is stored as 255 and its
// excess added by the JS side, see eam-collection.ts) and the matcher's dot products D_n are i32
// (`d + 4n`), all in the linear memory the JS side owns (imported). Every product is a u8 count
// times a u16 coefficient and every sum non-negative, so the JS side guarantees no i32 overflow
// by Cauchy–Schwarz before calling (D_n ≤ sqrt(‖x‖² · ‖entry n‖²) < 2^31): D_n is the exact
// integer in any order of the additions.
//
// Fixed region (below the JS side's first 64 KiB): the best matches of the last `scan`, entry
// indices (i32) at RES_TOP and scores (f64) at RES_SCORE, best first, up to 1024.

const RES_TOP: usize = 8192;
const RES_SCORE: usize = 12288;
// Seed entries of a `scan` (i32, up to 1024), written by the JS side: see `scan`.
const RES_SEED: usize = 20480;

/** The four i32x4 products of 16 u8 counts `v` with the u16 coefficient `s` (splat): entries 0–3, 4–7, 8–11, 12–15. */
// @ts-ignore: decorator
@inline function p0(v: v128, s: v128): v128 {
  return i32x4.extmul_low_i16x8_u(i16x8.extend_low_i8x16_u(v), s);
}
// @ts-ignore: decorator
@inline function p1(v: v128, s: v128): v128 {
  return i32x4.extmul_high_i16x8_u(i16x8.extend_low_i8x16_u(v), s);
}
// @ts-ignore: decorator
@inline function p2(v: v128, s: v128): v128 {
  return i32x4.extmul_low_i16x8_u(i16x8.extend_high_i8x16_u(v), s);
}
// @ts-ignore: decorator
@inline function p3(v: v128, s: v128): v128 {
  return i32x4.extmul_high_i16x8_u(i16x8.extend_high_i8x16_u(v), s);
}

// Pairs of u8 columns a, b with coefficients ca, cb ≤ 32767 (`w` = i32x4.splat(ca | cb << 16)):
// the bytes interleaved (a_i, b_i), zero-extended to i16 lanes, and `i32x4.dot_i16x8_s`
// gives ca·a_i + cb·b_i per entry (≤ 2 · 255 · 32767 < 2^31) — one multiply-add instruction
// for eight products (x86: punpck*bw, pmaddwd).
// @ts-ignore: decorator
@inline function zlo(t: v128): v128 {
  return i8x16.shuffle(t, i32x4.splat(0), 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
}
// @ts-ignore: decorator
@inline function zhi(t: v128): v128 {
  return i8x16.shuffle(t, i32x4.splat(0), 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
}
// @ts-ignore: decorator
@inline function ilo(a: v128, b: v128): v128 {
  return i8x16.shuffle(a, b, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
}
// @ts-ignore: decorator
@inline function ihi(a: v128, b: v128): v128 {
  return i8x16.shuffle(a, b, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
}

/**
 * `addColumns` with every coefficient ≤ 32767, two columns per multiply-add (see above):
 * columns (o0, o1), (o2, o3), … paired, k ≤ 8 (unused columns: coefficient 0).
 */
export function addPairs(
  d: usize, blocks: i32, k: i32,
  o0: usize, o1: usize, o2: usize, o3: usize, o4: usize, o5: usize, o6: usize, o7: usize,
  c0: i32, c1: i32, c2: i32, c3: i32, c4: i32, c5: i32, c6: i32, c7: i32,
): void {
  const w0 = i32x4.splat(c0 | (c1 << 16));
  const w1 = i32x4.splat(c2 | (c3 << 16));
  const w2 = i32x4.splat(c4 | (c5 << 16));
  const w3 = i32x4.splat(c6 | (c7 << 16));
  const pairs = (k + 1) >> 1;
  for (let b = 0; b < blocks; b++) {
    const off = (<usize>b) << 4;
    const dp = d + ((<usize>b) << 6);
    let v0 = v128.load(o0 + off);
    let v1 = v128.load(o1 + off);
    let t0 = ilo(v0, v1);
    let t1 = ihi(v0, v1);
    let a0 = i32x4.dot_i16x8_s(zlo(t0), w0);
    let a1 = i32x4.dot_i16x8_s(zhi(t0), w0);
    let a2 = i32x4.dot_i16x8_s(zlo(t1), w0);
    let a3 = i32x4.dot_i16x8_s(zhi(t1), w0);
    if (pairs > 1) {
      v0 = v128.load(o2 + off);
      v1 = v128.load(o3 + off);
      t0 = ilo(v0, v1);
      t1 = ihi(v0, v1);
      a0 = i32x4.add(a0, i32x4.dot_i16x8_s(zlo(t0), w1));
      a1 = i32x4.add(a1, i32x4.dot_i16x8_s(zhi(t0), w1));
      a2 = i32x4.add(a2, i32x4.dot_i16x8_s(zlo(t1), w1));
      a3 = i32x4.add(a3, i32x4.dot_i16x8_s(zhi(t1), w1));
      if (pairs > 2) {
        v0 = v128.load(o4 + off);
        v1 = v128.load(o5 + off);
        t0 = ilo(v0, v1);
        t1 = ihi(v0, v1);
        a0 = i32x4.add(a0, i32x4.dot_i16x8_s(zlo(t0), w2));
        a1 = i32x4.add(a1, i32x4.dot_i16x8_s(zhi(t0), w2));
        a2 = i32x4.add(a2, i32x4.dot_i16x8_s(zlo(t1), w2));
        a3 = i32x4.add(a3, i32x4.dot_i16x8_s(zhi(t1), w2));
        if (pairs > 3) {
          v0 = v128.load(o6 + off);
          v1 = v128.load(o7 + off);
          t0 = ilo(v0, v1);
          t1 = ihi(v0, v1);
          a0 = i32x4.add(a0, i32x4.dot_i16x8_s(zlo(t0), w3));
          a1 = i32x4.add(a1, i32x4.dot_i16x8_s(zhi(t0), w3));
          a2 = i32x4.add(a2, i32x4.dot_i16x8_s(zlo(t1), w3));
          a3 = i32x4.add(a3, i32x4.dot_i16x8_s(zhi(t1), w3));
        }
      }
    }
    v128.store(dp, i32x4.add(v128.load(dp), a0));
    v128.store(dp, i32x4.add(v128.load(dp, 16), a1), 16);
    v128.store(dp, i32x4.add(v128.load(dp, 32), a2), 32);
    v128.store(dp, i32x4.add(v128.load(dp, 48), a3), 48);
  }
}

/**
 * D[i] += Σ_{t<k} c_t · column_t[i] for the 16·blocks entries from 0 (k ≤ 8; unused columns
 * may be anything). Columns are u8 (entry i at byte o_t + i), D i32 (d + 4i), c_t ≤ 65535.
 */
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
      const dp = d + ((<usize>b) << 6);
      const v0 = v128.load(o0 + off);
      const v1 = v128.load(o1 + off);
      const v2 = v128.load(o2 + off);
      const v3 = v128.load(o3 + off);
      const v4 = v128.load(o4 + off);
      const v5 = v128.load(o5 + off);
      const v6 = v128.load(o6 + off);
      const v7 = v128.load(o7 + off);
      // prettier-ignore
      {
        v128.store(dp, i32x4.add(v128.load(dp), i32x4.add(i32x4.add(i32x4.add(p0(v0, s0), p0(v1, s1)), i32x4.add(p0(v2, s2), p0(v3, s3))), i32x4.add(i32x4.add(p0(v4, s4), p0(v5, s5)), i32x4.add(p0(v6, s6), p0(v7, s7))))));
        v128.store(dp, i32x4.add(v128.load(dp, 16), i32x4.add(i32x4.add(i32x4.add(p1(v0, s0), p1(v1, s1)), i32x4.add(p1(v2, s2), p1(v3, s3))), i32x4.add(i32x4.add(p1(v4, s4), p1(v5, s5)), i32x4.add(p1(v6, s6), p1(v7, s7))))), 16);
        v128.store(dp, i32x4.add(v128.load(dp, 32), i32x4.add(i32x4.add(i32x4.add(p2(v0, s0), p2(v1, s1)), i32x4.add(p2(v2, s2), p2(v3, s3))), i32x4.add(i32x4.add(p2(v4, s4), p2(v5, s5)), i32x4.add(p2(v6, s6), p2(v7, s7))))), 32);
        v128.store(dp, i32x4.add(v128.load(dp, 48), i32x4.add(i32x4.add(i32x4.add(p3(v0, s0), p3(v1, s1)), i32x4.add(p3(v2, s2), p3(v3, s3))), i32x4.add(i32x4.add(p3(v4, s4), p3(v5, s5)), i32x4.add(p3(v6, s6), p3(v7, s7))))), 48);
      }
    }
  } else if (k > 2) {
    for (let b = 0; b < blocks; b++) {
      const off = (<usize>b) << 4;
      const dp = d + ((<usize>b) << 6);
      const v0 = v128.load(o0 + off);
      const v1 = v128.load(o1 + off);
      const v2 = v128.load(o2 + off);
      const v3 = v128.load(o3 + off);
      v128.store(dp, i32x4.add(v128.load(dp), i32x4.add(i32x4.add(p0(v0, s0), p0(v1, s1)), i32x4.add(p0(v2, s2), p0(v3, s3)))));
      v128.store(dp, i32x4.add(v128.load(dp, 16), i32x4.add(i32x4.add(p1(v0, s0), p1(v1, s1)), i32x4.add(p1(v2, s2), p1(v3, s3)))), 16);
      v128.store(dp, i32x4.add(v128.load(dp, 32), i32x4.add(i32x4.add(p2(v0, s0), p2(v1, s1)), i32x4.add(p2(v2, s2), p2(v3, s3)))), 32);
      v128.store(dp, i32x4.add(v128.load(dp, 48), i32x4.add(i32x4.add(p3(v0, s0), p3(v1, s1)), i32x4.add(p3(v2, s2), p3(v3, s3)))), 48);
    }
  } else if (k > 0) {
    for (let b = 0; b < blocks; b++) {
      const off = (<usize>b) << 4;
      const dp = d + ((<usize>b) << 6);
      const v0 = v128.load(o0 + off);
      const v1 = v128.load(o1 + off);
      v128.store(dp, i32x4.add(v128.load(dp), i32x4.add(p0(v0, s0), p0(v1, s1))));
      v128.store(dp, i32x4.add(v128.load(dp, 16), i32x4.add(p1(v0, s0), p1(v1, s1))), 16);
      v128.store(dp, i32x4.add(v128.load(dp, 32), i32x4.add(p2(v0, s0), p2(v1, s1))), 32);
      v128.store(dp, i32x4.add(v128.load(dp, 48), i32x4.add(p3(v0, s0), p3(v1, s1))), 48);
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
 * After D += Σ_{t<k} c_t · column_t (k ≤ 8, every c_t ≤ 32767; as `addPairs`), the best M (≤ 1024) of entries
 * 0 … n−1 by D_n / sqrt(Q_n) (D_n > 0; Q_n the f64 at `q + 8n`) into the result region, best
 * first, ties to the lower index; returns how many. Entries are visited in index order: until
 * M are kept every positive one is taken; after that an entry is kept only if its exact score
 * is strictly above the worst kept. A block of 16 entries is looked at only if one of them
 * passes the conservative pre-filter f32(D_n) · r_n > f32(floor · (1 − 1e-6)), r_n =
 * fround(1/sqrt(Q_n)) at `r + 4n` (relative error of the product < 2e-7: never rejects an
 * entry that beats the floor). D of entries n … (16·ceil(n/16) − 1) must be 0; r is read up
 * to there.
 *
 * Seeds (`seeds` = M distinct entries < n at RES_SEED, e.g. the previous row's best): their
 * scores after this pass (D_i plus the pass's columns, the same exact f64 expression) are
 * computed first; every one positive, the lowest of them is a floor f0 no entry below which
 * can be among the best M (M entries reach it). Entries are then kept, until M are, only at or
 * above f0 (ties kept: a lower index wins them), and the pre-filter runs from the first block
 * (threshold f0): the same best M, in the same order, with fewer entries looked at.
 */
export function scan(
  d: usize, n: i32, M: i32, q: usize, r: usize, k: i32,
  o0: usize, o1: usize, o2: usize, o3: usize, o4: usize, o5: usize, o6: usize, o7: usize,
  c0: i32, c1: i32, c2: i32, c3: i32, c4: i32, c5: i32, c6: i32, c7: i32,
  seeds: i32,
): i32 {
  const w0 = i32x4.splat(c0 | (c1 << 16));
  const w1 = i32x4.splat(c2 | (c3 << 16));
  const w2 = i32x4.splat(c4 | (c5 << 16));
  const w3 = i32x4.splat(c6 | (c7 << 16));
  const blocks = (n + 15) >> 4;
  let count = 0;
  let floor: f64 = 0;
  let thr = f32x4.splat(0);
  // The seeds' floor (0: none).
  let seedFloor: f64 = 0;
  if (M > 0 && seeds === M) {
    let f0: f64 = Infinity;
    for (let j = 0; j < seeds; j++) {
      const i = load<i32>(RES_SEED + ((<usize>j) << 2));
      if (i < 0 || i >= n) {
        f0 = 0;
        break;
      }
      const ui = <usize>i;
      // Columns past k have coefficient 0 (and may be anything).
      let dv = load<i32>(d + (ui << 2));
      if (k > 0) dv += c0 * <i32>load<u8>(o0 + ui) + c1 * <i32>load<u8>(o1 + ui);
      if (k > 2) dv += c2 * <i32>load<u8>(o2 + ui) + c3 * <i32>load<u8>(o3 + ui);
      if (k > 4) dv += c4 * <i32>load<u8>(o4 + ui) + c5 * <i32>load<u8>(o5 + ui);
      if (k > 6) dv += c6 * <i32>load<u8>(o6 + ui) + c7 * <i32>load<u8>(o7 + ui);
      if (dv <= 0) {
        f0 = 0;
        break;
      }
      const s = (<f64>dv) / sqrt<f64>(load<f64>(q + (ui << 3)));
      if (s < f0) f0 = s;
    }
    if (f0 > 0) {
      seedFloor = f0;
      thr = f32x4.splat(<f32>(f0 * (1 - 1e-6)));
    }
  }
  const seeded = seedFloor > 0;
  for (let b = 0; b < blocks; b++) {
    const off = (<usize>b) << 4;
    const dp = d + ((<usize>b) << 6);
    let a0 = v128.load(dp);
    let a1 = v128.load(dp, 16);
    let a2 = v128.load(dp, 32);
    let a3 = v128.load(dp, 48);
    if (k > 0) {
      let v0 = v128.load(o0 + off);
      let v1 = v128.load(o1 + off);
      let t0 = ilo(v0, v1);
      let t1 = ihi(v0, v1);
      a0 = i32x4.add(a0, i32x4.dot_i16x8_s(zlo(t0), w0));
      a1 = i32x4.add(a1, i32x4.dot_i16x8_s(zhi(t0), w0));
      a2 = i32x4.add(a2, i32x4.dot_i16x8_s(zlo(t1), w0));
      a3 = i32x4.add(a3, i32x4.dot_i16x8_s(zhi(t1), w0));
      if (k > 2) {
        v0 = v128.load(o2 + off);
        v1 = v128.load(o3 + off);
        t0 = ilo(v0, v1);
        t1 = ihi(v0, v1);
        a0 = i32x4.add(a0, i32x4.dot_i16x8_s(zlo(t0), w1));
        a1 = i32x4.add(a1, i32x4.dot_i16x8_s(zhi(t0), w1));
        a2 = i32x4.add(a2, i32x4.dot_i16x8_s(zlo(t1), w1));
        a3 = i32x4.add(a3, i32x4.dot_i16x8_s(zhi(t1), w1));
        if (k > 4) {
          v0 = v128.load(o4 + off);
          v1 = v128.load(o5 + off);
          t0 = ilo(v0, v1);
          t1 = ihi(v0, v1);
          a0 = i32x4.add(a0, i32x4.dot_i16x8_s(zlo(t0), w2));
          a1 = i32x4.add(a1, i32x4.dot_i16x8_s(zhi(t0), w2));
          a2 = i32x4.add(a2, i32x4.dot_i16x8_s(zlo(t1), w2));
          a3 = i32x4.add(a3, i32x4.dot_i16x8_s(zhi(t1), w2));
          if (k > 6) {
            v0 = v128.load(o6 + off);
            v1 = v128.load(o7 + off);
            t0 = ilo(v0, v1);
            t1 = ihi(v0, v1);
            a0 = i32x4.add(a0, i32x4.dot_i16x8_s(zlo(t0), w3));
            a1 = i32x4.add(a1, i32x4.dot_i16x8_s(zhi(t0), w3));
            a2 = i32x4.add(a2, i32x4.dot_i16x8_s(zlo(t1), w3));
            a3 = i32x4.add(a3, i32x4.dot_i16x8_s(zhi(t1), w3));
          }
        }
      }
      v128.store(dp, a0);
      v128.store(dp, a1, 16);
      v128.store(dp, a2, 32);
      v128.store(dp, a3, 48);
    }
    const i0 = b << 4;
    const end = min(i0 + 16, n);
    if (count === M || seeded) {
      const rp = r + ((<usize>b) << 6);
      const m0 = f32x4.gt(f32x4.mul(f32x4.convert_i32x4_s(a0), v128.load(rp)), thr);
      const m1 = f32x4.gt(f32x4.mul(f32x4.convert_i32x4_s(a1), v128.load(rp, 16)), thr);
      const m2 = f32x4.gt(f32x4.mul(f32x4.convert_i32x4_s(a2), v128.load(rp, 32)), thr);
      const m3 = f32x4.gt(f32x4.mul(f32x4.convert_i32x4_s(a3), v128.load(rp, 48)), thr);
      if (!v128.any_true(v128.or(v128.or(m0, m1), v128.or(m2, m3)))) continue;
      // Only the entries that pass (in index order): the floor only rises, so an entry that
      // fails it now cannot be kept later in the block.
      let mask = i32x4.bitmask(m0) | (i32x4.bitmask(m1) << 4) | (i32x4.bitmask(m2) << 8) | (i32x4.bitmask(m3) << 12);
      while (mask !== 0) {
        const i = i0 + ctz(mask);
        mask &= mask - 1;
        if (i >= end) break;
        const dv = load<i32>(d + ((<usize>i) << 2));
        if (dv <= 0) continue;
        const s = (<f64>dv) / sqrt<f64>(load<f64>(q + ((<usize>i) << 3)));
        if (count === M) {
          if (s > floor) {
            insertTop(M, M, i, s);
            floor = load<f64>(RES_SCORE + ((<usize>(M - 1)) << 3));
          }
        } else if (s >= seedFloor) {
          count = insertTop(count, M, i, s);
          if (count === M) floor = load<f64>(RES_SCORE + ((<usize>(M - 1)) << 3));
        }
      }
      thr = f32x4.splat(<f32>((count === M ? floor : seedFloor) * (1 - 1e-6)));
    } else {
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
