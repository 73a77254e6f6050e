/** The task-graph executor (throughput family, DESIGN §7): public surface. */
export {
  TaskGraphExecutor,
  TaskGraphDeadlockError,
  STALL_CHECK_PRIORITY,
  type TaskGraphResources,
} from './task-graph.ts';
export { staticCriticalPath, type StaticCriticalPath } from './critical-path.ts';
export * from './types.ts';
