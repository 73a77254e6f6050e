/**
 * The critical-path estimator (DESIGN §8 MoE-Gen search): the longest path through a pass's
 * task DAG (`pass-dag.ts`) by dynamic programming over a topological order
 * (`staticCriticalPath`), every task priced alone on an idle machine:
 * - GPU kernel: its cost-model duration;
 * - transfer: link latency + bytes / the direction's bandwidth (rounded as the link rounds);
 * - CPU task: max(computeNs, bytes / min(host-DRAM bandwidth, cores × per-core bandwidth));
 * - barrier: 0.
 * No contention: host DRAM is never shared, memory never gates. Engine order (one kernel
 * stream, one H2D engine, ...) is in the DAG itself, so the path is a schedule, not a bound
 * on unlimited hardware. The simulated pass of the same DAG can only take as long or longer
 * (property-tested).
 *
 * `estimatePassNs` in `extrapolate` mode (the search's inner loop) builds only the dense
 * leading layers plus the first k MoE layers, twice (k and k − 1), and extends linearly:
 * T ≈ T_k + (moeLayers − k)·(T_k − T_{k−1}). Every MoE layer has the same DAG under expected
 * routing, so this converges once the pipeline reaches its steady state; the chosen
 * configuration is always re-priced `exact`.
 */
import type { HardwareProfile } from '../../hardware-profiles/types.ts';
import { bytesToNs, ceilNs } from '../kernel/time.ts';
import { staticCriticalPath, type StaticCriticalPath } from '../taskgraph/critical-path.ts';
import type { TaskSpec } from '../taskgraph/types.ts';
import { buildPassDag, type DagInput, type PassDag } from './pass-dag.ts';

/** Uncontended duration of one task (see the module doc). */
export function uncontendedNs(t: TaskSpec, hw: HardwareProfile): number {
  switch (t.kind) {
    case 'gpu':
      return t.durationNs;
    case 'h2d':
    case 'd2h': {
      const bw = (t.kind === 'h2d' ? hw.pcie.h2dBytesPerSec : hw.pcie.d2hBytesPerSec) * (hw.pinnedHostMemory ? 1 : hw.pcie.pageableFactor);
      return Math.round(hw.pcie.latencyNs) + bytesToNs(t.bytes, bw);
    }
    case 'cpu': {
      if (t.bytes === 0) return t.computeNs;
      const rate = Math.min(hw.cpu.dramBytesPerSec, t.cores * hw.cpu.perCoreDramBytesPerSec);
      return Math.max(t.computeNs, ceilNs((t.bytes / rate) * 1e9));
    }
    case 'barrier':
      return 0;
  }
}

/** The critical path of a built DAG (the generic `staticCriticalPath`: path, per-task finishes). */
export function dagCriticalPath(dag: PassDag, hw: HardwareProfile): StaticCriticalPath {
  return staticCriticalPath(dag.tasks, (t) => uncontendedNs(t, hw));
}

/**
 * Earliest finish of every task of a builder DAG, whose ids are 0 … n−1 in creation order with
 * every dep created before its dependent, so creation order is a topological order: one pass,
 * no maps. Same numbers as `staticCriticalPath` (unit-tested); the search's inner loop.
 */
export function earliestFinishes(dag: PassDag, hw: HardwareProfile): Float64Array {
  const tasks = dag.tasks;
  const finish = new Float64Array(tasks.length);
  for (let i = 0; i < tasks.length; i++) {
    const t = tasks[i]!;
    let start = 0;
    for (const d of t.deps ?? []) {
      const j = d as number;
      if (!(j < i)) throw new RangeError(`earliestFinishes: task ${i} depends on ${String(d)}, not an earlier task`);
      if (finish[j]! > start) start = finish[j]!;
    }
    finish[i] = start + uncontendedNs(t, hw);
  }
  return finish;
}

export interface EstimateOptions {
  /** `exact` (default): the whole DAG; `extrapolate`: k MoE layers, extended linearly. */
  readonly mode?: 'exact' | 'extrapolate';
  /** MoE layers built in `extrapolate` mode (≥ 2). Default 4. */
  readonly sampleMoeLayers?: number;
}

/** Predicted pass time (ns): the critical path of the pass DAG (see the module doc). */
export function estimatePassNs(inp: Omit<DagInput, 'layerLimit' | 'labels'>, o: EstimateOptions = {}): number {
  const model = inp.model;
  const k = Math.max(2, o.sampleMoeLayers ?? 4);
  const moeIdx = model.moeLayerIndices;
  // CPU layers are not periodic in the same way; the extrapolation needs every MoE layer on the GPU.
  const gpuMoe = moeIdx.filter((l) => l < inp.config.gpuLayers).length;
  const extrapolate = o.mode === 'extrapolate' && gpuMoe === moeIdx.length && moeIdx.length > k + 1;
  const dag = buildPassDag(extrapolate ? { ...inp, layerLimit: moeIdx[k - 1]! + 1 } : inp);
  const finish = earliestFinishes(dag, inp.hardware);
  const total = finish[dag.finalId]!;
  if (!extrapolate) return total;
  // Per-layer increment between the last two MoE layers built, times the MoE layers not built.
  const endK = finish[dag.layerEnds[moeIdx[k - 1]!]!]!;
  const endK1 = finish[dag.layerEnds[moeIdx[k - 2]!]!]!;
  return Math.round(total + (moeIdx.length - k) * Math.max(0, endK - endK1));
}
