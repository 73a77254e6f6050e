/**
 * `moesim/testing`: what a plugin's own tests use. `runPluginWorld` runs a plugin file the way
 * `moesim experiment` does (same loading, checks and hook-contract guard) in a small world with
 * the invariant checker watching; `TINY_*_WORLD` are fixed worlds that run in well under a
 * second and `servingWorldArb` / `throughputWorldArb` random small ones for fast-check
 * properties. `fc` is the fast-check these arbitraries are built with (use it, not another copy).
 */
export * as fc from 'fast-check';
export {
  runPluginWorld,
  servingWorldArb,
  throughputWorldArb,
  TINY_SERVING_WORLD,
  TINY_THROUGHPUT_WORLD,
  type PluginRun,
  type PluginWorld,
} from '../testing/plugin-world.ts';
export { InvariantChecker, type InvariantCheckerOptions } from '../testing/invariant-checker.ts';
