/** The throughput executor (DESIGN §7, offline batch; MoE-Gen and its baselines): public surface. */
export * from './types.ts';
export type { PlanContext, ThroughputPolicy } from './policy.ts';
export * from './iteration.ts';
export { KvPages } from './kv-pages.ts';
export { hostBatchExecution, HostBatchScheduler, PassDagPipeline, type HostBatchSettings } from './host-batch.ts';
export {
  ThroughputExecutor,
  offsetSink,
  type ThroughputConfig,
  type ThroughputInput,
  type ThroughputOutcome,
  type PredictionCheck,
} from './throughput-executor.ts';
export {
  buildPassDag,
  expectedCounts,
  passConfigProblem,
  URGENT_PRIORITY,
  type CountsFn,
  type DagInput,
  type PassDag,
} from './pass-dag.ts';
export { simulatePass, type PassResult, type PassSimInput } from './pass-sim.ts';
export {
  estimatePassNs,
  dagCriticalPath,
  earliestFinishes,
  uncontendedNs,
  layerPeriod,
  type EstimateOptions,
} from './estimator.ts';
export * from './memory-model.ts';
export * from './search.ts';
export { UniformMultinomialCounts, binomialSample } from './routing-counts.ts';
