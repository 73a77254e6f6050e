/** `BoundedMemo`: least recently used entries forgotten past a count or a total size, sizes that grow through `reserve`. */
import { describe, expect, it } from 'vitest';
import { BoundedMemo } from '../../sim/bounded-memo.ts';

interface Box {
  size: number;
}

describe('BoundedMemo', () => {
  it('forgets the least recently used entry past the entry bound', () => {
    const m = new BoundedMemo<Box>(2, 100, (b) => b.size);
    m.set('a', { size: 1 });
    m.set('b', { size: 1 });
    expect(m.get('a')).toBeDefined(); // a is now the most recent
    m.set('c', { size: 1 });
    expect(m.get('b')).toBeUndefined();
    expect([m.get('a'), m.get('c')].every((v) => v !== undefined)).toBe(true);
  });

  it('forgets entries until a new one fits the size bound, and refuses one larger than the bound', () => {
    const m = new BoundedMemo<Box>(Infinity, 10, (b) => b.size);
    m.set('a', { size: 4 });
    m.set('b', { size: 4 });
    expect(m.set('c', { size: 5 })).toBe(true); // 4 + 4 + 5 > 10: a goes (4 + 5 = 9)
    expect(m.get('a')).toBeUndefined();
    expect(m.get('b')).toBeDefined();
    expect(m.set('huge', { size: 11 })).toBe(false);
    expect(m.get('b')).toBeDefined();
  });

  it('lets kept values grow within the bound and gives their grown size back when they are forgotten', () => {
    const m = new BoundedMemo<Box>(1, 10, (b) => b.size);
    const a: Box = { size: 0 };
    m.set('a', a);
    expect(m.reserve(a, 6)).toBe(true);
    a.size += 6;
    expect(m.reserve(a, 5)).toBe(false); // 6 + 5 > 10
    const b: Box = { size: 0 };
    m.set('b', b); // a forgotten: its 6 given back
    expect(m.reserve(b, 10)).toBe(true);
    expect(m.reserve(b, 1)).toBe(false);
    m.clear();
    expect(m.reserve(b, 10)).toBe(false); // cleared: b is no longer kept
    const c: Box = { size: 0 };
    m.set('c', c);
    expect(m.reserve(c, 10)).toBe(true);
    expect([...m.values()]).toEqual([c]);
  });
});

describe('BoundedMemo forgotten values', () => {
  it('refuses growth of a value it no longer keeps, so the room it gave back stays free', () => {
    const m = new BoundedMemo<Box>(1, 10, (b) => b.size);
    const a: Box = { size: 0 };
    m.set('a', a);
    expect(m.reserve(a, 4)).toBe(true);
    a.size += 4;
    const b: Box = { size: 0 };
    m.set('b', b); // a forgotten (entry bound 1): its 4 given back
    // a is still used by its run: growing it is refused, not counted for ever.
    expect(m.reserve(a, 3)).toBe(false);
    expect(m.reserve(b, 10)).toBe(true); // the whole bound is b's
  });
});
