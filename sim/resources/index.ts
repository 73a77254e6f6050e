/**
 * The resources of one simulated machine, built from a hardware profile, and the handler
 * fragment for their events. Both executors use this.
 */
import type { Handlers, Scheduler } from '../kernel/simulation.ts';
import type { TraceSink } from '../observe/trace-sink.ts';
import type { HardwareProfile } from '../../hardware-profiles/types.ts';
import { CpuPool } from './cpu-pool.ts';
import type { ResourceEvent, StorageEvent } from './events.ts';
import { FluidShare } from './fluid-share.ts';
import { Gpu } from './gpu.ts';
import { MemoryPool } from './memory-pool.ts';
import { NvmeLink } from './nvme-link.ts';
import { PageCache } from './page-cache.ts';
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

/** The SSD tier: a page cache of `pageCacheBytes` and the reads kept in flight. */
export interface StorageOptions {
  readonly pageCacheBytes: number;
  /** Reads the engine keeps in flight at once (the drive's queue depth it reaches). */
  readonly maxQueueDepth: number;
}

export interface Resources {
  readonly gpu: Gpu;
  readonly h2d: PcieLink;
  readonly d2h: PcieLink;
  readonly cpu: CpuPool;
  readonly hostDram: FluidShare;
  readonly vram: MemoryPool;
  readonly host: MemoryPool;
  /** SSD tier only: the drive's read link and host DRAM's page cache (the third link and pool). */
  readonly nvme?: NvmeLink;
  readonly pageCache?: PageCache;
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

/**
 * The SSD tier's resources added to `r`: an NVMe link from the testbed's drive and a page cache
 * (`o` undefined: `r` unchanged). Their events are `StorageEvent`s (`storageHandlers`).
 */
export function withStorage(
  r: Resources,
  hw: HardwareProfile,
  sched: Scheduler<StorageEvent>,
  sink: TraceSink | undefined,
  o: StorageOptions | undefined,
): Resources {
  if (!o) return r;
  const drive = hw.drive;
  if (!drive) throw new RangeError(`testbed ${hw.id} names no drive: the SSD tier needs one`);
  const nvme = new NvmeLink({
    bytesPerSec: drive.seqReadBytesPerSec,
    latencyNsByQueueDepth: drive.readLatencyNsByQueueDepth,
    granularityBytes: drive.readGranularityBytes,
    maxQueueDepth: o.maxQueueDepth,
    sched,
    sink,
  });
  return { ...r, nvme, pageCache: new PageCache(o.pageCacheBytes, nvme, sched, sink) };
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

/** Handlers for the SSD tier's events (nothing schedules them without it). */
export function storageHandlers(r: Resources): Handlers<StorageEvent> {
  return {
    'nvme.latencyDone': (e) => r.nvme!.onLatencyDone(e.readId),
    'nvme.dataDone': () => r.nvme!.onDataDone(),
  };
}
