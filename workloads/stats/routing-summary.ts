/**
 * Summary routing statistics of a synthetic profile, measured by running its router — the
 * quantities papers publish instead of traces (MoE-Infinity Table 1, Fig. 2, Fig. 4), so a
 * profile can be fitted to them (`synthetic/calibrate-targets.ts`) and compared with them
 * (`moesim trace activation`).
 *
 * Definitions (E experts per MoE layer, top-k; every statistic is averaged over MoE layers):
 *
 * - **decode activation ratio at batch size bs, m tokens per request** (`decode[m][bs]`): draw
 *   bs distinct requests from a pool (tasks from the task mix), take in each a window of m
 *   consecutive decode tokens at a random decode position; at each MoE layer count the distinct
 *   experts the bs·m tokens select and divide by E; average over layers and sampled batches.
 *   With `batchComposition: same-topic` the bs requests share a task label and a latent
 *   cluster instead (a separate pool: 32 topics drawn from `${seed}:topics`, each
 *   with max(bs) requests of that topic, ids after the mixed pool's; a batch takes one topic).
 *   m = 1 is exactly one decode iteration of a batch of bs requests (what the simulator runs);
 *   its value at bs = 1 is k/E whatever the routing. m > 1 is what a measurement that sees m
 *   tokens of each request per "iteration" reports (see workloads/README.md, "Summary targets").
 * - **prefill activation** (`prefill.mean`): the fraction of a layer's experts that one prompt's
 *   tokens select (one prefill pass of one request), averaged over layers and over prompts whose
 *   lengths follow `prompts`; `prefill.atLength[P]`: the same for prompts of exactly P tokens.
 * - **reuse over n decode iterations** (`reuse`), one request at a time, at one MoE layer
 *   (`last`, or `mean` over layers): `distinct` = experts the request's n decode tokens select,
 *   / E; `topShare` = the share of its n·k activations that fall on its most-used expert;
 *   `pooledTopShare` / `pooledDistinct` = the same with every pool request's n tokens merged
 *   (how much the per-request skew evens out over many requests).
 *
 * Pool requests have a 16-token prompt (a burn-in past any shared start tokens; the router is
 * stationary after it when temporalMemory is 0); decode windows lie after it. Everything is deterministic given `seed`:
 * requests use router seeds `${seed}:<id>`, batches and windows come from `${seed}:batches`.
 */
import { Rng } from '../../sim/kernel/rng.ts';
import { lengthSampler, type LengthConfig } from '../lengths.ts';
import { SyntheticModel, type ModelShape } from '../synthetic/model.ts';
import { SyntheticRouting } from '../synthetic/router.ts';
import type { Knobs } from '../synthetic/profile.ts';

export type BatchComposition = 'mixed' | 'same-topic';

/** Topics sampled for same-topic batches (each with as many requests as the largest batch). */
const TOPIC_GROUPS = 32;

export const TABLE1_BATCH_SIZES: readonly number[] = [1, 2, 4, 8, 16, 32];

export interface SummaryOptions {
  /** Batch sizes of the decode activation table. Default 1, 2, 4, 8, 16, 32. */
  readonly batchSizes?: readonly number[];
  /** Window lengths m (decode tokens per request) to measure. Default [1]. */
  readonly tokensPerRequest?: readonly number[];
  /** Task mix of the measured requests (label → weight); none = no task labels. */
  readonly tasks?: Readonly<Record<string, number>>;
  /**
   * How decode batches are composed: `mixed` (default) = bs requests drawn from the whole pool;
   * `same-topic` = bs requests of one task label and one latent cluster (a batch of one
   * fine-grained task, e.g. one BIG-bench task; without clusters, of one task label).
   */
  readonly batchComposition?: BatchComposition;
  /** Requests in the decode pool. Default 512. */
  readonly poolRequests?: number;
  /** Sampled batches per batch size. Default 192. */
  readonly batchesPerSize?: number;
  /** Decode iterations of the reuse statistics. Default 20. */
  readonly reuseIterations?: number;
  /** Layer of the reuse statistics: `last` (default), `mean`, or a MoE layer index. */
  readonly reuseLayer?: 'last' | 'mean' | number;
  /** Prompt-length distribution of the prefill statistic; omit to skip it. */
  readonly prompts?: LengthConfig;
  /** Prompts for the prefill mean (lengths at stratified quantiles). Default 128. */
  readonly promptSamples?: number;
  /** Fixed prompt lengths to measure prefill activation at. */
  readonly atLengths?: readonly number[];
  /** Prompts per fixed length. Default 16. */
  readonly atLengthSamples?: number;
  readonly seed?: string;
}

export interface RoutingSummary {
  readonly experts: number;
  readonly topK: number;
  /** decode[m][bs]: activation ratio (fraction 0…1). */
  readonly decode: Record<string, Record<string, number>>;
  readonly prefill: {
    readonly mean: number;
    readonly meanPromptTokens: number;
    readonly atLength: Record<string, number>;
  } | null;
  readonly reuse: {
    readonly iterations: number;
    readonly layer: 'last' | 'mean' | number;
    readonly distinct: number;
    readonly topShare: number;
    readonly pooledDistinct: number;
    readonly pooledTopShare: number;
    readonly pooledRequests: number;
  };
}

const BURN_IN = 16;

/** Measures the summary statistics of `knobs` on `shape` by running the synthetic router. */
export function routingSummary(shape: ModelShape, knobs: Knobs, o: SummaryOptions = {}): RoutingSummary {
  const model = new SyntheticModel(shape, knobs);
  return summaryOfModel(model, o);
}

export function summaryOfModel(model: SyntheticModel, o: SummaryOptions = {}): RoutingSummary {
  const { L, E, k } = model;
  const seed = o.seed ?? 'moesim-summary';
  const routing = new SyntheticRouting(model, seed);
  const batchSizes = o.batchSizes ?? TABLE1_BATCH_SIZES;
  const ms = o.tokensPerRequest ?? [1];
  const N = o.poolRequests ?? 512;
  const S = o.batchesPerSize ?? 192;
  const R = o.reuseIterations ?? 20;
  const maxM = Math.max(1, ...ms);
  const W = BURN_IN + Math.max(maxM, R);
  const stride = L * k;
  const taskNames = o.tasks ? Object.keys(o.tasks) : [];
  const taskWeights = taskNames.map((t) => o.tasks![t]!);
  const taskRng = new Rng(`${seed}:tasks`);
  const taskOf = (): string | undefined => (taskNames.length ? taskNames[taskRng.weighted(taskWeights)] : undefined);

  // Decode pool: N requests of W tokens each, request-major.
  const pool = new Int32Array(N * W * stride);
  const buf = new Int32Array(W * stride);
  for (let i = 0; i < N; i++) {
    routing.create(i, taskOf(), BURN_IN).generateAll(W, buf);
    pool.set(buf, i * W * stride);
  }
  const mark = new Int32Array(E);
  let stamp = 0;
  const topics =
    o.batchComposition === 'same-topic' ? topicPool(model, routing, o, seed, N, W, Math.max(...batchSizes)) : undefined;
  const src = topics?.pool ?? pool;
  const groupSize = topics ? Math.max(...batchSizes) : N;
  const groups = topics ? TOPIC_GROUPS : 1;

  const decode: Record<string, Record<string, number>> = {};
  for (const m of ms) {
    const row: Record<string, number> = {};
    const rng = new Rng(`${seed}:batches:${m}`);
    const idx = Int32Array.from({ length: groupSize }, (_, i) => i);
    for (const bs of batchSizes) {
      if (bs > groupSize) throw new RangeError(`batch size ${bs} exceeds the pool of ${N} requests`);
      const chosen = new Int32Array(bs);
      const starts = new Int32Array(bs);
      let sum = 0;
      for (let s = 0; s < S; s++) {
        const g0 = groups > 1 ? rng.int(groups) * groupSize : 0;
        for (let i = 0; i < bs; i++) {
          const j = i + rng.int(groupSize - i);
          const t = idx[i]!;
          idx[i] = idx[j]!;
          idx[j] = t;
          chosen[i] = g0 + idx[i]!;
          starts[i] = BURN_IN + rng.int(W - BURN_IN - m + 1);
        }
        for (let l = 0; l < L; l++) {
          stamp++;
          let c = 0;
          for (let i = 0; i < bs; i++) {
            let p = (chosen[i]! * W + starts[i]!) * stride + l * k;
            for (let t = 0; t < m; t++, p += stride) {
              for (let j = 0; j < k; j++) {
                const e = src[p + j]!;
                if (mark[e] !== stamp) {
                  mark[e] = stamp;
                  c++;
                }
              }
            }
          }
          sum += c;
        }
      }
      row[String(bs)] = sum / (S * L * E);
    }
    decode[String(m)] = row;
  }

  // Reuse over R decode iterations.
  const layer = o.reuseLayer ?? 'last';
  const layers = layer === 'mean' ? Array.from({ length: L }, (_, l) => l) : [layer === 'last' ? L - 1 : layer];
  if (layers.some((l) => !(l >= 0 && l < L)))
    throw new RangeError(`reuse layer ${String(layer)} is not a MoE layer (0…${L - 1})`);
  const cnt = new Int32Array(E);
  const pooled = new Float64Array(E);
  let distinct = 0;
  let topShare = 0;
  let pooledDistinct = 0;
  let pooledTopShare = 0;
  for (const l of layers) {
    pooled.fill(0);
    for (let r = 0; r < N; r++) {
      cnt.fill(0);
      for (let t = BURN_IN; t < BURN_IN + R; t++) {
        const p = (r * W + t) * stride + l * k;
        for (let j = 0; j < k; j++) cnt[pool[p + j]!]!++;
      }
      let d = 0;
      let top = 0;
      for (let e = 0; e < E; e++) {
        const c = cnt[e]!;
        if (c > 0) d++;
        if (c > top) top = c;
        pooled[e]! += c;
      }
      distinct += d / E;
      topShare += top / (R * k);
    }
    let d = 0;
    let top = 0;
    for (let e = 0; e < E; e++) {
      if (pooled[e]! > 0) d++;
      if (pooled[e]! > top) top = pooled[e]!;
    }
    pooledDistinct += d / E;
    pooledTopShare += top / (N * R * k);
  }
  const nl = layers.length;

  // Prefill.
  let prefill: RoutingSummary['prefill'] = null;
  if (o.prompts || o.atLengths?.length) {
    let id = N;
    const unionOf = (P: number): number => {
      const a = new Int32Array(P * stride);
      routing.create(id++, taskOf(), P).generateAll(P, a);
      let sum = 0;
      for (let l = 0; l < L; l++) {
        stamp++;
        let c = 0;
        for (let t = 0; t < P; t++) {
          const p = t * stride + l * k;
          for (let j = 0; j < k; j++) {
            const e = a[p + j]!;
            if (mark[e] !== stamp) {
              mark[e] = stamp;
              c++;
            }
          }
        }
        sum += c / E;
      }
      return sum / L;
    };
    let mean = NaN;
    let meanTokens = NaN;
    if (o.prompts) {
      // Stratified lengths: the i-th prompt takes the length at quantile (i + ½)/n (every length
      // kind draws by inversion from one uniform), so the sampled lengths follow the
      // distribution closely and only the routing is random.
      const n = o.promptSamples ?? 128;
      const sample = lengthSampler(o.prompts, 'prompt');
      let u = 0;
      const stratum = { next: () => u, int: (k: number) => Math.min(k - 1, Math.floor(u * k)) } as unknown as Rng;
      let s = 0;
      let tok = 0;
      for (let i = 0; i < n; i++) {
        u = (i + 0.5) / n;
        const P = Math.max(1, sample(stratum));
        tok += P;
        s += unionOf(P);
      }
      mean = s / n;
      meanTokens = tok / n;
    }
    const atLength: Record<string, number> = {};
    for (const P of o.atLengths ?? []) {
      const n = o.atLengthSamples ?? 16;
      let s = 0;
      for (let i = 0; i < n; i++) s += unionOf(P);
      atLength[String(P)] = s / n;
    }
    prefill = { mean, meanPromptTokens: meanTokens, atLength };
  }

  return {
    experts: E,
    topK: k,
    decode,
    prefill,
    reuse: {
      iterations: R,
      layer,
      distinct: distinct / (N * nl),
      topShare: topShare / (N * nl),
      pooledDistinct: pooledDistinct / nl,
      pooledTopShare: pooledTopShare / nl,
      pooledRequests: N,
    },
  };
}

/**
 * The pool of same-topic batches: TOPIC_GROUPS topics (task from the mix, cluster uniform),
 * each with `size` requests of W tokens routed with that topic's cluster, topic-major.
 */
function topicPool(
  model: SyntheticModel,
  routing: SyntheticRouting,
  o: SummaryOptions,
  seed: string,
  firstId: number,
  W: number,
  size: number,
): { pool: Int32Array } {
  const stride = model.L * model.k;
  const rng = new Rng(`${seed}:topics`);
  const names = o.tasks ? Object.keys(o.tasks) : [];
  const weights = names.map((t) => o.tasks![t]!);
  const pool = new Int32Array(TOPIC_GROUPS * size * W * stride);
  const buf = new Int32Array(W * stride);
  let id = firstId;
  for (let g = 0; g < TOPIC_GROUPS; g++) {
    const task = names.length ? names[rng.weighted(weights)] : undefined;
    const cluster = model.clusters > 1 ? rng.int(model.clusters) : 0;
    for (let i = 0; i < size; i++) {
      routing.create(id++, task, BURN_IN, cluster).generateAll(W, buf);
      pool.set(buf, (g * size + i) * W * stride);
    }
  }
  return { pool };
}
