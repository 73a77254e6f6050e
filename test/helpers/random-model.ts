/**
 * A small random MoE model for property tests: the arbitraries draw its shape (`RandomModelShape`),
 * this builds the profile (derived sizes from `hardware-profiles/derive.ts`). The id carries the
 * shape, so a counterexample names its model.
 */
import { deriveModel, type ModelDeriveInput } from '../../hardware-profiles/derive.ts';
import type { ModelProfile } from '../../hardware-profiles/types.ts';

export interface RandomModelShape {
  readonly layers: number;
  /** Dense layers before the MoE ones (at most layers − 1 are used). */
  readonly denseLeading: number;
  /** A multiple of 64 (the head size). */
  readonly hidden: number;
  readonly inter: number;
  readonly experts: number;
  readonly topK: number;
  readonly shared: boolean;
  readonly mla: boolean;
  /** Default 500. */
  readonly vocab?: number;
}

export function randomModel(r: RandomModelShape, idPrefix: string): ModelProfile {
  const dense = Math.min(r.denseLeading, r.layers - 1);
  const heads = r.hidden / 64;
  const input: ModelDeriveInput = {
    arch: 'decoder-only',
    layers: r.layers,
    moeLayers: r.layers - dense,
    moeLayerIndices: Array.from({ length: r.layers - dense }, (_, i) => i + dense),
    hiddenSize: r.hidden,
    expertIntermediateSize: r.inter,
    experts: r.experts,
    topK: Math.min(r.topK, r.experts),
    sharedExperts: r.shared ? 1 : 0,
    sharedIntermediateSize: r.shared ? r.inter : 0,
    denseIntermediateSize: dense > 0 ? 2 * r.inter : 0,
    ffnMatrices: 3,
    attention: r.mla
      ? {
          type: 'MLA',
          heads,
          kvHeads: heads,
          headDim: 96,
          kvLoraRank: 128,
          ropeHeadDim: 32,
          vHeadDim: 64,
          qLoraRank: 256,
        }
      : { type: 'GQA', heads, kvHeads: Math.max(1, heads / 2), headDim: 64 },
    vocabSize: r.vocab ?? 500,
    tiedEmbeddings: false,
    dtypes: { expertBytesPerParam: 2, attentionBytesPerParam: 2, embeddingBytesPerParam: 2, kvBytesPerElement: 2 },
  };
  return { ...input, id: `${idPrefix}${JSON.stringify(r)}`, name: 'random', sources: [], derived: deriveModel(input) };
}
