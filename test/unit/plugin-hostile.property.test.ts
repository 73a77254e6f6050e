/**
 * Random hostile plugins cannot change results: a plugin (loaded by path, so under the runner's
 * guard) whose hooks try random writes to random view fields, return junk, or throw, either
 * fails with a PolicyError naming a hook (the CLI's exit 3) or gives results identical to the
 * same plugin without its hostile acts. A plugin that catches the TypeError of a refused write
 * and carries on must see its write had no effect.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { validateConfig } from '../../experiments/config/load.ts';
import { prepareRuns } from '../../experiments/runner.ts';
import { buildServingWorld } from '../../experiments/world.ts';
import { PolicyError } from '../../sim/kernel/errors.ts';

/** zod as the repository resolves it (a plugin in a temporary folder has no node_modules). */
const ZOD = import.meta.resolve('zod');
const TYPES = path.resolve(import.meta.dirname, '../../policies/types.ts');
const HOOKS = [
  'onIterationStart',
  'onLayerRouted',
  'onLayerDone',
  'onIterationEnd',
  'onPrefetchDone',
  'afterUse',
] as const;
/** What a hostile hook tries (by index in the plugin below). */
const ACTS = [
  'spec',
  'tokens',
  'nowNs',
  'batchPush',
  'activated',
  'deleteBatch',
  'junk42',
  'junkString',
  'promise',
  'throw',
] as const;

const PLUGIN = `import { z } from ${JSON.stringify(ZOD)};
import { definePolicy } from ${JSON.stringify(TYPES)};
const acts = {
  spec: (v) => { for (const r of v.batch) r.spec.outputTokens = 1; },
  tokens: (_v, r) => { if (r && r.tokensPerExpert) r.tokensPerExpert[0] = 99; },
  nowNs: (v) => { v.nowNs = 0; },
  batchPush: (v) => { v.batch.push(v.batch[0]); },
  activated: (_v, r) => { if (r && r.activated) r.activated.length = 0; },
  deleteBatch: (v) => { delete v.batch; },
};
const junk = { junk42: 42, junkString: 'x', promise: Promise.resolve(undefined) };
export default definePolicy({
  name: 'hostile', family: 'serving', summary: 'random hostile acts', params: z.object({}).strict(),
  create: () => {
    const plan = globalThis.__hostilePlan;
    const p = { name: 'hostile', chooseVictim: (_v, q) => q.candidates[0] };
    for (const [hook, act, swallow] of plan) {
      p[hook] = (view, arg) => {
        if (act in junk) return junk[act];
        if (act === 'throw') throw new Error('hostile');
        if (!swallow) { acts[act](view, arg); return; }
        try { acts[act](view, arg); } catch { /* carries on */ }
      };
    }
    return p;
  },
});
`;

describe('random hostile plugins', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'moesim-hostile-'));
  const plugin = path.join(dir, 'hostile.ts');
  writeFileSync(plugin, PLUGIN);
  const file = path.join(dir, 'hostile.yaml');
  writeFileSync(file, '# written by plugin-hostile.property.test.ts\n');
  const raw = {
    name: 'hostile',
    model: 'olmoe',
    hardware: 'rtx4090',
    seeds: [2],
    workload: {
      requests: 4,
      arrival: { kind: 'offline' },
      promptTokens: { kind: 'fixed', tokens: 8 },
      outputTokens: { kind: 'fixed', tokens: 6 },
      routing: { kind: 'uniform' },
    },
    executor: { maxBatchSize: 4, packetMiB: 4 },
    policies: [{ path: plugin, label: 'hostile' }],
  };
  const [spec] = await prepareRuns(validateConfig(raw, file), dir, file);
  const g = globalThis as { __hostilePlan?: unknown };
  const runWith = async (plan: readonly (readonly [string, string, boolean])[]): Promise<string> => {
    g.__hostilePlan = plan;
    const outcome = (await buildServingWorld(spec!, { baseDir: dir })).run();
    return JSON.stringify({ endNs: outcome.endNs, events: outcome.events, counters: outcome.counters });
  };
  const benign = await runWith([]);

  it('fail with a PolicyError naming a hook, or leave the results untouched', async () => {
    const step = fc.tuple(fc.constantFrom(...HOOKS), fc.constantFrom(...ACTS), fc.boolean());
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 4 }), async (plan) => {
        let result: string | undefined;
        try {
          result = await runWith(plan);
        } catch (err) {
          expect(err, String(err)).toBeInstanceOf(PolicyError);
          expect((HOOKS as readonly string[]).includes((err as PolicyError).hook ?? '')).toBe(true);
          return;
        }
        expect(result).toBe(benign);
      }),
      { numRuns: 40 },
    );
  });
});
