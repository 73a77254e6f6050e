/**
 * EAMC on the WASM kernels (u16 columns, i32 dot products, SIMD; `assembly/eamc.ts`) against
 * the JS kernels (packed doubles): the same operations on two collections, one of each, give
 * identical results bit for bit. Random worlds of small integer EAMs (duplicates: exact ties),
 * some with counts near or past 2^16 (the matcher's dot products leave the i32 kernels past the
 * overflow guard; a count above 65535 makes the collection leave WASM for good) or quarter
 * counts (the collection or the matcher goes plain), insertions with replacement (both rules)
 * and storage growth (past 16 and 32 entries), requests matched row by row in any order with
 * their dot products exported into a hint and inserted with it:
 * - every insertion returns the same entry (replacement), `similarities` the same values;
 * - after every row the matchers' best matches, their scores and every similarity are equal;
 * - the hints' dot products are equal, and so are the similarities completed from them.
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { EamCollection, EamcDots, IncrementalMatcher } from '../../policies/moe-infinity/eam-collection.ts';
import { eamcWasmModule } from '../../policies/moe-infinity/eamc-wasm.ts';

const built = eamcWasmModule() !== null;

/** Counts: 0 (weight `zeros`) and small, some near 2^16 (`big`), quarters when `quarter`. */
const eamArb = (cells: number, big: number, quarter: boolean, zeros: number) =>
  fc
    .array(
      fc.oneof(
        { weight: zeros, arbitrary: fc.constant(0) },
        { weight: 4, arbitrary: fc.integer({ min: 1, max: 9 }) },
        { weight: big > 9 ? 1 : 0, arbitrary: fc.integer({ min: 1, max: Math.max(big, 1) }) },
        { weight: quarter ? 1 : 0, arbitrary: fc.integer({ min: 1, max: 40 }).map((v) => v / 4) },
      ),
      { minLength: cells, maxLength: cells },
    )
    .map((a) => Float64Array.from(a));

const stepArb = (L: number, cells: number, big: number, quarter: boolean, zeros: number) =>
  fc.oneof(
    { weight: 3, arbitrary: fc.record({ kind: fc.constant('insert' as const), pick: fc.nat() }) },
    {
      weight: 2,
      arbitrary: fc.record({
        kind: fc.constant('request' as const),
        eam: eamArb(cells, big, quarter, zeros),
        order: fc.shuffledSubarray(
          Array.from({ length: L }, (_, l) => l),
          { minLength: 1 },
        ),
        unseenRows: fc.boolean(),
      }),
    },
  );

const worldArb = fc
  .record({
    L: fc.integer({ min: 1, max: 4 }),
    E: fc.oneof(fc.integer({ min: 1, max: 7 }), fc.integer({ min: 8, max: 20 })),
    capacity: fc.oneof(fc.integer({ min: 1, max: 13 }), fc.integer({ min: 17, max: 40 })),
    M: fc.integer({ min: 1, max: 5 }),
    replacement: fc.constantFrom('most-similar' as const, 'lfu-access' as const),
    // Small counts only (every kernel path with small coefficients), or some large ones.
    big: fc.constantFrom(9, 9, 9, 300, 40_000, 65_535, 70_000),
    // Sparse or dense rows (a row's non-zero cells: every pass width, up to 8 in the scan).
    zeros: fc.constantFrom(1, 6),
    quarter: fc.boolean(),
    quarterPool: fc.boolean(),
  })
  .chain((w) => {
    const cells = w.L * w.E;
    return fc.record({
      ...Object.fromEntries(Object.entries(w).map(([k, v]) => [k, fc.constant(v)])),
      pool: fc.array(eamArb(cells, w.big, w.quarter && w.quarterPool, w.zeros), { minLength: 1, maxLength: 5 }),
      // Entries stored before the steps (past 16 and 32: storage growth, full blocks of 16).
      prefill: fc.integer({ min: 0, max: 45 }),
      steps: fc.array(stepArb(w.L, cells, w.big, w.quarter, w.zeros), { minLength: 1, maxLength: 30 }),
    }) as fc.Arbitrary<
      typeof w & {
        pool: Float64Array[];
        prefill: number;
        steps: Array<
          | { kind: 'insert'; pick: number }
          | { kind: 'request'; eam: Float64Array; order: number[]; unseenRows: boolean }
        >;
      }
    >;
  });

describe.skipIf(!built)(
  `EAMC: the WASM kernels equal the JS kernels bit for bit${built ? '' : ' (build/eamc.wasm absent: npm run prepare)'}`,
  () => {
    it('insertions, replacements, similarities, matches, scores and hint dot products', () => {
      fc.assert(
        fc.property(worldArb, ({ L, E, capacity, M, replacement, pool, prefill, steps }) => {
          const shape = { layers: L, experts: E };
          const colls = [
            new EamCollection(shape, capacity, replacement, { kernel: 'js' }),
            new EamCollection(shape, capacity, replacement, { kernel: 'wasm' }),
          ] as const;
          expect(colls[1].kernel).toBe('wasm');
          const matchers = [new IncrementalMatcher(shape, M), new IncrementalMatcher(shape, M)] as const;
          const hints = [new EamcDots(shape), new EamcDots(shape)] as const;
          const same = <T>(f: (i: 0 | 1) => T): T => {
            const a = f(0);
            expect(f(1)).toEqual(a);
            return a;
          };
          for (let i = 0; i < prefill; i++) same((c) => colls[c].insert(pool[i % pool.length]!));
          for (const step of steps) {
            if (step.kind === 'insert') {
              const x = pool[step.pick % pool.length]!;
              if (colls[0].size > 0) {
                same((i) => {
                  const out = new Float64Array(colls[i].size);
                  colls[i].similarities(x, out);
                  return [...out];
                });
              }
              same((i) => colls[i].insert(x));
              continue;
            }
            // A request: matched row by row (its dot products exported), then inserted with the hint.
            const { eam, order } = step;
            same((i) => {
              const m = matchers[i];
              const c = colls[i];
              m.reset(c);
              hints[i].clear();
              const seen: number[][] = [];
              for (const l of order) {
                m.addRow(l, eam.subarray(l * E, (l + 1) * E));
                const sims: number[] = [];
                for (let n = 0; n < c.size; n++) sims.push(m.similarity(n));
                seen.push([...m.top.subarray(0, m.topCount)], [...m.topScore.subarray(0, m.topCount)], sims);
              }
              m.exportDots(hints[i]);
              return seen;
            });
            // The EAM inserted: the rows matched, plus (sometimes) rows the matcher never saw.
            const x = step.unseenRows ? eam : eam.map((v, j) => (order.includes(Math.floor(j / E)) ? v : 0));
            same((i) => {
              const h = hints[i];
              const dots: number[] = [];
              if (h.valid) for (let n = 0; n < h.size; n++) dots.push(h.dot(n));
              return [h.valid, dots];
            });
            if (colls[0].size > 0 && !x.every((v) => v === 0)) {
              same((i) => {
                const c = colls[i];
                c.hintStaleLimit = 1;
                const out = new Float64Array(c.size);
                const used = c.similaritiesFromHint(x, hints[i], out);
                return [used, [...out]];
              });
            }
            same((i) => colls[i].insert(x, hints[i]));
          }
          same((i) => [colls[i].size, colls[i].version, colls[i].lanes]);
        }),
        { numRuns: 300 },
      );
    });
  },
);
