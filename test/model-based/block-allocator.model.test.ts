/**
 * BlockAllocator against a simple model: a map owner → blocks held and a running peak.
 * Commands: ensure(owner, tokens), release(owner), canEnsure probes. After every command:
 * `used ≤ total`, the allocator and the model agree on used / free / per-owner blocks, owners
 * and peak, and the pool still holds exactly the reservation. Replay: see `replay.ts`.
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ns } from '../../sim/kernel/time.ts';
import { BlockAllocator } from '../../sim/resources/block-allocator.ts';
import { MemoryPool } from '../../sim/resources/memory-pool.ts';
import { assertParams, commandsConstraints } from './replay.ts';

const OWNERS = 6;
const BLOCK_BYTES = 64;

interface Model {
  readonly total: number;
  readonly blockTokens: number;
  readonly held: Map<number, number>;
  peak: number;
}

interface Real {
  readonly blocks: BlockAllocator;
  readonly pool: MemoryPool;
}

const usedBlocks = (m: Model) => [...m.held.values()].reduce((s, b) => s + b, 0);

function agree(m: Model, r: Real): void {
  const b = r.blocks;
  expect(b.usedBlocks).toBeLessThanOrEqual(b.totalBlocks);
  expect(b.usedBlocks).toBe(usedBlocks(m));
  expect(b.freeBlocks).toBe(m.total - usedBlocks(m));
  expect(b.peakBlocks).toBe(m.peak);
  expect(b.owners).toBe([...m.held.values()].filter((x) => x > 0).length);
  for (let o = 0; o < OWNERS; o++) expect(b.blocksHeldBy(o)).toBe(m.held.get(o) ?? 0);
  // The pool holds the reservation, whatever the blocks do.
  expect(r.pool.usedBytes).toBe(m.total * BLOCK_BYTES);
}

class EnsureCommand implements fc.Command<Model, Real> {
  constructor(
    readonly owner: number,
    readonly tokens: number,
  ) {}
  check = () => true;
  run(m: Model, r: Real): void {
    const have = m.held.get(this.owner) ?? 0;
    const want = Math.ceil(this.tokens / m.blockTokens);
    const need = Math.max(0, want - have);
    const ok = need <= m.total - usedBlocks(m);
    expect(r.blocks.canEnsure(this.owner, this.tokens)).toBe(ok);
    expect(r.blocks.ensure(this.owner, this.tokens)).toBe(ok);
    if (ok && need > 0) {
      m.held.set(this.owner, have + need);
      m.peak = Math.max(m.peak, usedBlocks(m));
    }
    // Whatever happened, the owner now holds enough slots iff ensure said yes.
    if (ok) expect(r.blocks.blocksHeldBy(this.owner) * m.blockTokens).toBeGreaterThanOrEqual(this.tokens);
    agree(m, r);
  }
  toString = () => `ensure(owner ${this.owner}, ${this.tokens} tokens)`;
}

class ReleaseCommand implements fc.Command<Model, Real> {
  constructor(readonly owner: number) {}
  check = () => true;
  run(m: Model, r: Real): void {
    expect(r.blocks.release(this.owner)).toBe(m.held.get(this.owner) ?? 0);
    m.held.delete(this.owner);
    agree(m, r);
  }
  toString = () => `release(owner ${this.owner})`;
}

const owner = fc.integer({ min: 0, max: OWNERS - 1 });
const commands = [
  fc.tuple(owner, fc.integer({ min: 0, max: 120 })).map(([o, t]) => new EnsureCommand(o, t)),
  fc.tuple(owner, fc.integer({ min: 0, max: 120 })).map(([o, t]) => new EnsureCommand(o, t)),
  owner.map((o) => new ReleaseCommand(o)),
];

describe('BlockAllocator (model-based)', () => {
  it('agrees with an owner → blocks model; used ≤ total after every command', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 24 }),
        fc.integer({ min: 1, max: 16 }),
        fc.commands(commands, commandsConstraints(60)),
        (total, blockTokens, cmds) => {
          const setup = () => {
            const pool = new MemoryPool('host', 24 * BLOCK_BYTES, { now: ns(0) });
            return {
              model: { total, blockTokens, held: new Map(), peak: 0 } satisfies Model,
              real: { pool, blocks: new BlockAllocator(pool, blockTokens, BLOCK_BYTES, total) } satisfies Real,
            };
          };
          fc.modelRun(setup, cmds);
        },
      ),
      assertParams(200),
    );
  });
});
