/**
 * Property tests explore new random worlds on every `npm test` by default. With
 * `MOESIM_FC_SEED=<integer>` every property without its own seed runs from that seed instead,
 * so a run is repeatable: `.ci/run` sets it, which makes CI decide the same way as the run the
 * developer checked before pushing (a property that fails prints its own seed and path to replay).
 */
import fc from 'fast-check';

const raw = process.env.MOESIM_FC_SEED;
if (raw !== undefined && raw !== '') {
  const seed = Number(raw);
  if (!Number.isSafeInteger(seed)) throw new Error(`MOESIM_FC_SEED: expected an integer, got '${raw}'`);
  fc.configureGlobal({ seed });
}
