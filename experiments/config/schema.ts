/**
 * The experiment config: what a user writes (YAML or JSON), validated once by zod into a
 * frozen, fully defaulted `ExperimentConfig`. Nothing mutates it afterwards; per-run values
 * (sweep points, seeds) are resolved into separate `RunSpec`s by `expand.ts`.
 *
 * ```yaml
 * name: quickstart
 * model: mixtral-8x7b              # profile id (moesim list models) or a .json path
 * hardware: a5000-pcie4-1tb        # testbed id (moesim list hardware) or a .json path
 * seeds: [1]
 * workload: { requests: 32, arrival: { kind: poisson, ratePerS: 2 }, promptTokens: {...}, outputTokens: {...} }
 *                                 # requests: at most 10^7 (expand.ts MAX_REQUESTS)
 * executor: { batching: continuous, maxBatchSize: 8, bufferSlots: auto }
 * policies:
 *   - name: on-demand
 *   - name: lru
 *     capacitySlots: 64
 *   - path: ./my-policy.ts         # a plugin module (default export: PolicyDefinition)
 *     label: mine
 *     params: { k: 3 }
 * sweep:                           # cartesian product over config paths
 *   workload.arrival.ratePerS: [1, 2, 4]
 *   policy.capacitySlots: [32, 64] # applies to every policy that has the parameter
 * ```
 */
import { z } from 'zod';
import { WorkloadSchema } from '../../workloads/config.ts';
import { PlotSchema } from '../outputs/plot.ts';
import { ThresholdsSchema } from '../outputs/thresholds.ts';

/** One policy entry: a built-in by `name` (its own parameters beside it) or a plugin by `path`. */
export const PolicyEntrySchema = z.union([
  z
    .object({
      path: z.string().min(1),
      label: z.string().min(1).optional(),
      /** The software stack this policy's system ran on (overrides the experiment's `runtime`). */
      runtime: z.string().min(1).optional(),
      params: z.record(z.string(), z.unknown()).default({}),
    })
    .strict(),
  z.object({ name: z.string().min(1), label: z.string().min(1).optional() }).catchall(z.unknown()),
]);
export type PolicyEntry = z.infer<typeof PolicyEntrySchema>;

export const ServingExecutorSchema = z
  .object({
    kind: z.literal('serving').default('serving'),
    /** `static`: auto-batcher (max batch size, max wait), batch runs to completion; `continuous`: admit at every iteration. */
    batching: z.enum(['static', 'continuous']).default('continuous'),
    maxBatchSize: z.number().int().positive().default(8),
    maxWaitMs: z.number().nonnegative().default(50),
    maxBatchTokens: z.number().int().positive().default(8192),
    bufferSlots: z.union([z.literal('auto'), z.number().int().positive()]).default('auto'),
    /** PCIe packet size in MiB (a higher priority overtakes at packet boundaries). */
    packetMiB: z.number().positive().default(16),
    /** Caching disabled: release every expert right after it computed (prefetch-only comparisons). */
    releaseAfterUse: z.boolean().default(false),
  })
  .strict();
export type ServingExecutorConfig = z.infer<typeof ServingExecutorSchema>;

/**
 * The throughput executor (DESIGN §7, offline batch: MoE-Gen and its baselines), selected by
 * `kind: throughput`; its policies must be of the throughput family.
 *
 * ```yaml
 * executor: { kind: throughput, phase: decode, padPromptTo: 512, contextBucketTokens: 64 }
 * ```
 */
export const ThroughputExecutorSchema = z
  .object({
    kind: z.literal('throughput'),
    /** Phases simulated: `prefill` only, `decode` only (KV of the prompts assumed in place), or `both`. */
    phase: z.enum(['prefill', 'decode', 'both']).default('both'),
    /** A fixed batch B (sequences held and decoded together); each policy uses it where its memory can hold it. */
    batchSeqs: z.number().int().positive().optional(),
    /** Simulate only the first n host batches (e.g. 1: throughput of one full batch of each policy's own size). */
    maxHostBatches: z.number().int().positive().optional(),
    /** Prompts are padded (or truncated) to this many tokens; default: the longest prompt. */
    padPromptTo: z.number().int().positive().optional(),
    /** Memoisation granularity: decode passes are simulated once per (sequences, past KV rounded up to this). */
    contextBucketTokens: z.number().int().positive().default(64),
    /** Simulate every pass (no memoisation): exact and slow. */
    memoise: z.boolean().default(true),
    /** Host KV layout: reserved per sequence for prompt + longest output, or pages allocated as contexts grow. */
    kvLayout: z.enum(['contiguous', 'paged']).default('contiguous'),
    kvPageTokens: z.number().int().positive().default(16),
    /** PCIe packet size in MiB. */
    packetMiB: z.number().positive().default(64),
  })
  .strict();
export type ThroughputExecutorConfig = z.infer<typeof ThroughputExecutorSchema>;

/** The executor section: `kind: serving` (default) or `kind: throughput`. */
export const ExecutorSchema = z.discriminatedUnion('kind', [ServingExecutorSchema, ThroughputExecutorSchema]);
export type ExecutorConfig = z.infer<typeof ExecutorSchema>;

const ScalarSchema = z.union([z.string(), z.number(), z.boolean(), z.null()]);

export const ExperimentSchema = z
  .object({
    name: z.string().min(1).default('experiment'),
    description: z.string().optional(),
    model: z.string().min(1),
    hardware: z.string().min(1),
    /**
     * Runtime profile (the software stack: `moesim list runtimes`, or a .json path): `fused`
     * when absent. A policy entry's own `runtime` overrides it for that policy.
     */
    runtime: z.string().min(1).optional(),
    seeds: z.array(z.number().int().nonnegative()).min(1).default([1]),
    /**
     * Wall-time budget (ms) of one call of a plugin's code (a hook, its factory) and of its import;
     * over it the run fails naming the hook. Absent: 10 000 (experiments/parallel/sandbox.ts).
     */
    pluginBudgetMs: z.number().positive().max(3_600_000).optional(),
    workload: WorkloadSchema,
    executor: ExecutorSchema.default(ServingExecutorSchema.parse({})),
    policies: z.array(PolicyEntrySchema).min(1),
    /**
     * Explicit points (config path → value, e.g. `{ model: mixtral-8x7b, workload.outputTokens.tokens: 256 }`),
     * for parameters that vary together; runs are cases × the sweep's product × policies × seeds.
     */
    cases: z.array(z.record(z.string(), z.union([ScalarSchema, z.record(z.string(), z.unknown())]))).default([]),
    /** Config path → values; runs are the cartesian product (× policies × seeds); at most 10^5 points. */
    sweep: z.record(z.string(), z.array(z.union([ScalarSchema, z.record(z.string(), z.unknown())])).min(1)).default({}),
    /** Options for outputs. */
    output: z
      .object({
        /** Columns (metric paths) to add to the printed table. */
        columns: z.array(z.string()).default([]),
        /** Metric paths summarised over seeds (min / mean / max) in a second table. */
        seedSummary: z.array(z.string()).default([]),
        /**
         * Metrics relative to a baseline policy: for each run, metric / the same metric of the
         * baseline's run at the same sweep point and seed (e.g. PCIe bytes relative to on-demand).
         */
        relative: z
          .object({ baseline: z.string().min(1), metrics: z.array(z.string()).min(1) })
          .strict()
          .optional(),
        /** SVG plots written beside results.json. */
        plots: z.array(PlotSchema).default([]),
        /** The smallest grid point meeting each target of a metric, per policy (`outputs/thresholds.ts`). */
        thresholds: ThresholdsSchema.optional(),
      })
      .strict()
      .default({ columns: [], seedSummary: [], plots: [] }),
  })
  .strict();

export type ExperimentConfig = Readonly<z.infer<typeof ExperimentSchema>>;
