/**
 * Calibrated synthetic twins reproduce the statistics of the real traces.
 *
 * For each real per-request trace in ../shared/traces/real (read where it lies; unlicensed, never
 * copied here) the twin is the same requests — lengths, phases, task labels — routed by the
 * shipped profile fitted to it. Tolerance per statistic: absolute 0.05, or 3× the statistic's
 * own seed-to-seed standard deviation at the trace's size when that is larger (measured here
 * from several twins; only the 4-request Mixtral trace's request skew and task similarity
 * need it). The calibrator itself is also run from scratch on the Mixtral trace.
 *
 * The OLMoE aggregate (Apache-2.0) ships in traces/, so its check always runs.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { RngStreams } from '../../sim/kernel/rng.ts';
import { statsOf, type ExtendedTraceStats } from '../../workloads/stats/trace-stats.ts';
import { readTraceFile } from '../../workloads/trace/reader.ts';
import { loadProfile, type Profile } from '../../workloads/synthetic/profile.ts';
import { SyntheticModel } from '../../workloads/synthetic/model.ts';
import { SyntheticRouting } from '../../workloads/synthetic/router.ts';
import { generateRequests, shapeOf, type RequestShape } from '../../workloads/synthetic/generate.ts';
import { calibrateTrace } from '../../workloads/synthetic/calibrate.ts';
import { seedFrom } from '../../workloads/random/hash-rng.ts';
import { aggregateTwin } from '../../workloads/trace-tools.ts';
import { sharedData } from '../helpers/shared-data.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(here, '../..');
// The unlicensed real traces are read only where they lie (../shared, beside the checkout).
const shared = sharedData(
  'traces/real/mixtral-8x7b-fp8_speculative-moe.jsonl.gz',
  'traces/real/deepseek-v2-lite_moe-beyond_prefill.jsonl.gz',
);
const REAL = shared.path('traces/real');
const present = shared.present;

/** Every compared statistic as a flat name → value map. */
function flat(s: ExtendedTraceStats): Record<string, number> {
  const out: Record<string, number> = {};
  s.popularityEntropy.forEach((h, l) => (out[`popularityEntropy[${l}]`] = h));
  for (const [c, v] of Object.entries(s.requestSkew)) {
    out[`requestSkew[${c}].request`] = v.request;
    out[`requestSkew[${c}].pooled`] = v.pooled;
  }
  if (s.crossLayerPredictability !== null) out['crossLayerPredictability'] = s.crossLayerPredictability;
  if (s.temporalLocality !== null) out['temporalLocality'] = s.temporalLocality;
  for (const [b, v] of Object.entries(s.activationRatioByBatch)) out[`activationRatioByBatch[${b}]`] = v;
  if (s.taskClusterSimilarity) {
    out['taskClusterSimilarity.within'] = s.taskClusterSimilarity.within;
    out['taskClusterSimilarity.across'] = s.taskClusterSimilarity.across;
  }
  return out;
}

function twin(profile: Profile, shapes: readonly RequestShape[], seed: number): ExtendedTraceStats {
  const streams = new RngStreams(seed);
  const routing = new SyntheticRouting(
    new SyntheticModel(profile.model, profile.knobs),
    `synthetic:${seedFrom(streams.stream('routing'))}`,
  );
  return statsOf(profile.model, generateRequests(routing, shapes));
}

/** Compares real statistics with the mean of twins; returns the failures (empty = pass). */
function compare(real: ExtendedTraceStats, twins: ExtendedTraceStats[]): string[] {
  const r = flat(real);
  const ts = twins.map(flat);
  const failures: string[] = [];
  for (const [key, value] of Object.entries(r)) {
    const xs = ts.map((t) => t[key]!);
    const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
    const sd = xs.length > 1 ? Math.sqrt(xs.reduce((a, x) => a + (x - mean) ** 2, 0) / (xs.length - 1)) : 0;
    const tol = Math.max(0.05, 3 * sd);
    if (!(Math.abs(mean - value) <= tol))
      failures.push(`${key}: real ${value.toFixed(4)}, twin ${mean.toFixed(4)} (tolerance ${tol.toFixed(3)})`);
  }
  return failures;
}

const CASES = [
  { file: 'mixtral-8x7b-fp8_speculative-moe.jsonl.gz', profile: 'mixtral-8x7b', seeds: 12 },
  { file: 'deepseek-v2-lite_moe-beyond_prefill.jsonl.gz', profile: 'deepseek-v2-lite', seeds: 2 },
];

describe.skipIf(!present)(shared.title('calibrated twins of the real traces'), () => {
  for (const c of CASES) {
    it(`${c.file}: the shipped profile "${c.profile}" reproduces every statistic`, async () => {
      const { requests, info } = await readTraceFile(path.join(REAL, c.file), { scores: false });
      const { profile } = await loadProfile(c.profile);
      expect(profile.model).toMatchObject({
        moeLayers: info.header.model.moeLayers,
        experts: info.header.model.experts,
        topK: info.header.model.topK,
      });
      const real = statsOf(info.header.model, requests);
      const shapes = requests.map(shapeOf);
      const twins = Array.from({ length: c.seeds }, (_, i) => twin(profile, shapes, i + 1));
      expect(compare(real, twins)).toEqual([]);
    });
  }

  it('the calibrator fits the Mixtral trace from scratch', async () => {
    const file = path.join(REAL, CASES[0]!.file);
    const r = await calibrateTrace(file, { name: 'test', maxEvaluations: 24 });
    const { requests } = await readTraceFile(file, { scores: false });
    const twins = Array.from({ length: 12 }, (_, i) => twin(r.profile, requests.map(shapeOf), i + 1));
    expect(compare(r.trace, twins)).toEqual([]);
    expect(r.profile.fittedTo).toMatch(/mixtral-8x7b-fp8_speculative-moe\.jsonl\.gz: 4 requests, 720 tokens/);
  });
});

describe('the OLMoE aggregate (shipped, Apache-2.0) and its fitted profile', () => {
  it('pooled popularity entropy, top-10 % share and rank-aligned successor rates within 0.05; corpora differ as much as in the aggregate', async () => {
    const r = await aggregateTwin(
      path.join(REPO, 'traces/olmoe-routing-aggregates.json.gz'),
      'OLMoE-1B-7B-0924',
      'olmoe',
      { requestsPerCorpus: 8 },
    );
    const twinPooled = r.twin!.pooled;
    r.real.pooled.entropy.forEach((h, i) => expect(Math.abs(twinPooled.entropy[i]! - h)).toBeLessThan(0.05));
    r.real.pooled.top10Share.forEach((s, i) => expect(Math.abs(twinPooled.top10Share[i]! - s)).toBeLessThan(0.05));
    const deficit = (s: typeof r.real): number => {
      const ds = Object.values(s.corpora).flatMap((c) => c.entropy.map((h, i) => s.pooled.entropy[i]! - h));
      return ds.reduce((a, b) => a + b, 0) / ds.length;
    };
    expect(Math.abs(deficit(r.twin!) - deficit(r.real))).toBeLessThan(0.02);
    for (const [pair, v] of Object.entries(r.real.pooled.rankAligned))
      expect(Math.abs(twinPooled.rankAligned[pair]! - v)).toBeLessThan(0.05);
  });
});
