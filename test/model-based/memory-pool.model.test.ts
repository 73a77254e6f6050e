/**
 * MemoryPool against a deliberately simple model: a list of live (bytes, category) pairs and
 * the running maxima. Commands allocate (throwing or `try`), allocate exactly what is left
 * (and one byte more), free, and double-free. After every command: `used ≤ capacity`, and the
 * pool and the model agree on used bytes, per-category use, peaks and live allocations.
 * Replay a failure as described in `replay.ts`.
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CapacityError, InvariantError } from '../../sim/kernel/errors.ts';
import { ns } from '../../sim/kernel/time.ts';
import {
  MEMORY_CATEGORIES,
  MemoryPool,
  type Allocation,
  type MemoryCategory,
} from '../../sim/resources/memory-pool.ts';
import { assertParams, commandsConstraints } from './replay.ts';

interface Model {
  readonly capacity: number;
  /** Live allocations, in allocation order. */
  readonly live: { bytes: number; category: MemoryCategory }[];
  /** How many freed allocations exist (for the double-free command). */
  freedCount: number;
  peak: number;
  readonly peakByCat: Map<MemoryCategory, number>;
}

interface Real {
  readonly pool: MemoryPool;
  /** Parallel to `model.live`. */
  readonly live: Allocation[];
  readonly freed: Allocation[];
}

const used = (m: Model) => m.live.reduce((s, a) => s + a.bytes, 0);
const usedBy = (m: Model, c: MemoryCategory) => m.live.filter((a) => a.category === c).reduce((s, a) => s + a.bytes, 0);

function agree(m: Model, r: Real): void {
  const p = r.pool;
  expect(p.usedBytes).toBeLessThanOrEqual(p.capacityBytes);
  expect(p.usedBytes).toBe(used(m));
  expect(p.freeBytes).toBe(m.capacity - used(m));
  expect(p.liveAllocations).toBe(m.live.length);
  expect(p.peakBytes).toBe(m.peak);
  for (const c of MEMORY_CATEGORIES) {
    expect(p.usedBy(c)).toBe(usedBy(m, c));
    expect(p.peakBy(c)).toBe(m.peakByCat.get(c) ?? 0);
  }
  expect(p.peaks()).toEqual(
    Object.fromEntries(MEMORY_CATEGORIES.filter((c) => m.peakByCat.has(c)).map((c) => [c, m.peakByCat.get(c)])),
  );
}

/** Model side of a successful allocation. */
function modelAllocate(m: Model, bytes: number, category: MemoryCategory): void {
  m.live.push({ bytes, category });
  m.peak = Math.max(m.peak, used(m));
  m.peakByCat.set(category, Math.max(m.peakByCat.get(category) ?? 0, usedBy(m, category)));
}

class AllocateCommand implements fc.Command<Model, Real> {
  constructor(
    readonly bytes: number,
    readonly category: MemoryCategory,
    readonly useTry: boolean,
  ) {}
  check = () => true;
  run(m: Model, r: Real): void {
    const fits = used(m) + this.bytes <= m.capacity;
    if (this.useTry) {
      const a = r.pool.tryAllocate(this.bytes, this.category, 'x');
      expect(a === null).toBe(!fits);
      if (a) {
        expect(a.bytes).toBe(this.bytes);
        r.live.push(a);
        modelAllocate(m, this.bytes, this.category);
      }
    } else if (fits) {
      r.live.push(r.pool.allocate(this.bytes, this.category, 'x'));
      modelAllocate(m, this.bytes, this.category);
    } else {
      const free = m.capacity - used(m);
      let err: unknown;
      try {
        r.pool.allocate(this.bytes, this.category, 'x');
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(CapacityError);
      expect((err as CapacityError).requestedBytes).toBe(this.bytes);
      expect((err as CapacityError).freeBytes).toBe(free);
      expect((err as CapacityError).message).toContain(
        `cannot allocate ${this.bytes} B for ${this.category} (x): ${free} B free of ${m.capacity}`,
      );
    }
    agree(m, r);
  }
  toString = () => `${this.useTry ? 'tryAllocate' : 'allocate'}(${this.bytes}, ${this.category})`;
}

/** Allocates exactly the free bytes plus `extra` (0: must fit exactly; 1: must fail). */
class AllocateRestCommand implements fc.Command<Model, Real> {
  constructor(
    readonly extra: 0 | 1,
    readonly category: MemoryCategory,
  ) {}
  check = () => true;
  run(m: Model, r: Real): void {
    const bytes = m.capacity - used(m) + this.extra;
    const a = r.pool.tryAllocate(bytes, this.category);
    if (this.extra === 0) {
      expect(a).not.toBeNull();
      r.live.push(a!);
      modelAllocate(m, bytes, this.category);
      expect(r.pool.freeBytes).toBe(0);
    } else {
      expect(a).toBeNull();
    }
    agree(m, r);
  }
  toString = () => `allocateRest(+${this.extra}, ${this.category})`;
}

class FreeCommand implements fc.Command<Model, Real> {
  constructor(readonly index: number) {}
  check = (m: Readonly<Model>) => m.live.length > 0;
  run(m: Model, r: Real): void {
    const i = this.index % m.live.length;
    const [a] = r.live.splice(i, 1);
    m.live.splice(i, 1);
    r.pool.free(a!);
    r.freed.push(a!);
    m.freedCount++;
    agree(m, r);
  }
  toString = () => `free(#${this.index})`;
}

class DoubleFreeCommand implements fc.Command<Model, Real> {
  constructor(readonly index: number) {}
  check = (m: Readonly<Model>) => m.freedCount > 0;
  run(m: Model, r: Real): void {
    const a = r.freed[this.index % r.freed.length]!;
    expect(() => r.pool.free(a)).toThrow(InvariantError);
    agree(m, r);
  }
  toString = () => `doubleFree(#${this.index})`;
}

const category = fc.constantFrom(...MEMORY_CATEGORIES);
const commands = [
  fc.tuple(fc.integer({ min: 0, max: 700 }), category, fc.boolean()).map(([b, c, t]) => new AllocateCommand(b, c, t)),
  fc.tuple(fc.constantFrom<0 | 1>(0, 1), category).map(([e, c]) => new AllocateRestCommand(e, c)),
  fc.nat(50).map((i) => new FreeCommand(i)),
  fc.nat(50).map((i) => new FreeCommand(i)),
  fc.nat(50).map((i) => new DoubleFreeCommand(i)),
];

describe('MemoryPool (model-based)', () => {
  it('agrees with a list-of-allocations model; used ≤ capacity after every command', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2000 }),
        fc.commands(commands, commandsConstraints(60)),
        (capacity, cmds) => {
          const clock = { now: ns(0) };
          const setup = () => ({
            model: { capacity, live: [], freedCount: 0, peak: 0, peakByCat: new Map() } satisfies Model,
            real: { pool: new MemoryPool('vram', capacity, clock), live: [], freed: [] } satisfies Real,
          });
          fc.modelRun(setup, cmds);
        },
      ),
      assertParams(200),
    );
  });
});
