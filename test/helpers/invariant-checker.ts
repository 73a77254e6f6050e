/** Moved to testing/invariant-checker.ts (exported as `moesim/testing`); kept so existing tests import it here. */
export * from '../../testing/invariant-checker.ts';
