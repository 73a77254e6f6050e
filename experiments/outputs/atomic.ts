/**
 * Atomic outputs of the experiment runner: the shared temp-file-then-rename writer of
 * `workloads/io/atomic.ts` (a reader, or a killed run, never sees a partial file), plus the
 * stable JSON form of results.
 */
export { writeFileAtomic } from '../../workloads/io/atomic.ts';

/** Stable JSON: 2-space indentation and a final newline. */
export const toJson = (v: unknown): string => `${JSON.stringify(v, null, 2)}\n`;
