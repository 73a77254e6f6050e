/**
 * The executor's `ExpertBuffer` refuses what would break its books: a slot beyond its count, a
 * key twice, the release of an expert it does not hold or that is pinned (being computed or
 * awaited). Each refusal is an `InvariantError` (a bug of the executor, not of a policy), and a
 * refused call leaves the buffer as it was.
 */
import { describe, expect, it } from 'vitest';
import type { Ns } from '../../sim/kernel/time.ts';
import { MemoryPool } from '../../sim/resources/memory-pool.ts';
import { ExpertBuffer } from '../../sim/serving/expert-buffer.ts';

const make = (slots = 2) => {
  const clock = { now: 0 as Ns };
  const vram = new MemoryPool('vram', 1000, clock);
  return { buffer: new ExpertBuffer(slots, 100, vram, clock), vram };
};

describe('ExpertBuffer refusals', () => {
  it('releasing a pinned expert is refused and changes nothing; unpinned, it is released', () => {
    const { buffer, vram } = make();
    const e = buffer.occupy(3, 'demand', true);
    buffer.pin(e, true);
    expect(() => buffer.release(3)).toThrow('release of pinned expert 3');
    expect(buffer.has(3)).toBe(true);
    expect(buffer.occupied).toBe(1);
    expect(vram.usedBytes).toBe(100);
    buffer.pin(e, false);
    buffer.release(3);
    expect(buffer.has(3)).toBe(false);
    expect(vram.usedBytes).toBe(0);
  });

  it('releasing an expert it does not hold, occupying a key twice or past its slots is refused', () => {
    const { buffer } = make(2);
    expect(() => buffer.release(1)).toThrow('release of absent expert 1');
    buffer.occupy(1, 'prefetch');
    expect(() => buffer.occupy(1, 'prefetch')).toThrow('expert 1 already in buffer');
    buffer.occupy(2, 'prefetch');
    expect(() => buffer.occupy(5, 'prefetch')).toThrow('expert buffer full (2 slots) when occupying 5');
    expect(buffer.occupied).toBe(2);
  });
});
