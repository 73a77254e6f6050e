/**
 * `EamCollection.copyFrom` (a warm-up shared by several runs is done once and copied,
 * `warm-eamc.ts`): a collection copied from a warmed one behaves as the warmed one, bit for bit
 * — every later insertion picks the same entry, similarities and stored counts are the same,
 * and the source is not changed by what the copy does. Random shapes, capacities, both
 * replacement rules, on the JS and the WASM kernels (JS where build/eamc.wasm is absent); counts above 254 (WASM overflow) and
 * non-integer counts (a collection leaving WASM or packing) are drawn. Coverage asserted.
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Rng } from '../../sim/kernel/rng.ts';
import { EamCollection, type EamcReplacement } from '../../policies/moe-infinity/eam-collection.ts';
import { eamcWasmModule } from '../../policies/moe-infinity/eamc-wasm.ts';

const caseArb = fc.record({
  L: fc.integer({ min: 1, max: 4 }),
  E: fc.integer({ min: 1, max: 9 }),
  capacity: fc.integer({ min: 1, max: 12 }),
  replacement: fc.constantFrom<EamcReplacement>('most-similar', 'lfu-access'),
  warm: fc.integer({ min: 0, max: 20 }),
  after: fc.integer({ min: 1, max: 12 }),
  seed: fc.integer({ min: 0, max: 100_000 }),
  // Counts above 254 (WASM overflow), non-integer ones (leaving WASM, then packing).
  big: fc.boolean(),
  frac: fc.constantFrom(false, false, false, true),
});

function randomEam(rng: Rng, cells: number, big: boolean, frac: boolean): Float64Array {
  const m = new Float64Array(cells);
  for (let j = 0; j < cells; j++) {
    const u = rng.next();
    if (u < 0.5) continue;
    m[j] = big && u > 0.95 ? 255 + rng.int(400) : 1 + rng.int(9);
    if (frac && u > 0.97) m[j] = m[j]! + 0.5;
  }
  return m;
}

function state(c: EamCollection, probe: Float64Array): unknown {
  const sims = new Float64Array(c.size);
  c.similarities(probe, sims);
  const cells = c.layers * c.experts;
  const counts: number[] = [];
  for (let n = 0; n < c.size; n++) for (let j = 0; j < cells; j++) counts.push(c.columns.count(j, n));
  return { size: c.size, version: c.version, kernel: c.kernel, sims: [...sims], counts };
}

describe.each(['js', 'wasm'] as const)('EamCollection.copyFrom (%s kernels)', (kernel) => {
  it('a copy of a warmed collection makes the same decisions as the warmed one, and leaves it alone', () => {
    const seen = { replaced: 0, overflow: 0, kinds: new Set<string>() };
    fc.assert(
      fc.property(caseArb, (k) => {
        const rng = new Rng(`eamc-copy-${k.seed}`);
        const shape = { layers: k.L, experts: k.E };
        const cells = k.L * k.E;
        const warmed = new EamCollection(shape, k.capacity, k.replacement, { kernel });
        const reference = new EamCollection(shape, k.capacity, k.replacement, { kernel });
        for (let i = 0; i < k.warm; i++) {
          const m = randomEam(rng, cells, k.big, k.frac);
          expect(warmed.insert(m)).toBe(reference.insert(m));
        }
        const copy = new EamCollection(shape, k.capacity, k.replacement, { kernel });
        copy.copyFrom(warmed);
        const probe = randomEam(rng, cells, k.big, false);
        const before = state(warmed, probe);
        expect(state(copy, probe)).toEqual(before);
        // The copy and the reference (warmed by insertions, like `warmed`) go on alike.
        for (let i = 0; i < k.after; i++) {
          const m = randomEam(rng, cells, k.big, k.frac);
          if (reference.size === k.capacity) seen.replaced++;
          expect(copy.insert(m)).toBe(reference.insert(m));
          const p = randomEam(rng, cells, k.big, false);
          expect(state(copy, p)).toEqual(state(reference, p));
        }
        seen.kinds.add(copy.kernel);
        if (k.big && k.warm > 0) seen.overflow++;
        // What the copy did left the source as it was.
        expect(state(warmed, probe)).toEqual(before);
      }),
      { numRuns: 150 },
    );
    // Coverage: replacements after the copy, counts above 254, every backend reached.
    expect(seen.replaced).toBeGreaterThan(100);
    expect(seen.overflow).toBeGreaterThan(20);
    expect(seen.kinds.has('plain')).toBe(true);
    // The WASM kernels where build/eamc.wasm is built (a checkout without it runs the JS ones).
    expect(seen.kinds.has(kernel === 'wasm' && eamcWasmModule() ? 'wasm' : 'packed')).toBe(true);
  });

  it('refuses a collection of another shape, capacity or replacement', () => {
    const a = new EamCollection({ layers: 2, experts: 3 }, 4, 'most-similar', { kernel });
    expect(() => a.copyFrom(new EamCollection({ layers: 2, experts: 4 }, 4, 'most-similar'))).toThrow(RangeError);
    expect(() => a.copyFrom(new EamCollection({ layers: 2, experts: 3 }, 5, 'most-similar'))).toThrow(RangeError);
    expect(() => a.copyFrom(new EamCollection({ layers: 2, experts: 3 }, 4, 'lfu-access'))).toThrow(RangeError);
  });
});
