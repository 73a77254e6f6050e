/**
 * The fixed structure of a synthetic routing model, derived once from a profile's knobs:
 * per-layer global popularity, expert ranks, cross-layer successor paths, per-task
 * distributions, and their alias tables. Immutable after construction except for the lazily
 * filled per-task cache; shared by all request routers of a run.
 *
 * Structure randomness comes from the profile's `structureSeed` (stream name
 * `moesim-structure:<seed>`), never from the run's master seed: which experts are hot, which
 * paths exist and what a task looks like are properties of the modelled model, so they stay
 * the same when the run seed changes. Requests then vary with the run seed.
 */
import { Rng } from '../../sim/kernel/rng.ts';
import { AliasTables, aliasScratch, type AliasScratch } from '../random/alias.ts';
import { zipfPerLayer, type Knobs } from './profile.ts';

export interface ModelShape {
  readonly moeLayers: number;
  readonly experts: number;
  readonly topK: number;
}

/** A per-layer distribution over experts with its alias tables. */
export interface LayerDistributions {
  /** L×E weights, each layer summing to 1. */
  readonly weights: Float64Array;
  readonly alias: AliasTables;
}

export class SyntheticModel {
  readonly L: number;
  readonly E: number;
  readonly k: number;
  readonly zipf: readonly number[];
  /** L×E: expert id of rank r (0 = hottest) at each layer. */
  readonly order: Int32Array;
  /** (L−1)×E: succ_l(e) = the expert of the same rank at layer l+1. */
  readonly successor: Int32Array;
  /** Global popularity g (what the whole routing averages to). */
  readonly global: LayerDistributions;
  /** Distribution of non-shared (fresh) draws: g, compensated for the shared vocabulary's load. */
  readonly base: LayerDistributions;
  readonly tau: number;
  /** Temporal reuse of prompt tokens (= tau unless the profile sets prefillTemporalReuse). */
  readonly tauPrefill: number;
  readonly rho: number;
  /** Temporal memory μ: a continuing token copies the j-th previous token with P(j) ∝ μ^(j−1). */
  readonly mu: number;
  readonly gamma: number;
  readonly psi: number;
  /** Shared vocabulary: M paths of L×k experts each, and their Zipf(1) frequencies (alias table 0). */
  readonly sharedPaths: Int32Array;
  readonly sharedCount: number;
  readonly sharedAlias: AliasTables;
  /** Paths of the first `startTokens` tokens of every request (startTokens × L × k). */
  readonly startPaths: Int32Array;
  readonly startTokens: number;
  /** Request concentration β_R (Infinity = no request-level skew). */
  readonly betaR: number;
  /** Task concentration β_T (Infinity = tasks share the global distribution). */
  readonly betaT: number;
  /** Latent cluster count and concentration β_C (Infinity = no clusters). */
  readonly clusters: number;
  readonly betaC: number;
  readonly structureSeed: number;
  /** Scratch for alias building and Dirichlet draws (single-threaded use only). */
  readonly scratch: AliasScratch;
  readonly scratchWeights: Float64Array;
  private readonly tasks = new Map<string, LayerDistributions>();

  constructor(
    shape: ModelShape,
    readonly knobs: Knobs,
  ) {
    const L = (this.L = shape.moeLayers);
    const E = (this.E = shape.experts);
    const k = (this.k = shape.topK);
    if (k > E) throw new RangeError(`topK ${k} > experts ${E}`);
    this.zipf = zipfPerLayer(knobs, L);
    if (this.zipf.length !== L) throw new RangeError(`zipfExponent has ${this.zipf.length} layers, model has ${L}`);
    this.tau = knobs.temporalReuse;
    this.tauPrefill = knobs.prefillTemporalReuse ?? knobs.temporalReuse;
    this.rho = knobs.temporalDepth;
    this.mu = knobs.temporalMemory;
    this.gamma = knobs.crossLayer;
    this.psi = knobs.sharedTokens;
    this.betaR = knobs.requestConcentration ?? Infinity;
    this.betaT = knobs.taskConcentration ?? Infinity;
    this.betaC = knobs.clusterConcentration ?? Infinity;
    this.clusters = Number.isFinite(this.betaC) ? knobs.latentClusters : 1;
    this.structureSeed = knobs.structureSeed;
    this.scratch = aliasScratch(E);
    this.scratchWeights = new Float64Array(E);

    const rng = new Rng(`moesim-structure:${this.structureSeed}`);
    this.order = new Int32Array(L * E);
    const given = knobs.popularity.expertOrder;
    for (let l = 0; l < L; l++) {
      const perm = given?.[l] ?? rng.shuffle(Array.from({ length: E }, (_, i) => i));
      this.order.set(perm, l * E);
    }
    const rankOf = new Int32Array(L * E);
    for (let l = 0; l < L; l++) for (let r = 0; r < E; r++) rankOf[l * E + this.order[l * E + r]!] = r;
    this.successor = new Int32Array(Math.max(0, L - 1) * E);
    for (let l = 0; l + 1 < L; l++) {
      for (let e = 0; e < E; e++) this.successor[l * E + e] = this.order[(l + 1) * E + rankOf[l * E + e]!]!;
    }

    const weights = new Float64Array(L * E);
    for (let l = 0; l < L; l++) {
      const a = this.zipf[l]!;
      let z = 0;
      for (let r = 0; r < E; r++) z += Math.pow(r + 1, -a);
      for (let r = 0; r < E; r++) weights[l * E + this.order[l * E + r]!] = Math.pow(r + 1, -a) / z;
    }
    const alias = new AliasTables(L, E);
    for (let l = 0; l < L; l++) alias.build(l, weights, l * E, this.scratch);
    this.global = { weights, alias };

    // Shared vocabulary: M token types with Zipf(1) frequencies w_m, paths built in order of
    // decreasing frequency: each slot takes, with probability γ, the successor of the same slot
    // at the previous layer, else the expert furthest below its target load g (random
    // tie-breaks), so the frequency-weighted load roughly follows g. What stays uneven is
    // compensated below.
    const M = this.psi > 0 ? knobs.sharedVocabulary : 0;
    this.sharedCount = M;
    this.sharedPaths = new Int32Array(M * L * k);
    const prng = new Rng(`moesim-structure:${this.structureSeed}:shared`);
    const load = new Float64Array(L * E);
    let wTotal = 0;
    for (let m = 0; m < M; m++) wTotal += 1 / (m + 1);
    for (let m = 0; m < M; m++) {
      const w = 1 / (m + 1) / wTotal;
      const pos = m * L * k;
      for (let l = 0; l < L; l++) {
        const base = pos + l * k;
        for (let j = 0; j < k; j++) {
          let e = -1;
          if (l > 0 && prng.next() < this.gamma) e = this.successor[(l - 1) * E + this.sharedPaths[base - k + j]!]!;
          if (e < 0 || taken(this.sharedPaths, base, j, e)) {
            let bestGap = Infinity;
            for (let f = 0; f < E; f++) {
              if (taken(this.sharedPaths, base, j, f)) continue;
              const gap = load[l * E + f]! / Math.max(1e-12, weights[l * E + f]!) + prng.next() * 1e-9;
              if (gap < bestGap) {
                bestGap = gap;
                e = f;
              }
            }
          }
          this.sharedPaths[base + j] = e;
          load[l * E + e]! += w;
        }
      }
    }
    // Start paths: drawn like fresh tokens from g with cross-layer successors.
    this.startTokens = knobs.startTokens;
    this.startPaths = new Int32Array(this.startTokens * L * k);
    const srng = new Rng(`moesim-structure:${this.structureSeed}:start`);
    for (let t = 0; t < this.startTokens; t++) {
      for (let l = 0; l < L; l++) {
        const base = (t * L + l) * k;
        for (let j = 0; j < k; j++) {
          let e =
            l > 0 && srng.next() < this.gamma ? this.successor[(l - 1) * E + this.startPaths[base - k + j]!]! : -1;
          for (let tries = 0; (e < 0 || taken(this.startPaths, base, j, e)) && tries < 64; tries++)
            e = alias.sample(l, srng.next());
          if (taken(this.startPaths, base, j, e)) for (e = 0; taken(this.startPaths, base, j, e); e++);
          this.startPaths[base + j] = e;
        }
      }
    }

    this.sharedAlias = new AliasTables(1, Math.max(1, M));
    if (M > 0) {
      const zipf = Float64Array.from({ length: M }, (_, i) => 1 / (i + 1));
      this.sharedAlias.build(0, zipf, 0, aliasScratch(M));
      // Compensate: fresh draws use (g − ψ·load)/(1 − ψ), so that the overall popularity stays
      // g where that is non-negative (where not, a floor of 2 % of g keeps every expert reachable).
      const fresh = new Float64Array(L * E);
      const freshAlias = new AliasTables(L, E);
      for (let l = 0; l < L; l++) {
        for (let e = 0; e < E; e++) {
          const g = weights[l * E + e]!;
          fresh[l * E + e] = Math.max(0.02 * g, (g - this.psi * (load[l * E + e]! / k)) / (1 - this.psi));
        }
        let z = 0;
        for (let e = 0; e < E; e++) z += fresh[l * E + e]!;
        for (let e = 0; e < E; e++) fresh[l * E + e] = fresh[l * E + e]! / z;
        freshAlias.build(l, fresh, l * E, this.scratch);
      }
      this.base = { weights: fresh, alias: freshAlias };
    } else {
      this.base = this.global;
    }
  }

  /**
   * The per-layer distribution of a task and latent cluster: the task's is Dirichlet(β_T ·
   * global), the cluster's Dirichlet(β_C · task's), each drawn from a stream named after the
   * structure seed and the labels, so the same label always gets the same pattern. Without a
   * task (or β_T = ∞) the task level is the global distribution; with β_C = ∞ there is no
   * cluster level.
   */
  distributionFor(task: string | undefined, cluster = 0): LayerDistributions {
    const base = task === undefined || !Number.isFinite(this.betaT) ? undefined : task;
    if (!Number.isFinite(this.betaC))
      return base === undefined ? this.base : this.derived(`task:${base}`, this.betaT, this.base);
    const parent = base === undefined ? this.base : this.derived(`task:${base}`, this.betaT, this.base);
    return this.derived(`task:${base ?? ''}:cluster:${cluster % this.clusters}`, this.betaC, parent);
  }

  /** Dirichlet(β · parent) per layer, drawn once per key from a structure stream named after it. */
  private derived(key: string, beta: number, parent: LayerDistributions): LayerDistributions {
    let d = this.tasks.get(key);
    if (d) return d;
    const { L, E } = this;
    const rng = new Rng(`moesim-structure:${this.structureSeed}:${key}`);
    const weights = new Float64Array(L * E);
    const alias = new AliasTables(L, E);
    for (let l = 0; l < L; l++) {
      dirichletInto(rng, beta, parent.weights, l * E, E, weights, l * E);
      alias.build(l, weights, l * E, this.scratch);
    }
    d = { weights, alias };
    this.tasks.set(key, d);
    return d;
  }
}

function taken(a: Int32Array, base: number, j: number, e: number): boolean {
  for (let i = 0; i < j; i++) if (a[base + i] === e) return true;
  return false;
}

/**
 * Writes a Dirichlet(β · mean) draw into `out[outOff … outOff+n)` (normalised to sum 1).
 * Components whose gamma draw underflows get weight 0; if all do, the mean is used.
 */
export function dirichletInto(
  rng: Rng,
  beta: number,
  mean: ArrayLike<number>,
  meanOff: number,
  n: number,
  out: Float64Array,
  outOff: number,
): void {
  let total = 0;
  for (let i = 0; i < n; i++) {
    const a = beta * mean[meanOff + i]!;
    const g = a > 0 ? rng.gamma(a, 1) : 0;
    out[outOff + i] = g;
    total += g;
  }
  if (!(total > 0) || !Number.isFinite(total)) {
    for (let i = 0; i < n; i++) out[outOff + i] = mean[meanOff + i]!;
    return;
  }
  for (let i = 0; i < n; i++) out[outOff + i] = out[outOff + i]! / total;
}
