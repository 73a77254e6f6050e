/**
 * Simulates one pass: the pass's task DAG (`pass-dag.ts`) on a fresh machine — GPU stream,
 * H2D/D2H links with packets and priorities, CPU pool, host DRAM shared fluidly by DMA and CPU
 * work, VRAM and host pools — driven by the task-graph executor. Before the graph runs, the
 * pass's static memory is allocated exactly as `memory-model.ts` counts it (VRAM: embedding and
 * LM head, cached modules, GPU-resident KV, activations, workspace; host: every weight and the
 * host batch's KV); buffers are allocated and freed by the tasks (holds). A pass that does not
 * fit its pools fails here with a `CapacityError`, and one whose buffers cannot be granted
 * stops with a `TaskGraphDeadlockError`: the executor never lets a policy overflow memory.
 *
 * The result carries what the run-level metrics need (busy times, bytes, peaks) and the static
 * critical path of the same DAG, for comparison.
 */
import type { HardwareProfile, ModelProfile } from '../../hardware-profiles/types.ts';
import { Simulation } from '../kernel/simulation.ts';
import type { Ns } from '../kernel/time.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import type { ResourceEvent } from '../resources/events.ts';
import { createResources, resourceHandlers } from '../resources/index.ts';
import { TaskGraphExecutor, type TaskGraphEvent } from '../taskgraph/index.ts';
import { earliestFinishes } from './estimator.ts';
import { buildPassDag, type DagInput } from './pass-dag.ts';

export interface PassSimInput extends Omit<DagInput, 'layerLimit'> {
  /** PCIe packet size (bytes). */
  readonly packetBytes: number;
  /** Host-resident KV of the host batch during this pass (bytes). */
  readonly hostKvBytes: number;
  readonly sink?: TraceSink;
  /** Also compute the static critical path of the DAG (for reports and tests). Default true. */
  readonly criticalPath?: boolean;
  /**
   * Checks the DAG as the executor checks any tasks (`TaskGraphExecutor.add`) instead of taking
   * it as the builder's (`addBuilt`). Default false; the tests compare both paths.
   */
  readonly checkGraph?: boolean;
}

export interface PassResult {
  readonly durationNs: number;
  readonly criticalPathNs: number;
  readonly events: number;
  readonly tasks: number;
  readonly gpuBusyNs: number;
  readonly gpuBusyNsByCategory: Readonly<Record<string, number>>;
  readonly h2dBusyNs: number;
  readonly d2hBusyNs: number;
  readonly h2dBytes: number;
  readonly d2hBytes: number;
  readonly cpuBusyCoreNs: number;
  readonly hostDramBytes: number;
  /** Peak bytes per pool: total and per category. */
  readonly peaks: Readonly<Record<'vram' | 'host', Readonly<Record<string, number>>>>;
  readonly routedTokenSlots: number;
  readonly expertLayerPairs: number;
  readonly activatedPairs: number;
  readonly passActivatedPairs: number;
}

export function simulatePass(inp: PassSimInput): PassResult {
  const model: ModelProfile = inp.model;
  const hw: HardwareProfile = inp.hardware;
  const dag = buildPassDag({ ...inp, labels: inp.labels ?? readsLabels(inp.sink) });
  const sim = new Simulation<ResourceEvent | TaskGraphEvent>();
  const r = createResources(hw, sim, inp.sink, { streamNames: ['compute'], packetBytes: inp.packetBytes });
  const graph = new TaskGraphExecutor(r, sim, { name: 'throughput pass' });
  sim.setHandlers({ ...resourceHandlers(r), ...graph.handlers() });

  // Static memory (the same terms as vramNeeded / hostNeeded).
  const v = dag.vram;
  const cachedExpertBytes = dag.cached.expertBytes;
  r.vram.allocate(
    v.residentBytes + v.cachedBytes - cachedExpertBytes,
    'denseWeights',
    'embedding, LM head, cached dense modules',
  );
  if (cachedExpertBytes > 0) r.vram.allocate(cachedExpertBytes, 'expertCache', 'cached experts (S_params)');
  if (v.kvResidentBytes > 0) r.vram.allocate(v.kvResidentBytes, 'kvCache', 'GPU-resident KV');
  r.vram.allocate(v.activationBytes, 'activations', 'intermediate state');
  r.vram.allocate(v.workspaceBytes, 'workspace', 'workspace');
  const dv = model.derived;
  r.host.allocate(dv.nonExpertBytes, 'denseWeights', 'parameter server (dense)');
  r.host.allocate(dv.allExpertBytes, 'expertWeights', 'parameter server (experts)');
  if (inp.hostKvBytes > 0) r.host.allocate(inp.hostKvBytes, 'kvCache', 'host KV');

  if (inp.checkGraph) graph.add(dag.tasks);
  else graph.addBuilt(dag.tasks);
  const run = sim.run();
  graph.assertDone();
  const end = graph.timing(dag.finalId).finishNs as Ns;
  const byCat: Record<string, number> = {};
  for (const [k, b] of r.gpu.busyNsByCategory) byCat[k] = b;
  const peaks = {
    vram: { total: r.vram.peakBytes, capacity: r.vram.capacityBytes, ...r.vram.peaks() },
    host: { total: r.host.peakBytes, capacity: r.host.capacityBytes, ...r.host.peaks() },
  };
  return {
    durationNs: end,
    // The final join depends on every task nobody else depends on, so its earliest finish is the
    // critical path's length (`dagCriticalPath(dag, hw).lengthNs`, the same sums; unit-tested).
    criticalPathNs: inp.criticalPath === false ? 0 : earliestFinishes(dag, hw)[dag.finalId]!,
    events: run.events,
    tasks: dag.tasks.length,
    gpuBusyNs: r.gpu.busyTimeNs(),
    gpuBusyNsByCategory: byCat,
    h2dBusyNs: r.h2d.busyTimeNs(),
    d2hBusyNs: r.d2h.busyTimeNs(),
    h2dBytes: r.h2d.bytesMoved,
    d2hBytes: r.d2h.bytesMoved,
    cpuBusyCoreNs: r.cpu.busyCoreTimeNs(),
    hostDramBytes: r.hostDram.bytesServed(),
    peaks,
    routedTokenSlots: dag.routedTokenSlots,
    expertLayerPairs: dag.expertLayerPairs,
    activatedPairs: dag.activatedPairs,
    passActivatedPairs: dag.passActivatedPairs,
  };
}

/**
 * Whether a sink records task labels (a timeline, a trace): one of the resources' record hooks.
 * A run's sink always exists (the runner's fanout, often of nothing but request milestones);
 * without such a hook the tasks are named by id (errors too), and a pass builds no label.
 */
function readsLabels(sink: TraceSink | undefined): boolean {
  if (!sink) return false;
  const s = sink;
  return !!(s.onKernel || s.onTransfer || s.onPacket || s.onCpuTask || s.onMemory || s.onBlocked);
}
