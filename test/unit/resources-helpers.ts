/**
 * Test rig for the resources: one `Simulation<ResourceEvent>`, resources built directly (no
 * hardware profile needed), and a handler table that dispatches each resource event to its
 * owner, as `resourceHandlers` does for a full `Resources`. Plus a trace sink that records
 * everything it is told, for timeline assertions.
 *
 * Not a test file itself (no `.test.ts`), shared by `resources-*.test.ts` and the
 * model-based tests.
 */
import { Simulation } from '../../sim/kernel/simulation.ts';
import { ns, type Ns } from '../../sim/kernel/time.ts';
import type {
  CpuTaskRecord,
  KernelRecord,
  MemoryRecord,
  PacketRecord,
  TraceSink,
  TransferRecord,
} from '../../sim/observe/trace-sink.ts';
import { CpuPool } from '../../sim/resources/cpu-pool.ts';
import type { LinkName, ResourceEvent } from '../../sim/resources/events.ts';
import { FluidShare } from '../../sim/resources/fluid-share.ts';
import { Gpu } from '../../sim/resources/gpu.ts';
import { PcieLink } from '../../sim/resources/pcie-link.ts';

/** A sink that keeps every record, in the order it was reported. */
export class RecordingSink implements TraceSink {
  readonly kernels: KernelRecord[] = [];
  readonly transfers: TransferRecord[] = [];
  readonly packets: PacketRecord[] = [];
  readonly cpuTasks: CpuTaskRecord[] = [];
  readonly memory: MemoryRecord[] = [];
  onKernel(r: KernelRecord): void {
    this.kernels.push(r);
  }
  onTransfer(r: TransferRecord): void {
    this.transfers.push(r);
  }
  onPacket(r: PacketRecord): void {
    this.packets.push(r);
  }
  onCpuTask(r: CpuTaskRecord): void {
    this.cpuTasks.push(r);
  }
  onMemory(r: MemoryRecord): void {
    this.memory.push(r);
  }
}

export interface LinkRigOptions {
  readonly bytesPerSec: number;
  readonly latencyNs: number;
  readonly packetBytes: number;
  /** If given, the link's packets are flows in a host-DRAM share of this capacity. */
  readonly dramBytesPerSec?: number;
}

export interface CpuRigOptions {
  readonly cores: number;
  readonly perCoreBytesPerSec: number;
}

export interface GpuRigOptions {
  readonly streams: number;
  readonly concurrentStreams: boolean;
}

export interface RigOptions {
  readonly link?: LinkRigOptions;
  /** Host-DRAM capacity when there is no link sharing it (CPU-only or fluid-only rigs). */
  readonly dramBytesPerSec?: number;
  readonly cpu?: CpuRigOptions;
  readonly gpu?: GpuRigOptions;
}

export interface Rig {
  readonly sim: Simulation<ResourceEvent>;
  readonly sink: RecordingSink;
  readonly dram: FluidShare | undefined;
  readonly link: PcieLink | undefined;
  readonly cpu: CpuPool | undefined;
  readonly gpu: Gpu | undefined;
  /** Runs until `t` (absolute ns): every event at or before `t` is processed, then now = t. */
  runUntil(t: number): void;
  /** Runs until the queue is empty. */
  runAll(): void;
}

function missing(what: string): never {
  throw new Error(`rig has no ${what}`);
}

/** Builds a simulation with the requested resources and installs the handler table. */
export function makeRig(o: RigOptions): Rig {
  const sim = new Simulation<ResourceEvent>();
  const sink = new RecordingSink();
  const dramCapacity = o.link?.dramBytesPerSec ?? o.dramBytesPerSec;
  const dram = dramCapacity !== undefined ? new FluidShare('hostDram', dramCapacity, sim) : undefined;
  const link = o.link
    ? new PcieLink({
        name: 'h2d',
        bytesPerSec: o.link.bytesPerSec,
        latencyNs: o.link.latencyNs,
        packetBytes: o.link.packetBytes,
        sched: sim,
        dram: o.link.dramBytesPerSec !== undefined ? dram : undefined,
        sink,
      })
    : undefined;
  const cpu = o.cpu
    ? new CpuPool({
        cores: o.cpu.cores,
        perCoreBytesPerSec: o.cpu.perCoreBytesPerSec,
        sched: sim,
        dram: dram ?? missing('host DRAM for the CPU pool (set dramBytesPerSec)'),
        sink,
      })
    : undefined;
  const gpu = o.gpu
    ? new Gpu({ streams: o.gpu.streams, concurrentStreams: o.gpu.concurrentStreams, sched: sim, sink })
    : undefined;
  const linkFor = (name: LinkName): PcieLink => (link && link.name === name ? link : missing(`link ${name}`));
  sim.setHandlers({
    'gpu.kernelDone': (e) => (gpu ?? missing('gpu')).onKernelDone(e.stream),
    'link.latencyDone': (e) => linkFor(e.link).onLatencyDone(),
    'link.packetDone': (e) => linkFor(e.link).onPacketDone(),
    'link.runDone': (e) => linkFor(e.link).onRunDone(),
    'fluid.flowDone': (e) => (dram ?? missing('host DRAM')).onFlowDone(e.flowId),
    'cpu.taskDone': (e) => (cpu ?? missing('cpu')).onTaskDone(e.taskId),
  });
  return {
    sim,
    sink,
    dram,
    link,
    cpu,
    gpu,
    runUntil: (t) => void sim.run({ until: ns(t) }),
    runAll: () => void sim.run(),
  };
}

/** `value` as Ns (validated), for specs that take durations. */
export const nsOf = (value: number): Ns => ns(value);
