/**
 * Small MoE-Infinity executor worlds shared by the property tests (moe-infinity.test.ts,
 * eamc-hint-policy.test.ts): a model profile shrunk to L layers of E experts, top-k, and a
 * clustered routing source (request r of cluster r % 3 prefers a few experts per layer), and
 * the fast-check fields of such a world's shape and workload.
 */
import * as fc from 'fast-check';
import { deriveModel } from '../../hardware-profiles/derive.ts';
import { loadModel } from '../../hardware-profiles/load.ts';
import type { ModelProfile } from '../../hardware-profiles/types.ts';
import { Rng } from '../../sim/kernel/rng.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import type { RequestSpec, RoutingSource, Workload } from '../../sim/workload.ts';

/** `base` with every layer an MoE layer of `E` experts, top-`k`, `L` layers. */
export function smallModel(base: string, L: number, E: number, k: number): ModelProfile {
  const m = loadModel(base);
  const input = {
    ...m,
    layers: L,
    moeLayers: L,
    moeLayerIndices: Array.from({ length: L }, (_, i) => i),
    experts: E,
    topK: k,
    details: { ...m.details, decoderLayers: L },
  };
  return { ...input, id: `${base}-small-${L}l${E}e${k}k`, derived: deriveModel(input) };
}

/** Clustered routing: request r of cluster r % 3 prefers a few experts per layer, with noise. */
export function clusteredRouting(L: number, E: number, k: number, seed: number): RoutingSource {
  return {
    moeLayers: L,
    experts: E,
    topK: k,
    forRequest: (spec) => {
      const rng = new Rng(`route-${seed}-${spec.id}`);
      const c = spec.id % 3;
      return {
        route(layer, from, to, out) {
          let o = 0;
          for (let t = from; t < to; t++) {
            const start = o;
            while (o - start < k) {
              const e = rng.next() < 0.7 ? (c * 3 + layer + rng.int(2) + (o - start)) % E : rng.int(E);
              let dup = false;
              for (let j = start; j < o; j++) if (out[j] === e) dup = true;
              if (!dup) out[o++] = e;
            }
          }
        },
      };
    },
  };
}

/**
 * Fast-check record fields of a small serving world's shape (L layers, E experts, top-k) and
 * workload (requests, Poisson rate or all at once, lengths, batching), in generation order:
 * spread into a test's own `fc.record`.
 */
export function servingWorldFields(requests: { min: number; max: number }) {
  return {
    L: fc.integer({ min: 1, max: 4 }),
    E: fc.integer({ min: 2, max: 8 }),
    k: fc.integer({ min: 1, max: 2 }),
    requests: fc.integer(requests),
    ratePerS: fc.option(fc.double({ min: 0.5, max: 50, noNaN: true }), { nil: undefined }),
    promptMax: fc.integer({ min: 1, max: 32 }),
    outputMax: fc.integer({ min: 1, max: 8 }),
    batching: fc.constantFrom('static' as const, 'continuous' as const),
    maxBatchSize: fc.integer({ min: 1, max: 4 }),
  };
}

/**
 * The workload of a world drawn from `servingWorldFields` (and a seed): `requests` requests
 * with lengths uniform in 1…promptMax / 1…outputMax, Poisson at `ratePerS` (all at time 0
 * without), routed by `clusteredRouting` with top-min(k, E).
 */
export function smallWorkload(w: {
  L: number;
  E: number;
  k: number;
  requests: number;
  ratePerS: number | undefined;
  promptMax: number;
  outputMax: number;
  seed: number;
}): Workload {
  const k = Math.min(w.k, w.E);
  const rng = new Rng(`world-${w.seed}`);
  let tS = 0;
  const requests: RequestSpec[] = Array.from({ length: w.requests }, (_, id) => {
    if (w.ratePerS !== undefined) tS += rng.exponential(1 / w.ratePerS);
    return {
      id,
      arrivalNs: Math.round(tS * 1e9) as Ns,
      promptTokens: 1 + rng.int(w.promptMax),
      outputTokens: 1 + rng.int(w.outputMax),
    };
  });
  return { requests, routing: clusteredRouting(w.L, w.E, k, w.seed), describe: 'clustered' };
}
