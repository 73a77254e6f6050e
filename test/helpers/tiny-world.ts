/**
 * Hand-made worlds for executor unit tests: a model with 1 MB experts (zero compute FLOPs
 * except experts) and a real testbed reduced to a 1 GB/s zero-latency link (1 MB = 1 ms).
 */
import { loadHardware } from '../../hardware-profiles/load.ts';
import type { HardwareProfile, ModelProfile } from '../../hardware-profiles/types.ts';
import type { CostModel, Operation } from '../../sim/cost/types.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import type { RoutingSource } from '../../sim/workload.ts';

export const MB = 1_000_000;

export function tinyModel(layers: number, experts: number, topK: number): ModelProfile {
  return {
    id: `tiny-${layers}l${experts}e${topK}k`,
    name: 'tiny',
    arch: 'decoder-only',
    layers,
    moeLayers: layers,
    moeLayerIndices: Array.from({ length: layers }, (_, i) => i),
    hiddenSize: 64,
    expertIntermediateSize: 128,
    experts,
    topK,
    sharedExperts: 0,
    sharedIntermediateSize: 0,
    denseIntermediateSize: 0,
    ffnMatrices: 3,
    attention: { type: 'GQA', heads: 1, kvHeads: 1, headDim: 64 },
    vocabSize: 100,
    tiedEmbeddings: false,
    dtypes: { expertBytesPerParam: 2, attentionBytesPerParam: 2, embeddingBytesPerParam: 2, kvBytesPerElement: 2 },
    sources: ['test'],
    derived: {
      paramsPerExpert: MB / 2,
      bytesPerExpert: MB,
      sharedExpertBytesPerLayer: 0,
      attentionBytesPerLayer: 0,
      routerBytesPerLayer: 0,
      denseFfnBytesPerLayer: 0,
      embeddingBytes: 0,
      lmHeadBytes: 0,
      nonExpertBytes: 10 * MB,
      allExpertBytes: layers * experts * MB,
      totalBytes: (10 + layers * experts) * MB,
      kvBytesPerTokenPerLayer: 500,
      kvBytesPerToken: 500 * layers,
      expertFlopsPerToken: MB,
      sharedExpertFlopsPerToken: 0,
      denseFfnFlopsPerToken: 0,
      attentionProjFlopsPerToken: 0,
      attentionScoreFlopsPerContextToken: 0,
      routerFlopsPerToken: 0,
      lmHeadFlopsPerToken: 0,
    },
  };
}

/** A real testbed with a 1 GB/s zero-latency link (1 MB expert = 1 ms) and `vramBytes` of VRAM. */
export function tinyHardware(vramBytes = 200 * MB): HardwareProfile {
  const base = loadHardware('a5000-pcie4-1tb');
  return {
    ...base,
    id: 'tiny-hw',
    gpu: { ...base.gpu, vramBytes },
    pcie: { ...base.pcie, h2dBytesPerSec: 1e9, d2hBytesPerSec: 1e9, latencyNs: 0 },
    pinnedHostMemory: true,
  };
}

/**
 * A cost model of fixed kernel durations (ns) for hand-checked timings: attention 10 µs, linear
 * attention (hybrid models' DeltaNet layers) 4 µs, router 1 µs, expert 100 µs (× its segment fraction), LM head 5 µs, everything else free; `idleExpertNs`
 * prices each idle loop iteration. Override any kind with `ns`.
 */
export function stubKernelCost(ns: Partial<Record<Operation['kind'], number>> = {}, idleExpertNs = 0): CostModel {
  const fixed: Record<Operation['kind'], number> = {
    attention: 10_000,
    linearAttention: 4_000,
    crossAttention: 0,
    idleExperts: 0,
    router: 1_000,
    expert: 100_000,
    lmHead: 5_000,
    sharedExperts: 0,
    denseFfn: 0,
    attentionProj: 0,
    cpuAttention: 0,
    transfer: 0,
    ...ns,
  };
  return {
    estimate: (op) => {
      const t =
        op.kind === 'idleExperts'
          ? op.count * idleExpertNs
          : op.kind === 'expert'
            ? Math.ceil(fixed.expert * (op.fraction ?? 1))
            : fixed[op.kind];
      return { ns: t as Ns, bound: 'flops', source: 'roofline', flops: 0, bytes: 0 };
    },
  };
}

/**
 * Routing that sends every token of MoE layer `l` to the experts `choose(l)` (its length is the
 * top-k), whatever the request: hand-made worlds whose expected times follow from the route.
 */
export function fixedRouting(
  moeLayers: number,
  experts: number,
  choose: (layer: number) => readonly number[],
): RoutingSource {
  const topK = choose(0).length;
  return {
    moeLayers,
    experts,
    topK,
    forRequest: () => ({
      route(layer, fromToken, toToken, out) {
        const chosen = choose(layer);
        for (let i = 0; i < toToken - fromToken; i++) for (let j = 0; j < topK; j++) out[i * topK + j] = chosen[j]!;
      },
    }),
  };
}
