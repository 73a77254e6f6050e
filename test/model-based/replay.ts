/**
 * Replaying a failing model-based run.
 *
 * fast-check prints, on failure, `{ seed, path, endOnFailure: true }` and the counterexample
 * with a `replayPath`. To replay exactly that run (and only it):
 *
 *   FC_SEED=<seed> FC_PATH=<path> FC_REPLAY_PATH=<replayPath> npx vitest run test/model-based/<file>
 *
 * Without these variables every run draws a fresh seed, as fast-check intends.
 */
import type * as fc from 'fast-check';

const seedEnv = process.env.FC_SEED;
const pathEnv = process.env.FC_PATH;
const replayPathEnv = process.env.FC_REPLAY_PATH;

/** Parameters for `fc.assert`: `numRuns`, plus the seed and path to replay when given. */
export function assertParams<T>(numRuns: number): fc.Parameters<T> {
  if (seedEnv === undefined) return { numRuns };
  return { numRuns, seed: Number(seedEnv), path: pathEnv, endOnFailure: true };
}

/** Constraints for `fc.commands`: `maxCommands`, plus the replay path when given. */
export function commandsConstraints(maxCommands: number): fc.CommandsContraints {
  return replayPathEnv === undefined ? { maxCommands } : { maxCommands, replayPath: replayPathEnv };
}
