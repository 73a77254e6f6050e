/**
 * The resources of one simulated machine, built from a hardware profile, and the handler
 * fragment for their events. Both executors use this.
 */
import type { Handlers, Scheduler } from '../kernel/simulation.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import type { HardwareProfile } from '../../hardware-profiles/types.ts';
import { CpuPool } from './cpu-pool.ts';
import type { ResourceEvent } from './events.ts';
import { FluidShare } from './fluid-share.ts';
import { Gpu } from './gpu.ts';
import { MemoryPool } from './memory-pool.ts';
import { LinkRunGroup, PcieLink } from './pcie-link.ts';

export interface ResourceOptions {
  /** GPU streams and their names (e.g. ['compute'] or ['attention', 'experts']). */
  readonly streamNames: readonly string[];
  readonly concurrentStreams?: boolean;
  /** PCIe packet size; a higher priority overtakes at this granularity. Default 16 MiB. */
  readonly packetBytes?: number;
  /** Whether DMA draws on host-DRAM bandwidth (shared with CPU work). Default true. */
  readonly dmaSharesHostDram?: boolean;
  /** Override VRAM / host capacities (bytes), e.g. for "unbounded VRAM" references. */
  readonly vramBytes?: number;
  readonly hostBytes?: number;
}

export interface Resources {
  readonly gpu: Gpu;
  readonly h2d: PcieLink;
  readonly d2h: PcieLink;
  readonly cpu: CpuPool;
  readonly hostDram: FluidShare;
  readonly vram: MemoryPool;
  readonly host: MemoryPool;
}

export const DEFAULT_PACKET_BYTES = 16 * 1024 * 1024;

export function createResources(
  hw: HardwareProfile,
  sched: Scheduler<ResourceEvent>,
  sink: TraceSink | undefined,
  o: ResourceOptions,
): Resources {
  const hostDram = new FluidShare('hostDram', hw.cpu.dramBytesPerSec, sched);
  const dmaDram = o.dmaSharesHostDram === false ? undefined : hostDram;
  const pageable = hw.pinnedHostMemory ? 1 : hw.pcie.pageableFactor;
  const packetBytes = o.packetBytes ?? DEFAULT_PACKET_BYTES;
  const runGroup = new LinkRunGroup();
  return {
    gpu: new Gpu({
      streams: o.streamNames.length,
      concurrentStreams: o.concurrentStreams ?? false,
      sched,
      sink,
      streamNames: o.streamNames,
    }),
    h2d: new PcieLink({
      name: 'h2d',
      bytesPerSec: hw.pcie.h2dBytesPerSec * pageable,
      latencyNs: hw.pcie.latencyNs,
      packetBytes,
      sched,
      dram: dmaDram,
      sink,
      runGroup,
    }),
    d2h: new PcieLink({
      name: 'd2h',
      bytesPerSec: hw.pcie.d2hBytesPerSec * pageable,
      latencyNs: hw.pcie.latencyNs,
      packetBytes,
      sched,
      dram: dmaDram,
      sink,
      runGroup,
    }),
    cpu: new CpuPool({
      cores: hw.cpu.cores,
      perCoreBytesPerSec: hw.cpu.perCoreDramBytesPerSec,
      sched,
      dram: hostDram,
      sink,
    }),
    hostDram,
    vram: new MemoryPool('vram', o.vramBytes ?? hw.gpu.vramBytes, sched, sink),
    host: new MemoryPool('host', o.hostBytes ?? hw.hostDramBytes, sched, sink),
  };
}

/** Handlers for every resource event, to be spread into an executor's handler table. */
export function resourceHandlers(r: Resources): Handlers<ResourceEvent> {
  return {
    'gpu.kernelDone': (e) => r.gpu.onKernelDone(e.stream),
    'link.latencyDone': (e) => r[e.link].onLatencyDone(),
    'link.packetDone': (e) => r[e.link].onPacketDone(),
    'link.runDone': (e) => r[e.link].onRunDone(),
    'fluid.flowDone': (e) => r.hostDram.onFlowDone(e.flowId),
    'cpu.taskDone': (e) => r.cpu.onTaskDone(e.taskId),
  };
}
