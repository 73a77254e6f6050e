/** Moved to testing/plugin-world.ts (exported as `moesim/testing`); kept so existing tests import it here. */
export * from '../../testing/plugin-world.ts';
