/**
 * A task-graph world for unit tests: the executor on resources built directly (no hardware
 * profile). Links at 1 GB/s (1 B/ns: 1 MB takes 1 ms) with no latency unless stated, packets
 * larger than any transfer unless a test is about packets, 8 cores, 64 MB of VRAM, 1 GB of host.
 */
import { expect } from 'vitest';
import { SimError } from '../../sim/kernel/errors.ts';
import { Simulation } from '../../sim/kernel/simulation.ts';
import { ns, type Ns } from '../../sim/kernel/time.ts';
import type { TraceSink } from '../../sim/observe/trace-sink.ts';
import { CpuPool } from '../../sim/resources/cpu-pool.ts';
import type { ResourceEvent } from '../../sim/resources/events.ts';
import { FluidShare } from '../../sim/resources/fluid-share.ts';
import { Gpu } from '../../sim/resources/gpu.ts';
import { resourceHandlers, type Resources } from '../../sim/resources/index.ts';
import { MemoryPool } from '../../sim/resources/memory-pool.ts';
import { PcieLink } from '../../sim/resources/pcie-link.ts';
import { TaskGraphExecutor, type TaskGraphEvent, type TaskGraphOptions } from '../../sim/taskgraph/index.ts';

export const MB = 1_000_000;
export const ms = (x: number): Ns => ns(Math.round(x * 1_000_000));

export interface WorldOptions {
  streamNames?: string[];
  concurrentStreams?: boolean;
  linkBytesPerSec?: number;
  latencyNs?: number;
  packetBytes?: number;
  cores?: number;
  vramBytes?: number;
  hostBytes?: number;
  sink?: TraceSink;
  graph?: TaskGraphOptions;
}

/** A machine built from resources directly (no hardware profile needed). */
export function world(o: WorldOptions = {}) {
  const sim = new Simulation<ResourceEvent | TaskGraphEvent>();
  const streamNames = o.streamNames ?? ['compute'];
  const hostDram = new FluidShare('hostDram', 1e12, sim); // never the bottleneck here
  const link = (name: 'h2d' | 'd2h') =>
    new PcieLink({
      name,
      bytesPerSec: o.linkBytesPerSec ?? 1e9,
      latencyNs: o.latencyNs ?? 0,
      packetBytes: o.packetBytes ?? 1e12,
      sched: sim,
      dram: hostDram,
      sink: o.sink,
    });
  const r: Resources = {
    gpu: new Gpu({
      streams: streamNames.length,
      concurrentStreams: o.concurrentStreams ?? false,
      sched: sim,
      sink: o.sink,
      streamNames,
    }),
    h2d: link('h2d'),
    d2h: link('d2h'),
    cpu: new CpuPool({ cores: o.cores ?? 8, perCoreBytesPerSec: 1e9, sched: sim, dram: hostDram, sink: o.sink }),
    hostDram,
    vram: new MemoryPool('vram', o.vramBytes ?? 64 * MB, sim, o.sink),
    host: new MemoryPool('host', o.hostBytes ?? 1024 * MB, sim, o.sink),
  };
  const graph = new TaskGraphExecutor(r, sim, o.graph);
  sim.setHandlers({ ...resourceHandlers(r), ...graph.handlers() });
  return { sim, r, graph };
}

/** start/finish of each task, in ms. */
export function spans(graph: TaskGraphExecutor, ids: readonly (string | number)[]): Record<string, [number, number]> {
  const out: Record<string, [number, number]> = {};
  for (const id of ids) {
    const t = graph.timing(id);
    out[String(id)] = [t.startNs! / 1e6, t.finishNs! / 1e6];
  }
  return out;
}

/** Work outside the graph: a one-core CPU task of `atMs` whose `onDone` runs at that time (e.g. a free by someone else). */
export function foreignAt(r: Pick<Resources, 'cpu'>, atMs: number, onDone: () => void): void {
  r.cpu.submit({ cores: 1, computeNs: ms(atMs), bytes: 0, label: 'foreign', category: 'x', onDone });
}

/** The `SimError` that `act` throws (the test fails if it throws nothing or something else). */
export function thrownSimError(act: () => void): SimError {
  let err: unknown;
  try {
    act();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(SimError);
  return err as SimError;
}

/** The message of the `SimError` that `act` throws (see `thrownSimError`). */
export function simErrorOf(act: () => void): string {
  return thrownSimError(act).message;
}
