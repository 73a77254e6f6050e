/**
 * VSLPipe at event level (MoE-Lens §6.4–§6.5): the `events` mode of the VSLPipe pipeline
 * (`vslpipe.ts`), beside its closed form.
 *
 * One `Simulation` lives for the whole run; every iteration is simulated as events on the
 * repo's resources (public APIs only: `Gpu`, `CpuPool`, `PcieLink`, `FluidShare`):
 *
 * - Prologue: layer 0's weights over H2D, alone (as the closed form's `transfer_0`).
 * - Stage l (one per layer): at its start the data mover is asked for layer l+1's weights
 *   (a 2-layer buffer, 2W/L); phase 1 runs CPU attention of α (`CpuPool`) beside the GPU work
 *   of β (`Gpu`, one stream); a sync; phase 2 runs CPU β beside GPU α; the stage ends when
 *   phase 2 and the weight DMA have both finished (the data mover "synchronizes only at the
 *   stage boundaries", §6.4).
 * - Activations: when a group's CPU attention ends, its output (d per decode token,
 *   `ACTIVATION_BYTES` each) goes H2D as a high-priority transfer; the GPU work of that group
 *   in the next phase waits for it (α: phase 2 of the same stage; β: phase 1 of the next stage,
 *   or the LM head after the last layer).
 * - Optional D2H leg (`d2hA` / `d2hB` > 0; off in the closed form and by default): when a group's
 *   GPU work ends, its Q and new K/V (and its prefill tokens' K/V, the KV write-back) go D2H on
 *   their own link (full duplex), in the same DRAM share; that group's next CPU attention waits
 *   for them (β: phase 2 of the same stage; α: phase 1 of the next stage — the pairing of the
 *   closed form, where a group's GPU work at layer l ends with the projections its next CPU
 *   attention reads). Layer 0's first Q/K/V are taken as present.
 * - Data mover (§6.5): weights are split into fixed-size packets (`PAPER_PACKET_BYTES`, the
 *   paper's "100MB packet size") issued at low priority; activation transfers are more urgent
 *   and overtake at the next packet boundary (`PcieLink`'s priority queue). Each transfer pays
 *   the link's setup latency once (`hw.pcie.latencyNs`), activation copies included.
 * - Host DRAM (`contention: true`): the link's packets and the CPU attention tasks are flows in
 *   one `FluidShare` of the socket's DRAM bandwidth; rates are recomputed whenever a flow starts
 *   or ends (proportional to demand when oversubscribed). A CPU task's demand is its KV bytes
 *   over its cost-model time (that time already applies min(DRAM, cores × per-core bandwidth),
 *   `sim/cost/cost-model.ts`), as in the closed form's `sharedStage`; hence the pool's per-core
 *   cap is set to +∞ here (not a second, different cap). Without contention the link has no
 *   DRAM share and CPU tasks are timers.
 * - LM head on the GPU after the last stage.
 *
 * Measured: the weight DMA's slowdown by DRAM contention (Σ over weight packets of their
 * duration − their duration alone on the link), the activation transfers' queueing delay
 * (start − submit: waiting for the weight packet on the wire), the time DRAM demand exceeded
 * capacity and the stages during which it did.
 *
 * Equivalence with the closed form (no contention, no activation bytes): each stage is
 * max(max(CPU α, GPU β) + max(CPU β, GPU α), link time of layer l+1) in both. The closed form's
 * link time is the cost model's ⌈latency + B/bw⌉; the link's is latency + Σ over packets of
 * ⌈packet/bw⌉ (each packet rounded up once, `bytesToNs`), so a stage bound by the link can be
 * longer by at most (packets − 1) ns, and is equal when a full packet takes an integer number of
 * ns. Nothing is memoised here: every iteration is simulated.
 */
import { Simulation, type Handlers } from '../../kernel/simulation.ts';
import { bytesToNs, type Ns } from '../../kernel/time.ts';
import { CpuPool } from '../../resources/cpu-pool.ts';
import type { ResourceEvent } from '../../resources/events.ts';
import { FluidShare } from '../../resources/fluid-share.ts';
import { Gpu } from '../../resources/gpu.ts';
import { PcieLink, type Transfer } from '../../resources/pcie-link.ts';

/**
 * The data mover's packet: MoE-Lens §6.5 "Empirically, a 100MB packet size strikes a good
 * balance between transfer throughput and minimizing interference" (settings card §4, §7:
 * a design constant). MB read as 10⁶ B (the unit is NOT STATED).
 */
export const PAPER_PACKET_BYTES = 100_000_000;
/** Link priorities (lower first): activation copies before weight packets (§6.5: no head-of-line blocking). */
export const ACTIVATION_PRIORITY = 0;
export const WEIGHT_PRIORITY = 1;

export interface DataMoverOptions {
  readonly bytesPerSec: number;
  readonly latencyNs: number;
  readonly packetBytes: number;
  /** Host-DRAM share the DMA draws on (contention), or none. */
  readonly dram?: FluidShare;
}

/** The contiguous data mover (§6.5) on one H2D `PcieLink`: weights in packets at low priority, activations at high. */
export class DataMover {
  readonly link: PcieLink;
  /** Σ over weight packets of (duration − duration alone on the link): the DMA's slowdown by DRAM sharing. */
  weightSlowedNs = 0;
  /** Σ over activation transfers of start − submit (queueing behind the packet on the wire, or an earlier activation). */
  activationQueueNs = 0;
  activationMaxQueueNs = 0;
  activationTransfers = 0;
  weightTransfers = 0;

  constructor(
    sim: Simulation<ResourceEvent>,
    private readonly o: DataMoverOptions,
  ) {
    const bps = o.bytesPerSec;
    this.link = new PcieLink({
      name: 'h2d',
      bytesPerSec: bps,
      latencyNs: o.latencyNs,
      packetBytes: o.packetBytes,
      sched: sim,
      ...(o.dram ? { dram: o.dram } : {}),
      sink: {
        onPacket: (r) => {
          if (r.category === 'weights') this.weightSlowedNs += r.endNs - r.startNs - bytesToNs(r.bytes, bps);
        },
      },
    });
  }

  weights(bytes: number, onDone: () => void): void {
    this.weightTransfers++;
    this.link.submit({
      bytes,
      priority: WEIGHT_PRIORITY,
      label: 'layer weights',
      category: 'weights',
      onDone: () => onDone(),
    });
  }

  activation(bytes: number, onDone: () => void): void {
    this.activationTransfers++;
    this.link.submit({
      bytes,
      priority: ACTIVATION_PRIORITY,
      label: 'attention output',
      category: 'activations',
      onDone: (t: Transfer) => {
        const q = (t.startNs as number) - (t.submitNs as number);
        this.activationQueueNs += q;
        if (q > this.activationMaxQueueNs) this.activationMaxQueueNs = q;
        onDone();
      },
    });
  }
}

/** One iteration's shape for the event pipeline (all durations integer ns from the cost model). */
export interface PipeIteration {
  /** Weight bytes of each layer (streamed every iteration). */
  readonly layerBytes: readonly number[];
  /** GPU ns of α and β at each layer. */
  readonly ga: readonly number[];
  readonly gb: readonly number[];
  /** CPU attention ns of α and β (the same at every layer), and the KV bytes each reads per layer. */
  readonly ca: number;
  readonly cb: number;
  readonly ka: number;
  readonly kb: number;
  /** H2D activation bytes of α's and β's attention outputs per layer (0: none). */
  readonly actA: number;
  readonly actB: number;
  /** D2H bytes of α's and β's Q/K/V (+ prefill K/V) per layer (0 or absent: not modelled). */
  readonly d2hA?: number;
  readonly d2hB?: number;
  readonly lmHeadNs: number;
}

export interface EventPipeOptions {
  readonly linkBytesPerSec: number;
  readonly linkLatencyNs: number;
  readonly packetBytes: number;
  readonly dramBytesPerSec: number;
  readonly contention: boolean;
  readonly cores: number;
  /** D2H link bandwidth (default `linkBytesPerSec`). */
  readonly d2hBytesPerSec?: number;
}

export interface EventPipeStats {
  readonly events: number;
  readonly weightSlowedNs: number;
  readonly activationQueueNs: number;
  readonly activationMaxQueueNs: number;
  readonly activationTransfers: number;
  readonly dramContendedNs: number;
  readonly dramBoundStages: number;
  readonly h2dBusyNs: number;
  readonly h2dBytes: number;
  readonly cpuBusyNs: number;
  readonly gpuBusyNs: number;
  readonly d2hBytes: number;
  readonly d2hBusyNs: number;
  /** Σ over D2H copies of (landing − submit); and the time CPU attention waited for them. */
  readonly d2hLatencyNs: number;
  readonly cpuWaitD2hNs: number;
}

export class EventPipe {
  readonly sim = new Simulation<ResourceEvent>();
  readonly dram: FluidShare;
  readonly mover: DataMover;
  readonly cpu: CpuPool;
  readonly gpu: Gpu;
  readonly d2h: PcieLink;
  private dramBoundStages = 0;
  private d2hLatencyNs = 0;
  private cpuWaitD2hNs = 0;
  private lastContended = 0;

  constructor(private readonly o: EventPipeOptions) {
    const sim = this.sim;
    this.dram = new FluidShare('hostDram', o.dramBytesPerSec, sim);
    this.mover = new DataMover(sim, {
      bytesPerSec: o.linkBytesPerSec,
      latencyNs: o.linkLatencyNs,
      packetBytes: o.packetBytes,
      ...(o.contention ? { dram: this.dram } : {}),
    });
    // Per-core cap +∞: the cost model's CPU time already holds the cores' bandwidth limit (module comment).
    this.cpu = new CpuPool({
      cores: o.cores,
      perCoreBytesPerSec: Number.POSITIVE_INFINITY,
      sched: sim,
      dram: this.dram,
    });
    this.gpu = new Gpu({ streams: 1, concurrentStreams: false, sched: sim, streamNames: ['compute'] });
    const link = this.mover.link;
    this.d2h = new PcieLink({
      name: 'd2h',
      bytesPerSec: o.d2hBytesPerSec ?? o.linkBytesPerSec,
      latencyNs: o.linkLatencyNs,
      packetBytes: o.packetBytes,
      sched: sim,
      ...(o.contention ? { dram: this.dram } : {}),
    });
    const links = { h2d: link, d2h: this.d2h };
    const handlers: Handlers<ResourceEvent> = {
      'gpu.kernelDone': (e) => this.gpu.onKernelDone(e.stream),
      'link.latencyDone': (e) => links[e.link].onLatencyDone(),
      'link.packetDone': (e) => links[e.link].onPacketDone(),
      'link.runDone': (e) => links[e.link].onRunDone(),
      'fluid.flowDone': (e) => this.dram.onFlowDone(e.flowId),
      'cpu.taskDone': (e) => this.cpu.onTaskDone(e.taskId),
    };
    sim.setHandlers(handlers);
  }

  /** Simulates one iteration from `sim.now`; returns its duration (ns). */
  runIteration(x: PipeIteration): number {
    const sim = this.sim;
    const mover = this.mover;
    const L = x.layerBytes.length;
    const startNs = sim.now as number;
    const contention = this.o.contention;
    const cores = this.o.cores;
    let endNs = -1;
    let l = 0;
    let dmaDone = false;
    let p2Done = false;
    let cpuDone = false;
    let gpuDone = false;
    let phase = 1;
    let actAReady = true;
    let actBReady = true;
    let gpuAWaiting = false;
    let gpuBWaiting = false;
    let lmWaiting = false;
    const d2hA = x.d2hA ?? 0;
    const d2hB = x.d2hB ?? 0;
    let qkvAReady = true;
    let qkvBReady = true;
    let cpuAWaitSince = -1;
    let cpuBWaitSince = -1;
    const d2hCopy = (bytes: number, done: () => void): void => {
      const t0 = sim.now as number;
      this.d2h.submit({
        bytes,
        priority: ACTIVATION_PRIORITY,
        label: 'q/k/v',
        category: 'activations',
        onDone: () => {
          this.d2hLatencyNs += (sim.now as number) - t0;
          done();
        },
      });
    };

    const cpuTask = (c: number, k: number, done: () => void): void => {
      if (c <= 0) {
        done();
        return;
      }
      this.cpu.submit({
        cores,
        computeNs: c as Ns,
        bytes: contention ? k : 0,
        label: 'cpu attention',
        category: 'attention',
        onDone: done,
      });
    };
    const gpuTask = (g: number, label: string, done: () => void): void => {
      if (g <= 0) {
        done();
        return;
      }
      this.gpu.submit({ stream: 0, durationNs: g as Ns, label, category: 'compute', onDone: done });
    };
    const endPhase = (): void => {
      if (!cpuDone || !gpuDone) return;
      if (phase === 1) phase2();
      else {
        p2Done = true;
        maybeEndStage();
      }
    };
    const runCpuA = (): void =>
      cpuTask(x.ca, x.ka, () => {
        if (x.actA > 0) {
          actAReady = false;
          mover.activation(x.actA, onActA);
        }
        cpuDone = true;
        endPhase();
      });
    const runCpuB = (): void =>
      cpuTask(x.cb, x.kb, () => {
        if (x.actB > 0) {
          actBReady = false;
          mover.activation(x.actB, onActB);
        }
        cpuDone = true;
        endPhase();
      });
    const onQkvA = (): void => {
      qkvAReady = true;
      if (cpuAWaitSince >= 0) {
        this.cpuWaitD2hNs += (sim.now as number) - cpuAWaitSince;
        cpuAWaitSince = -1;
        runCpuA();
      }
    };
    const onQkvB = (): void => {
      qkvBReady = true;
      if (cpuBWaitSince >= 0) {
        this.cpuWaitD2hNs += (sim.now as number) - cpuBWaitSince;
        cpuBWaitSince = -1;
        runCpuB();
      }
    };
    const runGpuB = (): void =>
      gpuTask(x.gb[l]!, 'gpu β', () => {
        if (d2hB > 0) {
          qkvBReady = false;
          d2hCopy(d2hB, onQkvB);
        }
        gpuDone = true;
        endPhase();
      });
    const runGpuA = (): void =>
      gpuTask(x.ga[l]!, 'gpu α', () => {
        if (d2hA > 0 && l + 1 < L) {
          qkvAReady = false;
          d2hCopy(d2hA, onQkvA);
        }
        gpuDone = true;
        endPhase();
      });
    const runLm = (): void =>
      gpuTask(x.lmHeadNs, 'lm head', () => {
        endNs = sim.now;
      });
    const onActA = (): void => {
      actAReady = true;
      if (gpuAWaiting) {
        gpuAWaiting = false;
        runGpuA();
      }
    };
    const onActB = (): void => {
      actBReady = true;
      if (gpuBWaiting) {
        gpuBWaiting = false;
        runGpuB();
      } else if (lmWaiting) {
        lmWaiting = false;
        runLm();
      }
    };
    const phase1 = (): void => {
      phase = 1;
      cpuDone = false;
      gpuDone = false;
      if (qkvAReady) runCpuA();
      else cpuAWaitSince = sim.now;
      if (actBReady) runGpuB();
      else gpuBWaiting = true;
    };
    const phase2 = (): void => {
      phase = 2;
      cpuDone = false;
      gpuDone = false;
      if (qkvBReady) runCpuB();
      else cpuBWaitSince = sim.now;
      if (actAReady) runGpuA();
      else gpuAWaiting = true;
    };
    const onDma = (): void => {
      dmaDone = true;
      maybeEndStage();
    };
    const startStage = (): void => {
      dmaDone = l + 1 >= L;
      p2Done = false;
      if (!dmaDone) mover.weights(x.layerBytes[l + 1]!, onDma);
      phase1();
    };
    const maybeEndStage = (): void => {
      if (!p2Done || !dmaDone) return;
      if (contention) {
        const c = this.dram.contendedTimeNs();
        if (c > this.lastContended) this.dramBoundStages++;
        this.lastContended = c;
      }
      l++;
      if (l < L) startStage();
      else if (actBReady) runLm();
      else lmWaiting = true;
    };
    mover.weights(x.layerBytes[0]!, () => startStage());
    sim.run();
    if (endNs < 0) throw new Error(`event VSLPipe: iteration did not finish (layer ${l} of ${L})`);
    return endNs - startNs;
  }

  stats(): EventPipeStats {
    const m = this.mover;
    return {
      events: this.sim.eventsProcessed,
      weightSlowedNs: m.weightSlowedNs,
      activationQueueNs: m.activationQueueNs,
      activationMaxQueueNs: m.activationMaxQueueNs,
      activationTransfers: m.activationTransfers,
      dramContendedNs: this.o.contention ? this.dram.contendedTimeNs() : 0,
      dramBoundStages: this.dramBoundStages,
      h2dBusyNs: m.link.busyTimeNs(),
      h2dBytes: m.link.bytesMoved,
      cpuBusyNs: this.cpu.busyCoreTimeNs() / this.o.cores,
      gpuBusyNs: this.gpu.busyTimeNs(),
      d2hBytes: this.d2h.bytesMoved,
      d2hBusyNs: this.d2h.busyTimeNs(),
      d2hLatencyNs: this.d2hLatencyNs,
      cpuWaitD2hNs: this.cpuWaitD2hNs,
    };
  }
}
