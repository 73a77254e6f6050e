/**
 * The EAMC's exact-integer arithmetic in JS (see `eam-collection.ts`): the limits under which
 * packed and WASM sums stay exact, and the column kernels of the JS backend (`eamc-columns.ts`)
 * and the matcher (`eamc-matcher.ts`): D += Σ c · column over doubles that hold one count, or two
 * entries' counts packed as `count(2m) + count(2m+1) · 2^26`. Numeric kernels: one loop each,
 * fixed arities (four or eight columns per pass) because a loop over a column list compiles to
 * slower code in V8.
 */

/** Entries a collection first allocates room for; storage then grows by doubling (a choice: small collections stay small). */
export const MIN_ALLOC = 16;
/** Lane width of the packed column copy: two entries' counts per double, `lo + hi · LANE`. */
export const LANE = 2 ** 26;
export const INV_LANE = 2 ** -26;
/** Stored counts pack while they are integers in [0, MAX_PACKED] (also exact in Float32). */
export const MAX_PACKED = 2 ** 24;
/**
 * Packed sums stay exact while every entry's dot product is below 2^26 (no carry between
 * lanes, every partial sum an integer below 2^53): guaranteed when Q_cur · max_n ‖entry n‖²
 * ≤ PACK_LIMIT (Cauchy–Schwarz: D_n ≤ sqrt(Q_cur · ‖entry n‖²) ≤ 2^25.5).
 */
export const PACK_LIMIT = 2 ** 51;

/** Counts the WASM path stores and coefficients its kernels take: integers in [0, MAX_WASM] (u8 columns, a count above 254 with its excess kept aside; u16 coefficients). */
export const MAX_WASM = 65535;
/**
 * The kernels' i32 dot products cannot overflow while ‖x‖² · max_n ‖entry n‖² ≤ WASM_LIMIT
 * (Cauchy–Schwarz: every partial sum ≤ D_n ≤ 2^30.5; all terms are non-negative).
 */
export const WASM_LIMIT = 2 ** 61;

/** Whether `v` is a count the WASM kernels store (an integer in [0, MAX_WASM]). */
export function fitsWasm(v: number): boolean {
  return v >= 0 && v <= MAX_WASM && Math.floor(v) === v;
}

export const align16 = (b: number): number => (b + 15) & ~15;
/** Coefficients the paired kernels take (signed i16 multiply-adds); larger ones use the unpaired kernel. */
export const MAX_PAIR = 32767;

/** Whether `v` is a count that packs (an integer in [0, MAX_PACKED]). */
export function packable(v: number): boolean {
  return v >= 0 && v <= MAX_PACKED && Math.floor(v) === v;
}

/** The count of lane `n & 1` of packed double `p` (exact: both lanes are integers below 2^26). */
export function laneOf(p: number, n: number): number {
  const hi = Math.floor(p * INV_LANE);
  return (n & 1) === 1 ? hi : p - hi * LANE;
}

/** Unpacks `half` doubles of two lanes (count(2m) + count(2m+1)·2^26) into `out[0 … size)`, from the last pair down. */
export function unpackPairs(packed: Float64Array, half: number, size: number, out: Float64Array): void {
  for (let m = half - 1; m >= 0; m--) {
    const p = packed[m]!;
    const hi = Math.floor(p * INV_LANE);
    if (2 * m + 1 < size) out[2 * m + 1] = hi;
    out[2 * m] = p - hi * LANE;
  }
}

/** D += Σ_t v_t · column at offset `offs[t]`, over `n` doubles: eight, then four, then one column per pass. */
export function addColumns(
  out: Float64Array,
  cols: Float64Array,
  n: number,
  offs: readonly number[],
  vals: readonly number[],
): void {
  let t = 0;
  for (; t + 8 <= offs.length; t += 8) {
    // prettier-ignore
    addColumns8(
      out,
      cols,
      n,
      offs[t]!,
      offs[t + 1]!,
      offs[t + 2]!,
      offs[t + 3]!,
      offs[t + 4]!,
      offs[t + 5]!,
      offs[t + 6]!,
      offs[t + 7]!,
      vals[t]!,
      vals[t + 1]!,
      vals[t + 2]!,
      vals[t + 3]!,
      vals[t + 4]!,
      vals[t + 5]!,
      vals[t + 6]!,
      vals[t + 7]!,
    );
  }
  for (; t + 4 <= offs.length; t += 4) {
    addColumns4(
      out,
      cols,
      n,
      offs[t]!,
      offs[t + 1]!,
      offs[t + 2]!,
      offs[t + 3]!,
      vals[t]!,
      vals[t + 1]!,
      vals[t + 2]!,
      vals[t + 3]!,
    );
  }
  for (; t < offs.length; t++) {
    const v = vals[t]!;
    const off = offs[t]!;
    for (let i = 0; i < n; i++) out[i]! += v * cols[off + i]!;
  }
}

/** Plain D_i += c · count of entry i, for i < n, from a packed column at `off` (lanes unpacked on the fly). */
export function addPackedColumn(out: Float64Array, cols: Float64Array, n: number, off: number, c: number): void {
  const pairs = n >> 1;
  for (let m = 0; m < pairs; m++) {
    const p = cols[off + m]!;
    const hi = Math.floor(p * INV_LANE);
    out[2 * m]! += c * (p - hi * LANE);
    out[2 * m + 1]! += c * hi;
  }
  if ((n & 1) === 1) {
    const p = cols[off + pairs]!;
    out[n - 1]! += c * (p - Math.floor(p * INV_LANE) * LANE);
  }
}

// Row-update kernels: D += Σ c_j · column_j over `n` doubles (entries, or pairs of entries when
// packed). The products are summed as a tree (not a chain: independent additions overlap in
// the CPU); all terms are integers, so the sum is the same exact integer in any order.
export function addColumns4(
  dots: Float64Array,
  cols: Float64Array,
  n: number,
  o0: number,
  o1: number,
  o2: number,
  o3: number,
  c0: number,
  c1: number,
  c2: number,
  c3: number,
): void {
  for (let i = 0; i < n; i++)
    dots[i]! += c0 * cols[o0 + i]! + c1 * cols[o1 + i]! + (c2 * cols[o2 + i]! + c3 * cols[o3 + i]!);
}

export function addColumns8(
  dots: Float64Array,
  cols: Float64Array,
  n: number,
  o0: number,
  o1: number,
  o2: number,
  o3: number,
  o4: number,
  o5: number,
  o6: number,
  o7: number,
  c0: number,
  c1: number,
  c2: number,
  c3: number,
  c4: number,
  c5: number,
  c6: number,
  c7: number,
): void {
  for (let i = 0; i < n; i++) {
    dots[i]! +=
      c0 * cols[o0 + i]! +
      c1 * cols[o1 + i]! +
      (c2 * cols[o2 + i]! + c3 * cols[o3 + i]!) +
      (c4 * cols[o4 + i]! + c5 * cols[o5 + i]! + (c6 * cols[o6 + i]! + c7 * cols[o7 + i]!));
  }
}
