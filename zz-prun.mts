// Scratch hunt: shipped profiles / configs with values changed; the ones that validate are RUN (2 short requests).
import { mkdtempSync, readdirSync, readFileSync, writeFileSync, appendFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import seedrandom from 'seedrandom';
import { validateConfig } from './experiments/config/load.ts';
import { preflight, runExperiment } from './experiments/runner.ts';
import { clearProfileCache } from './hardware-profiles/load.ts';
import { UserError } from './sim/kernel/errors.ts';
import { applyChange, CHANGE_KINDS } from './test/helpers/mutate-values.ts';

const seed = process.argv[2] ?? 'p1';
const iters = Number(process.argv[3] ?? 100);
const log = '/work/hunt/prun.txt';
const rng = seedrandom(seed);
const nat = () => Math.floor(rng() * 2 ** 31);
const KINDS = { model: 'models', testbed: 'testbeds', gpu: 'gpus', cpu: 'cpus', pcie: 'pcie', drive: 'drives', runtime: 'runtimes' } as const;
const P = 'hardware-profiles';
const FILES = (Object.keys(KINDS) as (keyof typeof KINDS)[]).flatMap((kind) => readdirSync(path.join(P, KINDS[kind])).filter((f) => f.endsWith('.json')).map((f) => ({ kind, file: path.join(P, KINDS[kind], f) })));
const BASE_TB = JSON.parse(readFileSync(path.join(P, 'testbeds', 'flashmoe-rtx4090-nvme.json'), 'utf8'));
const POLICIES = ['on-demand', 'lru', 'moe-infinity', 'mixtral-offloading', 'lfu'];
const dir = mkdtempSync(path.join(tmpdir(), 'prun-'));
let n = 0;
const counts: Record<string, number> = {};
for (let i = 0; i < iters; i++) {
  const { kind, file } = FILES[nat() % FILES.length]!;
  const doc = JSON.parse(readFileSync(file, 'utf8'));
  const changes: string[] = [];
  if (rng() < 0.8) changes.push(JSON.stringify(applyChange(doc, { pick: nat(), kind: CHANGE_KINDS[nat() % 5]!, choice: nat() })));
  const own = path.join(dir, `p${n++}.json`);
  writeFileSync(own, JSON.stringify(doc));
  const over: Record<string, unknown> = kind === 'model' ? { model: own } : kind === 'runtime' ? { runtime: own } : kind === 'testbed' ? { hardware: own } : { hardware: (() => { const t = path.join(dir, `t${n++}.json`); writeFileSync(t, JSON.stringify({ ...BASE_TB, id: 'm', [kind]: own })); return t; })() };
  const policy = POLICIES[nat() % POLICIES.length]!;
  const cfg = { name: 'prun', model: 'olmoe', hardware: 'a5000-pcie4-1tb', seeds: [1], workload: { requests: 2, arrival: { kind: 'offline' }, promptTokens: { kind: 'fixed', tokens: 8 }, outputTokens: { kind: 'fixed', tokens: 3 } }, executor: { maxBatchSize: 2 }, policies: [{ name: policy }], ...over };
  clearProfileCache();
  const cfile = path.join(dir, `c${i}.yaml`);
  writeFileSync(cfile, JSON.stringify(cfg));
  let stage = 'validate';
  try {
    const config = validateConfig(cfg, cfile);
    await preflight({ config, file: cfile, baseDir: dir }, { onWarning: () => {} });
    stage = 'run';
    const t0 = Date.now();
    await runExperiment({ config, file: cfile, baseDir: dir }, { outDir: path.join(dir, `o${i}`), progress: false, jobs: 1, table: false, log: () => {} });
    counts.ran = (counts.ran ?? 0) + 1;
    if (Date.now() - t0 > 20000) appendFileSync(log, `${seed} ${i} SLOW ${Date.now() - t0} ms ${kind} ${file} ${changes.join(' ')} ${policy}\n`);
  } catch (err) {
    if (err instanceof UserError) { counts[`user-${stage}`] = (counts[`user-${stage}`] ?? 0) + 1; continue; }
    counts.crash = (counts.crash ?? 0) + 1;
    appendFileSync(log, `${seed} ${i} CRASH at ${stage} ${kind} ${file} ${changes.join(' ')} ${policy} (${cfile})\n${(err as Error)?.stack?.slice(0, 1200)}\n---\n`);
  }
}
console.log(seed, JSON.stringify(counts));
process.exit(0);
