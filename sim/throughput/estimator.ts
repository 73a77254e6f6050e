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
 * `estimatePassNs` in `extrapolate` mode (the search's inner loop) builds the layers up to the
 * last one whose modules S_params caches, then k more MoE layers (k ≥ period + 2, the period
 * after which every buffer ring realigns with the layer boundaries), and extends linearly by
 * the mean increment over the last period: T ≈ T_built + (MoE layers left)·(F_k − F_{k−p})/p.
 * The layers left have the same DAG under expected routing, so this converges once the
 * pipeline reaches its steady state; the chosen configuration is always re-priced `exact`.
 */
import type { HardwareProfile } from '../../hardware-profiles/types.ts';
import { bytesToNs, ceilNs } from '../kernel/time.ts';
import { staticCriticalPath, type StaticCriticalPath } from '../taskgraph/critical-path.ts';
import type { TaskSpec } from '../taskgraph/types.ts';
import { cachedModules, modelModules } from './memory-model.ts';
import { EarliestFinishes } from './dag-emitter.ts';
import { buildPassDag, type DagInput, type PassDag } from './pass-dag.ts';

/** Uncontended duration of one task (see the module doc). */
export function uncontendedNs(t: TaskSpec, hw: HardwareProfile): number {
  switch (t.kind) {
    case 'gpu':
      return t.durationNs;
    case 'h2d':
    case 'd2h': {
      const bw =
        (t.kind === 'h2d' ? hw.pcie.h2dBytesPerSec : hw.pcie.d2hBytesPerSec) *
        (hw.pinnedHostMemory ? 1 : hw.pcie.pageableFactor);
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
  /** Uncached MoE layers built in `extrapolate` mode at least (more when a buffer ring's period needs them). Default 3. */
  readonly sampleMoeLayers?: number;
}

const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));
const lcm = (a: number, b: number): number => (a / gcd(a, b)) * b;

/**
 * Layers after which the DAG of an uncached GPU MoE layer repeats: each buffer ring of n
 * buffers filled f times per layer realigns every n / gcd(f, n) layers.
 */
export function layerPeriod(inp: Pick<DagInput, 'model' | 'shape' | 'config'>): number {
  const { model, shape, config: c } = inp;
  let p = 1;
  const ring = (n: number, fillsPerLayer: number) => {
    if (fillsPerLayer > 0) p = lcm(p, n / gcd(fillsPerLayer, n));
  };
  ring(c.weightSlots, 1);
  if (c.weightGranularity === 'expert') ring(c.expertSlots, model.experts);
  const gpuSeqs = shape.seqs - Math.round(c.omega * shape.seqs);
  const micro =
    c.expertBatching === 'accumulated'
      ? Math.ceil(gpuSeqs / c.attnMicroSeqs)
      : c.omega === 0
        ? Math.ceil(shape.seqs / c.attnMicroSeqs)
        : 0;
  if (c.kvGpuLayers < model.layers && micro > 0) {
    if (shape.pastTokens > 0) ring(c.kvBuffers, micro);
    ring(2, micro);
  }
  return p;
}

/** Predicted pass time (ns): the critical path of the pass DAG (see the module doc). */
export function estimatePassNs(
  inp: Omit<DagInput, 'layerLimit' | 'labels' | 'finishes'>,
  o: EstimateOptions = {},
): number {
  const { model, config: c } = inp;
  const moeIdx = model.moeLayerIndices;
  const L = model.layers;
  // Layers differ only by what S_params caches (leading layers first), by CPU layers, and by the
  // phase of the buffer rings; the sample is every layer up to the last one with cached modules,
  // then enough uncached MoE layers to average the increment over one ring period.
  if (o.mode !== 'extrapolate' || c.gpuLayers < L) return exactNs(inp);
  const mm = modelModules(model);
  const cm = cachedModules(mm, c.cachedParamBytes, c.cacheOrder, L);
  const allDense = cm.denseCached.every(Boolean);
  let lastCached = -1;
  for (let l = 0; l < L; l++) if (cm.cachedExperts[l]! > 0 || (!allDense && cm.denseCached[l])) lastCached = l;
  const tail = moeIdx.filter((l) => l > lastCached);
  const period = layerPeriod(inp);
  // After the cached layers the copy engine has run ahead; the pipeline settles a few layers
  // later. Build until two consecutive periods take the same time, doubling the sample.
  for (let k = Math.max(o.sampleMoeLayers ?? 3, 2 * period + 2); k + 1 < tail.length && period <= 12; k *= 2) {
    const { dag, finish } = streamedFinishes({ ...inp, layerLimit: tail[k - 1]! + 1 });
    const at = (i: number) => finish[dag.layerEnds[tail[i]!]!]!;
    const last = at(k - 1) - at(k - 1 - period);
    const before = at(k - 1 - period) - at(k - 1 - 2 * period);
    if (Math.abs(last - before) <= 1e-4 * Math.max(last, 1)) {
      return Math.round(finish[dag.finalId]! + ((tail.length - k) * Math.max(0, last)) / period);
    }
  }
  return exactNs(inp);
}

function exactNs(inp: Omit<DagInput, 'layerLimit' | 'labels' | 'finishes'>): number {
  const { dag, finish } = streamedFinishes(inp);
  return finish[dag.finalId]!;
}

/** Builds a DAG in streaming mode, computing each task's earliest finish as it is created. */
function streamedFinishes(inp: Omit<DagInput, 'labels' | 'finishes'>): { dag: PassDag; finish: Float64Array } {
  const finishes = new EarliestFinishes(inp.hardware);
  const dag = buildPassDag({ ...inp, finishes });
  return { dag, finish: finishes.finish };
}
