/**
 * The task-graph executor's small parts on their own: the ready list (`ready-list.ts`), the
 * dispatch pass's merge heap (`merge-heap.ts`), the node index (`nodes.ts`) and the static
 * critical path (`critical-path.ts`). The executor's tests rarely give them more than two lists,
 * a few hundred tasks or a refused input, so the mutation run of sim/taskgraph left their
 * branches unread. The lists and the heap are checked against a sorted array (fast-check, with
 * the share of runs that reach the ready list's compaction asserted); the rest by hand.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { staticCriticalPath } from '../../sim/taskgraph/critical-path.ts';
import { MergeHeap } from '../../sim/taskgraph/merge-heap.ts';
import { type Node, NodeIndex } from '../../sim/taskgraph/nodes.ts';
import { compareRanked, type Ranked, ReadyList } from '../../sim/taskgraph/ready-list.ts';
import type { TaskSpec } from '../../sim/taskgraph/types.ts';
import { CoverageTally } from '../helpers/coverage.ts';

/** The list's front offset and end (private): where the list keeps its items is part of its promise (no copy per pass). */
const internals = (l: ReadyList<Ranked>) => l as unknown as { head: number; end: number; items: Ranked[] };

const item = (priority: number, seq: number): Ranked => ({ priority, seq });

describe('ReadyList', () => {
  type Op = { kind: 'insert'; priorities: number[] } | { kind: 'remove'; share: number };
  const insert = (minLength: number, maxLength: number) =>
    fc.record({
      kind: fc.constant('insert' as const),
      priorities: fc.array(fc.integer({ min: 0, max: 3 }), { minLength, maxLength }),
    });
  // Shares spread over (0, 1) (fast-check's doubles lean to the ends), so that fronts of 1 024+ are reached.
  const share = fc.oneof(fc.constantFrom(0.3, 0.5, 0.7, 0.8, 0.9), fc.double({ min: 0, max: 1, noNaN: true }));
  const op: fc.Arbitrary<Op> = fc.oneof(
    { weight: 3, arbitrary: insert(1, 5) },
    { weight: 1, arbitrary: insert(1100, 1500) },
    { weight: 2, arbitrary: fc.record({ kind: fc.constant('remove' as const), share }) },
  );

  it('holds its items in (priority, seq) order through any inserts and front removals (model: a sorted array)', () => {
    const tally = new CoverageTally('ready-list', ['compacted', 'front insert', 'emptied']);
    // Every world starts with a long list (the fronts of 1 024+ where it compacts), then anything,
    // is emptied (the array kept for reuse), then anything again.
    const some = fc.array(op, { minLength: 1, maxLength: 12 });
    fc.assert(
      fc.property(insert(1100, 1500), some, insert(1100, 1500), some, (first, rest, again, more) => {
        const ops: Op[] = [first, ...rest, { kind: 'remove', share: 1 }, again, ...more];
        const list = new ReadyList<Ranked>();
        let model: Ranked[] = [];
        let seq = 0;
        const seen = { compacted: false, 'front insert': false, emptied: false };
        for (const o of ops) {
          if (o.kind === 'insert') {
            for (const p of o.priorities) {
              const x = item(p, seq++);
              if (internals(list).head > 0 && model.length > 0 && compareRanked(x, model[0]!) < 0)
                seen['front insert'] = true;
              list.insert(x);
              model.push(x);
            }
            model.sort(compareRanked);
          } else {
            const k = Math.floor(o.share * model.length);
            const before = internals(list).head;
            list.removeFirst(k);
            model = model.slice(k);
            if (before + k >= 1024 && internals(list).head === 0 && model.length > 0) seen.compacted = true;
            if (model.length === 0) {
              seen.emptied = true;
              expect(internals(list)).toMatchObject({ head: 0, end: 0 });
            }
          }
          expect(list.length).toBe(model.length);
          expect(list.values()).toEqual(model);
          for (const i of [-1, 0, 1, model.length - 1, model.length, model.length + 1])
            expect(list.at(i)).toBe(model[i]);
        }
        tally.record(seen);
      }),
      { numRuns: 60 },
    );
    tally.check();
  });

  it('reads nothing past its end, even where the kept array still holds old items', () => {
    const list = new ReadyList<Ranked>();
    for (let s = 0; s < 3; s++) list.insert(item(0, s));
    list.removeFirst(3);
    expect(internals(list).items.length).toBe(3); // kept for the next pass
    expect([list.length, list.at(0), list.at(2)]).toEqual([0, undefined, undefined]);
    list.insert(item(1, 9));
    expect(list.values()).toEqual([item(1, 9)]);
    expect(list.at(1)).toBeUndefined();
  });

  it('an item more urgent than the front takes the slot before it (no move), and at(i) counts from the front', () => {
    const list = new ReadyList<Ranked>();
    for (let s = 0; s < 4; s++) list.insert(item(1, s));
    list.removeFirst(2);
    list.insert(item(0, 10));
    expect(internals(list)).toMatchObject({ head: 1, end: 4 });
    expect([list.at(0), list.at(1), list.at(2), list.at(3)]).toEqual([item(0, 10), item(1, 2), item(1, 3), undefined]);
  });

  it('compacts only once the front offset is at least 1 024 and half the array', () => {
    const fill = (n: number) => {
      const list = new ReadyList<Ranked>();
      for (let s = 0; s < n; s++) list.insert(item(0, s));
      return list;
    };
    const small = fill(4);
    small.removeFirst(2); // half gone, but only 2 in front: no copy
    expect(internals(small)).toMatchObject({ head: 2, end: 4 });
    const justBelow = fill(2048);
    justBelow.removeFirst(1023);
    expect(internals(justBelow).head).toBe(1023);
    const exactly = fill(2048);
    exactly.removeFirst(1024); // 1 024 in front and half of 2 048
    expect(internals(exactly)).toMatchObject({ head: 0, end: 1024 });
    expect(exactly.at(0)).toEqual(item(0, 1024));
    const lessThanHalf = fill(2050);
    lessThanHalf.removeFirst(1024); // 1 024 · 2 < 2 050
    expect(internals(lessThanHalf).head).toBe(1024);
  });

  it('refuses to remove more items than it holds, or a negative or NaN count', () => {
    const list = new ReadyList<Ranked>();
    list.insert(item(0, 0));
    list.insert(item(0, 1));
    expect(() => list.removeFirst(3)).toThrow('cannot remove 3 of 2 items');
    expect(() => list.removeFirst(-1)).toThrow('cannot remove -1 of 2 items');
    expect(() => list.removeFirst(Number.NaN)).toThrow('cannot remove NaN of 2 items');
    list.removeFirst(0);
    expect(list.length).toBe(2);
    list.removeFirst(2);
    expect(list.length).toBe(0);
  });
});

describe('MergeHeap', () => {
  it('pops in order through any pushes, pops and clears (model: a sorted array)', () => {
    type Op = { kind: 'push'; x: number } | { kind: 'pop' } | { kind: 'clear' };
    const op: fc.Arbitrary<Op> = fc.oneof(
      { weight: 6, arbitrary: fc.record({ kind: fc.constant('push' as const), x: fc.integer({ min: 0, max: 50 }) }) },
      { weight: 3, arbitrary: fc.constant({ kind: 'pop' as const }) },
      { weight: 1, arbitrary: fc.constant({ kind: 'clear' as const }) },
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 200 }), (ops) => {
        const heap = new MergeHeap<number>((a, b) => a - b);
        let model: number[] = [];
        for (const o of ops) {
          if (o.kind === 'push') {
            heap.push(o.x);
            model.push(o.x);
            model.sort((a, b) => a - b);
          } else if (o.kind === 'pop') expect(heap.pop()).toBe(model.shift());
          else {
            heap.clear();
            model = [];
          }
          expect(heap.size).toBe(model.length);
        }
        const rest: (number | undefined)[] = [];
        while (heap.size > 0) rest.push(heap.pop());
        expect(rest).toEqual(model);
        expect(heap.pop()).toBeUndefined();
      }),
      { numRuns: 200 },
    );
  });

  it('worked by hand: seven heads, a clear, and the heap reused', () => {
    const heap = new MergeHeap<number>((a, b) => a - b);
    for (const x of [5, 3, 9, 1, 7, 2, 8]) heap.push(x);
    expect([heap.pop(), heap.pop(), heap.pop()]).toEqual([1, 2, 3]);
    heap.clear();
    expect([heap.size, heap.pop()]).toEqual([0, undefined]);
    for (const x of [4, 6, 0]) heap.push(x);
    expect([heap.pop(), heap.pop(), heap.pop(), heap.pop()]).toEqual([0, 4, 6, undefined]);
  });
});

describe('NodeIndex', () => {
  const node = (id: unknown) => ({ id }) as unknown as Node;

  it('finds dense ids, ids past a gap, far ids and other ids', () => {
    const index = new NodeIndex();
    const n: Record<string, Node> = {};
    // 0, then 3 past a gap (1 and 2 filled later), a far id, a negative and fractional one, strings.
    for (const id of [0, 3, 1, 2, 5000, -1, 1.5, 2 ** 30, 'a', 'length']) {
      n[String(id)] = node(id);
      index.set(id, n[String(id)]!);
    }
    for (const id of [0, 1, 2, 3, 5000, -1, 1.5, 2 ** 30, 'a', 'length']) expect(index.get(id)).toBe(n[String(id)]);
    for (const id of [4, 4999, 5001, 'b', 'constructor', 2 ** 30 + 1]) {
      expect(index.get(id)).toBeUndefined();
      expect(index.has(id)).toBe(false);
    }
  });

  it('a dense id is found before any other id is set, and after', () => {
    const index = new NodeIndex();
    const a = node(7);
    index.set(7, a);
    expect([index.get(7), index.get(6), index.has(7)]).toEqual([a, undefined, true]);
    const s = node('s');
    index.set('s', s);
    expect([index.get(7), index.get('s'), index.get(6)]).toEqual([a, s, undefined]);
  });
});

describe('staticCriticalPath', () => {
  const t = (id: string, deps: string[] = []): TaskSpec => ({ id, kind: 'barrier', category: 'x', deps }) as TaskSpec;
  const durations =
    (d: Record<string, number>) =>
    (task: TaskSpec): number =>
      d[String(task.id)]!;

  it('an empty graph has length 0 and no path', () => {
    const cp = staticCriticalPath([], () => 0);
    expect([cp.lengthNs, cp.path, cp.earliestFinishNs.size]).toEqual([0, [], 0]);
  });

  it('the longest chain need not end at the last task given', () => {
    const cp = staticCriticalPath([t('a'), t('b')], durations({ a: 5, b: 1 }));
    expect([cp.lengthNs, cp.path]).toEqual([5, ['a']]);
  });

  it('goes back through the dep that finished last, even when it is the first task of the graph', () => {
    const cp = staticCriticalPath([t('x'), t('y'), t('c', ['x', 'y'])], durations({ x: 5, y: 1, c: 2 }));
    expect([cp.lengthNs, cp.path]).toEqual([7, ['x', 'c']]);
    expect([...cp.earliestFinishNs]).toEqual([
      ['x', 5],
      ['y', 1],
      ['c', 7],
    ]);
  });

  it('a dep listed twice counts once; tasks may come before their deps', () => {
    const cp = staticCriticalPath([t('c', ['a', 'a']), t('a')], durations({ a: 2, c: 3 }));
    expect([cp.lengthNs, cp.path]).toEqual([5, ['a', 'c']]);
  });

  it('ties: the dep listed first, and the end given last', () => {
    const cp = staticCriticalPath(
      [t('p'), t('q'), t('r', ['q', 'p']), t('s', ['p'])],
      durations({ p: 2, q: 2, r: 1, s: 1 }),
    );
    expect([cp.lengthNs, cp.path]).toEqual([3, ['p', 's']]);
    const r = staticCriticalPath([t('p'), t('q'), t('r', ['q', 'p'])], durations({ p: 2, q: 2, r: 1 }));
    expect(r.path).toEqual(['q', 'r']);
  });

  it('refuses a repeated id, an unknown dep, a cycle and a duration that is negative, NaN or infinite', () => {
    expect(() => staticCriticalPath([t('a'), t('a')], () => 1)).toThrow(
      new RangeError('staticCriticalPath: duplicate task id a'),
    );
    expect(() => staticCriticalPath([t('a', ['z'])], () => 1)).toThrow(
      new RangeError('staticCriticalPath: task a depends on z, not in the graph'),
    );
    expect(() => staticCriticalPath([t('a', ['b']), t('b', ['a']), t('c')], () => 1)).toThrow(
      new RangeError('staticCriticalPath: the graph has a cycle'),
    );
    for (const d of [-1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => staticCriticalPath([t('a')], () => d)).toThrow(
        new RangeError(`staticCriticalPath: task a has duration ${d}`),
      );
    }
    expect(staticCriticalPath([t('a')], () => 0).lengthNs).toBe(0);
  });
});
