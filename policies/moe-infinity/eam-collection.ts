/**
 * The EAM collection (EAMC) of MoE-Infinity and its incremental matcher (DESIGN §8).
 *
 * `EamCollection`: a fixed-capacity set of past request EAMs (one collection per phase, see
 * `eam.ts`). When a request finishes its EAM fills a free entry, or, once the collection is
 * full, replaces
 * - `most-similar` (the paper): the stored EAM with the highest cosine similarity to it
 *   (smallest cosine distance), so the collection stays recent and diverse: a new pattern
 *   replaces the one closest to it, never a rare one; ties go to the lowest index;
 * - `lfu-access` (the released code, `finish_entry`): the entry matched the fewest times
 *   (an access count incremented for the top-1 match of every layer match, reset to 1 on
 *   insertion); ties go to the lowest index.
 *
 * Storage: each entry twice, entry-major (`rows`, Float32, read by the batch scores of
 * `prefetcher.ts`) and column-major (`cols`, cell (l, e) of every entry contiguous, for the
 * matcher's per-row update and for replacement), plus per entry and row the squared norm, its
 * prefix sum over rows 0…l (and 1/sqrt of it in Float32, for the scan's pre-filter), the total
 * and the largest cell. The column-major copy is packed:
 * counts are integers, so two entries share one double, `count(2m) + count(2m+1) · 2^26`
 * (exact while counts are integers in [0, 2^24], which every stored count is checked to be).
 * A dot product of packed columns with integer coefficients is then two exact dot products
 * at once, as long as neither reaches 2^26 (no carry between lanes; every partial sum an
 * integer below 2^53, so exact in any order): guaranteed by Cauchy–Schwarz when
 * ‖x‖² · max_n ‖entry n‖² ≤ 2^51 (checked before every packed sum; else the lanes are
 * unpacked on the fly). Half the loads and multiply-adds of one value per entry, the same
 * memory as Float32. That is 8·L·E + 36·L bytes per entry (Arctic, 35×128: 37 KB; 10 000
 * entries: 360 MB per phase; the Float32 pre-filter norms add 4·L bytes, 1.4 MB per phase). A
 * collection given a count that does not pack (non-integer, negative or above 2^24; never in
 * the simulator, where counts are token counts) goes plain for good: one Float32-rounded value
 * per double, 12·L·E + 36·L bytes per entry. Storage grows by doubling up to the capacity.
 *
 * WASM kernels (issue #12; `assembly/eamc.ts`, AssemblyScript built to `build/eamc.wasm` by
 * `npm ci`, loaded by `eamc-wasm.ts`): where the module is built, a collection keeps its
 * column-major copy not as packed doubles but as u8 counts in a WebAssembly memory of its own
 * (column j: every entry's count, padded to a multiple of 16 entries with zeros; L·E bytes per
 * entry, an eighth of the packed doubles: 45 MB per phase on Arctic with 10 000 entries). A
 * count above 254 is stored as 255 and its excess (count − 255) kept aside per column (`wOver`,
 * a map entry → excess; a prefill EAM of a long prompt has a few), added after each kernel
 * pass: exact. The prefix norms and their Float32 1/sqrt live beside the columns (`prefixNorm2`
 * and `prefixInvSqrt` are views), and each matcher keeps D_n as i32 in a block of that memory.
 * The row update D += Σ c · column (eight columns per pass), the top-M scan (the last ≤ 8
 * columns added in the same pass: a decode row of a batch is one pass; the pre-filter in f32x4 on 16 entries at a time,
 * f32(D_n) · r_n > f32(floor · (1 − 1e-6)), relative error < 2e-7, so still conservative; only
 * the entries that pass are looked at, by the same exact f64 score D_n / sqrt(Q_n), in index
 * order, ties to the lower index) and replacement's dot products (the same kernel into a
 * scratch D) run in 128-bit SIMD: two columns' bytes interleaved and zero-extended to i16, one
 * `i32x4.dot_i16x8_s` (pmaddwd) per eight products, coefficients ≤ 32767 (larger ones: a
 * u8 × u16 `extmul` kernel). Exact: the counts are integers, every term non-negative and every
 * D_n ≤ sqrt(‖x‖² · max‖entry‖²) ≤ 2^30.5 when ‖x‖² · max‖entry‖² ≤ 2^61 (`WASM_LIMIT`,
 * checked before every kernel call, as `PACK_LIMIT` is for the packed doubles), so every D_n is
 * the same integer as the JS kernels' and every decision the same, bit for bit
 * (property-tested against them, `test/property/eamc-wasm.test.ts`). Where the guard fails,
 * or a row count is not an integer in [0, 65535], the matcher moves D to plain doubles for the
 * rest of the match (one column at a time, one multiply-add per entry, as the packed path
 * does); a stored count that is not an integer in [0, 65535] makes the collection leave WASM
 * for good (the packed doubles are rebuilt from `rows`, then the rules above apply). Where
 * `build/eamc.wasm` is absent (a copy of the checkout without its build) or
 * MOESIM_EAMC_KERNEL=js, the JS kernels run: the same results, slower. Measured in the bench's
 * run (`eamc-match-arctic-10k`: Arctic, 10 000 entries per phase; JS → WASM kernels on the
 * same commit and machine, a shared 2-core machine, ±20 %): a decode row (≤ 8 cells)
 * ~50 → ~19 µs, a prefill row ~400 → ~125 µs, an insertion ~5.2 → ~1.8 ms; matching +
 * insertion 0.57 → 0.32 of the run's wall time, the run's CPU time 2.3 → 1.77 s. What bounds it
 * now is arithmetic, not memory: u16 columns (u16 × u16 `extmul`) measured no faster than u8
 * with the same kernel, and pairing the columns for `dot_i16x8_s` (fewer instructions per
 * product) was what helped. A row update is O(N · nnz) multiply-adds plus an O(N) scan (D
 * loaded, updated and stored, the f32 pre-filter: ~60 SIMD instructions per 16 entries, ~10 µs
 * for 10 000 entries, most of a decode row); the run does ~9 000 decode rows, ~750 prefill rows
 * (~100 cells each) and 48 insertions (~2 000 cells each, fewer with a hint) against 10 000
 * entries: ~2·10^9 products in 128-bit SIMD.
 *
 * Seeded scan (WASM): a matcher passes its previous row's best M to the scan, which scores them
 * after the pass's columns first (the same exact expression); the lowest is a floor that M
 * entries reach, so no entry below it can be among the best M, and the pre-filter runs from the
 * first block instead of after M entries were taken and the floor built up entry by entry (ties
 * at the floor are kept: the same best M, in the same order). In the bench's run, 2 % of the
 * blocks of a decode row then pass the pre-filter and ~20 entries per row are scored; a decode
 * row went ~21 → ~13 µs (same machine, interleaved runs). Measured bound of what is left (a
 * micro run of `IncrementalMatcher.addRow`: 10 000 entries, 35 rows per iteration): a decode row
 * of 8 cells is ~6.5 µs with its columns in cache and ~10–12 µs with them from DRAM (45 MB per
 * phase), a row of 2 cells ~3.5 / ~6–10 µs: the O(N) pass (D loaded and stored, 1/sqrt(Q_n)
 * loaded, the pre-filter) and the columns' memory traffic, both linear in N.
 *
 * What bounds the bench's share of the run (`eamcShareOfWall`, 0.26–0.28; issue #12 asks for
 * < 0.10) is bytes, then the O(N) pass. One thread reads ~17 GB/s from DRAM on this project's
 * machine (a JS read loop over 512 MB). An insertion that is not completed from its matchers'
 * dot products reads 2 000–3 500 columns (20–35 MB): ≥ 1.2–2 ms at that rate, ~2.2 ms measured.
 * A prefill row reads ~100 columns (~1 MB): ≥ ~60 µs, 100–130 µs measured. The bench's run
 * (~1.2 s) does 28 such insertions, ~750 prefill rows and ~9 000 decode rows (≥ 6.5 µs each
 * even with their columns in cache). The insertions and prefill rows at memory speed alone and
 * the decode rows at their in-cache speed take ~42 + ~44 + ~59 ms. With the coefficients'
 * preparation (~40 ms, JS), the floor is ~0.15–0.18 of the run with u8 columns. Getting under
 * 0.10 needs fewer bytes per stored count, or a second core.
 * - 4-bit counts: prefill EAMs' hot cells exceed 15, which would fill the overflow maps.
 * - A second core: the match is needed at the same simulated instant, so only a worker that
 *   shares the memory and splits the entries could help.
 *
 * `IncrementalMatcher`: the cosine similarity between the current iteration EAM, restricted to
 * the rows seen so far S, and every stored EAM restricted to the same rows:
 *
 *     sim_n = D_n / sqrt(Q_cur · Q_n),   D_n = Σ_{i∈S} cur_i · stored_n,i,
 *                                        Q_cur = Σ_{i∈S} ‖cur_i‖²,  Q_n = Σ_{i∈S} ‖stored_n,i‖²
 *
 * — one cosine over the L×E matrices with the unseen rows removed (not an average of per-row
 * cosines), so every seen row counts by its mass, as in a cosine of whole EAMs. Per matcher
 * it keeps D_n for every entry, and Q_cur. When row l arrives:
 * - D_n += cur_l · stored_n,l reads only the non-zero cells of cur_l (a decode token of a
 *   top-k model: k cells) through the column-major copy: O(N · nnz(cur_l)), never
 *   O(N · L · E). D is packed like the columns (entries 2m and 2m+1 in one double, the same
 *   exact integers) while the collection is packed, the row's counts are integers and
 *   Q_cur · max‖entry‖² ≤ 2^51; else it is unpacked once and the rest of the match reads the
 *   columns lane by lane. Packed, rows with ≤ 4 non-zero cells (decode tokens) are folded
 *   into the scan below (one pass) and rows with ≤ 8 (decode tokens of a batch) take one
 *   column pass before it (plain: ≤ 2 and ≤ 8); denser rows (prefill) go eight columns per
 *   pass over D, the last ≤ 8 as above. The counts are integers, so D_n is the
 *   same exact integer however the products are grouped (sums are trees, not chains:
 *   independent additions overlap in the CPU).
 * - Q_n: while rows arrive in layer order 0, 1, … (always, in the executor), S = {0…l} and
 *   Q_n is the precomputed prefix sum of entry n's row norms up to l — read, not updated;
 *   rows in another order fall back to accumulating Q_n += ‖stored_n,l‖² per entry.
 * - Q_cur += ‖cur_l‖².
 * All sums are of integer products in doubles, so the result equals the brute-force cosine
 * exactly (tested on random matrices and row orders, packed and not, bit for bit). The best
 * `topMatches` entries are kept in the same pass over the N entries, in index order, by
 * D_n / sqrt(Q_n) (Q_cur is common to all), rejecting most before any square root (packed:
 * D_n · fround(1/sqrt(Q_n)) ≤ floor · (1 − 1e-6), reading 4 bytes per entry instead of Q_n's 8;
 * plain: D_n² ≤ floor²·Q_n with a relative margin; both conservative: an entry is kept or
 * not by its exact score); ties go to the lowest index; entries with similarity 0 never match.
 *
 * Replacement (`most-similar`) computes D_n = x · entry n for every entry the same way
 * (packed, eight columns of the new EAM's non-zero cells per pass) and the cosine with the
 * same expression as the matcher's, D_n / sqrt(‖x‖² · ‖entry n‖²). When the request was alone
 * in its matched group in every iteration of the phase (a prefill; any request at batch 1 or
 * with `per-request` matching), its matchers already computed D_n over every row but the last
 * (the policy hands them over, `EamcDots`): insertion then adds only the rows not matched and
 * recomputes only the entries written since (an entry's `writtenAt` version), the same exact
 * integers (Arctic, 10 000 entries: about 2 ms instead of 15 for a prefill EAM).
 *
 * Measured and left out (issue #12, Arctic with 10 000 entries per phase): per-cell posting
 * lists (entries with a non-zero count) — stored columns are 15–40 % non-zero and a scatter
 * costs several times a packed multiply-add, so they were no faster for rows or replacement,
 * at up to 16 bytes per non-zero; pruning replacement by per-row Cauchy–Schwarz bounds —
 * served EAMs' cosines to all entries lie within a few per cent, nothing was pruned; pruning
 * a row update's entries by D_n(l−1) + ‖row‖₁ · (largest cell of entry n's row l) against the
 * floor — even with the exact D_n(l−1) — leaves 28 % of the entries of a decode row and 72 % of a
 * prefill row as candidates in the bench's run, so lazy (stale-D) variants cannot beat the
 * packed pass; Uint8 columns in plain JS (no packing, one multiply-add per entry and column)
 * were slower than the packed doubles. In a serving run the passes are bound by memory traffic
 * (cold columns, 4 bytes per entry each) and the multiply-adds of one JS double per two entries.
 */
import type { EamShape } from './eam.ts';
import {
  eamcWasmModule,
  instantiateEamcKernels,
  newWasmMemory,
  WASM_MAX_TOP,
  WASM_RES_SCORE,
  WASM_RES_SEED,
  WASM_RES_TOP,
  WASM_RESERVED,
  type EamcKernels,
  type WasmMemory,
  type WasmModule,
} from './eamc-wasm.ts';

export type EamcReplacement = 'most-similar' | 'lfu-access';

const MIN_ALLOC = 16;
/** Lane width of the packed column copy: two entries' counts per double, `lo + hi · LANE`. */
const LANE = 2 ** 26;
const INV_LANE = 2 ** -26;
/** Stored counts pack while they are integers in [0, MAX_PACKED] (also exact in Float32). */
const MAX_PACKED = 2 ** 24;
/**
 * Packed sums stay exact while every entry's dot product is below 2^26 (no carry between
 * lanes, every partial sum an integer below 2^53): guaranteed when Q_cur · max_n ‖entry n‖²
 * ≤ PACK_LIMIT (Cauchy–Schwarz: D_n ≤ sqrt(Q_cur · ‖entry n‖²) ≤ 2^25.5).
 */
const PACK_LIMIT = 2 ** 51;

/** Counts the WASM path stores and coefficients its kernels take: integers in [0, MAX_WASM] (u8 columns, a count above 254 with its excess kept aside; u16 coefficients). */
const MAX_WASM = 65535;
/**
 * The kernels' i32 dot products cannot overflow while ‖x‖² · max_n ‖entry n‖² ≤ WASM_LIMIT
 * (Cauchy–Schwarz: every partial sum ≤ D_n ≤ 2^30.5; all terms are non-negative).
 */
const WASM_LIMIT = 2 ** 61;

/** Whether `v` is a count the WASM kernels store (an integer in [0, MAX_WASM]). */
function fitsWasm(v: number): boolean {
  return v >= 0 && v <= MAX_WASM && Math.floor(v) === v;
}

const align16 = (b: number): number => (b + 15) & ~15;
/** Coefficients the paired kernels take (signed i16 multiply-adds); larger ones use the unpaired kernel. */
const MAX_PAIR = 32767;

/** Whether `v` is a count that packs (an integer in [0, MAX_PACKED]). */
function packable(v: number): boolean {
  return v >= 0 && v <= MAX_PACKED && Math.floor(v) === v;
}

export class EamCollection {
  readonly layers: number;
  readonly experts: number;
  private readonly cells: number;
  /** Entries stored. */
  size = 0;
  /** Entries the storage has room for (≤ capacity); the stride of the per-row arrays. */
  private alloc = 0;
  /**
   * Entries per double in `cols`: 2 (packed) while every stored count is an integer in
   * [0, 2^24]; 1 (one Float32-rounded value per double) for good once one is not.
   */
  private lanesValue: 1 | 2 = 2;
  /** Doubles per column of `cols`: ceil(alloc / lanes). */
  private slots = 0;
  /** Largest ‖entry n‖² ever stored (an upper bound: the packing limit). */
  private maxNorm2 = 0;
  private rows = new Float32Array(0);
  private cols = new Float64Array(0);
  private packedScratch = new Float64Array(0);
  /** ‖row l of entry n‖², at `l * alloc + n`. */
  private rowNorm2 = new Float64Array(0);
  /** Σ_{i ≤ l} ‖row i of entry n‖², at `l * alloc + n` (rows seen in order 0…l). */
  private prefixNorm2 = new Float64Array(0);
  /**
   * 1/sqrt(prefixNorm2) rounded to Float32, at `l * alloc + n` (one spare value at the end):
   * the scan's pre-filter (a conservative test; the exact score is computed from Q_n).
   */
  private prefixInvSqrt = new Float32Array(1);
  /** Σ of row l of entry n, at `n * layers + l`. */
  private rowTotal = new Float64Array(0);
  /** Largest cell of row l of entry n, at `n * layers + l` (bounds for pruning score rows). */
  private rowMax = new Float64Array(0);
  /** ‖entry n‖² over all rows. */
  private fullNorm2 = new Float64Array(0);
  private access = new Float64Array(0);
  /** The collection version at which entry n was last written (a dot-product hint older than it is stale for n). */
  private writtenAt = new Float64Array(0);
  private scratch = new Float64Array(0);
  private scratch2 = new Float64Array(0);
  /** Increments on every insertion or replacement (matchers built on an older version are stale). */
  version = 0;
  /**
   * Largest share of stale entries (written since a hint) for which `similaritiesFromHint`
   * still completes the hint (each costs a dot product over all L·E cells); above it the column
   * passes of `similarities` are cheaper. Either way the values are the same (tests set 1).
   */
  hintStaleLimit = 1 / 8;

  // WASM storage (see the file header), while `wasm`: a memory of this collection's own with
  // the u8 columns at `wColsOff` (column j at wColsOff + j·wCs, wCs = alloc rounded up to 16,
  // zero past `size`; a count c > 254 stored as 255, its excess c − 255 in `wOver[j]`), prefixNorm2 (f64) at `wQOff` and prefixInvSqrt (f32) at `wROff` (the
  // fields `prefixNorm2` / `prefixInvSqrt` are views of them), an i32 scratch of wCs entries at
  // `wSOff` (replacement), then the matchers' blocks (D as i32, and Q_n / 1/sqrt(Q_n) for rows
  // out of order). Views are refreshed whenever the memory grows; `wGen` changes whenever the
  // memory is replaced (storage growth, or leaving WASM), which frees every block.
  private readonly wasmModule: WasmModule | null;
  private wasm: boolean;
  private memory: WasmMemory | null = null;
  /** The kernels over `memory` (internal: for the matcher). */
  wk: EamcKernels | null = null;
  wu8 = new Uint8Array(0);
  /** The columns' part of `wu8` (empty unless `wasm`). */
  private wCols8 = new Uint8Array(0);
  /** Per column, the entries whose count there is above 254, and the excess (count − 255). */
  wOver: (Map<number, number> | undefined)[] = [];
  wi32 = new Int32Array(0);
  wf64 = new Float64Array(0);
  wf32 = new Float32Array(0);
  wCs = 0;
  wColsOff = 0;
  wQOff = 0;
  wROff = 0;
  private wSOff = 0;
  private wBlocksOff = 0;
  private wBlockBytes = 0;
  wGen = 0;
  private wBlockCount = 0;
  private wFreeBlocks: number[] = [];

  constructor(
    shape: EamShape,
    readonly capacity: number,
    readonly replacement: EamcReplacement,
    /** `js` forces the JS kernels; `wasm` (the default) uses the WASM ones where `build/eamc.wasm` exists. */
    options: { kernel?: 'wasm' | 'js' } = {},
  ) {
    if (!(Number.isInteger(capacity) && capacity >= 1))
      throw new RangeError(`EAMC capacity must be a positive integer, got ${capacity}`);
    this.layers = shape.layers;
    this.experts = shape.experts;
    this.cells = shape.layers * shape.experts;
    this.wasmModule = options.kernel === 'js' ? null : eamcWasmModule();
    this.wasm = this.wasmModule !== null;
  }

  /**
   * The column-major storage and kernels: `wasm` (u8 columns, SIMD kernels), `packed` (JS, two
   * entries per double) or `plain` (JS, one Float32-rounded value per double). A collection
   * starts `wasm` where the module is built (else `packed`) and only ever moves right.
   */
  get kernel(): 'wasm' | 'packed' | 'plain' {
    return this.wasm ? 'wasm' : this.lanesValue === 2 ? 'packed' : 'plain';
  }

  /** The WASM memory is laid out (a matcher can use the kernels). */
  get wasmReady(): boolean {
    return this.wasm && this.memory !== null;
  }

  /** Refreshes the views over the WASM memory (after it grew or was replaced). */
  private refreshViews(): void {
    const buf = this.memory!.buffer;
    this.wu8 = new Uint8Array(buf);
    this.wi32 = new Int32Array(buf);
    this.wf64 = new Float64Array(buf);
    this.wf32 = new Float32Array(buf);
    const q = this.wQOff >> 3;
    const r = this.wROff >> 2;
    this.wCols8 = this.wu8.subarray(this.wColsOff, this.wColsOff + this.cells * this.wCs);
    this.prefixNorm2 = this.wf64.subarray(q, q + this.layers * this.alloc);
    this.prefixInvSqrt = this.wf32.subarray(r, r + this.layers * this.alloc + 1);
  }

  /**
   * Lays the WASM storage out for `alloc` entries in a new memory, copying the `size` entries
   * stored (columns, prefix norms) from the old one; frees every matcher block.
   */
  private layoutWasm(alloc: number): void {
    const { cells, layers, size } = this;
    const cs = (alloc + 15) & ~15;
    const colsOff = WASM_RESERVED;
    const qOff = colsOff + align16(cells * cs);
    const rOff = qOff + align16(layers * alloc * 8);
    const sOff = rOff + align16((layers * alloc + 32) * 4);
    const blocksOff = sOff + align16(cs * 4 + 64);
    const blockBytes = align16(cs * 4) + align16(alloc * 8) + align16((alloc + 32) * 4);
    const memory = newWasmMemory(Math.ceil((blocksOff + 2 * blockBytes) / 65536));
    const u8 = new Uint8Array(memory.buffer);
    const f64 = new Float64Array(memory.buffer);
    const f32 = new Float32Array(memory.buffer);
    if (this.memory && size > 0) {
      const oc = this.wColsOff;
      for (let j = 0; j < cells; j++)
        u8.set(this.wu8.subarray(oc + j * this.wCs, oc + j * this.wCs + size), colsOff + j * cs);
      for (let l = 0; l < layers; l++) {
        f64.set(this.prefixNorm2.subarray(l * this.alloc, l * this.alloc + size), (qOff >> 3) + l * alloc);
        f32.set(this.prefixInvSqrt.subarray(l * this.alloc, l * this.alloc + size), (rOff >> 2) + l * alloc);
      }
    }
    if (this.wOver.length !== cells) this.wOver = new Array<Map<number, number> | undefined>(cells);
    this.memory = memory;
    this.wk = instantiateEamcKernels(this.wasmModule!, memory);
    this.wCs = cs;
    this.wColsOff = colsOff;
    this.wQOff = qOff;
    this.wROff = rOff;
    this.wSOff = sOff;
    this.wBlocksOff = blocksOff;
    this.wBlockBytes = blockBytes;
    this.wGen++;
    this.wBlockCount = 0;
    this.wFreeBlocks = [];
    this.alloc = alloc;
    this.refreshViews();
  }

  /** A matcher block (byte offset) of this memory generation: D (i32, wCs), then Q_n (f64) and 1/sqrt(Q_n) (f32) for `alloc` entries. */
  acquireBlock(): number {
    const b = this.wFreeBlocks.pop() ?? this.wBlockCount++;
    const end = this.wBlocksOff + (b + 1) * this.wBlockBytes;
    const mem = this.memory!;
    if (end > mem.buffer.byteLength) {
      mem.grow(Math.ceil((end - mem.buffer.byteLength) / 65536));
      this.refreshViews();
    }
    return this.wBlocksOff + b * this.wBlockBytes;
  }

  /** Returns a block of generation `gen` (ignored if the memory was replaced since). */
  releaseBlock(block: number, gen: number): void {
    if (this.wasm && gen === this.wGen) this.wFreeBlocks.push((block - this.wBlocksOff) / this.wBlockBytes);
  }

  /** Byte offsets of a block's Q_n (f64) and 1/sqrt(Q_n) (f32) arrays. */
  blockNorms(block: number): { q: number; r: number } {
    const q = block + align16(this.wCs * 4);
    return { q, r: q + align16(this.alloc * 8) };
  }

  /**
   * Leaves WASM for good (a count that is not an integer in [0, 65535]): the packed JS columns
   * are rebuilt from the entry-major copy (every stored count is an integer ≤ 65535, exact in
   * Float32), the prefix norms copied out of the memory, which is dropped.
   */
  private leaveWasm(): void {
    const { cells, alloc, size } = this;
    if (this.memory) {
      const slots = Math.ceil(alloc / 2);
      const cols = new Float64Array(cells * slots);
      for (let n = 0; n < size; n++) {
        const base = n * cells;
        const scale = (n & 1) === 1 ? LANE : 1;
        const slot = n >> 1;
        for (let j = 0; j < cells; j++) {
          const v = this.rows[base + j]!;
          if (v !== 0) cols[j * slots + slot]! += v * scale;
        }
      }
      this.cols = cols;
      this.slots = slots;
      this.prefixNorm2 = this.prefixNorm2.slice();
      this.prefixInvSqrt = this.prefixInvSqrt.slice();
      this.packedScratch = new Float64Array(Math.ceil(alloc / 2));
    }
    this.wasm = false;
    this.memory = null;
    this.wk = null;
    this.wu8 = new Uint8Array(0);
    this.wCols8 = new Uint8Array(0);
    this.wOver = [];
    this.wi32 = new Int32Array(0);
    this.wf64 = new Float64Array(0);
    this.wf32 = new Float32Array(0);
    this.wGen++;
    this.lanesValue = 2;
  }

  /**
   * Adds Σ_t vals[t] · column `cellBase + cellsList[t]` (u8, WASM), t ∈ [from, to), to the i32 array at byte offset `d`
   * (entries 0 … 16·blocks−1), eight columns per pass: the stored bytes only (a count above 254
   * counts 255; see `addOverflow`). The caller guarantees no overflow.
   */
  addColumnsWasm(
    d: number,
    blocks: number,
    cellsList: ArrayLike<number>,
    vals: ArrayLike<number>,
    from: number,
    to: number,
    cellBase = 0,
  ): void {
    const k = this.wk!;
    const base = this.wColsOff + cellBase * this.wCs;
    const stride = this.wCs;
    for (let t = from; t < to; t += 8) {
      const w = Math.min(8, to - t);
      const o0 = base + cellsList[t]! * stride;
      let small = true;
      for (let u = t; u < t + w; u++) if (vals[u]! > MAX_PAIR) small = false;
      // Missing columns have coefficient 0 and read column o0 (+ 0 is exact).
      // prettier-ignore
      (small ? k.addPairs : k.addColumns)(
        d,
        blocks,
        w,
        o0,
        w > 1 ? base + cellsList[t + 1]! * stride : o0,
        w > 2 ? base + cellsList[t + 2]! * stride : o0,
        w > 3 ? base + cellsList[t + 3]! * stride : o0,
        w > 4 ? base + cellsList[t + 4]! * stride : o0,
        w > 5 ? base + cellsList[t + 5]! * stride : o0,
        w > 6 ? base + cellsList[t + 6]! * stride : o0,
        w > 7 ? base + cellsList[t + 7]! * stride : o0,
        vals[t]!,
        w > 1 ? vals[t + 1]! : 0,
        w > 2 ? vals[t + 2]! : 0,
        w > 3 ? vals[t + 3]! : 0,
        w > 4 ? vals[t + 4]! : 0,
        w > 5 ? vals[t + 5]! : 0,
        w > 6 ? vals[t + 6]! : 0,
        w > 7 ? vals[t + 7]! : 0,
      );
    }
  }

  /** Entries the storage has room for without growing (the stride of the per-row arrays). */
  get stride(): number {
    return this.alloc;
  }

  /** Entries per double of the column-major copy (2: packed, 1: plain); 2 while `kernel` is `wasm` (every count an exact integer). */
  get lanes(): 1 | 2 {
    return this.lanesValue;
  }

  /** Values per column of the column-major copy (doubles; u8 counts, padded to 16, while `kernel` is `wasm`). */
  get columnStride(): number {
    return this.wasm ? this.wCs : this.slots;
  }

  /** An upper bound of every stored entry's ‖entry‖² (for the packing limit). */
  get maxEntryNorm2(): number {
    return this.maxNorm2;
  }

  private grow(need: number): void {
    if (need <= this.alloc) return;
    const alloc = Math.min(this.capacity, Math.max(need, MIN_ALLOC, this.alloc * 2));
    const { cells, layers } = this;
    const rows = new Float32Array(alloc * cells);
    rows.set(this.rows.subarray(0, this.size * cells));
    const rowNorm2 = new Float64Array(layers * alloc);
    for (let l = 0; l < layers; l++)
      rowNorm2.set(this.rowNorm2.subarray(l * this.alloc, l * this.alloc + this.size), l * alloc);
    // A 32-bit WASM memory holds at most 4 GiB: a collection that would not fit leaves WASM.
    if (this.wasm && WASM_RESERVED + cells * alloc + layers * alloc * 16 + alloc * 64 > 3.5 * 2 ** 30) this.leaveWasm();
    if (this.wasm) {
      // Columns and prefix norms in a new WASM memory (sets `alloc`).
      this.layoutWasm(alloc);
    } else {
      const lanes = this.lanesValue;
      const slots = Math.ceil(alloc / lanes);
      const used = Math.ceil(this.size / lanes);
      const cols = new Float64Array(cells * slots);
      const prefixNorm2 = new Float64Array(layers * alloc);
      const prefixInvSqrt = new Float32Array(layers * alloc + 1);
      for (let c = 0; c < cells; c++) cols.set(this.cols.subarray(c * this.slots, c * this.slots + used), c * slots);
      for (let l = 0; l < layers; l++) {
        prefixNorm2.set(this.prefixNorm2.subarray(l * this.alloc, l * this.alloc + this.size), l * alloc);
        prefixInvSqrt.set(this.prefixInvSqrt.subarray(l * this.alloc, l * this.alloc + this.size), l * alloc);
      }
      this.cols = cols;
      this.slots = slots;
      this.prefixNorm2 = prefixNorm2;
      this.prefixInvSqrt = prefixInvSqrt;
      this.packedScratch = new Float64Array(Math.ceil(alloc / 2));
    }
    const rowTotal = new Float64Array(alloc * layers);
    rowTotal.set(this.rowTotal.subarray(0, this.size * layers));
    const rowMax = new Float64Array(alloc * layers);
    rowMax.set(this.rowMax.subarray(0, this.size * layers));
    const grow1 = (a: Float64Array) => {
      const b = new Float64Array(alloc);
      b.set(a.subarray(0, this.size));
      return b;
    };
    this.fullNorm2 = grow1(this.fullNorm2);
    this.access = grow1(this.access);
    this.writtenAt = grow1(this.writtenAt);
    this.scratch = new Float64Array(alloc);
    this.rows = rows;
    this.rowNorm2 = rowNorm2;
    this.rowTotal = rowTotal;
    this.rowMax = rowMax;
    this.alloc = alloc;
  }

  /**
   * Stores `eam` (L×E counts): in a free entry while there is one, else in place of the entry
   * the replacement rule picks. Returns the entry index. Empty EAMs are ignored (−1).
   */
  insert(eam: ArrayLike<number>, hint?: EamcDots): number {
    if (eam.length !== this.cells) throw new RangeError(`EAM has ${eam.length} cells, the collection ${this.cells}`);
    let any = false;
    let packs = true;
    let fits = true;
    for (let j = 0; j < this.cells; j++) {
      const v = eam[j]!;
      if (v !== 0) any = true;
      if (!packable(v)) packs = false;
      if (!fitsWasm(v)) fits = false;
    }
    if (!any) return -1;
    if (!fits && this.wasm) this.leaveWasm();
    if (!packs && this.lanesValue === 2) this.unpack();
    let n: number;
    if (this.size < this.capacity) {
      this.grow(this.size + 1);
      n = this.size++;
    } else {
      n = this.replacement === 'most-similar' ? this.mostSimilar(eam, hint) : this.leastAccessed();
    }
    this.write(n, eam);
    this.access[n] = 1;
    this.version++;
    this.writtenAt[n] = this.version;
    return n;
  }

  /** Switches the column-major copy to one (Float32-rounded) value per double, for good. */
  private unpack(): void {
    const { cells, alloc, size } = this;
    const cols = new Float64Array(cells * alloc);
    for (let n = 0; n < size; n++) {
      const base = n * cells;
      for (let j = 0; j < cells; j++) cols[j * alloc + n] = this.rows[base + j]!;
    }
    this.cols = cols;
    this.slots = alloc;
    this.lanesValue = 1;
  }

  private write(n: number, eam: ArrayLike<number>): void {
    const { experts, layers, alloc, cols } = this;
    const base = n * this.cells;
    const wasm = this.wasm;
    const u8 = this.wu8;
    const cs = this.wCs;
    const cb = this.wColsOff;
    const over = this.wOver;
    const packed = this.lanesValue === 2;
    const slot = packed ? n >> 1 : n;
    const high = (n & 1) === 1;
    const slots = this.slots;
    let full = 0;
    for (let l = 0; l < layers; l++) {
      let sq = 0;
      let tot = 0;
      let max = 0;
      for (let e = 0; e < experts; e++) {
        const j = l * experts + e;
        const v = eam[j]!;
        const old = this.rows[base + j]!;
        this.rows[base + j] = v;
        // The column copy always equals `rows` (zero in unused entries): a cell left as it was
        // (mostly zero to zero) skips its strided write.
        if (old !== Math.fround(v)) {
          const at = j * slots + slot;
          if (wasm) {
            u8[cb + j * cs + n] = v > 255 ? 255 : v;
            if (old > 254) over[j]!.delete(n);
            if (v > 254) (over[j] ??= new Map()).set(n, v - 255);
          } else if (!packed) cols[at] = Math.fround(v);
          else {
            // Replace this entry's lane, keep the other's.
            const p = cols[at]!;
            const hi = Math.floor(p * INV_LANE);
            cols[at] = high ? p - hi * LANE + v * LANE : hi * LANE + v;
          }
        }
        sq += v * v;
        tot += v;
        if (v > max) max = v;
      }
      this.rowNorm2[l * alloc + n] = sq;
      this.rowTotal[n * layers + l] = tot;
      this.rowMax[n * layers + l] = max;
      full += sq;
      this.prefixNorm2[l * alloc + n] = full;
      this.prefixInvSqrt[l * alloc + n] = 1 / Math.sqrt(full);
    }
    this.fullNorm2[n] = full;
    if (full > this.maxNorm2) this.maxNorm2 = full;
  }

  /** Cosine similarity of `eam` (all rows) with every stored entry, into `out[0..size)`. */
  similarities(eam: ArrayLike<number>, out: Float64Array): void {
    const { size, cols, slots } = this;
    // Non-zero cells, then eight columns per pass over the dot products (a dense EAM has L·E
    // of them); integer counts: the dot products are exact whatever the grouping.
    const nzJ: number[] = [];
    const nzV: number[] = [];
    let norm = 0;
    let packs = true;
    let fits = true;
    // Column offsets (doubles), or column indices for WASM.
    const colStride = this.wasm ? 1 : slots;
    for (let j = 0; j < this.cells; j++) {
      const v = eam[j]!;
      if (v === 0) continue;
      if (!packable(v)) packs = false;
      if (!fitsWasm(v)) fits = false;
      norm += v * v;
      nzJ.push(j * colStride);
      nzV.push(v);
    }
    if (this.wasm) this.dotsWasm(null, nzJ, nzV, fits && norm * this.maxNorm2 <= WASM_LIMIT, out);
    else if (this.lanesValue === 1) {
      out.fill(0, 0, size);
      addColumns(out, cols, size, nzJ, nzV);
    } else if (packs && norm * this.maxNorm2 <= PACK_LIMIT) {
      // Two entries per double: half the passes' work; every D_n < 2^26, so no carry.
      const half = (size + 1) >> 1;
      const packed = this.packedScratch;
      packed.fill(0, 0, half);
      addColumns(packed, cols, half, nzJ, nzV);
      unpackPairs(packed, half, size, out);
    } else {
      out.fill(0, 0, size);
      for (let t = 0; t < nzJ.length; t++) addPackedColumn(out, cols, size, nzJ[t]!, nzV[t]!);
    }
    for (let n = 0; n < size; n++) {
      const q = norm * this.fullNorm2[n]!;
      out[n] = q > 0 ? out[n]! / Math.sqrt(q) : 0;
    }
  }

  /**
   * Adds the excess of the counts above 254 (stored as 255) of column `j`, times `c`, to the
   * i32 array at byte offset `d` (entries below `n`): after `addColumnsWasm`, exact.
   */
  addOverflow(d: number, n: number, j: number, c: number): void {
    const over = this.wOver[j];
    if (!over) return;
    const i32 = this.wi32;
    const d4 = d >> 2;
    for (const [e, x] of over) if (e < n) i32[d4 + e]! += c * x;
  }

  /**
   * Plain D_i += c · count of entry i in column `j` of the WASM copy, for i < n: one
   * multiply-add per entry, as the packed JS path (`addPackedColumn`) does.
   */
  addColumnPlain(out: Float64Array, n: number, j: number, c: number): void {
    const u8 = this.wu8;
    const off = this.wColsOff + j * this.wCs;
    for (let i = 0; i < n; i++) {
      const v = u8[off + i]!;
      out[i]! += c * (v === 255 ? this.wasmCount(j, i) : v);
    }
  }

  /** The count of entry `n` in column `j` of the WASM copy (u8 plus excess). */
  wasmCount(j: number, n: number): number {
    const v = this.wu8[this.wColsOff + j * this.wCs + n]!;
    return v === 255 ? 255 + (this.wOver[j]?.get(n) ?? 0) : v;
  }

  /**
   * WASM: out[n] = D_n (n < size) = (src[n], or 0 without `src`) + Σ_t vals[t] · column
   * cellsList[t]: with the i32 kernels when `exact` (the caller's overflow guard: every count an
   * integer ≤ 65535, ‖x‖² · max‖entry‖² ≤ WASM_LIMIT, src[n] ≤ D_n), else one column at a time in
   * doubles (as the packed JS path's fallback: the same additions in the same order).
   */
  private dotsWasm(
    src: Float64Array | null,
    cellsList: readonly number[],
    vals: readonly number[],
    exact: boolean,
    out: Float64Array,
  ): void {
    const size = this.size;
    if (size === 0) return;
    if (exact) {
      const s4 = this.wSOff >> 2;
      const i32 = this.wi32;
      const blocks = (size + 15) >> 4;
      i32.fill(0, s4, s4 + 16 * blocks);
      if (src) for (let n = 0; n < size; n++) i32[s4 + n] = src[n]!;
      this.addColumnsWasm(this.wSOff, blocks, cellsList, vals, 0, cellsList.length);
      for (let t = 0; t < cellsList.length; t++) this.addOverflow(this.wSOff, size, cellsList[t]!, vals[t]!);
      const r = this.wi32;
      for (let n = 0; n < size; n++) out[n] = r[s4 + n]!;
    } else {
      if (src) out.set(src.subarray(0, size));
      else out.fill(0, 0, size);
      for (let t = 0; t < cellsList.length; t++) this.addColumnPlain(out, size, cellsList[t]!, vals[t]!);
    }
  }

  /**
   * `similarities` from a hint: `hint` holds the exact dot products of `eam`'s rows `hint.rows`
   * with entries 0 … hint.size−1 as they were at `hint.version` (a matcher's D, see
   * `EamcDots`). Completed here: the rows not covered are added column by column (as in
   * `similarities`), and an entry written since `hint.version` (or past `hint.size`) gets a
   * fresh dot product over all rows from its entry-major copy. Every count is an integer, so
   * every D_n is the same exact integer as `similarities` computes, and the cosine is the same
   * expression: bit for bit. Returns false (nothing done) unless the collection is packed
   * (integer counts), `eam` packs and the hint is this collection's.
   */
  similaritiesFromHint(eam: ArrayLike<number>, hint: EamcDots, out: Float64Array): boolean {
    if (hint.collection !== this || !hint.valid || this.lanesValue !== 2 || hint.version > this.version) return false;
    const { size, cols, slots, cells, experts } = this;
    const hs = Math.min(hint.size, size);
    const hv = hint.version;
    const writtenAt = this.writtenAt;
    // Stale entries (written since the hint, or past it) are recomputed over all rows from the
    // entry-major copy; when there are many, the column passes of `similarities` are cheaper.
    const stale = (n: number): boolean => n >= hs || writtenAt[n]! > hv;
    let staleCount = size - hs;
    for (let n = 0; n < hs; n++) if (writtenAt[n]! > hv) staleCount++;
    if (staleCount > size * this.hintStaleLimit) return false;
    const nzJ: number[] = [];
    const nzV: number[] = [];
    let norm = 0;
    let fits = true;
    const colStride = this.wasm ? 1 : slots;
    for (let j = 0; j < cells; j++) {
      const v = eam[j]!;
      if (v === 0) continue;
      if (!packable(v)) return false;
      norm += v * v;
      const l = (j / experts) | 0;
      if (!hint.rows[l]) {
        if (!fitsWasm(v)) fits = false;
        nzJ.push(j * colStride);
        nzV.push(v);
      }
    }
    // Stale entries start from 0: their fresh dot product replaces whatever the missing rows add below.
    const src = this.scratch2.length >= size ? this.scratch2 : (this.scratch2 = new Float64Array(this.alloc));
    for (let n = 0; n < size; n++) src[n] = stale(n) ? 0 : hint.dot(n);
    // WASM: the hint's D_n (each ≤ the full D_n) plus the missing rows, i32 under the guard.
    if (this.wasm) this.dotsWasm(src, nzJ, nzV, fits && norm * this.maxNorm2 <= WASM_LIMIT, out);
    else if (norm * this.maxNorm2 <= PACK_LIMIT) {
      // Packed, as in `similarities`: D packed two entries per double (every D_n < 2^26: no
      // carry), the missing rows added eight columns per pass, then unpacked.
      const half = (size + 1) >> 1;
      const packed = this.packedScratch;
      for (let m = 0; m < half; m++) {
        const a = 2 * m;
        packed[m] = src[a]! + (a + 1 < size ? src[a + 1]! : 0) * LANE;
      }
      addColumns(packed, cols, half, nzJ, nzV);
      unpackPairs(packed, half, size, out);
    } else {
      out.set(src.subarray(0, size));
      for (let t = 0; t < nzJ.length; t++) addPackedColumn(out, cols, size, nzJ[t]!, nzV[t]!);
    }
    // Entries written since the hint: a fresh dot product over all rows (entry-major copy;
    // the missing rows' columns were added to a zero lane above and are overwritten).
    const rowsF = this.rows;
    for (let n = 0; n < size; n++) {
      if (!stale(n)) continue;
      const base = n * cells;
      let d = 0;
      for (let j = 0; j < cells; j++) {
        const v = eam[j]!;
        if (v !== 0) d += v * rowsF[base + j]!;
      }
      out[n] = d;
    }
    for (let n = 0; n < size; n++) {
      const q = norm * this.fullNorm2[n]!;
      out[n] = q > 0 ? out[n]! / Math.sqrt(q) : 0;
    }
    return true;
  }

  /**
   * The stored entry most similar to `eam` (highest cosine; ties: lowest index). With a valid
   * `hint` (dot products of `eam` already accumulated by a matcher) the dot products are
   * completed from it (`similaritiesFromHint`), else computed in full; the same values either way.
   */
  mostSimilar(eam: ArrayLike<number>, hint?: EamcDots): number {
    if (!(hint && this.similaritiesFromHint(eam, hint, this.scratch))) this.similarities(eam, this.scratch);
    let best = 0;
    for (let n = 1; n < this.size; n++) if (this.scratch[n]! > this.scratch[best]!) best = n;
    return best;
  }

  private leastAccessed(): number {
    let best = 0;
    for (let n = 1; n < this.size; n++) if (this.access[n]! < this.access[best]!) best = n;
    return best;
  }

  /** Records that entry `n` was the best match of a layer match (the `lfu-access` rule counts these). */
  noteMatched(n: number): void {
    this.access[n]!++;
  }

  accessCount(n: number): number {
    return this.access[n]!;
  }

  /** Entry `n`'s counts, entry-major (a view: do not modify). */
  entry(n: number): Float32Array {
    if (!(n >= 0 && n < this.size)) throw new RangeError(`EAMC entry ${n} of ${this.size}`);
    return this.rows.subarray(n * this.cells, (n + 1) * this.cells);
  }

  /** Σ of row `layer` of entry `n`. */
  rowSum(n: number, layer: number): number {
    return this.rowTotal[n * this.layers + layer]!;
  }

  /** Internal arrays for the matcher (read-only use). */
  get internals(): {
    /** The JS column-major copy (empty while `kernel` is `wasm`). */
    readonly cols: Float64Array;
    /** The WASM u8 columns (column j at j · columnStride, counts above 254 as 255; empty unless `kernel` is `wasm`). */
    readonly cols8: Uint8Array;
    readonly rows: Float32Array;
    readonly rowNorm2: Float64Array;
    readonly prefixNorm2: Float64Array;
    readonly prefixInvSqrt: Float32Array;
    readonly rowTotal: Float64Array;
    readonly rowMax: Float64Array;
  } {
    return {
      cols: this.cols,
      cols8: this.wCols8,
      rows: this.rows,
      rowNorm2: this.rowNorm2,
      prefixNorm2: this.prefixNorm2,
      prefixInvSqrt: this.prefixInvSqrt,
      rowTotal: this.rowTotal,
      rowMax: this.rowMax,
    };
  }
}

/**
 * Dot products of one request EAM (of one phase) with every entry of a collection, over some
 * of its rows, accumulated while the request's iterations were matched, for
 * `EamCollection.insert` to complete instead of recomputing (`similaritiesFromHint`): a request
 * alone in its matched group adds the matcher's dot products at the end of every iteration
 * (`IncrementalMatcher.exportDots`; free, the match computed them). A request sharing its group
 * (a batch's decode steps) is poisoned: its own dot products are not known. (Measured and left
 * out, issue #12: adding such a request's own rows' columns after each batch row update, about
 * 23 µs per request and row on Arctic with 10 000 entries, cost more than the insertions it
 * saved — a decode EAM repeats cells across steps, which one computation at insertion reads
 * once.) The dot products are exact integers (valid only while every row had integer counts against a
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

/**
 * Incremental cosine matching of one iteration EAM (fed row by row) against a collection, and
 * its best matches. Reusable: `reset` starts a new iteration EAM.
 *
 * Fast paths (same values as the general path): while rows arrive in layer order 0, 1, …
 * (always, in the executor) Q_n is read from the collection's prefix norms instead of being
 * accumulated; while the collection is packed, the row's counts are integers and
 * Q_cur · max‖entry‖² ≤ 2^51, D is kept packed (two entries per double, exact: see
 * `PACK_LIMIT`), else it is unpacked for the rest of the match. Packed, a row with at most
 * four non-zero cells (decode tokens) updates D and scans in one pass, one with at most eight
 * in two (plain: two and eight cells); the scan rejects most entries by a conservative
 * pre-filter before taking a square root (see the file header).
 */
export class IncrementalMatcher {
  private coll: EamCollection | null = null;
  private version = -1;
  private n = 0;
  /** D_n: packed (entries 2m, 2m+1 in `dots[m]`) while `packed`, else plain (`dots[n]`). */
  private dots = new Float64Array(0);
  private packed = false;
  /** Q_n, once rows stopped arriving in layer order (see `ordered`). */
  private norms = new Float64Array(0);
  /** 1/sqrt(Q_n) rounded to Float32, for the scan's pre-filter once rows are out of order. */
  private invSqrt = new Float32Array(0);
  private qCur = 0;
  private readonly seen: Uint8Array;
  private rowsSeen = 0;
  /** Every row so far had integer counts (that pack) and the collection was packed at `reset`: D is exact. */
  private exact = true;
  /** Σ of the counts of the rows seen (the packing bound of dot products exported). */
  private l1 = 0;
  /** Rows seen so far are exactly 0 … rowsSeen−1: Q_n = prefixNorm2[rowsSeen−1][n]. */
  private ordered = true;
  private readonly nzE: Int32Array;
  private readonly nzC: Float64Array;
  /**
   * D kept as i32 in a block of the collection's WASM memory (`block`, byte offset, of memory
   * generation `blockGen` of `blockColl`) while the collection is `wasm`, every row's counts are
   * integers ≤ 65535 and Q_cur · max‖entry‖² ≤ WASM_LIMIT; else D is plain doubles in `dots`.
   */
  private wasm = false;
  private blockColl: EamCollection | null = null;
  private blockGen = -1;
  private block = 0;
  /** Best matches (entry indices), best first; `topCount` of them are valid. */
  readonly top: Int32Array;
  readonly topScore: Float64Array;
  topCount = 0;

  constructor(
    shape: EamShape,
    readonly topMatches: number,
  ) {
    this.seen = new Uint8Array(shape.layers);
    this.nzE = new Int32Array(shape.experts);
    this.nzC = new Float64Array(shape.experts);
    this.top = new Int32Array(topMatches);
    this.topScore = new Float64Array(topMatches);
  }

  /** Starts a new (empty) iteration EAM against `coll` as it is now. */
  reset(coll: EamCollection): void {
    this.coll = coll;
    this.version = coll.version;
    this.n = coll.size;
    // One spare double: the packed scan may touch slot ⌈n/2⌉ … of an odd n never past n.
    if (this.dots.length < this.n + 1) {
      this.dots = new Float64Array(coll.capacity > 4 * this.n ? Math.max(this.n * 2, 16) : coll.capacity + 1);
      this.norms = new Float64Array(this.dots.length);
      this.invSqrt = new Float32Array(this.dots.length);
    }
    this.packed = coll.lanes === 2 && coll.kernel !== 'wasm';
    this.exact = coll.lanes === 2;
    this.wasm = coll.wasmReady && this.topMatches <= WASM_MAX_TOP;
    if (this.wasm) {
      if (this.blockColl !== coll || this.blockGen !== coll.wGen) {
        this.releaseBlock();
        this.block = coll.acquireBlock();
        this.blockColl = coll;
        this.blockGen = coll.wGen;
      }
      const d = this.block >> 2;
      coll.wi32.fill(0, d, d + ((this.n + 15) & ~15));
    } else {
      this.releaseBlock();
      this.dots.fill(0, 0, this.n);
    }
    this.l1 = 0;
    this.qCur = 0;
    this.seen.fill(0);
    this.rowsSeen = 0;
    this.ordered = true;
    this.topCount = 0;
  }

  get collection(): EamCollection | null {
    return this.coll;
  }

  /** Entries being matched (the collection's size at `reset`). */
  get entries(): number {
    return this.n;
  }

  /** D kept as i32 in WASM memory so far (for tests). */
  get wasmDots(): boolean {
    return this.wasm;
  }

  /** D kept packed so far (for tests). */
  get packedDots(): boolean {
    return this.packed;
  }

  /** Gives the WASM block back to its collection (if its memory is still the one it came from). */
  private releaseBlock(): void {
    if (this.blockColl) this.blockColl.releaseBlock(this.block, this.blockGen);
    this.blockColl = null;
  }

  /** Moves D out of WASM (i32) into plain doubles, for the rest of the match. */
  private leaveWasm(coll: EamCollection): void {
    const i32 = coll.wi32;
    const d = this.block >> 2;
    for (let i = 0; i < this.n; i++) this.dots[i] = i32[d + i]!;
    this.wasm = false;
  }

  /** Unpacks D in place (backwards: slot m goes to 2m, 2m+1 ≥ m), for the rest of the match. */
  private unpackDots(): void {
    const dots = this.dots;
    const n = this.n;
    for (let m = ((n + 1) >> 1) - 1; m >= 0; m--) {
      const p = dots[m]!;
      const hi = Math.floor(p * INV_LANE);
      if (2 * m + 1 < n) dots[2 * m + 1] = hi;
      dots[2 * m] = p - hi * LANE;
    }
    this.packed = false;
  }

  /**
   * Adds row `layer` of the iteration EAM (`counts[e]`, length E) and updates every stored
   * entry's similarity and the best matches. Each row may be added once per `reset`.
   */
  addRow(layer: number, counts: ArrayLike<number>): void {
    const coll = this.coll;
    if (!coll) throw new Error('matcher used before reset');
    if (coll.version !== this.version) throw new Error('EAMC changed during a match');
    if (this.seen[layer]) throw new Error(`row ${layer} added twice to one iteration EAM`);
    this.seen[layer] = 1;
    const E = coll.experts;
    const stride = coll.stride;
    const colStride = coll.columnStride;
    const { cols, rowNorm2, prefixNorm2, prefixInvSqrt } = coll.internals;
    const n = this.n;
    const dots = this.dots;
    const norms = this.norms;

    let nnz = 0;
    let packs = true;
    let fits = true;
    for (let e = 0; e < E; e++) {
      const c = counts[e]!;
      if (c === 0) continue;
      if (!packable(c)) packs = false;
      if (!fitsWasm(c)) fits = false;
      this.nzE[nnz] = e;
      this.nzC[nnz] = c;
      nnz++;
      this.qCur += c * c;
      this.l1 += c;
    }
    if (!packs) this.exact = false;
    if (this.packed && !(packs && this.qCur * coll.maxEntryNorm2 <= PACK_LIMIT)) this.unpackDots();
    if (this.wasm && !(fits && this.qCur * coll.maxEntryNorm2 <= WASM_LIMIT)) this.leaveWasm(coll);

    // Q_n: the prefix norms while rows come in order; else accumulate from the last prefix.
    let qArr: Float64Array;
    let qOff: number;
    let rArr: Float32Array;
    if (this.ordered && layer === this.rowsSeen) {
      qArr = prefixNorm2;
      qOff = layer * stride;
      rArr = prefixInvSqrt;
    } else {
      if (this.ordered) {
        const from = (this.rowsSeen - 1) * stride;
        for (let i = 0; i < n; i++) norms[i] = this.rowsSeen > 0 ? prefixNorm2[from + i]! : 0;
        this.ordered = false;
      }
      const rn = layer * stride;
      for (let i = 0; i < n; i++) norms[i]! += rowNorm2[rn + i]!;
      qArr = norms;
      qOff = 0;
      rArr = this.invSqrt;
      if (this.packed) for (let i = 0; i < n; i++) rArr[i] = 1 / Math.sqrt(norms[i]!);
      if (this.wasm) {
        // The scan reads Q_n and 1/sqrt(Q_n) from the block.
        const at = coll.blockNorms(this.block);
        coll.wf64.set(norms.subarray(0, n), at.q >> 3);
        const r = coll.wf32;
        const r0 = at.r >> 2;
        for (let i = 0; i < n; i++) r[r0 + i] = 1 / Math.sqrt(norms[i]!);
      }
    }
    this.rowsSeen++;

    const cb = layer * E;
    const nzC = this.nzC;
    const nzE = this.nzE;
    let count: number;
    if (this.wasm) {
      // D (i32) += the row's columns, eight per pass over D until at most eight are left, then
      // those inside the scan (one pass for the decode tokens of a batch of up to eight cells); see `scan`.
      const d = this.block;
      let done = 0;
      // The scan's paired kernel takes coefficients ≤ 32767: a larger one sends every column through `addColumnsWasm`.
      let fuse = 8;
      for (let t = 0; t < nnz; t++) if (nzC[t]! > MAX_PAIR) fuse = 0;
      while (nnz - done > fuse) {
        const w = Math.min(8, nnz - done - fuse);
        coll.addColumnsWasm(d, (n + 15) >> 4, nzE, nzC, done, done + w, cb);
        done += w;
      }
      // The excess of counts above 254 of every column of the row (the scan's too: D is then exact when it looks).
      for (let t = 0; t < nnz; t++) coll.addOverflow(d, n, cb + nzE[t]!, nzC[t]!);
      const left = nnz - done;
      const base = coll.wColsOff;
      const cstride = coll.wCs;
      const o0 = left > 0 ? base + (cb + nzE[done]!) * cstride : base;
      const o1 = left > 1 ? base + (cb + nzE[done + 1]!) * cstride : o0;
      const o2 = left > 2 ? base + (cb + nzE[done + 2]!) * cstride : o0;
      const o3 = left > 3 ? base + (cb + nzE[done + 3]!) * cstride : o0;
      const o4 = left > 4 ? base + (cb + nzE[done + 4]!) * cstride : o0;
      const o5 = left > 5 ? base + (cb + nzE[done + 5]!) * cstride : o0;
      const o6 = left > 6 ? base + (cb + nzE[done + 6]!) * cstride : o0;
      const o7 = left > 7 ? base + (cb + nzE[done + 7]!) * cstride : o0;
      let qp: number;
      let rp: number;
      if (qArr === prefixNorm2) {
        qp = coll.wQOff + layer * stride * 8;
        rp = coll.wROff + layer * stride * 4;
      } else {
        const at = coll.blockNorms(this.block);
        qp = at.q;
        rp = at.r;
      }
      // Seeds: the previous row's best M (the scan's floor from the start; the same result).
      let seeds = 0;
      if (this.topCount === this.topMatches && this.topMatches <= WASM_MAX_TOP) {
        seeds = this.topCount;
        const s32 = coll.wi32;
        for (let j = 0; j < seeds; j++) s32[(WASM_RES_SEED >> 2) + j] = this.top[j]!;
      }
      // prettier-ignore
      count = coll.wk!.scan(
        d,
        n,
        this.topMatches,
        qp,
        rp,
        left,
        o0,
        o1,
        o2,
        o3,
        o4,
        o5,
        o6,
        o7,
        left > 0 ? nzC[done]! : 0,
        left > 1 ? nzC[done + 1]! : 0,
        left > 2 ? nzC[done + 2]! : 0,
        left > 3 ? nzC[done + 3]! : 0,
        left > 4 ? nzC[done + 4]! : 0,
        left > 5 ? nzC[done + 5]! : 0,
        left > 6 ? nzC[done + 6]! : 0,
        left > 7 ? nzC[done + 7]! : 0,
        seeds,
      );
      const i32 = coll.wi32;
      const f64 = coll.wf64;
      for (let j = 0; j < count; j++) {
        this.top[j] = i32[(WASM_RES_TOP >> 2) + j]!;
        this.topScore[j] = f64[(WASM_RES_SCORE >> 3) + j]!;
      }
    } else if (coll.kernel === 'wasm') {
      // WASM columns, plain D (counts past 65535 or not integers, or sums past the i32 limit):
      // one column at a time, then the scan.
      for (let t = 0; t < nnz; t++) coll.addColumnPlain(dots, n, cb + nzE[t]!, nzC[t]!);
      count = selectTop(dots, qArr, qOff, n, this.topMatches, this.top, this.topScore, cols, 0, 0, 0, 0);
    } else if (coll.lanes === 2 && !this.packed) {
      // Packed columns, plain D (counts not integers, or sums past the packing limit): each
      // column unpacked on the fly, then the scan.
      for (let t = 0; t < nnz; t++) addPackedColumn(dots, cols, n, (cb + nzE[t]!) * colStride, nzC[t]!);
      count = selectTop(dots, qArr, qOff, n, this.topMatches, this.top, this.topScore, cols, 0, 0, 0, 0);
    } else {
      // Dense rows (prefill): columns eight (then four) per pass over D until at most eight
      // are left; those are added in one pass (width 4 or 8; missing columns have coefficient
      // 0 and read column o0: + 0 is exact), then the best M by D_n / sqrt(Q_n) in a second
      // pass (two tight loops in small functions compile better than one fused loop with
      // eight columns); width ≤ 2 (a decode token of a top-1/top-2 model) is added inside the
      // scan (one pass). The counts are integers, so D_n is the same exact integer whatever
      // the grouping. Packed: every pass covers two entries per double.
      const w = this.packed ? (n + 1) >> 1 : n;
      let done = 0;
      while (nnz - done > 8) {
        const c = done;
        if (nnz - done >= 16) {
          // prettier-ignore
          addColumns8(
            dots,
            cols,
            w,
            (cb + nzE[c]!) * colStride,
            (cb + nzE[c + 1]!) * colStride,
            (cb + nzE[c + 2]!) * colStride,
            (cb + nzE[c + 3]!) * colStride,
            (cb + nzE[c + 4]!) * colStride,
            (cb + nzE[c + 5]!) * colStride,
            (cb + nzE[c + 6]!) * colStride,
            (cb + nzE[c + 7]!) * colStride,
            nzC[c]!,
            nzC[c + 1]!,
            nzC[c + 2]!,
            nzC[c + 3]!,
            nzC[c + 4]!,
            nzC[c + 5]!,
            nzC[c + 6]!,
            nzC[c + 7]!,
          );
          done += 8;
        } else {
          // prettier-ignore
          addColumns4(
            dots,
            cols,
            w,
            (cb + nzE[c]!) * colStride,
            (cb + nzE[c + 1]!) * colStride,
            (cb + nzE[c + 2]!) * colStride,
            (cb + nzE[c + 3]!) * colStride,
            nzC[c]!,
            nzC[c + 1]!,
            nzC[c + 2]!,
            nzC[c + 3]!,
          );
          done += 4;
        }
      }
      if (this.packed) {
        // The last ≤ 8: up to four in one pass, then the last ≤ 4 (two for a decode token of a
        // top-1/top-2 model) inside the scan. Missing columns have coefficient 0 and read the
        // first column (+ 0 is exact).
        const pre = nnz - done > 4 ? nnz - done - 4 : 0;
        if (pre > 0) {
          const p0 = (cb + nzE[done]!) * colStride;
          const p1 = pre > 1 ? (cb + nzE[done + 1]!) * colStride : p0;
          const p2 = pre > 2 ? (cb + nzE[done + 2]!) * colStride : p0;
          const p3 = pre > 3 ? (cb + nzE[done + 3]!) * colStride : p0;
          addColumns4(
            dots,
            cols,
            w,
            p0,
            p1,
            p2,
            p3,
            nzC[done]!,
            pre > 1 ? nzC[done + 1]! : 0,
            pre > 2 ? nzC[done + 2]! : 0,
            pre > 3 ? nzC[done + 3]! : 0,
          );
          done += pre;
        }
        const left = nnz - done;
        const k0 = left > 0 ? nzC[done]! : 0;
        const k1 = left > 1 ? nzC[done + 1]! : 0;
        const k2 = left > 2 ? nzC[done + 2]! : 0;
        const k3 = left > 3 ? nzC[done + 3]! : 0;
        const q0 = left > 0 ? (cb + nzE[done]!) * colStride : 0;
        const q1 = left > 1 ? (cb + nzE[done + 1]!) * colStride : q0;
        const q2 = left > 2 ? (cb + nzE[done + 2]!) * colStride : q0;
        const q3 = left > 3 ? (cb + nzE[done + 3]!) * colStride : q0;
        // prettier-ignore
        count =
          left <= 2
            ? scanPacked2(dots, qArr, rArr, qOff, n, this.topMatches, this.top, this.topScore, cols, k0, k1, q0, q1)
            : scanPacked4(
                dots,
                qArr,
                rArr,
                qOff,
                n,
                this.topMatches,
                this.top,
                this.topScore,
                cols,
                k0,
                k1,
                k2,
                k3,
                q0,
                q1,
                q2,
                q3,
              );
      } else {
        const left = nnz - done;
        const width = left === 0 ? 0 : left <= 2 ? 2 : left <= 4 ? 4 : 8;
        const c0 = left > 0 ? nzC[done]! : 0;
        const c1 = left > 1 ? nzC[done + 1]! : 0;
        const c2 = left > 2 ? nzC[done + 2]! : 0;
        const c3 = left > 3 ? nzC[done + 3]! : 0;
        const c4 = left > 4 ? nzC[done + 4]! : 0;
        const c5 = left > 5 ? nzC[done + 5]! : 0;
        const c6 = left > 6 ? nzC[done + 6]! : 0;
        const c7 = left > 7 ? nzC[done + 7]! : 0;
        const o0 = left > 0 ? (cb + nzE[done]!) * colStride : 0;
        const o1 = left > 1 ? (cb + nzE[done + 1]!) * colStride : o0;
        const o2 = left > 2 ? (cb + nzE[done + 2]!) * colStride : o0;
        const o3 = left > 3 ? (cb + nzE[done + 3]!) * colStride : o0;
        const o4 = left > 4 ? (cb + nzE[done + 4]!) * colStride : o0;
        const o5 = left > 5 ? (cb + nzE[done + 5]!) * colStride : o0;
        const o6 = left > 6 ? (cb + nzE[done + 6]!) * colStride : o0;
        const o7 = left > 7 ? (cb + nzE[done + 7]!) * colStride : o0;
        if (width === 4) addColumns4(dots, cols, w, o0, o1, o2, o3, c0, c1, c2, c3);
        else if (width === 8)
          addColumns8(dots, cols, w, o0, o1, o2, o3, o4, o5, o6, o7, c0, c1, c2, c3, c4, c5, c6, c7);
        const a0 = width === 2 ? c0 : 0;
        const a1 = width === 2 ? c1 : 0;
        count = selectTop(dots, qArr, qOff, n, this.topMatches, this.top, this.topScore, cols, a0, a1, o0, o1);
      }
    }
    const score = this.topScore;
    this.topCount = count;
    // Scores were kept without Q_cur; turn them into similarities.
    const qc = Math.sqrt(this.qCur);
    for (let j = 0; j < count; j++) score[j] = score[j]! / qc;
  }

  /**
   * Adds this match's dot products (the rows seen so far, exact integers) to `into`
   * (`EamcDots.addIteration`); poisons it when they are not exact (non-integer rows or a
   * collection gone plain).
   */
  exportDots(into: EamcDots): void {
    const coll = this.coll;
    if (!coll || !this.exact) into.poison();
    else if (this.wasm) {
      // D lives in the collection's memory: gone if it was replaced since (never, in the policy).
      if (this.blockColl !== coll || this.blockGen !== coll.wGen) into.poison();
      else
        into.addIteration(
          coll,
          this.version,
          this.n,
          coll.wi32.subarray(this.block >> 2, (this.block >> 2) + this.n),
          false,
          this.seen,
          this.l1,
        );
    } else into.addIteration(coll, this.version, this.n, this.dots, this.packed, this.seen, this.l1);
  }

  /** Current similarity of entry `n` (over the rows seen so far). */
  similarity(n: number): number {
    const coll = this.coll;
    if (!coll || this.rowsSeen === 0) return 0;
    const qn = this.ordered ? coll.internals.prefixNorm2[(this.rowsSeen - 1) * coll.stride + n]! : this.norms[n]!;
    let d: number;
    if (this.wasm) d = coll.wi32[(this.block >> 2) + n]!;
    else if (this.packed) {
      const p = this.dots[n >> 1]!;
      const hi = Math.floor(p * INV_LANE);
      d = (n & 1) === 1 ? hi : p - hi * LANE;
    } else d = this.dots[n]!;
    const q = this.qCur * qn;
    return q > 0 ? d / Math.sqrt(q) : 0;
  }
}

/** Unpacks `half` doubles of two lanes (count(2m) + count(2m+1)·2^26) into `out[0 … size)`, from the last pair down. */
function unpackPairs(packed: Float64Array, half: number, size: number, out: Float64Array): void {
  for (let m = half - 1; m >= 0; m--) {
    const p = packed[m]!;
    const hi = Math.floor(p * INV_LANE);
    if (2 * m + 1 < size) out[2 * m + 1] = hi;
    out[2 * m] = p - hi * LANE;
  }
}

/** D += Σ_t v_t · column at offset `offs[t]`, over `n` doubles: eight, then four, then one column per pass. */
function addColumns(
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
function addPackedColumn(out: Float64Array, cols: Float64Array, n: number, off: number, c: number): void {
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
function addColumns4(
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

function addColumns8(
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

/**
 * After D_n += c0·column o0 + c1·column o1 (both 0 for none), the best `M` entries by
 * D_n / sqrt(Q_n) (D_n > 0) into `top` / `score`, best first, ties to the lower index; returns
 * how many. Rejects an entry by D_n² ≤ floor²·Q_n (with a relative margin) before taking a
 * square root.
 */
// prettier-ignore
function selectTop(
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
function scanPacked2(
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
function scanPacked4(
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
