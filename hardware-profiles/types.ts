/**
 * Resolved (validated, defaulted, derived) profile types: what the simulator consumes.
 * The zod schemas of the JSON files live in `schema.ts`; `load.ts` turns files into these.
 * Units are in field names. All byte counts are exact integers.
 */

/** Bytes per parameter of a module family. */
export interface ModelDtypes {
  readonly expertBytesPerParam: number;
  readonly attentionBytesPerParam: number;
  readonly embeddingBytesPerParam: number;
  /** Bytes per KV element (K or V value, or latent value for MLA). */
  readonly kvBytesPerElement: number;
}

export interface ModelProfile {
  readonly id: string;
  readonly name: string;
  readonly arch: 'decoder-only' | 'encoder-decoder';
  /** All transformer layers (encoder + decoder for encoder-decoder models). */
  readonly layers: number;
  /** Layers with a routed-expert FFN; the others have a dense FFN. */
  readonly moeLayers: number;
  /** Index (0-based, among `layers`) of each MoE layer, ascending; length = moeLayers. */
  readonly moeLayerIndices: readonly number[];
  readonly hiddenSize: number;
  readonly expertIntermediateSize: number;
  /** Routed experts per MoE layer. */
  readonly experts: number;
  readonly topK: number;
  /** Shared (always-active) experts per MoE layer and their total intermediate size. */
  readonly sharedExperts: number;
  readonly sharedIntermediateSize: number;
  /** Dense FFN intermediate size of non-MoE layers (0 if none). */
  readonly denseIntermediateSize: number;
  /** Expert FFN matrices: 3 for SwiGLU (gate, up, down), 2 for a plain MLP. */
  readonly ffnMatrices: 2 | 3;
  readonly attention: {
    readonly type: 'MHA' | 'GQA' | 'MLA';
    readonly heads: number;
    readonly kvHeads: number;
    readonly headDim: number;
    /** MLA only: latent KV rank and decoupled RoPE dim (KV cache holds kvLoraRank + ropeDim per token per layer). */
    readonly kvLoraRank?: number;
    readonly qLoraRank?: number;
    readonly ropeHeadDim?: number;
    readonly vHeadDim?: number;
    readonly outputGate?: boolean;
  };
  /** Gated DeltaNet blocks of a hybrid model (absent: every layer has full attention). */
  readonly linearAttention?: LinearAttention;
  readonly vocabSize: number;
  readonly tiedEmbeddings: boolean;
  readonly dtypes: ModelDtypes;
  readonly sources: readonly string[];
  readonly derived: ModelDerived;
}

/** Linear-attention (Gated DeltaNet) layers: see `schema.ts` LinearAttentionFileSchema. */
export interface LinearAttention {
  readonly kind: 'gated-deltanet';
  readonly fullAttentionInterval: number;
  readonly keyHeads: number;
  readonly valueHeads: number;
  readonly keyHeadDim: number;
  readonly valueHeadDim: number;
  readonly convKernel: number;
  readonly stateBytesPerElement: number;
}

/** Quantities computed from the profile (see `derive.ts`). Per layer unless stated. */
export interface ModelDerived {
  readonly paramsPerExpert: number;
  readonly bytesPerExpert: number;
  /** Shared experts of one MoE layer, together. */
  readonly sharedExpertBytesPerLayer: number;
  /** Attention projections + norms + router of one layer (MoE layer) — the "dense module" streamed per layer. */
  readonly attentionBytesPerLayer: number;
  readonly routerBytesPerLayer: number;
  /** Dense FFN of a non-MoE layer. */
  readonly denseFfnBytesPerLayer: number;
  readonly embeddingBytes: number;
  readonly lmHeadBytes: number;
  /** Everything except routed experts. */
  readonly nonExpertBytes: number;
  readonly allExpertBytes: number;
  readonly totalBytes: number;
  /** KV cache bytes per token per layer (K+V, or latent for MLA) and over all layers. */
  readonly kvBytesPerTokenPerLayer: number;
  readonly kvBytesPerToken: number;
  /** FLOPs per token (2 per multiply-add). */
  readonly expertFlopsPerToken: number;
  readonly sharedExpertFlopsPerToken: number;
  readonly denseFfnFlopsPerToken: number;
  readonly attentionProjFlopsPerToken: number;
  /** Score + value FLOPs per token per context token attended, per layer. */
  readonly attentionScoreFlopsPerContextToken: number;
  readonly routerFlopsPerToken: number;
  readonly lmHeadFlopsPerToken: number;
  /** Hybrid models only: linear-attention layers, their parameters, recurrent state and FLOPs per token (per layer). */
  readonly linearAttentionLayers?: number;
  readonly linearAttentionParamsPerLayer?: number;
  readonly linearStateBytesPerLayer?: number;
  readonly linearAttentionFlopsPerToken?: number;
  /**
   * Hybrid models only: what one layer of each kind reads for its attention block (its
   * projections plus the layer's norms, no router; the `attention` / `linearAttention` ops),
   * the projection FLOPs per token of a full-attention layer, and the recurrent state one
   * sequence holds over all linear-attention layers (reserved per request beside its KV).
   */
  readonly fullAttentionBytesPerLayer?: number;
  readonly linearAttentionBytesPerLayer?: number;
  readonly fullAttentionProjFlopsPerToken?: number;
  readonly recurrentStateBytesPerSequence?: number;
}

export interface GpuProfile {
  readonly id: string;
  readonly name: string;
  readonly vramBytes: number;
  readonly hbmBytesPerSec: number;
  /** Dense BF16 tensor FLOP/s (no sparsity). */
  readonly bf16FlopsPerSec: number;
  /** Dense FP32 FLOP/s (CUDA cores), when the profile gives it; FP32 models use it. */
  readonly fp32FlopsPerSec?: number;
  readonly kernelLaunchNs: number;
  /** GEMM efficiency: eff(tokens) = maxFraction · tokens / (tokens + halfSaturationTokens). */
  readonly gemmEfficiency: { readonly maxFraction: number; readonly halfSaturationTokens: number };
  /** Fraction of peak HBM bandwidth that kernels reach. */
  readonly hbmEfficiency: number;
  /** Measured tables override the roofline: op → points (tokens, ns), sorted by tokens. */
  readonly measured?: Readonly<Record<string, readonly (readonly [number, number])[]>>;
  readonly priceUsd?: number;
  readonly tdpWatts?: number;
  readonly sources: readonly string[];
}

export interface CpuProfile {
  readonly id: string;
  readonly name: string;
  readonly cores: number;
  /** Vector FLOP/s per core (FP32/BF16 AVX, as used for attention). */
  readonly vectorFlopsPerSecPerCore: number;
  /** Fraction of peak vector FLOP/s attention kernels reach. */
  readonly vectorEfficiency: number;
  readonly memoryChannels: number;
  /** Sustained host-DRAM bandwidth (all channels). */
  readonly dramBytesPerSec: number;
  /** Bandwidth a single core can draw. */
  readonly perCoreDramBytesPerSec: number;
  /** Theoretical peak host-DRAM bandwidth (channels × MT/s × 8 B, no efficiency): MoE-CAP's CPU-side peak. */
  readonly dramPeakBytesPerSec?: number;
  /** ISA extensions (absent in older profiles). */
  readonly isa?: readonly string[];
  readonly priceUsd?: number;
  readonly tdpWatts?: number;
  readonly sources: readonly string[];
}

export interface PcieProfile {
  readonly id: string;
  readonly generation: number;
  readonly lanes: number;
  /** Effective (measured, pinned) bandwidths. */
  readonly h2dBytesPerSec: number;
  readonly d2hBytesPerSec: number;
  /** Fixed cost per transfer (DMA setup + launch). */
  readonly latencyNs: number;
  /** Effective bandwidth factor when host memory is pageable instead of pinned. */
  readonly pageableFactor: number;
  readonly sources: readonly string[];
}

/** An NVMe drive (see `schema.ts` DriveFileSchema), times in ns. */
export interface DriveProfile {
  readonly id: string;
  readonly name: string;
  readonly seqReadBytesPerSec: number;
  /** (queue depth, ns) points, increasing depth. */
  readonly readLatencyNsByQueueDepth: readonly (readonly [number, number])[];
  /** A read is rounded up to whole units of this many bytes (page / LBA size). */
  readonly readGranularityBytes: number;
  readonly capacityBytes: number;
  readonly sources: readonly string[];
}

export interface HardwareProfile {
  readonly id: string;
  readonly name: string;
  readonly gpu: GpuProfile;
  readonly cpu: CpuProfile;
  readonly pcie: PcieProfile;
  readonly hostDramBytes: number;
  readonly pinnedHostMemory: boolean;
  /** The NVMe drive, when the testbed names one. */
  readonly drive?: DriveProfile;
  /** Costs for MoE-CAP's cost model. */
  readonly cost: {
    readonly boardUsd: number;
    readonly dramUsdPerGb: number;
    readonly ssdUsd: number;
    readonly lifetimeYears: number;
    readonly electricityUsdPerKwh: number;
    /** Overrides of the GPU / CPU profile's `priceUsd` (MoE-CAP cost; optional). */
    readonly gpuUsd?: number;
    readonly cpuUsd?: number;
  };
  readonly sources: readonly string[];
}

/** Host-side work of one module call under a runtime. */
export interface ModuleWork {
  readonly ops: number;
  readonly syncs: number;
}

/**
 * A runtime profile (DESIGN §5): how a software stack turns a module into work. Resolved from
 * `runtimes/<id>.json` (µs → ns); see `runtimes/README.md` for the calibration rule.
 */
export interface RuntimeProfile {
  readonly id: string;
  readonly name: string;
  /** Host cost of one dispatched op; `null` = the GPU's kernel launch cost. */
  readonly dispatchNs: number | null;
  readonly syncNs: number;
  readonly modules: Readonly<
    Record<
      | 'attention'
      | 'crossAttention'
      | 'attentionProj'
      | 'router'
      | 'expert'
      | 'idleExpert'
      | 'sharedExperts'
      | 'denseFfn'
      | 'lmHead',
      ModuleWork
    >
  >;
  readonly expertLoop: 'active' | 'all';
  readonly expertOrder: 'index' | 'ready-first';
  readonly attention: 'eager' | 'fused';
  readonly gemmEfficiency?: { readonly maxFraction: number; readonly halfSaturationTokens: number };
  readonly cpuAttention: {
    readonly kernel: string;
    readonly fmaPeakFraction: number | null;
    readonly threads: number | null;
  };
  /** Host-resident expert computation (schema.ts `hostExperts`; µs → ns). */
  readonly hostExperts?: {
    readonly kernels: string | null;
    readonly layerSyncNs: number;
    readonly overlap: 'concurrent' | 'serial';
    readonly zeroCopyEfficiency: number;
    readonly source: string;
  };
  readonly calibration: readonly {
    readonly figure: string;
    readonly model: string;
    readonly hardware: string;
    readonly value: number;
    readonly unit: 'ms' | 'us';
    readonly source: string;
    readonly notes?: string;
  }[];
  readonly sources: readonly string[];
}
