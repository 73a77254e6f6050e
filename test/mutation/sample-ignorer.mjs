/**
 * Stryker ignorer plugin for a mutation sample (test/mutation/sample.ts): Stryker's `mutate` range
 * for a drawn mutant also takes in every mutant nested inside its node (a block's statements, an
 * expression's operands), which would multiply the run's cost several times. This ignorer leaves out
 * every node that neither is a drawn mutant's node nor contains one, so nested mutants are reported
 * as ignored instead of run. Plain JavaScript: Stryker's worker processes load plugins without tsx.
 * The drawn nodes come in MOESIM_MUTATION_SAMPLE_LOCS as [startLine, startCol, endLine, endCol]
 * (Babel's 1-based lines, 0-based columns), files not distinguished: a node of another file at a
 * drawn location is merely run, never wrongly left out.
 */
import { declareValuePlugin, PluginKind } from '@stryker-mutator/api/plugin';

// Read on every call: the module is loaded once per process, the drawn nodes change per folder.
let seen = '';
/** @type {number[][]} */
let locs = [];

/** True when a (line, column) position is before or at b. */
const le = (l1, c1, l2, c2) => l1 < l2 || (l1 === l2 && c1 <= c2);

/** @param {{ node: { loc?: { start: { line: number, column: number }, end: { line: number, column: number } } } }} path */
function shouldIgnore(path) {
  const env = process.env.MOESIM_MUTATION_SAMPLE_LOCS ?? '[]';
  if (env !== seen) {
    seen = env;
    locs = JSON.parse(env);
  }
  const loc = path.node.loc;
  if (loc === undefined || loc === null || locs.length === 0) return undefined;
  for (const [sl, sc, el, ec] of locs) {
    if (le(loc.start.line, loc.start.column, sl, sc) && le(el, ec, loc.end.line, loc.end.column)) return undefined;
  }
  return 'not drawn in the mutation sample';
}

export const strykerPlugins = [declareValuePlugin(PluginKind.Ignore, 'moesim-sample', { shouldIgnore })];
