/**
 * The EAMC's WebAssembly SIMD kernels (`assembly/eamc.ts`, built to `build/eamc.wasm` by
 * `npm ci` / `npm run prepare`; see the header of `eam-collection.ts`), loaded synchronously
 * once per process. Each collection instantiates the module over a memory of its own (imported,
 * grown by the JS side).
 *
 * Where the binary is absent (a checkout copied without its build, as CI's second run does)
 * the collections use the JS kernels: the same decisions, bit for bit, only slower.
 * `MOESIM_EAMC_KERNEL=js` forces the JS kernels (for the bench's comparison).
 */
import { readFileSync } from 'node:fs';

// The few WebAssembly JS API types used here (the project's `lib` does not declare them).
/** A compiled module. */
export type WasmModule = { readonly __wasmModule?: never };
/** A linear memory (its `buffer` is replaced, and every view over it detached, when it grows). */
export interface WasmMemory {
  readonly buffer: ArrayBuffer;
  grow(pages: number): number;
}
declare const WebAssembly: {
  Module: new (bytes: Uint8Array) => WasmModule;
  Instance: new (module: WasmModule, imports: object) => { readonly exports: unknown };
  Memory: new (descriptor: { initial: number }) => WasmMemory;
};

/**
 * The columns a kernel adds: their byte offsets o0 … o7 (u8) and coefficients c0 … c7, the first
 * k of them used (the others: coefficient 0).
 */
type Columns = [
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
];

/** A column kernel's arguments: D (i32 at byte offset `d`, entries 0 … 16·blocks − 1), k ≤ 8, then the columns. */
type ColumnKernel = (d: number, blocks: number, k: number, ...columns: Columns) => void;

export interface EamcKernels {
  /** D[i] += Σ_{t<k} c_t · column_t[i], i < 16·blocks (byte offsets; u8 columns, i32 D; k ≤ 8, c_t ≤ 65535). */
  addColumns: ColumnKernel;
  /** `addColumns` with every coefficient ≤ 32767 (two columns per multiply-add). */
  addPairs: ColumnKernel;
  /**
   * D += Σ_{t<k} c_t · column_t (k ≤ 8, every c_t ≤ 32767), then the best M entries into the
   * result region; returns how many. `seeds`: seed entries at WASM_RES_SEED, M of them (else 0),
   * distinct, below n (see assembly/eamc.ts).
   */
  scan(
    d: number,
    n: number,
    M: number,
    q: number,
    r: number,
    k: number,
    ...columnsAndSeeds: [...Columns, seeds: number]
  ): number;
}

/** Bytes below which the JS side places nothing (the kernels' fixed result region lives there). */
export const WASM_RESERVED = 65536;
/** Byte offsets of the last `scan`'s best matches: entry indices (i32), scores (f64); at most 1024. */
export const WASM_RES_TOP = 8192;
export const WASM_RES_SCORE = 12288;
export const WASM_MAX_TOP = 1024;
/** Byte offset of a `scan`'s seed entries (i32, at most 1024), written before the call. */
export const WASM_RES_SEED = 20480;

let compiled: WasmModule | null | undefined;

/** The compiled module, or null where `build/eamc.wasm` is absent or the JS kernels are forced. */
export function eamcWasmModule(): WasmModule | null {
  if (compiled === undefined) {
    compiled = null;
    if (process.env.MOESIM_EAMC_KERNEL !== 'js') {
      let bytes: Buffer | null = null;
      try {
        bytes = readFileSync(new URL('../../build/eamc.wasm', import.meta.url));
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      }
      if (bytes) compiled = new WebAssembly.Module(bytes);
    }
  }
  return compiled;
}

/** The kernels over `memory` (which the caller grows). */
export function instantiateEamcKernels(module: WasmModule, memory: WasmMemory): EamcKernels {
  const instance = new WebAssembly.Instance(module, { env: { memory } });
  return instance.exports as unknown as EamcKernels;
}

/** A new zeroed memory of `pages` 64 KiB pages. */
export function newWasmMemory(pages: number): WasmMemory {
  return new WebAssembly.Memory({ initial: pages });
}
