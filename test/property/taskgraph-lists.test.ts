/**
 * The dispatch pass's own containers against plain references, on random operation sequences:
 * `ReadyList` (sorted by (priority, seq), keeps its array when emptied, compacts a long removed
 * prefix in place) against a sorted array, and `MergeHeap` (reused between passes) against
 * sorting. Coverage asserted: inserts at the front, middle and end, lists emptied and refilled,
 * in-place compaction, heaps cleared and reused.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MergeHeap } from '../../sim/taskgraph/merge-heap.ts';
import { compareRanked, type Ranked, ReadyList } from '../../sim/taskgraph/ready-list.ts';
import { CoverageTally } from '../helpers/coverage.ts';

type Op = { kind: 'insert'; priority: number; count: number } | { kind: 'remove'; share: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    kind: fc.constant('insert' as const),
    priority: fc.integer({ min: -2, max: 3 }),
    count: fc.integer({ min: 1, max: 1500 }),
  }),
  fc.record({
    kind: fc.constant('remove' as const),
    // Everything (the list empties), most of it (a long prefix: compaction), or any share.
    share: fc.oneof(
      fc.constant(1),
      fc.double({ min: 0.5, max: 0.99, noNaN: true }),
      fc.double({ min: 0, max: 1, noNaN: true }),
    ),
  }),
);

describe('task-graph dispatch containers', () => {
  it('ReadyList keeps the order a sorted array keeps, through removals, emptying and compaction', () => {
    const tally = new CoverageTally('ready-list', ['front', 'middle', 'end', 'emptied', 'compacted']);
    fc.assert(
      fc.property(fc.array(op, { minLength: 1, maxLength: 40 }), (ops) => {
        const list = new ReadyList<Ranked>();
        let ref: Ranked[] = [];
        let seq = 0;
        const seen = { front: false, middle: false, end: false, emptied: false, compacted: false };
        let head = 0; // where the list's first item sits in its array (as ReadyList keeps it)
        for (const o of ops) {
          if (o.kind === 'insert') {
            for (let c = 0; c < o.count; c++) {
              // Priorities and seqs drawn so that items land at the front, middle and end.
              const item = { priority: o.priority + ((c * 7) % 3) - 1, seq: seq++ };
              const at = ref.findIndex((x) => compareRanked(x, item) > 0);
              const pos = at < 0 ? ref.length : at;
              if (pos === 0 && ref.length > 0 && head > 0) head--;
              if (ref.length > 0) {
                if (pos === 0) seen.front = true;
                else if (pos === ref.length) seen.end = true;
                else seen.middle = true;
              }
              ref.splice(pos, 0, item);
              list.insert(item);
            }
          } else {
            const k = Math.floor(o.share * ref.length);
            head += k;
            if (k === ref.length) {
              if (k > 0) seen.emptied = true;
              head = 0;
            } else if (head >= 1024 && head * 2 >= head + ref.length - k) {
              seen.compacted = true;
              head = 0;
            }
            ref = ref.slice(k);
            list.removeFirst(k);
          }
          expect(list.length).toBe(ref.length);
          expect(list.values()).toEqual(ref);
          expect(list.at(ref.length)).toBeUndefined();
          for (let i = 0; i < ref.length; i += 97) expect(list.at(i)).toBe(ref[i]);
        }
        tally.record(seen);
      }),
      { numRuns: 120 },
    );
    tally.check(0.1);
  });

  it('MergeHeap pops in sorted order, after clears too', () => {
    const tally = new CoverageTally('merge-heap', ['reused']);
    fc.assert(
      fc.property(
        fc.array(fc.array(fc.integer({ min: 0, max: 50 }), { maxLength: 30 }), { minLength: 1, maxLength: 5 }),
        (rounds) => {
          const heap = new MergeHeap<number>((a, b) => a - b);
          let reused = false;
          for (const xs of rounds) {
            // Push everything, pop half, push the popped back, then drain (as a pass does) or clear.
            for (const x of xs) heap.push(x);
            const half = Math.floor(xs.length / 2);
            const popped: number[] = [];
            for (let i = 0; i < half; i++) popped.push(heap.pop()!);
            expect(popped).toEqual([...xs].sort((a, b) => a - b).slice(0, half));
            for (const x of popped) heap.push(x);
            if (xs.length % 2 === 0) {
              const out: number[] = [];
              for (let x = heap.pop(); x !== undefined; x = heap.pop()) out.push(x);
              expect(out).toEqual([...xs].sort((a, b) => a - b));
            } else heap.clear();
            expect(heap.size).toBe(0);
            if (xs.length > 0) reused = true;
          }
          tally.record({ reused: reused && rounds.length > 1 });
        },
      ),
      { numRuns: 200 },
    );
    tally.check(0.5);
  });
});
