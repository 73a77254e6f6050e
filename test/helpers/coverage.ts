/**
 * Coverage of property tests, counted the way `fc.statistics` counts: over the worlds a property
 * ran, the share in which each guarded behaviour actually OCCURRED during the simulated run
 * (seen through a trace sink or a run's public outcome, never merely configured). A property
 * asserts its shares, so a generator change that stops reaching what an invariant guards fails
 * instead of passing vacuously, and prints them (`coverage <property>: ...`).
 *
 * `ServingCoverage` is the trace sink that observes the serving executor's behaviours.
 *
 * Not a test file (no `.test.ts`).
 */
import { expect } from 'vitest';
import type { KernelRecord, MemoryRecord, TraceSink, TransferRecord } from '../../sim/observe/trace-sink.ts';

/** The share every guarded behaviour must reach (the honesty requirement: "at least 25 % of the worlds"). */
export const MIN_SHARE = 0.25;

/**
 * Whether the properties explore new random worlds (no `MOESIM_FC_SEED`, see
 * test/setup/fast-check-seed.ts). A fixed seed (CI) decides the same every time, and its
 * observed shares are held to `min` exactly. Random worlds are a sample: a behaviour whose true
 * share is 30 % shows below 25 % in a quarter of 25-world runs. There a share below `min` fails
 * only when it must have occurred at all and did not, or when so few occurrences would be
 * improbable (`NOISE_P`) were its true share `min` (a binomial lower tail).
 */
const RANDOM_WORLDS = !process.env.MOESIM_FC_SEED;
/** The lower-tail probability below which a random-worlds share is judged too low. */
const NOISE_P = 0.001;

/** P(X ≤ k) for X ~ Binomial(n, p), summed in log space (no underflow for large n). */
export function binomialLowerTail(k: number, n: number, p: number): number {
  if (k >= n || p <= 0) return 1;
  if (k < 0) return 0;
  if (p >= 1) return 0;
  const lp = Math.log(p);
  const lq = Math.log(1 - p);
  // log C(n, i) p^i q^(n−i), term by term from i = 0.
  let logTerm = n * lq;
  let max = logTerm;
  const logs: number[] = [logTerm];
  for (let i = 0; i < k; i++) {
    logTerm += Math.log((n - i) / (i + 1)) + lp - lq;
    logs.push(logTerm);
    if (logTerm > max) max = logTerm;
  }
  let sum = 0;
  for (const l of logs) sum += Math.exp(l - max);
  return Math.min(1, Math.exp(max) * sum);
}

export class CoverageTally {
  private worlds = 0;
  private readonly hits = new Map<string, number>();

  constructor(
    readonly property: string,
    keys: readonly string[],
  ) {
    for (const k of keys) this.hits.set(k, 0);
  }

  /** One world that ran: which behaviours occurred in it. Unknown keys are an error (typos). */
  record(occurred: Readonly<Record<string, boolean>>): void {
    this.worlds++;
    for (const [k, v] of Object.entries(occurred)) {
      const n = this.hits.get(k);
      if (n === undefined) throw new Error(`coverage ${this.property}: unknown behaviour '${k}'`);
      if (v) this.hits.set(k, n + 1);
    }
  }

  get count(): number {
    return this.worlds;
  }

  share(key: string): number {
    return this.worlds === 0 ? 0 : (this.hits.get(key) ?? 0) / this.worlds;
  }

  /** One line: `coverage <property>: <n> worlds; prefetch 41 % (33), ...`. */
  line(): string {
    const parts = [...this.hits].map(([k, n]) => `${k} ${Math.round((100 * n) / Math.max(1, this.worlds))} % (${n})`);
    return `coverage ${this.property}: ${this.worlds} worlds; ${parts.join(', ')}`;
  }

  /**
   * Prints the shares, then asserts each of `keys` (default: all) occurred in ≥ `min` of the
   * worlds — with random worlds, in at least one and in a share consistent with `min` (see
   * `RANDOM_WORLDS`).
   */
  check(min = MIN_SHARE, keys: readonly string[] = [...this.hits.keys()]): void {
    console.log(this.line());
    expect(this.worlds, `coverage ${this.property}: no world ran`).toBeGreaterThan(0);
    for (const k of keys) {
      const message = `coverage ${this.property}: '${k}' occurred in too few worlds (${this.line()})`;
      const hits = this.hits.get(k) ?? 0;
      if (RANDOM_WORLDS && this.share(k) < min) {
        expect(hits, message).toBeGreaterThan(0);
        expect(
          binomialLowerTail(hits, this.worlds, min),
          `${message}; improbable at a true share of ${min}`,
        ).toBeGreaterThanOrEqual(NOISE_P);
      } else expect(this.share(k), message).toBeGreaterThanOrEqual(min);
    }
  }
}

/** Behaviours of a serving run that the serving invariants guard. */
export const SERVING_BEHAVIOURS = [
  'prefetch',
  'cancel',
  'cancelMidway',
  'eviction',
  'split',
  'encoderDecoder',
] as const;
export type ServingBehaviour = (typeof SERVING_BEHAVIOURS)[number];

/**
 * A trace sink that notes which serving behaviours occurred:
 * - prefetch: an H2D expert transfer of category `expert-prefetch` was reported;
 * - cancel: an H2D transfer was reported cancelled; cancelMidway: one had sent some bytes;
 * - eviction (under memory pressure): the expert cache was full (≥ slots × bytes per expert in
 *   category `expertCache`), a resident expert left it, and its space was taken again at the same
 *   instant, i.e. an expert was evicted to make room for another;
 * - split (MoEpic's split experts): a transfer or kernel of a top or bottom segment;
 * - encoderDecoder: a cross-attention kernel ran (the decoder attending to encoder states).
 * Call `finish(slots, bytesPerExpert)` after the run.
 */
export class ServingCoverage implements TraceSink {
  private readonly seen = new Set<ServingBehaviour>();
  /** expertCache levels in record order, with their times. */
  private readonly cacheLevels: number[] = [];
  private readonly cacheTimes: number[] = [];
  /** Indices into cacheLevels at which a resident expert was reported released. */
  private readonly releases: number[] = [];

  onTransfer(r: TransferRecord): void {
    if (r.category === 'expert-prefetch') this.seen.add('prefetch');
    if (r.outcome === 'cancelled') {
      this.seen.add('cancel');
      if (r.sentBytes > 0) this.seen.add('cancelMidway');
    }
    if (SEGMENT.test(r.label)) this.seen.add('split');
  }

  onKernel(r: KernelRecord): void {
    if (SEGMENT.test(r.label)) this.seen.add('split');
    if (r.label.endsWith('cross-attention')) this.seen.add('encoderDecoder');
  }

  onMemory(r: MemoryRecord): void {
    if (r.category !== 'expertCache') return;
    this.cacheLevels.push(r.categoryUsedBytes);
    this.cacheTimes.push(r.timeNs);
  }

  onExpertResidency(_key: number, resident: boolean): void {
    if (!resident) this.releases.push(this.cacheLevels.length - 1);
  }

  /** Which behaviours occurred; `slots` expert slots of `bytesPerExpert` (the outcome's `slots`). */
  finish(slots: number, bytesPerExpert: number): Record<ServingBehaviour, boolean> {
    const full = slots * bytesPerExpert;
    const L = this.cacheLevels;
    for (const i of this.releases) {
      // i: the record of the release (a decrease); i − 1 the level before it; i + 1 the next allocation.
      if (i < 1 || i + 1 >= L.length) continue;
      if (
        L[i - 1]! >= full &&
        L[i]! < L[i - 1]! &&
        L[i + 1]! > L[i]! &&
        this.cacheTimes[i + 1] === this.cacheTimes[i]
      ) {
        this.seen.add('eviction');
        break;
      }
    }
    const out = {} as Record<ServingBehaviour, boolean>;
    for (const b of SERVING_BEHAVIOURS) out[b] = this.seen.has(b);
    return out;
  }
}

const SEGMENT = /^expert M\d+E\d+ (top|bottom)\b/;
