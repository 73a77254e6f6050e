/**
 * The EAMC's WASM backend (`EamcColumns`, see `eamc-columns.ts`): the column-major copy as u8
 * counts in a WebAssembly memory of the collection's own, added by the SIMD kernels of
 * `assembly/eamc.ts` (loaded by `eamc-wasm.ts`). Column j holds every entry's count, padded to a
 * multiple of 16 entries with zeros (L·E bytes per entry, an eighth of the packed doubles). A
 * count above 254 is stored as 255 and its excess (count − 255) kept aside per column (`over`,
 * entry → excess), added after each kernel pass: exact. The prefix norms and their Float32
 * 1/sqrt live in the same memory (the scan reads them), and each matcher keeps its D_n as i32 in
 * a block of it (`acquireBlock`). The kernels' i32 sums are exact while ‖x‖² · max‖entry‖² ≤
 * `WASM_LIMIT` (checked by the callers); past it, `addColumnPlain` adds one column at a time in
 * doubles, as the packed JS backend does.
 *
 * Layout (byte offsets): the kernels' fixed result region below `WASM_RESERVED`, the columns at
 * `colsOff` (column j at colsOff + j·cs, cs = alloc rounded up to 16, zero past `size`), prefix
 * norms (f64) at `qOff`, their 1/sqrt (f32) at `rOff`, an i32 scratch of cs entries at `sOff`
 * (replacement's dot products), then the matchers' blocks (D as i32, and Q_n / 1/sqrt(Q_n) for
 * rows out of order). Views are refreshed whenever the memory grows; `gen` changes whenever it
 * is replaced (storage growth), which frees every block.
 */
import type { DotGuard, EamcColumns } from './eamc-columns.ts';
import { align16, MAX_PAIR, WASM_LIMIT } from './eamc-js-kernels.ts';
import {
  type EamcKernels,
  instantiateEamcKernels,
  newWasmMemory,
  WASM_RESERVED,
  type WasmMemory,
  type WasmModule,
} from './eamc-wasm.ts';

export class WasmColumns implements EamcColumns {
  readonly kind = 'wasm' as const;
  private memory: WasmMemory | null = null;
  /** The kernels over `memory`. */
  k: EamcKernels | null = null;
  u8 = new Uint8Array(0);
  /** The columns' part of `u8`. */
  cols8 = new Uint8Array(0);
  /** Per column, the entries whose count there is above 254, and the excess (count − 255). */
  private over: (Map<number, number> | undefined)[] = [];
  i32 = new Int32Array(0);
  f64 = new Float64Array(0);
  f32 = new Float32Array(0);
  cs = 0;
  colsOff = 0;
  qOff = 0;
  rOff = 0;
  private sOff = 0;
  private blocksOff = 0;
  private blockBytes = 0;
  private alloc = 0;
  /** Memory generation: a block of an older one is gone. */
  gen = 0;
  private blockCount = 0;
  private freeBlocks: number[] = [];
  prefixNorm2 = new Float64Array(0);
  prefixInvSqrt = new Float32Array(1);

  constructor(
    private readonly module: WasmModule,
    private readonly cells: number,
    private readonly layers: number,
  ) {}

  /**
   * A copy of this backend's whole state in a memory of its own (same size and layout, same
   * bytes; the overflow maps copied): a collection's warm-up shared by several runs.
   */
  clone(): WasmColumns {
    const c = new WasmColumns(this.module, this.cells, this.layers);
    if (this.memory) {
      const bytes = this.memory.buffer.byteLength;
      c.memory = newWasmMemory(bytes / 65536);
      new Uint8Array(c.memory.buffer).set(new Uint8Array(this.memory.buffer));
      c.k = instantiateEamcKernels(this.module, c.memory);
    }
    c.over = this.over.map((m) => (m ? new Map(m) : undefined));
    c.cs = this.cs;
    c.colsOff = this.colsOff;
    c.qOff = this.qOff;
    c.rOff = this.rOff;
    c.sOff = this.sOff;
    c.blocksOff = this.blocksOff;
    c.blockBytes = this.blockBytes;
    c.alloc = this.alloc;
    c.gen = this.gen;
    c.blockCount = this.blockCount;
    c.freeBlocks = this.freeBlocks.slice();
    if (c.memory) c.refreshViews();
    return c;
  }

  /** The memory is laid out (a matcher can use the kernels). */
  get ready(): boolean {
    return this.memory !== null;
  }

  get columnStride(): number {
    return this.cs;
  }

  /** Whether `alloc` entries would overflow a 32-bit memory (keeping 0.5 GiB spare for the matchers' blocks). */
  static tooLarge(cells: number, layers: number, alloc: number): boolean {
    return WASM_RESERVED + cells * alloc + layers * alloc * 16 + alloc * 64 > 3.5 * 2 ** 30;
  }

  /** Refreshes the views over the memory (after it grew or was replaced). */
  private refreshViews(): void {
    const buf = this.memory!.buffer;
    this.u8 = new Uint8Array(buf);
    this.i32 = new Int32Array(buf);
    this.f64 = new Float64Array(buf);
    this.f32 = new Float32Array(buf);
    const q = this.qOff >> 3;
    const r = this.rOff >> 2;
    this.cols8 = this.u8.subarray(this.colsOff, this.colsOff + this.cells * this.cs);
    this.prefixNorm2 = this.f64.subarray(q, q + this.layers * this.alloc);
    this.prefixInvSqrt = this.f32.subarray(r, r + this.layers * this.alloc + 1);
  }

  /**
   * Lays the storage out for `alloc` entries in a new memory, copying the `size` entries stored
   * (columns, prefix norms) from the old one; frees every matcher block.
   */
  resize(alloc: number, size: number): void {
    const { cells, layers } = this;
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
      const oc = this.colsOff;
      for (let j = 0; j < cells; j++)
        u8.set(this.u8.subarray(oc + j * this.cs, oc + j * this.cs + size), colsOff + j * cs);
      for (let l = 0; l < layers; l++) {
        f64.set(this.prefixNorm2.subarray(l * this.alloc, l * this.alloc + size), (qOff >> 3) + l * alloc);
        f32.set(this.prefixInvSqrt.subarray(l * this.alloc, l * this.alloc + size), (rOff >> 2) + l * alloc);
      }
    }
    if (this.over.length !== cells) this.over = new Array<Map<number, number> | undefined>(cells);
    this.memory = memory;
    this.k = instantiateEamcKernels(this.module, memory);
    this.cs = cs;
    this.colsOff = colsOff;
    this.qOff = qOff;
    this.rOff = rOff;
    this.sOff = sOff;
    this.blocksOff = blocksOff;
    this.blockBytes = blockBytes;
    this.gen++;
    this.blockCount = 0;
    this.freeBlocks = [];
    this.alloc = alloc;
    this.refreshViews();
  }

  /** A matcher block (byte offset) of this memory generation: D (i32, cs), then Q_n (f64) and 1/sqrt(Q_n) (f32) for `alloc` entries. */
  acquireBlock(): number {
    const b = this.freeBlocks.pop() ?? this.blockCount++;
    const end = this.blocksOff + (b + 1) * this.blockBytes;
    const mem = this.memory!;
    if (end > mem.buffer.byteLength) {
      mem.grow(Math.ceil((end - mem.buffer.byteLength) / 65536));
      this.refreshViews();
    }
    return this.blocksOff + b * this.blockBytes;
  }

  /** Returns a block of generation `gen` (ignored if the memory was replaced since). */
  releaseBlock(block: number, gen: number): void {
    if (gen === this.gen) this.freeBlocks.push((block - this.blocksOff) / this.blockBytes);
  }

  /** Byte offsets of a block's Q_n (f64) and 1/sqrt(Q_n) (f32) arrays. */
  blockNorms(block: number): { q: number; r: number } {
    const q = block + align16(this.cs * 4);
    return { q, r: q + align16(this.alloc * 8) };
  }

  set(j: number, n: number, old: number, v: number): void {
    const over = this.over;
    this.u8[this.colsOff + j * this.cs + n] = Math.min(v, 255);
    if (old > 254) over[j]!.delete(n);
    if (v > 254) (over[j] ??= new Map()).set(n, v - 255);
  }

  /**
   * Adds Σ_t vals[t] · column `cellBase + cellsList[t]`, t ∈ [from, to), to the i32 array at byte
   * offset `d` (entries 0 … 16·blocks−1), eight columns per pass: the stored bytes only (a count
   * above 254 counts 255; see `addOverflow`). The caller guarantees no overflow.
   */
  addColumns(
    d: number,
    blocks: number,
    cellsList: ArrayLike<number>,
    vals: ArrayLike<number>,
    from: number,
    to: number,
    cellBase = 0,
  ): void {
    const k = this.k!;
    const base = this.colsOff + cellBase * this.cs;
    const stride = this.cs;
    for (let t = from; t < to; t += 8) {
      const w = Math.min(8, to - t);
      const o0 = base + cellsList[t]! * stride;
      let small = true;
      for (let u = t; u < t + w; u++) if (vals[u]! > MAX_PAIR) small = false;
      // Missing columns have coefficient 0 and read column o0 (+ 0 is exact).
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

  /**
   * Adds the excess of the counts above 254 (stored as 255) of column `j`, times `c`, to the
   * i32 array at byte offset `d` (entries below `n`): after `addColumns`, exact.
   */
  addOverflow(d: number, n: number, j: number, c: number): void {
    const over = this.over[j];
    if (!over) return;
    const i32 = this.i32;
    const d4 = d >> 2;
    for (const [e, x] of over) if (e < n) i32[d4 + e]! += c * x;
  }

  /** Plain D_i += c · count of entry i in column `j`, for i < n: one multiply-add per entry. */
  addColumnPlain(out: Float64Array, n: number, j: number, c: number): void {
    const u8 = this.u8;
    const off = this.colsOff + j * this.cs;
    for (let i = 0; i < n; i++) {
      const v = u8[off + i]!;
      out[i]! += c * (v === 255 ? this.count(j, i) : v);
    }
  }

  count(j: number, n: number): number {
    const v = this.u8[this.colsOff + j * this.cs + n]!;
    return v === 255 ? 255 + (this.over[j]?.get(n) ?? 0) : v;
  }

  /**
   * With the i32 kernels when the guard allows (every coefficient an integer ≤ 65535 and
   * ‖x‖² · max‖entry‖² ≤ WASM_LIMIT), else one column at a time in doubles (as the packed JS
   * backend's fallback: the same additions in the same order).
   */
  dots(
    src: Float64Array | null,
    cellsList: readonly number[],
    vals: readonly number[],
    guard: DotGuard,
    size: number,
    out: Float64Array,
  ): void {
    if (size === 0) return;
    if (guard.fits && guard.bound <= WASM_LIMIT) {
      const s4 = this.sOff >> 2;
      const i32 = this.i32;
      const blocks = (size + 15) >> 4;
      i32.fill(0, s4, s4 + 16 * blocks);
      if (src) for (let n = 0; n < size; n++) i32[s4 + n] = src[n]!;
      this.addColumns(this.sOff, blocks, cellsList, vals, 0, cellsList.length);
      for (let t = 0; t < cellsList.length; t++) this.addOverflow(this.sOff, size, cellsList[t]!, vals[t]!);
      const r = this.i32;
      for (let n = 0; n < size; n++) out[n] = r[s4 + n]!;
    } else {
      if (src) out.set(src.subarray(0, size));
      else out.fill(0, 0, size);
      for (let t = 0; t < cellsList.length; t++) this.addColumnPlain(out, size, cellsList[t]!, vals[t]!);
    }
  }
}
