/**
 * One random change to a parsed config or profile, for the bad-input properties: a number set
 * to 0, −1, ½, 10¹², 2⁵³, 3, −½ or 10⁻⁹, a value of the wrong type, a key deleted or an unknown one
 * added, an array emptied, shortened or lengthened. Not a test file.
 */
import * as fc from 'fast-check';

type Path = (string | number)[];

/** Every path to a value inside `v` (not the root). */
export function pathsOf(v: unknown, at: Path = [], out: Path[] = []): Path[] {
  if (at.length > 0) out.push(at);
  if (Array.isArray(v)) v.forEach((x, i) => pathsOf(x, [...at, i], out));
  else if (v && typeof v === 'object')
    for (const k of Object.keys(v)) pathsOf((v as Record<string, unknown>)[k], [...at, k], out);
  return out;
}

const NUMBERS = [0, -1, 0.5, 1e12, 2 ** 53, 3, -0.5, 1e-9];
const WRONG: unknown[] = ['abc', null, [], {}, true, '', 7];
export const CHANGE_KINDS = ['delete', 'number', 'wrong', 'array', 'unknown-key'] as const;
export type ChangeKind = (typeof CHANGE_KINDS)[number];

export interface Change {
  /** Which value (an index into `pathsOf`, modulo their count). */
  readonly pick: number;
  readonly kind: ChangeKind;
  /** Which replacement of the kind (modulo their count). */
  readonly choice: number;
}

export const changeArb: fc.Arbitrary<Change> = fc.record({
  pick: fc.nat(),
  kind: fc.constantFrom(...CHANGE_KINDS),
  choice: fc.nat(),
});

/**
 * Applies `c` to `doc` in place; the kind of change made (a kind that does not fit the value
 * picked — a number change on a string — puts a value of the wrong type there instead).
 */
export function applyChange(doc: unknown, c: Change): { kind: ChangeKind; at: string } {
  const paths = pathsOf(doc);
  if (paths.length === 0) return { kind: 'wrong', at: '' };
  const p = paths[c.pick % paths.length]!;
  let parent = doc as Record<string | number, unknown>;
  for (const k of p.slice(0, -1)) parent = parent[k] as Record<string | number, unknown>;
  const last = p[p.length - 1]!;
  const cur = parent[last];
  const at = p.join('.');
  if (c.kind === 'delete') {
    if (Array.isArray(parent)) parent.splice(last as number, 1);
    else delete parent[last];
    return { kind: 'delete', at };
  }
  if (c.kind === 'number' && typeof cur === 'number') {
    parent[last] = NUMBERS[c.choice % NUMBERS.length];
    return { kind: 'number', at };
  }
  if (c.kind === 'array' && Array.isArray(cur)) {
    const k = c.choice % 3;
    parent[last] = k === 0 ? [] : k === 1 ? cur.slice(0, -1) : [...cur, cur[0]];
    return { kind: 'array', at };
  }
  if (c.kind === 'unknown-key' && cur && typeof cur === 'object' && !Array.isArray(cur)) {
    (cur as Record<string, unknown>).zzUnknown = 1;
    return { kind: 'unknown-key', at };
  }
  // A fresh copy: the loaders freeze what they are given, and these values are shared.
  parent[last] = structuredClone(WRONG[c.choice % WRONG.length]);
  return { kind: 'wrong', at };
}
