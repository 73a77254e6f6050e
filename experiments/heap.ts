/**
 * V8's young generation for the processes and worker threads that simulate (issue #12).
 *
 * A simulation allocates many short-lived objects: buffer entries, transfers and queue entries,
 * ~200 MB per 10× quickstart run. Node's default semi-space is at most 16 MB, so these are
 * scavenged often, and the ones that outlive two scavenges (an expert cached for a while, its
 * transfer) are promoted and then collected by mark-compacts. With 64 MB semi-spaces, fewer
 * scavenges run and far fewer objects are promoted.
 *
 * Measured on a 300 K-request scale run (LRU, Mixtral): 844 → 341 scavenges, 119 → 29
 * mark-compacts, run wall time 53.5 → 43.1 s.
 *
 * On-demand quickstart, best CPU time per process, simulated s per CPU s at semi-space
 * 16 / 32 / 64 / 128 MB, two rounds:
 *
 * | scale | 16 MB | 32 MB | 64 MB | 128 MB |
 * |---|---|---|---|---|
 * | 1× | 19 460 / 19 600 | 20 700 / 21 460 | 21 160 / 21 580 | 21 380 / 21 950 |
 * | 10× | 17 690 / 17 730 | 18 550 / 18 830 | 18 550 / 19 260 | 18 610 / 19 030 |
 *
 * The cost is memory: up to 3 × 64 MB of young generation per process or thread.
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
