/**
 * EAMC insertion from accumulated dot products (policies/moe-infinity/eam-collection.ts,
 * `EamcDots`, `IncrementalMatcher.exportDots`, `EamCollection.similaritiesFromHint`): a request
 * EAM matched over one or several iterations (each a matcher fed some rows, in any order, its
 * dot products exported into one hint), with insertions and replacements between the
 * iterations and before the request's own insertion (stale entries, growth), and rows the
 * matchers never saw. Properties, on random integer EAMs with duplicates (exact ties):
 * - whenever the hint is used, the similarities equal `similarities` (the column passes) and the
 *   brute-force cosine bit for bit, and the entry replaced equals the one chosen without a hint;
 * - a hint is refused (never wrong) for mismatched rows across iterations, non-integer rows,
 *   or a collection gone plain; huge counts (past the packing limit) stay exact.
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { EamCollection, EamcDots, IncrementalMatcher } from '../../policies/moe-infinity/eam-collection.ts';

const eamArb = (cells: number, maxCount: number) =>
  fc
    .array(
      fc.oneof(
        { weight: 3, arbitrary: fc.constant(0) },
        { weight: 2, arbitrary: fc.integer({ min: 1, max: maxCount }) },
      ),
      { minLength: cells, maxLength: cells },
    )
    .map((a) => Float64Array.from(a));

const caseArb = (maxCount: number) =>
  fc
    .record({
      L: fc.integer({ min: 1, max: 4 }),
      E: fc.oneof(fc.integer({ min: 1, max: 7 }), fc.integer({ min: 8, max: 20 })),
      capacity: fc.oneof(fc.integer({ min: 1, max: 13 }), fc.integer({ min: 17, max: 36 })),
      M: fc.integer({ min: 1, max: 4 }),
    })
    .chain(({ L, E, capacity, M }) => {
      const cells = L * E;
      return fc.record({
        L: fc.constant(L),
        E: fc.constant(E),
        capacity: fc.constant(capacity),
        M: fc.constant(M),
        pool: fc.array(eamArb(cells, maxCount), { minLength: 1, maxLength: 5 }),
        picks: fc.array(fc.nat(), { minLength: 1, maxLength: 45 }),
        // Iterations of the request: its rows per iteration, and entries inserted after each.
        iterations: fc.array(
          fc.record({ rows: eamArb(cells, maxCount), after: fc.array(fc.nat(), { maxLength: 4 }) }),
          { minLength: 1, maxLength: 3 },
        ),
        order: fc.shuffledSubarray(
          Array.from({ length: L }, (_, l) => l),
          { minLength: 0 },
        ),
        shuffleEach: fc.boolean(),
        extra: eamArb(cells, maxCount),
      });
    });

function brute(c: EamCollection, x: Float64Array): number[] {
  const E = c.experts;
  const cells = c.layers * E;
  let nx = 0;
  for (let j = 0; j < cells; j++) nx += x[j]! * x[j]!;
  const out: number[] = [];
  for (let n = 0; n < c.size; n++) {
    const s = c.entry(n);
    let d = 0;
    let ns = 0;
    for (let j = 0; j < cells; j++) {
      d += x[j]! * s[j]!;
      ns += s[j]! * s[j]!;
    }
    const q = nx * ns;
    out.push(q > 0 ? d / Math.sqrt(q) : 0);
  }
  return out;
}

/** Builds the collection, runs the request's iterations (matchers exporting into a hint), returns the request EAM. */
function scenario(
  k: {
    L: number;
    E: number;
    capacity: number;
    M: number;
    pool: Float64Array[];
    picks: number[];
    iterations: { rows: Float64Array; after: number[] }[];
    order: number[];
    shuffleEach: boolean;
    extra: Float64Array;
  },
  scale = 1,
  kernel: 'js' | 'wasm' = 'wasm',
): { c: EamCollection; twin: EamCollection; hint: EamcDots; x: Float64Array } {
  const { L, E, capacity, M, pool, picks, iterations, order, extra } = k;
  const shape = { layers: L, experts: E };
  const c = new EamCollection(shape, capacity, 'most-similar', { kernel });
  const twin = new EamCollection(shape, capacity, 'most-similar', { kernel });
  c.hintStaleLimit = 1;
  const both = (x: Float64Array) => {
    expect(c.insert(x)).toBe(twin.insert(x));
  };
  for (const p of picks) both(pool[p % pool.length]!);
  const hint = new EamcDots(shape);
  const x = new Float64Array(L * E);
  const m = new IncrementalMatcher(shape, M);
  iterations.forEach((it, i) => {
    m.reset(c);
    // The same rows every iteration (a later one in another order when `shuffleEach`).
    const rows = k.shuffleEach && i % 2 === 1 ? [...order].reverse() : order;
    for (const l of rows) {
      const row = it.rows.subarray(l * E, (l + 1) * E).map((v) => v * scale);
      m.addRow(l, row);
      for (let e = 0; e < E; e++) x[l * E + e]! += row[e]!;
    }
    m.exportDots(hint);
    for (const p of it.after) both(pool[p % pool.length]!);
  });
  // Rows no matcher saw (the last layer in the policy): any counts.
  const seen = new Set(order);
  for (let l = 0; l < L; l++) if (!seen.has(l)) for (let e = 0; e < E; e++) x[l * E + e] = extra[l * E + e]!;
  return { c, twin, hint, x };
}

// Each property on the JS kernels and on the WASM ones (the JS ones where build/eamc.wasm is absent).
describe.each(['js', 'wasm'] as const)('EAMC insertion from accumulated dot products (%s kernels)', (kernel) => {
  it('similarities and the replaced entry equal the full computation and the brute force, bit for bit', () => {
    let used = 0;
    fc.assert(
      fc.property(caseArb(9), (k) => {
        const { c, twin, hint, x } = scenario(k, 1, kernel);
        if (c.size === 0 || x.every((v) => v === 0)) return;
        const a = new Float64Array(c.size);
        const b = new Float64Array(c.size);
        const ok = c.similaritiesFromHint(x, hint, a);
        expect(ok).toBe(true);
        used++;
        c.similarities(x, b);
        expect([...a]).toEqual([...b]);
        expect([...a]).toEqual(brute(c, x));
        expect(c.insert(x, hint)).toBe(twin.insert(x));
        expect([...c.entry(c.size - 1)]).toEqual([...twin.entry(twin.size - 1)]);
      }),
      { numRuns: 300 },
    );
    expect(used).toBeGreaterThan(100);
  });

  it('huge counts (past the packing limit) stay exact', () => {
    let plain = 0;
    fc.assert(
      fc.property(caseArb(2 ** 20), (k) => {
        const { c, twin, hint, x } = scenario(k, 1, kernel);
        if (c.size === 0 || x.every((v) => v === 0)) return;
        const a = new Float64Array(c.size);
        if (c.similaritiesFromHint(x, hint, a)) {
          expect([...a]).toEqual(brute(c, x));
          if (!hint.packed) plain++;
        }
        expect(c.insert(x, hint)).toBe(twin.insert(x));
      }),
      { numRuns: 200 },
    );
    // Some hints went plain (lanes could carry) and were still used.
    expect(plain).toBeGreaterThan(0);
  });

  it('is refused for non-integer rows, rows that differ across iterations, another collection, or a collection gone plain', () => {
    fc.assert(
      fc.property(caseArb(9), (k) => {
        const { c, hint, x } = scenario(k, 0.5, kernel);
        const a = new Float64Array(Math.max(1, c.size));
        if (
          k.order.some((l) =>
            k.iterations.some((it) => it.rows.subarray(l * k.E, (l + 1) * k.E).some((v) => v % 2 === 1)),
          )
        ) {
          expect(c.similaritiesFromHint(x, hint, a)).toBe(false);
        }
      }),
      { numRuns: 100 },
    );
    const shape = { layers: 2, experts: 2 };
    const c = new EamCollection(shape, 4, 'most-similar', { kernel });
    c.hintStaleLimit = 1;
    c.insert(Float64Array.of(1, 2, 3, 4));
    c.insert(Float64Array.of(4, 0, 1, 1));
    const m = new IncrementalMatcher(shape, 2);
    const h = new EamcDots(shape);
    m.reset(c);
    m.addRow(0, Float64Array.of(1, 1));
    m.exportDots(h);
    m.reset(c);
    m.addRow(1, Float64Array.of(1, 1));
    m.exportDots(h); // other rows than the first iteration
    expect(h.valid).toBe(false);
    expect(c.similaritiesFromHint(Float64Array.of(1, 1, 1, 1), h, new Float64Array(2))).toBe(false);
    const h2 = new EamcDots(shape);
    m.reset(c);
    m.addRow(0, Float64Array.of(2, 1));
    m.exportDots(h2);
    const other = new EamCollection(shape, 4, 'most-similar', { kernel });
    other.insert(Float64Array.of(1, 2, 3, 4));
    expect(other.similaritiesFromHint(Float64Array.of(2, 1, 0, 0), h2, new Float64Array(2))).toBe(false);
    expect(c.similaritiesFromHint(Float64Array.of(2, 1, 0, 0), h2, new Float64Array(2))).toBe(true);
    c.insert(Float64Array.of(0.5, 0, 0, 0)); // goes plain
    expect(c.lanes).toBe(1);
    expect(c.similaritiesFromHint(Float64Array.of(2, 1, 0, 0), h2, new Float64Array(3))).toBe(false);
  });
});
