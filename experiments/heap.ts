/**
 * V8's young generation for the processes and worker threads that simulate.
 *
 * A simulation allocates many short-lived objects: buffer entries, transfers and queue entries,
 * ~200 MB per 10× quickstart run. Node's default semi-space is at most 16 MB, so these are
 * scavenged often, and the ones that outlive two scavenges (an expert cached for a while, its
 * transfer) are promoted and then collected by mark-compacts. With 64 MB semi-spaces, fewer
 * scavenges run and far fewer objects are promoted.
 *
 * The figures behind the choice of 64 MB are in docs/PERFORMANCE.md (V8 heap). The cost is memory: up to 3 × 64 MB of young generation per process or thread.
 *
 * Where it is set:
 * - package.json's scripts run `tsx --max-semi-space-size=64`;
 * - bin/moesim.mjs has it in its shebang;
 * - the scale bench's child processes get the flag;
 * - worker threads (`--jobs`, `moesim worker`) get `resourceLimits.maxYoungGenerationSizeMb`.
 *
 * `test/unit/heap-flags.test.ts` checks that these places agree with `SEMI_SPACE_MB`.
 */

/** V8 semi-space size (MB) for simulating processes: `--max-semi-space-size`. */
export const SEMI_SPACE_MB = 64;

/** A worker thread's young generation (MB): V8 sizes it as three semi-spaces (two, and the new large-object space). */
export const YOUNG_GENERATION_MB = 3 * SEMI_SPACE_MB;

/** The node flag. */
export const SEMI_SPACE_FLAG = `--max-semi-space-size=${SEMI_SPACE_MB}`;
