/**
 * A user's own profile is a shipped one with a value changed: every shipped model, testbed, GPU,
 * CPU, PCIe link, drive and runtime profile, with one or two values changed at random
 * (`test/helpers/mutate-values.ts`), written to a temporary file and named by path from a small
 * config (a model or runtime by `model:` / `runtime:`, a testbed by `hardware:`, a component by a
 * testbed copy that names it), then checked as `moesim validate` checks (`validateConfig`, then
 * `preflight`: every run's world built), and run when it passes (two short requests, one of
 * four policies). Each either passes and runs or fails with a `UserError` (one line, exit 2);
 * never a crash of another kind. The generator reaches every kind of profile, both outcomes and
 * every kind of change (asserted).
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { validateConfig } from '../../experiments/config/load.ts';
import { preflight, runExperiment } from '../../experiments/runner.ts';
import { clearProfileCache } from '../../hardware-profiles/load.ts';
import { UserError } from '../../sim/kernel/errors.ts';
import { REPO_ROOT } from '../helpers/cli.ts';
import { applyChange, CHANGE_KINDS, type ChangeKind, changeArb } from '../helpers/mutate-values.ts';

const PROFILES = path.join(REPO_ROOT, 'hardware-profiles');
const dir = mkdtempSync(path.join(tmpdir(), 'moesim-profile-mutation-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Profile kinds, their folder, and how a config names a file of theirs. */
const KINDS = {
  model: 'models',
  testbed: 'testbeds',
  gpu: 'gpus',
  cpu: 'cpus',
  pcie: 'pcie',
  drive: 'drives',
  runtime: 'runtimes',
} as const;
type Kind = keyof typeof KINDS;

const FILES: { kind: Kind; file: string }[] = (Object.keys(KINDS) as Kind[]).flatMap((kind) =>
  readdirSync(path.join(PROFILES, KINDS[kind]))
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((f) => ({ kind, file: path.join(PROFILES, KINDS[kind], f) })),
);

/** The testbed a component is put in (it names a drive, so a drive profile is read too). */
const BASE_TESTBED = JSON.parse(
  readFileSync(path.join(PROFILES, 'testbeds', 'flashmoe-rtx4090-nvme.json'), 'utf8'),
) as Record<string, unknown>;

/** A small config: two short requests, uniform routing, `policy`. */
function configFor(over: Record<string, unknown>, policy: string): Record<string, unknown> {
  return {
    name: 'profile-mutation',
    model: 'olmoe',
    hardware: 'a5000-pcie4-1tb',
    seeds: [1],
    workload: {
      requests: 2,
      arrival: { kind: 'offline' },
      promptTokens: { kind: 'fixed', tokens: 8 },
      outputTokens: { kind: 'fixed', tokens: 2 },
    },
    executor: { maxBatchSize: 1 },
    policies: [{ name: policy }],
    ...over,
  };
}

let written = 0;
/** Writes `doc` to a new file of the temporary folder; its path. */
function write(doc: unknown): string {
  const f = path.join(dir, `p${written++}.json`);
  writeFileSync(f, JSON.stringify(doc));
  return f;
}

describe('shipped profiles with values changed, named by path', () => {
  it('validate to runs or fail with one user error, never another crash', async () => {
    const seen = { kinds: new Set<Kind>(), passed: 0, ran: 0, refused: 0, changes: new Set<ChangeKind>() };
    const configFile = path.join(dir, 'c.yaml');
    await fc.assert(
      fc.asyncProperty(
        fc.nat({ max: FILES.length - 1 }),
        fc.array(changeArb, { minLength: 1, maxLength: 2 }),
        fc.constantFrom('on-demand', 'lru', 'moe-infinity', 'mixtral-offloading'),
        async (fi, changes, policy) => {
          const { kind, file } = FILES[fi]!;
          const doc = JSON.parse(readFileSync(file, 'utf8')) as unknown;
          for (const c of changes) seen.changes.add(applyChange(doc, c).kind);
          seen.kinds.add(kind);
          const own = write(doc);
          const over: Record<string, unknown> =
            kind === 'model'
              ? { model: own }
              : kind === 'runtime'
                ? { runtime: own }
                : kind === 'testbed'
                  ? { hardware: own }
                  : { hardware: write({ ...BASE_TESTBED, id: 'mutated', [kind]: own }) };
          // Files are read once per path; every path here is new, but a clean cache keeps cases apart.
          clearProfileCache();
          try {
            const config = validateConfig(configFor(over, policy), configFile);
            await preflight({ config, file: configFile, baseDir: dir }, { onWarning: () => {} });
            seen.passed++;
            // It runs too (a crash may wait for the run: a fractional state allocation did).
            seen.ran++;
            const outDir = path.join(dir, `out${seen.ran}`);
            const loaded = { config, file: configFile, baseDir: dir };
            await runExperiment(loaded, { outDir, progress: false, jobs: 1, table: false, log: () => {} });
          } catch (err) {
            if (!(err instanceof UserError)) throw err;
            expect(err.oneLine()).not.toMatch(/\n/);
            seen.refused++;
          }
        },
      ),
      { numRuns: 300 },
    );
    process.stderr.write(
      `profile-mutation: ${seen.passed} passed and ran, ${seen.refused} refused with a user error, kinds ${[...seen.kinds].join(' ')}\n`,
    );
    expect([...seen.kinds].sort()).toEqual((Object.keys(KINDS) as Kind[]).sort());
    expect([...seen.changes].sort()).toEqual([...CHANGE_KINDS].sort());
    expect(seen.passed).toBeGreaterThan(10);
    expect(seen.refused).toBeGreaterThan(50);
  }, 120_000);
});
