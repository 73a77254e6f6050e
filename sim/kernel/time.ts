/**
 * Simulated time: an integer number of nanoseconds, carried in a branded `number`.
 *
 * Durations are computed once from bytes and rates (or FLOPs and rates) and rounded *up* to
 * the next nanosecond, so that a positive amount of work never takes zero time. Float seconds
 * are never accumulated: convert at the edges only (config in, metrics out).
 *
 * `Number.MAX_SAFE_INTEGER` ns is about 104 simulated days, far beyond any run.
 */
export type Ns = number & { readonly __unit: 'ns' };

export const ZERO_NS = 0 as Ns;

/** Brands an integer as nanoseconds. Throws RangeError on a negative, fractional or unsafe value. */
export function ns(value: number): Ns {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new RangeError(`time must be a non-negative safe integer of nanoseconds, got ${value}`);
  }
  return value as Ns;
}

/**
 * Rounds a non-negative real number of nanoseconds up to an integer, once.
 * Values within 1e-6 ns of an integer are snapped to it, so that 0.001 s → 1 000 000 ns
 * exactly despite binary floating point.
 */
export function ceilNs(realNs: number): Ns {
  if (!(realNs >= 0) || !Number.isFinite(realNs)) {
    throw new RangeError(`duration must be finite and non-negative, got ${realNs} ns`);
  }
  const r = Math.round(realNs);
  return (Math.abs(realNs - r) < 1e-6 ? r : Math.ceil(realNs)) as Ns;
}

export const secondsToNs = (s: number): Ns => ceilNs(s * 1e9);
export const msToNs = (ms: number): Ns => ceilNs(ms * 1e6);
export const usToNs = (us: number): Ns => ceilNs(us * 1e3);
export const nsToSeconds = (t: number): number => t / 1e9;
export const nsToMs = (t: number): number => t / 1e6;

/** Time to move `bytes` at `bytesPerSec`, rounded up once. Zero bytes take zero time. */
export function bytesToNs(bytes: number, bytesPerSec: number): Ns {
  if (bytes === 0) return ZERO_NS;
  if (!(bytesPerSec > 0)) throw new RangeError(`rate must be positive, got ${bytesPerSec} B/s`);
  return ceilNs((bytes / bytesPerSec) * 1e9);
}

/** Time to execute `flops` at `flopsPerSec`, rounded up once. */
export function flopsToNs(flops: number, flopsPerSec: number): Ns {
  if (flops === 0) return ZERO_NS;
  if (!(flopsPerSec > 0)) throw new RangeError(`rate must be positive, got ${flopsPerSec} FLOP/s`);
  return ceilNs((flops / flopsPerSec) * 1e9);
}

export const addNs = (a: Ns, b: Ns): Ns => (a + b) as Ns;
export const maxNs = (a: Ns, b: Ns): Ns => (a > b ? a : b);
