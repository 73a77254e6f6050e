/**
 * zod schemas of the profile JSON files under `hardware-profiles/`:
 *
 * | folder      | schema              | one file per                         |
 * | ----------- | ------------------- | ------------------------------------ |
 * | `models/`   | `ModelFileSchema`   | MoE model architecture               |
 * | `gpus/`     | `GpuFileSchema`     | GPU (datasheet + efficiency knobs)   |
 * | `cpus/`     | `CpuFileSchema`     | host CPU socket                      |
 * | `pcie/`     | `PcieFileSchema`    | PCIe link (generation × lanes)       |
 * | `testbeds/` | `TestbedFileSchema` | a machine: gpu + cpu + pcie + DRAM   |
 *
 * Conventions:
 * - Objects are strict: an unknown (e.g. misspelt) field is an error, not silently ignored.
 * - Units are in field names and are *decimal* unless the name says otherwise: `GBPerSec`
 *   = 1e9 B/s, `Tflops` = 1e12 FLOP/s, `GiB` = 2^30 B, `Us` = microseconds.
 * - Every file has `sources: string[]` (where each number came from: URL, datasheet,
 *   `reference-facts.md` section, or "assumption: ...") and an optional free-text `notes`.
 *
 * `load.ts` parses files with these schemas and resolves them into the runtime types of
 * `types.ts` (SI units, integer bytes, derived quantities).
 */
import { z } from 'zod';

/** Op kinds a GPU measured table may cover (the token-indexed GPU operations of `sim/cost/types.ts`). */
export const MEASURABLE_GPU_OPS = ['expert', 'sharedExperts', 'denseFfn', 'attentionProj', 'router', 'lmHead'] as const;
export type MeasurableGpuOp = (typeof MEASURABLE_GPU_OPS)[number];

const positiveInt = z.int().positive();
const nonNegativeInt = z.int().nonnegative();
const positiveNumber = z.number().positive();
/**
 * Model shapes within the simulator's range (not model constants; real models are far inside:
 * 256 experts, 128 layers, widths of 16 384): per-layer × per-expert tables of the policies stay
 * allocatable (layers × experts ≤ 2^24 cells) and widths keep parameter counts exact.
 */
const width = positiveInt.max(2 ** 20, 'at most 1048576 (2^20)');
const layerCount = positiveInt.max(1024, 'at most 1024 layers');
const expertCount = positiveInt.max(2 ** 14, 'at most 16384 experts per layer');
const widthOrZero = nonNegativeInt.max(2 ** 20, 'at most 1048576 (2^20)');
/** Bytes per parameter or element: FP64 is 8; more is a typo (it would size every pool past reach). */
const bytesPerElement = positiveNumber.max(16, 'at most 16 bytes');
/** Cores, threads and channels: the simulator keeps per-core state (the largest CPUs have a few hundred). */
const coreCount = positiveInt.max(4096, 'at most 4096');
const fraction = z.number().gt(0).lte(1);
/**
 * A memory or drive size: positive and at most 1 PiB (2^20 GiB, 1e6 GB). Not a model constant:
 * the simulator's range. Sizes become integer byte counts, which must stay exact (below 2^53)
 * when several are added up; no single machine has a petabyte of memory.
 */
const MAX_SIZE_GIB = 2 ** 20;
const sizeGiB = positiveNumber.max(MAX_SIZE_GIB, `at most ${MAX_SIZE_GIB} GiB (1 PiB: byte counts must stay exact)`);
const sizeGB = positiveNumber.max(1e6, 'at most 1000000 GB (1 PB: byte counts must stay exact)');
const profileId = z.string().regex(/^[a-z0-9][a-z0-9._-]*$/, 'ids are lower-case letters, digits, ".", "_" and "-"');
const sources = z.array(z.string().min(1)).min(1, 'say where the numbers come from');
const notes = z.string().optional();

// ---------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------

/**
 * Attention of one layer. For MHA/GQA, `headDim` is the per-head Q/K/V width. For MLA
 * (DeepSeek), `headDim` is the query/key head width *including* the decoupled RoPE part
 * (`qk_nope_head_dim + qk_rope_head_dim` = 128 + 64 = 192), `vHeadDim` the value head width,
 * `kvLoraRank` the latent KV width and `qLoraRank` the query low-rank width (absent when
 * queries are projected directly, as in DeepSeek-V2-Lite).
 */
export const AttentionFileSchema = z
  .strictObject({
    type: z.enum(['MHA', 'GQA', 'MLA']),
    heads: width,
    kvHeads: width,
    headDim: width,
    /** Biases on the Q, K and V projections (Qwen1.5/2, Phi-3.5, NLLB). */
    qkvBias: z.boolean().default(false),
    /** Bias on the output projection (NLLB). */
    outBias: z.boolean().default(false),
    /** Q/K RMSNorm: 'per-head' (Qwen3, weights of headDim each) or 'full' (OLMoE, over all heads). */
    qkNorm: z.enum(['none', 'per-head', 'full']).default('none'),
    kvLoraRank: width.optional(),
    qLoraRank: width.optional(),
    ropeHeadDim: width.optional(),
    vHeadDim: width.optional(),
    /** A sigmoid gate on the attention output computed by the Q projection (Qwen3-Next/3.5 `attn_output_gate`: q_proj is 2·heads·headDim wide). */
    outputGate: z.boolean().optional(),
  })
  .superRefine((a, ctx) => {
    const mla = a.type === 'MLA';
    if (mla) {
      for (const f of ['kvLoraRank', 'ropeHeadDim', 'vHeadDim'] as const) {
        if (a[f] === undefined) ctx.addIssue({ code: 'custom', path: [f], message: `MLA needs ${f}` });
      }
      if (a.ropeHeadDim !== undefined && a.ropeHeadDim >= a.headDim) {
        ctx.addIssue({
          code: 'custom',
          path: ['ropeHeadDim'],
          message: 'ropeHeadDim must be < headDim (headDim includes it)',
          input: a.ropeHeadDim,
        });
      }
    } else {
      for (const f of ['kvLoraRank', 'qLoraRank', 'ropeHeadDim'] as const) {
        if (a[f] !== undefined)
          ctx.addIssue({ code: 'custom', path: [f], message: `${f} is only for MLA`, input: a[f] });
      }
      if (a.heads % a.kvHeads !== 0) {
        ctx.addIssue({
          code: 'custom',
          path: ['kvHeads'],
          message: 'heads must be a multiple of kvHeads',
          input: a.kvHeads,
        });
      }
      if (a.type === 'MHA' && a.kvHeads !== a.heads) {
        ctx.addIssue({
          code: 'custom',
          path: ['kvHeads'],
          message: 'MHA has kvHeads = heads (use GQA otherwise)',
          input: a.kvHeads,
        });
      }
    }
  });

/**
 * Linear-attention (Gated DeltaNet) blocks of a hybrid model (Qwen3-Next, Qwen3.5/3.6): every
 * `fullAttentionInterval`-th layer (layers interval−1, 2·interval−1, …) has full attention with a
 * KV cache; the others hold a fixed-size recurrent state per sequence instead (no KV growth).
 */
export const LinearAttentionFileSchema = z.strictObject({
  kind: z.literal('gated-deltanet'),
  fullAttentionInterval: positiveInt,
  keyHeads: width,
  valueHeads: width,
  keyHeadDim: width,
  valueHeadDim: width,
  convKernel: width,
  /** Bytes per recurrent-state element (`mamba_ssm_dtype` float32 = 4). */
  stateBytesPerElement: bytesPerElement.default(4),
});

/** Bytes per parameter of each module family (2 = BF16, 1 = FP8/INT8, 0.5 = INT4). */
export const DtypesFileSchema = z.strictObject({
  /** All FFN weights: routed experts, shared experts, dense FFNs. */
  expertBytesPerParam: bytesPerElement,
  /** Attention projections, norms, routers, shared-expert gates. */
  attentionBytesPerParam: bytesPerElement,
  /** Token embedding and LM head. */
  embeddingBytesPerParam: bytesPerElement,
  /** Bytes per cached K/V (or MLA latent) element. */
  kvBytesPerElement: bytesPerElement,
});

const BF16_DTYPES = {
  expertBytesPerParam: 2,
  attentionBytesPerParam: 2,
  embeddingBytesPerParam: 2,
  kvBytesPerElement: 2,
} as const;

/**
 * A MoE model. Placement of the MoE layers, one of:
 * - nothing: every layer is MoE (`moeLayers` = `layers`);
 * - `firstDenseLayers: n`: the first n layers have a dense FFN (DeepSeek);
 * - `moeLayerIndices: [...]`: explicit 0-based indices among `layers` (required for
 *   encoder-decoder models, whose layer list is the encoder layers then the decoder layers).
 * `moeLayers` is always given and is checked against the placement.
 */
export const ModelFileSchema = z
  .strictObject({
    id: profileId,
    name: z.string().min(1),
    hfRepo: z.string().optional(),
    arch: z.enum(['decoder-only', 'encoder-decoder']),
    layers: layerCount,
    /** Encoder-decoder only: encoderLayers + decoderLayers = layers. */
    encoderLayers: layerCount.optional(),
    decoderLayers: layerCount.optional(),
    moeLayers: layerCount,
    firstDenseLayers: nonNegativeInt.optional(),
    moeLayerIndices: z.array(nonNegativeInt).optional(),
    /** Norms per (encoder or decoder-only) layer; decoder layers of encoder-decoder models have one more (cross-attention). */
    normsPerLayer: nonNegativeInt.default(2),
    /** LayerNorm with bias (2·hidden parameters) instead of RMSNorm (hidden). */
    normBias: z.boolean().default(false),
    hiddenSize: width,
    expertIntermediateSize: width,
    experts: expertCount,
    topK: positiveInt,
    /** 3 = SwiGLU / gated (gate, up, down); 2 = plain MLP (up, down). Applies to all FFNs of the model. */
    ffnMatrices: z.union([z.literal(2), z.literal(3)], 'ffnMatrices is 3 (SwiGLU / gated) or 2 (plain MLP)'),
    /** FFN biases (NLLB: fc1 bias of width intermediate, fc2 bias of width hidden). */
    ffnBias: z.boolean().default(false),
    sharedExperts: nonNegativeInt.max(2 ** 14, 'at most 16384').default(0),
    /** Total intermediate width of all shared experts of a layer together. */
    sharedIntermediateSize: widthOrZero.default(0),
    /** A sigmoid gate hidden→1 scaling the shared-expert output (Qwen1.5/2-MoE). */
    sharedExpertGate: z.boolean().default(false),
    /** Dense FFN width of the non-MoE layers. */
    denseIntermediateSize: widthOrZero.default(0),
    attention: AttentionFileSchema,
    vocabSize: positiveInt.max(2 ** 22, 'at most 4194304 (2^22)'),
    tiedEmbeddings: z.boolean(),
    lmHeadBias: z.boolean().default(false),
    dtypes: DtypesFileSchema.default(BF16_DTYPES),
    linearAttention: LinearAttentionFileSchema.optional(),
    /** The expert format the dtypes were derived from (`sim/cost/formats.ts` id), when quantised. */
    expertFormat: z.string().optional(),
    /** Fields whose values the sources did not confirm (e.g. "hiddenSize: from memory"); a profile says so rather than hiding it. */
    unverified: z.array(z.string().min(1)).optional(),
    sources,
    notes,
  })
  .superRefine((m, ctx) => {
    const issue = (path: (string | number)[], message: string, input?: unknown): void =>
      ctx.addIssue({ code: 'custom', path, message, input });
    if (m.topK > m.experts) issue(['topK'], `topK must be ≤ experts (${m.experts})`, m.topK);
    if (m.arch === 'encoder-decoder') {
      if (m.encoderLayers === undefined) issue(['encoderLayers'], 'encoder-decoder models need encoderLayers');
      if (m.decoderLayers === undefined) issue(['decoderLayers'], 'encoder-decoder models need decoderLayers');
      if (
        m.encoderLayers !== undefined &&
        m.decoderLayers !== undefined &&
        m.encoderLayers + m.decoderLayers !== m.layers
      ) {
        issue(
          ['layers'],
          `layers must equal encoderLayers + decoderLayers (${m.encoderLayers + m.decoderLayers})`,
          m.layers,
        );
      }
      if (m.moeLayerIndices === undefined)
        issue(['moeLayerIndices'], 'encoder-decoder models list their MoE layers explicitly');
    } else {
      if (m.encoderLayers !== undefined) issue(['encoderLayers'], 'only for encoder-decoder models', m.encoderLayers);
      if (m.decoderLayers !== undefined) issue(['decoderLayers'], 'only for encoder-decoder models', m.decoderLayers);
    }
    if (m.firstDenseLayers !== undefined && m.moeLayerIndices !== undefined) {
      issue(['firstDenseLayers'], 'give either firstDenseLayers or moeLayerIndices, not both', m.firstDenseLayers);
    }
    if (m.moeLayerIndices !== undefined) {
      const idx = m.moeLayerIndices;
      idx.forEach((v, i) => {
        if (v >= m.layers) issue(['moeLayerIndices', i], `index must be < layers (${m.layers})`, v);
        const prev = idx[i - 1];
        if (prev !== undefined && v <= prev) issue(['moeLayerIndices', i], 'indices must be strictly increasing', v);
      });
      if (idx.length !== m.moeLayers) issue(['moeLayers'], `moeLayerIndices lists ${idx.length} layers`, m.moeLayers);
    } else {
      const expected = m.layers - (m.firstDenseLayers ?? 0);
      if (m.moeLayers !== expected) issue(['moeLayers'], `layers − firstDenseLayers = ${expected}`, m.moeLayers);
    }
    if (m.sharedExperts > 0 !== m.sharedIntermediateSize > 0) {
      issue(
        ['sharedIntermediateSize'],
        'sharedExperts and sharedIntermediateSize must be both zero or both positive',
        m.sharedIntermediateSize,
      );
    }
    if (m.sharedExpertGate && m.sharedExperts === 0)
      issue(['sharedExpertGate'], 'a shared-expert gate needs shared experts', true);
    if (m.moeLayers < m.layers && m.denseIntermediateSize === 0) {
      issue(['denseIntermediateSize'], 'the model has non-MoE layers: give their dense FFN width', 0);
    }
  });
export type ModelFile = z.infer<typeof ModelFileSchema>;

// ---------------------------------------------------------------------------------------
// GPUs
// ---------------------------------------------------------------------------------------

/** Measured durations of one op: points (tokens, microseconds), strictly increasing in tokens. */
export const MeasuredTableFileSchema = z.strictObject({
  pointsTokensUs: z
    .array(z.tuple([z.number().nonnegative(), positiveNumber]))
    .min(2, 'a measured table needs at least two points')
    .superRefine((pts, ctx) => {
      pts.forEach((p, i) => {
        const prev = pts[i - 1];
        if (prev !== undefined && p[0] <= prev[0]) {
          ctx.addIssue({
            code: 'custom',
            path: [i, 0],
            message: 'token counts must be strictly increasing',
            input: p[0],
          });
        }
      });
    }),
  source: z.string().optional(),
});

/**
 * Measured-table keys: an op kind (`expert`) or an op kind for one model (`expert@mixtral-8x7b`).
 * Model-specific keys win over plain ones; a plain key applies to every model, which only makes
 * sense for tables measured on the model the experiment uses.
 */
const measuredKey = z
  .string()
  .regex(
    new RegExp(`^(${MEASURABLE_GPU_OPS.join('|')})(@[a-z0-9][a-z0-9._-]*)?$`),
    `keys are <op>[@<model id>] with op one of ${MEASURABLE_GPU_OPS.join(', ')}`,
  );

export const GpuFileSchema = z.strictObject({
  id: profileId,
  name: z.string().min(1),
  /** Nominal memory in GiB (2^30 B), as marketed ("24 GB" cards have 24 GiB). */
  vramGiB: sizeGiB,
  /** Peak memory bandwidth, 1e9 B/s. */
  hbmGBPerSec: positiveNumber,
  /** Dense (no 2:4 sparsity) BF16 tensor TFLOP/s with FP32 accumulate. */
  bf16DenseTflops: positiveNumber,
  /** Dense FP32 TFLOP/s without tensor cores (PyTorch's default for FP32 matmul: TF32 off); used for FP32 checkpoints (Switch, NLLB). */
  fp32DenseTflops: positiveNumber.optional(),
  kernelLaunchUs: z.number().nonnegative(),
  gemmEfficiency: z.strictObject({
    maxFraction: fraction,
    halfSaturationTokens: positiveNumber,
  }),
  hbmEfficiency: fraction,
  measured: z.record(measuredKey, MeasuredTableFileSchema).optional(),
  priceUsd: positiveNumber.optional(),
  tdpWatts: positiveNumber.optional(),
  sources,
  notes,
});
export type GpuFile = z.infer<typeof GpuFileSchema>;

// ---------------------------------------------------------------------------------------
// CPUs
// ---------------------------------------------------------------------------------------

export const CpuFileSchema = z.strictObject({
  id: profileId,
  name: z.string().min(1),
  cores: coreCount,
  /** Peak FP32 vector FLOPs per cycle per core (FMA units × SIMD lanes × 2). */
  vectorFlopsPerCyclePerCore: positiveNumber,
  /** All-core clock sustained under vector load (GHz). */
  sustainedClockGHz: positiveNumber,
  /** Fraction of peak vector FLOP/s attention kernels reach. */
  vectorEfficiency: fraction,
  memoryChannels: coreCount,
  /** DIMM transfer rate (DDR4-3200 = 3200 MT/s); 8 bytes per transfer per channel. */
  memoryMegaTransfersPerSec: positiveNumber,
  /** Sustained (STREAM-like) fraction of the peak DRAM bandwidth. */
  dramEfficiency: fraction,
  /** Bandwidth one core can draw on its own (GB/s). */
  perCoreDramGBPerSec: positiveNumber,
  /** Vector/matrix ISA extensions the engines' CPU kernels use (llama.cpp, kTransformers pick kernels by them). */
  isa: z.array(z.enum(['avx2', 'avx512', 'avx512-bf16', 'avx512-vnni', 'amx', 'neon'])).optional(),
  priceUsd: positiveNumber.optional(),
  tdpWatts: positiveNumber.optional(),
  sources,
  notes,
});
export type CpuFile = z.infer<typeof CpuFileSchema>;

// ---------------------------------------------------------------------------------------
// PCIe
// ---------------------------------------------------------------------------------------

export const PcieFileSchema = z.strictObject({
  id: profileId,
  generation: z.int().min(1).max(7),
  lanes: z.union([z.literal(1), z.literal(2), z.literal(4), z.literal(8), z.literal(16)], 'lanes is 1, 2, 4, 8 or 16'),
  /** Theoretical per-direction bandwidth (GB/s), for reference only. */
  theoreticalGBPerSec: positiveNumber,
  /** Effective pinned bandwidths (GB/s), large copies through the copy engine. */
  h2dGBPerSec: positiveNumber,
  d2hGBPerSec: positiveNumber,
  /** Fixed cost per transfer (DMA setup, launch, synchronisation), µs. */
  latencyUs: z.number().nonnegative(),
  /** Effective-bandwidth factor for pageable host memory. */
  pageableFactor: fraction,
  sources,
  notes,
});
export type PcieFile = z.infer<typeof PcieFileSchema>;

// ---------------------------------------------------------------------------------------
// Testbeds
// ---------------------------------------------------------------------------------------

/** A component reference: an id from the component folder, or a path ending in `.json` (relative to the testbed file). */
const componentRef = z.string().min(1);

/** An NVMe drive: sequential read bandwidth and per-request read latency by queue depth. */
export const DriveFileSchema = z.strictObject({
  id: profileId,
  name: z.string().min(1),
  /** Host interface, e.g. "pcie4x4". */
  interface: z.string().min(1),
  capacityGB: sizeGB,
  /** Sequential read (large requests, high queue depth), 1e9 B/s. */
  seqReadGBPerSec: positiveNumber,
  /**
   * Per-request read latency (µs) at queue depths (reads outstanding): points (queue depth, µs),
   * increasing depth; the simulator interpolates linearly and clamps at the ends.
   */
  readLatencyUsByQueueDepth: z
    .array(z.tuple([positiveInt.max(2 ** 16, 'at most 65536'), positiveNumber]))
    .min(1)
    .refine((pts) => pts.every((p, i) => i === 0 || p[0] > pts[i - 1]![0]), 'queue depths must increase'),
  /** The unit a read is rounded up to (page / LBA size), KiB. Default 4 (the Linux page size). */
  readGranularityKiB: positiveNumber.default(4),
  sources,
  notes,
});
export type DriveFile = z.infer<typeof DriveFileSchema>;

/** A host DRAM configuration that overrides the CPU profile's default (a user's own DIMMs). */
export const DramFileSchema = z.strictObject({
  type: z.enum(['ddr4', 'ddr5']),
  megaTransfersPerSec: positiveNumber,
  channels: coreCount,
  /** Sustained fraction of peak; absent = the CPU profile's `dramEfficiency`. */
  efficiency: fraction.optional(),
});

export const TestbedFileSchema = z.strictObject({
  id: profileId,
  name: z.string().min(1),
  gpu: componentRef,
  cpu: componentRef,
  pcie: componentRef,
  /** Installed host DRAM in GiB (DIMMs are binary-sized). */
  hostDramGiB: sizeGiB,
  /** Whether weights/KV in host memory are pinned (page-locked). */
  pinnedHostMemory: z.boolean(),
  /** The installed DIMM configuration, overriding the CPU profile's channels and transfer rate. */
  dram: DramFileSchema.optional(),
  /** An NVMe drive holding the weights (id from `drives/` or a `.json` path). */
  drive: componentRef.optional(),
  /** For MoE-CAP's cost metric. */
  cost: z.strictObject({
    /** Chassis, motherboard, PSU, cooling (everything but GPU, CPU, DRAM, SSD). */
    boardUsd: z.number().nonnegative(),
    dramUsdPerGb: z.number().nonnegative(),
    ssdUsd: z.number().nonnegative(),
    lifetimeYears: positiveNumber,
    electricityUsdPerKwh: z.number().nonnegative(),
    /** Purchase price of the GPU (overrides the GPU profile's `priceUsd`; for GPUs whose profile has none). */
    gpuUsd: z.number().nonnegative().optional(),
    /** Purchase price of the CPU (overrides the CPU profile's `priceUsd`). */
    cpuUsd: z.number().nonnegative().optional(),
  }),
  sources,
  notes,
});
export type TestbedFile = z.infer<typeof TestbedFileSchema>;

// ---------------------------------------------------------------------------------------
// Runtimes (the software stack beside the hardware; see `runtimes/README.md`)
// ---------------------------------------------------------------------------------------

/** Host-side work of one module call: eager ops dispatched and device→host synchronisations. */
const ModuleWorkSchema = z.strictObject({
  /** Ops (kernels, views, Python-level tensor calls) dispatched by the host for one call. */
  ops: z.number().nonnegative(),
  /** Device→host synchronisations in one call (`.item()`, `.any()`, boolean-mask indexing, `torch.where` / `nonzero`). */
  syncs: z.number().nonnegative().default(0),
});

/** The GPU modules a runtime prices (`sim/cost/types.ts` op kinds, plus cross-attention and idle loop iterations). */
export const RUNTIME_MODULES = [
  'attention',
  'crossAttention',
  'attentionProj',
  'router',
  'expert',
  'idleExpert',
  'sharedExperts',
  'denseFfn',
  'lmHead',
] as const;
export type RuntimeModule = (typeof RUNTIME_MODULES)[number];

/** One calibration figure: a measurement of this runtime with everything resident, and what the profile gives. */
export const CalibrationFigureSchema = z.strictObject({
  /** What is measured, e.g. "all-resident decode TPOT at batch 1". */
  figure: z.string().min(1),
  model: z.string().min(1),
  hardware: z.string().min(1),
  /** The measured value and its unit. */
  value: positiveNumber,
  unit: z.enum(['ms', 'us']),
  source: z.string().min(1),
  notes: z.string().optional(),
});

export const RuntimeFileSchema = z.strictObject({
  id: profileId,
  name: z.string().min(1),
  /**
   * Host cost of dispatching one op (µs): Python + framework dispatcher + kernel launch. `null`
   * = the GPU profile's `kernelLaunchUs` (a fused runtime launches one kernel per module).
   */
  dispatchUs: z.number().nonnegative().nullable(),
  /** Cost of one device→host synchronisation round trip (µs). */
  syncUs: z.number().nonnegative(),
  /** Host work per module call (ops, syncs). */
  modules: z.strictObject(
    Object.fromEntries(RUNTIME_MODULES.map((m) => [m, ModuleWorkSchema])) as Record<
      RuntimeModule,
      typeof ModuleWorkSchema
    >,
  ),
  /** `all`: an MoE layer loops over every expert, paying `idleExpert` for each one no token chose (HF Switch / NLLB / Mixtral); `active`: only chosen experts. */
  expertLoop: z.enum(['active', 'all']),
  /** `index`: experts of a layer run in index order (a Python loop: a missing expert blocks the ones after it); `ready-first`: resident experts first (a scheduler). */
  expertOrder: z.enum(['index', 'ready-first']),
  /** `eager`: attention scores are materialised in HBM in FP32 (written, read by softmax, written, read by AV); `fused`: flash-style, scores stay on chip. */
  attention: z.enum(['eager', 'fused']),
  /** Overrides the GPU's GEMM efficiency curve (e.g. a runtime with poorer kernels). */
  gemmEfficiency: z.strictObject({ maxFraction: fraction, halfSaturationTokens: positiveNumber }).optional(),
  /** The CPU attention kernel this runtime ships (throughput family, CPU-attention systems). */
  cpuAttention: z
    .strictObject({
      kernel: z.string().min(1),
      /** Fraction of the CPU's FP32 FMA peak the kernel reaches; `null` = the CPU profile's `vectorEfficiency`. */
      fmaPeakFraction: fraction.nullable(),
      /** Threads the system runs it on; `null` = the cores the executor gives it. */
      threads: coreCount.nullable(),
    })
    .default({ kernel: 'cpu profile default', fmaPeakFraction: null, threads: null }),
  /**
   * How the runtime computes experts kept in host DRAM (policies with `hostExperts`): its CPU
   * kernel rates (`quant-kernels/<id>.json`), the host's submit + synchronise + merge cost per
   * layer with CPU experts (µs), whether GPU and CPU experts of a layer run concurrently or in
   * series, and the link efficiency of zero-copy kernel reads.
   */
  hostExperts: z
    .strictObject({
      kernels: z.string().min(1).nullable(),
      layerSyncUs: z.number().nonnegative(),
      overlap: z.enum(['concurrent', 'serial']),
      zeroCopyEfficiency: fraction.default(1),
      source: z.string().min(1),
    })
    .optional(),
  /** Measurements of this runtime with everything resident that the profile must reproduce (tested). */
  calibration: z.array(CalibrationFigureSchema).default([]),
  sources,
  notes,
});
export type RuntimeFile = z.infer<typeof RuntimeFileSchema>;
