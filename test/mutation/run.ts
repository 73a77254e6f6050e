/**
 * `npm run mutation [-- <folder>...] [--incremental] [--concurrency=N] [--only=a.ts,b.ts] [--sample=N --seed=S]`:
 * Stryker mutation testing over the simulator's
 * core and the cache/prefetch policies, one folder at a time against the tests that guard it
 * (test/mutation/folders.ts), then a table of the share of mutants killed per folder. Reports land
 * in reports/mutation/ (HTML and JSON per folder, summary.json). Not part of `npm test`: a full run
 * takes tens of minutes on two cores.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Stryker } from '@stryker-mutator/core';
import { MUTATION_FOLDERS, type MutationFolder, mutationScore } from './folders.ts';
import { clopperPearson, drawSample, mutantKey } from './sample.ts';

const args = process.argv.slice(2);
const incremental = args.includes('--incremental');
const concArg = args.find((a) => a.startsWith('--concurrency='));
const concurrency = concArg === undefined ? 2 : Number(concArg.slice('--concurrency='.length));
if (!Number.isSafeInteger(concurrency) || concurrency < 1) {
  console.error(`mutation: --concurrency must be a positive integer, got '${concArg}'`);
  process.exit(2);
}
// --only: mutate only these files of one folder (a run that fits in the time at hand); its reports
// get their own names, so a partial run never overwrites a whole folder's report.
const onlyArg = args.find((a) => a.startsWith('--only='));
const only =
  onlyArg === undefined
    ? null
    : onlyArg
        .slice('--only='.length)
        .split(',')
        .filter((f) => f !== '');
// --sample=N --seed=S: N mutants drawn at random from the named folders (all by default), each run
// against its folder's guarding tests; prints the killed share with its 95 % interval (test/mutation/sample.ts).
const intArg = (name: string, dflt: number | null): number | null => {
  const a = args.find((x) => x.startsWith(`--${name}=`));
  if (a === undefined) return dflt;
  const v = Number(a.slice(name.length + 3));
  if (!Number.isSafeInteger(v) || v < 1) {
    console.error(`mutation: --${name} must be a positive integer, got '${a}'`);
    process.exit(2);
  }
  return v;
};
const sampleSize = intArg('sample', null);
const sampleSeed = intArg('seed', 1) as number;
const names = args.filter((a) => !a.startsWith('--'));
const unknown = names.filter((n) => !MUTATION_FOLDERS.some((f) => f.name === n));
if (unknown.length > 0) {
  console.error(`mutation: unknown folder '${unknown[0]}' (one of ${MUTATION_FOLDERS.map((f) => f.name).join(', ')})`);
  process.exit(2);
}
// Property and model-based tests draw a fresh seed per run unless told; a mutant must meet the
// same worlds as the dry run, so use CI's seed (test/setup/fast-check-seed.ts) unless one is given.
process.env.MOESIM_FC_SEED ??= '20261125';
const chosen = names.length === 0 ? MUTATION_FOLDERS : MUTATION_FOLDERS.filter((f) => names.includes(f.name));
if (sampleSize !== null && (only !== null || incremental)) {
  console.error('mutation: --sample takes neither --only nor --incremental');
  process.exit(2);
}
if (only !== null && (chosen.length !== 1 || only.length === 0 || only.some((f) => !/^[\w.-]+\.ts$/.test(f)))) {
  console.error(`mutation: --only needs one folder and file names like a.ts,b.ts, got '${onlyArg}'`);
  process.exit(2);
}

interface FolderResult {
  readonly folder: string;
  readonly counts: Record<string, number>;
  readonly score: number;
  readonly target: number | null;
  readonly survivors: string[];
}

async function runFolder(folder: MutationFolder): Promise<FolderResult> {
  const mutate = only === null ? [...folder.mutate] : only.map((f) => `${folder.name}/${f}`);
  const slug =
    folder.name.replace(/\//g, '-') + (only === null ? '' : `@${only.map((f) => f.replace(/\.ts$/, '')).join('+')}`);
  const results = await runStryker(folder, mutate, slug);
  const counts: Record<string, number> = {};
  const survivors: string[] = [];
  for (const r of results) {
    counts[r.status] = (counts[r.status] ?? 0) + 1;
    if (r.status === 'Survived' || r.status === 'NoCoverage') {
      survivors.push(`${relative(process.cwd(), r.fileName)}:${r.location.start.line} ${r.mutatorName} ${r.status}`);
    }
  }
  const label = only === null ? folder.name : `${folder.name} (${only.join(', ')})`;
  return { folder: label, counts, score: mutationScore(counts), target: folder.target ?? null, survivors };
}

/** One Stryker run of the mutate patterns against the folder's guarding tests; sampleLocs: see sample-ignorer.mjs. */
async function runStryker(folder: MutationFolder, mutate: string[], slug: string, sampleLocs?: number[][]) {
  process.env.MOESIM_MUTATION_TESTS = JSON.stringify(folder.tests);
  process.env.MOESIM_MUTATION_SAMPLE_LOCS = JSON.stringify(sampleLocs ?? []);
  const ignorer = fileURLToPath(new URL('./sample-ignorer.mjs', import.meta.url));
  const stryker = new Stryker({
    testRunner: 'vitest',
    plugins: ['@stryker-mutator/vitest-runner', ...(sampleLocs === undefined ? [] : [ignorer])],
    ignorers: sampleLocs === undefined ? [] : ['moesim-sample'],
    vitest: { configFile: 'test/mutation/vitest.mutation.config.ts' },
    coverageAnalysis: 'perTest',
    mutate,
    // Type-only code cannot change behaviour; the assembly folder is AssemblyScript, not TypeScript.
    ignoreStatic: true,
    disableTypeChecks: '{sim,policies,workloads,experiments,test}/**/*.ts',
    concurrency,
    // A mutant's timeout is timeoutFactor × its tests' dry-run time + timeoutMS. Mutated loop
    // bounds spin forever; 15 s of slack absorbs a loaded machine without waiting a minute each.
    timeoutFactor: 2,
    timeoutMS: 15_000,
    dryRunTimeoutMinutes: 30,
    reporters: ['progress', 'json', 'html'],
    jsonReporter: { fileName: `reports/mutation/${slug}.json` },
    htmlReporter: { fileName: `reports/mutation/${slug}.html` },
    incremental,
    incrementalFile: `reports/mutation/${slug}.incremental.json`,
    // One sandbox per folder, so two folders can be run by two processes at once.
    // Other folders' sandboxes (a concurrent run) and reports are not part of the project.
    ignorePatterns: ['/.stryker-tmp*', '/reports'],
    tempDirName: `.stryker-tmp-${slug}`,
    cleanTempDir: 'always',
  });
  return stryker.runMutationTest();
}

/** Run the drawn mutants folder by folder; rows count only the drawn ones (not those nested in their ranges). */
async function runSample(n: number, seed: number): Promise<FolderResult[]> {
  const out: FolderResult[] = [];
  for (const g of await drawSample(chosen, n, seed)) {
    const slug = `sample-s${seed}-n${n}@${g.folder.name.replace(/\//g, '-')}`;
    const results = await runStryker(g.folder, g.ranges, slug, g.locs);
    const counts: Record<string, number> = {};
    const survivors: string[] = [];
    const found = new Set<string>();
    for (const r of results) {
      const key = mutantKey(r, false);
      if (!g.keys.has(key) || found.has(key)) continue;
      found.add(key);
      counts[r.status] = (counts[r.status] ?? 0) + 1;
      if (r.status !== 'Killed' && r.status !== 'Timeout' && r.status !== 'Ignored')
        survivors.push(`${key} ${r.status}`);
    }
    for (const k of g.keys) if (!found.has(k)) survivors.push(`${k} MissingFromRun`);
    const label = `${g.folder.name} (sample)`;
    out.push({ folder: label, counts, score: mutationScore(counts), target: null, survivors });
  }
  return out;
}

const rows: FolderResult[] = [];
if (sampleSize === null) for (const folder of chosen) rows.push(await runFolder(folder));
else rows.push(...(await runSample(sampleSize, sampleSeed)));

mkdirSync('reports/mutation', { recursive: true });
// A subset gets its own summary, so runs of different folders side by side do not overwrite each other.
const summary =
  sampleSize !== null
    ? `sample-s${sampleSeed}-n${sampleSize}`
    : names.length === 0 && only === null
      ? 'summary'
      : `summary-${chosen.map((f) => f.name.replace(/\//g, '-')).join('+')}${only === null ? '' : `@${only.join('+')}`}`;
writeFileSync(`reports/mutation/${summary}.json`, `${JSON.stringify(rows, null, 2)}\n`);
const all: Record<string, number> = {};
for (const r of rows) for (const [k, v] of Object.entries(r.counts)) all[k] = (all[k] ?? 0) + v;
console.log('folder               killed  survived  no-cov  timeout  score   target');
for (const r of [...rows, { folder: 'all', counts: all, score: mutationScore(all), target: 0.75, survivors: [] }]) {
  const c = r.counts;
  console.log(
    `${r.folder.padEnd(20)} ${String(c.Killed ?? 0).padStart(6)}  ${String(c.Survived ?? 0).padStart(8)}  ` +
      `${String(c.NoCoverage ?? 0).padStart(6)}  ${String(c.Timeout ?? 0).padStart(7)}  ` +
      `${(r.score * 100).toFixed(1).padStart(5)} %  ${r.target === null ? '' : `${(r.target * 100).toFixed(0)} %`}`,
  );
}
if (sampleSize !== null) {
  const killed = (all.Killed ?? 0) + (all.Timeout ?? 0);
  const tested = killed + (all.Survived ?? 0) + (all.NoCoverage ?? 0);
  const [lo, hi] = clopperPearson(killed, tested);
  console.log(
    `SAMPLE ESTIMATE (seed ${sampleSeed}, ${sampleSize} drawn, ${all.Ignored ?? 0} static left out): ` +
      `${killed} of ${tested} killed = ${((100 * killed) / Math.max(1, tested)).toFixed(1)} %, ` +
      `95 % Clopper–Pearson interval ${(100 * lo).toFixed(1)}–${(100 * hi).toFixed(1)} %`,
  );
}
