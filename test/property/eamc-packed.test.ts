/**
 * EAMC packed storage (policies/moe-infinity/eam-collection.ts): two entries' counts per double
 * in the column-major copy, and the matcher's dot products packed the same way while the
 * packing limit holds. Properties, on random integer EAMs with zero rows, duplicates (exact
 * ties), replacement and storage growth (past 16 and 32 entries):
 * - the packed columns decode to exactly the stored counts after any sequence of insertions
 *   and replacements (a lane write never disturbs its neighbour);
 * - `similarities` and `mostSimilar` equal the brute-force cosine computed with the same
 *   floating-point expression (exact integer dot product / sqrt(‖x‖²·‖entry‖²)), bit for bit,
 *   and the replaced entry is the brute-force argmax, ties to the lower index;
 * - the matcher's best matches, their scores and every similarity equal the brute force bit for
 *   bit, rows in any order (rows of 1…24 non-zero cells: every pass width), on the packed
 *   path, after unpacking past the packing limit (huge counts), and (to 1e-12) with
 *   non-integer rows or a collection gone plain.
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { EamCollection, IncrementalMatcher } from '../../policies/moe-infinity/eam-collection.ts';
import { eamcWasmModule } from '../../policies/moe-infinity/eamc-wasm.ts';

/** The kernel a `wasm` collection gets here (`packed` where build/eamc.wasm is absent). */
const wasmKernel = eamcWasmModule() ? 'wasm' : 'packed';

/** Exact integer dot product of rows `rows` of `a` and `b` (E experts per row). */
function dotRows(a: ArrayLike<number>, b: ArrayLike<number>, E: number, rows: readonly number[]): number {
  let d = 0;
  for (const l of rows) for (let e = 0; e < E; e++) d += a[l * E + e]! * b[l * E + e]!;
  return d;
}

const allRows = (L: number) => Array.from({ length: L }, (_, l) => l);

/** EAMs drawn from a small pool (duplicates: exact ties), with zero rows and a given count scale. */
const eamsArb = (L: number, E: number, count: number, maxCount: number) =>
  fc
    .array(
      fc.tuple(
        fc.array(
          fc.oneof(
            { weight: 3, arbitrary: fc.constant(0) },
            { weight: 2, arbitrary: fc.integer({ min: 1, max: maxCount }) },
          ),
          { minLength: L * E, maxLength: L * E },
        ),
        fc.array(fc.boolean(), { minLength: L, maxLength: L }),
      ),
      { minLength: 1, maxLength: 5 },
    )
    .chain((pool) =>
      fc.array(
        fc.integer({ min: 0, max: pool.length - 1 }).map((i) => {
          const [cells, zeroRows] = pool[i]!;
          return Float64Array.from(cells, (v, j) => (zeroRows[Math.floor(j / E)] ? 0 : v));
        }),
        { minLength: 1, maxLength: count, size: 'max' },
      ),
    );

const caseArb = (maxCount: number) =>
  fc
    .record({
      L: fc.integer({ min: 1, max: 4 }),
      E: fc.oneof(fc.integer({ min: 1, max: 7 }), fc.integer({ min: 8, max: 24 })),
      capacity: fc.oneof(fc.integer({ min: 1, max: 13 }), fc.integer({ min: 17, max: 40 })),
      M: fc.integer({ min: 1, max: 5 }),
    })
    .chain(({ L, E, capacity, M }) =>
      fc.record({
        L: fc.constant(L),
        E: fc.constant(E),
        capacity: fc.constant(capacity),
        M: fc.constant(M),
        inserts: eamsArb(L, E, 45, maxCount),
        cur: eamsArb(L, E, 1, maxCount).map((a) => a[0]!),
        order: fc.shuffledSubarray(allRows(L), { minLength: 1 }),
      }),
    );

/** Checks the column copy against the stored entries, whatever its kernel and lane count. */
function checkColumns(c: EamCollection): void {
  const { cols, cols8 } = c.internals;
  const cells = c.layers * c.experts;
  for (let n = 0; n < c.size; n++) {
    const got: number[] = [];
    const bytes: number[] = [];
    for (let j = 0; j < cells; j++) {
      if (c.kernel === 'wasm') {
        // u8 (255 for counts above 254) plus the excess kept aside.
        got.push(c.columnCount(j, n));
        bytes.push(cols8[j * c.columnStride + n]!);
      } else if (c.lanes === 1) got.push(cols[j * c.columnStride + n]!);
      else {
        const p = cols[j * c.columnStride + (n >> 1)]!;
        const hi = Math.floor(p / 2 ** 26);
        got.push((n & 1) === 1 ? hi : p - hi * 2 ** 26);
      }
    }
    const entry = [...c.entry(n)];
    expect(got).toEqual(entry);
    if (c.kernel === 'wasm') expect(bytes).toEqual(entry.map((v) => Math.min(v, 255)));
  }
}

/** Brute-force most-similar entry: same expression, ties to the lower index. */
function bruteMostSimilar(c: EamCollection, x: Float64Array): { sims: number[]; best: number } {
  const rows = allRows(c.layers);
  const nx = dotRows(x, x, c.experts, rows);
  const sims: number[] = [];
  for (let n = 0; n < c.size; n++) {
    const s = c.entry(n);
    const q = nx * dotRows(s, s, c.experts, rows);
    sims.push(q > 0 ? dotRows(x, s, c.experts, rows) / Math.sqrt(q) : 0);
  }
  let best = 0;
  for (let n = 1; n < sims.length; n++) if (sims[n]! > sims[best]!) best = n;
  return { sims, best };
}

/**
 * Runs a matcher over `order` and checks, after every row, the best matches and similarities
 * against the brute force (bit for bit when `exact`).
 */
function checkMatcher(
  coll: EamCollection,
  M: number,
  cur: Float64Array,
  order: readonly number[],
  exact: boolean,
): IncrementalMatcher {
  const E = coll.experts;
  const m = new IncrementalMatcher({ layers: coll.layers, experts: E }, M);
  m.reset(coll);
  const seen: number[] = [];
  for (const l of order) {
    m.addRow(l, cur.subarray(l * E, (l + 1) * E));
    seen.push(l);
    const qCur = dotRows(cur, cur, E, seen);
    const scores: { n: number; s: number }[] = [];
    for (let n = 0; n < coll.size; n++) {
      const s = coll.entry(n);
      const d = dotRows(cur, s, E, seen);
      const qn = dotRows(s, s, E, seen);
      const q = qCur * qn;
      const sim = q > 0 ? d / Math.sqrt(q) : 0;
      if (exact) expect(m.similarity(n)).toBe(sim);
      else expect(Math.abs(m.similarity(n) - sim)).toBeLessThan(1e-12);
      if (d > 0) scores.push({ n, s: d / Math.sqrt(qn) / Math.sqrt(qCur) });
    }
    // Stable sort: equal scores keep the lower index first.
    scores.sort((a, b) => b.s - a.s);
    const want = scores.slice(0, M);
    const got = [...m.top.subarray(0, m.topCount)];
    if (exact) {
      expect(got).toEqual(want.map((w) => w.n));
      expect([...m.topScore.subarray(0, m.topCount)]).toEqual(want.map((w) => w.s));
    } else {
      expect(got.length).toBe(want.length);
      for (let j = 0; j < got.length; j++) expect(Math.abs(m.topScore[j]! - want[j]!.s)).toBeLessThan(1e-12);
    }
  }
  return m;
}

// Each property on the JS kernels (packed doubles) and on the WASM ones (u16 columns, i32 dot
// products; the JS kernels where build/eamc.wasm is absent).
describe.each(['js', 'wasm'] as const)('EAMC packed storage (%s kernels)', (kernel) => {
  it('decodes to the stored counts and picks the brute-force most similar entry for replacement, bit for bit', () => {
    fc.assert(
      fc.property(caseArb(9), ({ L, E, capacity, inserts }) => {
        const c = new EamCollection({ layers: L, experts: E }, capacity, 'most-similar', { kernel });
        const stored: Float64Array[] = [];
        for (const x of inserts) {
          const empty = x.every((v) => v === 0);
          const expected = empty ? -1 : c.size < capacity ? c.size : bruteMostSimilar(c, x).best;
          if (c.size > 0 && !empty) {
            const sims = new Float64Array(c.size);
            c.similarities(x, sims);
            expect([...sims]).toEqual(bruteMostSimilar(c, x).sims);
          }
          const n = c.insert(x);
          expect(n).toBe(expected);
          if (n >= 0) stored[n] = x;
          expect(c.lanes).toBe(2);
          checkColumns(c);
        }
        stored.forEach((x, n) => expect([...c.entry(n)]).toEqual([...x]));
      }),
      { numRuns: 200 },
    );
  });

  it('matcher: packed best matches, scores and similarities equal the brute force bit for bit, rows in any order', () => {
    fc.assert(
      fc.property(caseArb(9), ({ L, E, capacity, M, inserts, cur, order }) => {
        const c = new EamCollection({ layers: L, experts: E }, capacity, 'most-similar', { kernel });
        for (const x of inserts) c.insert(x);
        if (c.size === 0) return;
        const m = checkMatcher(c, M, cur, order, true);
        if (c.kernel === 'wasm') expect(m.wasmDots).toBe(true);
        else expect(m.packedDots).toBe(true);
      }),
      { numRuns: 200 },
    );
  });

  it('past the packing limit (huge counts) the dot products unpack and stay exact', () => {
    fc.assert(
      fc.property(caseArb(2 ** 20), ({ L, E, capacity, M, inserts, cur, order }) => {
        const c = new EamCollection({ layers: L, experts: E }, capacity, 'most-similar', { kernel });
        for (const x of inserts) {
          const empty = x.every((v) => v === 0);
          const expected = empty ? -1 : c.size < capacity ? c.size : bruteMostSimilar(c, x).best;
          expect(c.insert(x)).toBe(expected);
        }
        checkColumns(c);
        if (c.size > 0) checkMatcher(c, M, cur, order, true);
      }),
      { numRuns: 200 },
    );
    // A case that surely crosses the limit mid-match: row 0 small, row 1 with a 2^20 count.
    const c = new EamCollection({ layers: 2, experts: 2 }, 4, 'most-similar', { kernel });
    c.insert(Float64Array.of(2 ** 20, 1, 2 ** 20, 3));
    c.insert(Float64Array.of(1, 2 ** 20, 5, 2 ** 20));
    c.insert(Float64Array.of(7, 0, 0, 2 ** 20));
    const m = checkMatcher(c, 2, Float64Array.of(3, 1, 2 ** 20, 2), [0, 1], true);
    expect(m.packedDots).toBe(false);
    expect(m.wasmDots).toBe(false);
  });

  it('counts up to 65535 (the WASM kernel limit): past the i32 limit the dot products go plain and stay exact', () => {
    fc.assert(
      fc.property(caseArb(65535), ({ L, E, capacity, M, inserts, cur, order }) => {
        const c = new EamCollection({ layers: L, experts: E }, capacity, 'most-similar', { kernel });
        for (const x of inserts) {
          const empty = x.every((v) => v === 0);
          const expected = empty ? -1 : c.size < capacity ? c.size : bruteMostSimilar(c, x).best;
          expect(c.insert(x)).toBe(expected);
        }
        expect(c.kernel).toBe(kernel === 'js' ? 'packed' : wasmKernel);
        checkColumns(c);
        if (c.size > 0) checkMatcher(c, M, cur, order, true);
      }),
      { numRuns: 100 },
    );
    // Row 0 small, row 1 with counts near 2^16: Q_cur · max‖entry‖² passes 2^61 mid-match.
    const c = new EamCollection({ layers: 2, experts: 2 }, 4, 'most-similar', { kernel });
    c.insert(Float64Array.of(65535, 1, 65535, 3));
    c.insert(Float64Array.of(1, 65535, 5, 65535));
    c.insert(Float64Array.of(7, 0, 0, 65535));
    const m = checkMatcher(c, 2, Float64Array.of(3, 1, 65535, 65534), [0, 1], true);
    expect(m.wasmDots).toBe(false);
  });

  it('non-integer counts: the collection goes plain, or the matcher unpacks; results equal the brute force', () => {
    fc.assert(
      fc.property(
        caseArb(9),
        fc.integer({ min: 1, max: 21 }).map((k) => k / 4),
        fc.boolean(),
        ({ L, E, capacity, M, inserts, cur, order }, scale, inCollection) => {
          const c = new EamCollection({ layers: L, experts: E }, capacity, 'most-similar', { kernel });
          const odd = inserts.length > 1 ? Math.floor(inserts.length / 2) : 0;
          inserts.forEach((x, i) => {
            const v = inCollection && i === odd ? x.map((y) => y * scale) : x;
            const empty = v.every((y) => y === 0);
            if (!empty && c.size >= capacity) {
              // Replacement by cosine: only near-ties may differ from an exact argmax.
              const { sims } = bruteMostSimilar(c, Float64Array.from(v));
              const n = c.mostSimilar(v);
              expect(Math.max(...sims) - sims[n]!).toBeLessThan(1e-12);
            }
            c.insert(v);
          });
          checkColumns(c);
          if (c.size === 0) return;
          // Multiples of 1/4: exact in the Float32 copy too (the norms are of the values given).
          const curV = inCollection ? cur : cur.map((y) => y * scale);
          checkMatcher(c, M, Float64Array.from(curV), order, false);
        },
      ),
      { numRuns: 200 },
    );
  });
});
