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

/** Counters an `EventPipe` keeps over its iterations. */
interface PipeTally {
  dramBoundStages: number;
  d2hLatencyNs: number;
  cpuWaitD2hNs: number;
  /** The DRAM share's contended time at the end of the last stage. */
  lastContended: number;
}

export class EventPipe {
  readonly sim = new Simulation<ResourceEvent>();
  readonly dram: FluidShare;
  readonly mover: DataMover;
  readonly cpu: CpuPool;
  readonly gpu: Gpu;
  readonly d2h: PcieLink;
  private readonly tally: PipeTally = { dramBoundStages: 0, d2hLatencyNs: 0, cpuWaitD2hNs: 0, lastContended: 0 };

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
    const startNs = this.sim.now as number;
    const run = new IterationRun(this, x, this.o.contention, this.o.cores, this.tally);
    run.start();
    this.sim.run();
    if (run.endNs < 0) throw new Error(`event VSLPipe: iteration did not finish (layer ${run.l} of ${run.L})`);
    return run.endNs - startNs;
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
      dramBoundStages: this.tally.dramBoundStages,
      h2dBusyNs: m.link.busyTimeNs(),
      h2dBytes: m.link.bytesMoved,
      cpuBusyNs: this.cpu.busyCoreTimeNs() / this.o.cores,
      gpuBusyNs: this.gpu.busyTimeNs(),
      d2hBytes: this.d2h.bytesMoved,
      d2hBusyNs: this.d2h.busyTimeNs(),
      d2hLatencyNs: this.tally.d2hLatencyNs,
      cpuWaitD2hNs: this.tally.cpuWaitD2hNs,
    };
  }
}

/**
 * One iteration of the event pipeline as a state machine (module comment): layer 0's weights,
 * then per layer a stage of two phases (CPU α beside GPU β, then CPU β beside GPU α) that ends
 * when phase 2 and the next layer's weight DMA have both finished, then the LM head. A group's
 * H2D activation copy gates its next GPU task; its D2H Q/K/V copy gates its next CPU attention.
 */
class IterationRun {
  /** When the LM head finished (−1 until then), and the current layer. */
  endNs = -1;
  l = 0;
  readonly L: number;
  private readonly sim: Simulation<ResourceEvent>;
  private readonly d2hA: number;
  private readonly d2hB: number;
  private dmaDone = false;
  private p2Done = false;
  private cpuDone = false;
  private gpuDone = false;
  private phase = 1;
  private actAReady = true;
  private actBReady = true;
  private gpuAWaiting = false;
  private gpuBWaiting = false;
  private lmWaiting = false;
  private qkvAReady = true;
  private qkvBReady = true;
  private cpuAWaitSince = -1;
  private cpuBWaitSince = -1;

  constructor(
    private readonly pipe: EventPipe,
    private readonly x: PipeIteration,
    private readonly contention: boolean,
    private readonly cores: number,
    private readonly tally: PipeTally,
  ) {
    this.sim = pipe.sim;
    this.L = x.layerBytes.length;
    this.d2hA = x.d2hA ?? 0;
    this.d2hB = x.d2hB ?? 0;
  }

  /** The prologue: layer 0's weights over H2D, alone; then stage 0. */
  start(): void {
    this.pipe.mover.weights(this.x.layerBytes[0]!, () => this.startStage());
  }

  private d2hCopy(bytes: number, done: () => void): void {
    const t0 = this.sim.now as number;
    this.pipe.d2h.submit({
      bytes,
      priority: ACTIVATION_PRIORITY,
      label: 'q/k/v',
      category: 'activations',
      onDone: () => {
        this.tally.d2hLatencyNs += (this.sim.now as number) - t0;
        done();
      },
    });
  }

  private cpuTask(c: number, k: number, done: () => void): void {
    if (c <= 0) {
      done();
      return;
    }
    this.pipe.cpu.submit({
      cores: this.cores,
      computeNs: c as Ns,
      bytes: this.contention ? k : 0,
      label: 'cpu attention',
      category: 'attention',
      onDone: done,
    });
  }

  private gpuTask(g: number, label: string, done: () => void): void {
    if (g <= 0) {
      done();
      return;
    }
    this.pipe.gpu.submit({ stream: 0, durationNs: g as Ns, label, category: 'compute', onDone: done });
  }

  private endPhase(): void {
    if (!this.cpuDone || !this.gpuDone) return;
    if (this.phase === 1) this.phase2();
    else {
      this.p2Done = true;
      this.maybeEndStage();
    }
  }

  private runCpuA(): void {
    this.cpuTask(this.x.ca, this.x.ka, () => {
      if (this.x.actA > 0) {
        this.actAReady = false;
        this.pipe.mover.activation(this.x.actA, () => this.onActA());
      }
      this.cpuDone = true;
      this.endPhase();
    });
  }

  private runCpuB(): void {
    this.cpuTask(this.x.cb, this.x.kb, () => {
      if (this.x.actB > 0) {
        this.actBReady = false;
        this.pipe.mover.activation(this.x.actB, () => this.onActB());
      }
      this.cpuDone = true;
      this.endPhase();
    });
  }

  private onQkvA(): void {
    this.qkvAReady = true;
    if (this.cpuAWaitSince >= 0) {
      this.tally.cpuWaitD2hNs += (this.sim.now as number) - this.cpuAWaitSince;
      this.cpuAWaitSince = -1;
      this.runCpuA();
    }
  }

  private onQkvB(): void {
    this.qkvBReady = true;
    if (this.cpuBWaitSince >= 0) {
      this.tally.cpuWaitD2hNs += (this.sim.now as number) - this.cpuBWaitSince;
      this.cpuBWaitSince = -1;
      this.runCpuB();
    }
  }

  private runGpuB(): void {
    this.gpuTask(this.x.gb[this.l]!, 'gpu β', () => {
      if (this.d2hB > 0) {
        this.qkvBReady = false;
        this.d2hCopy(this.d2hB, () => this.onQkvB());
      }
      this.gpuDone = true;
      this.endPhase();
    });
  }

  private runGpuA(): void {
    this.gpuTask(this.x.ga[this.l]!, 'gpu α', () => {
      if (this.d2hA > 0 && this.l + 1 < this.L) {
        this.qkvAReady = false;
        this.d2hCopy(this.d2hA, () => this.onQkvA());
      }
      this.gpuDone = true;
      this.endPhase();
    });
  }

  private runLm(): void {
    this.gpuTask(this.x.lmHeadNs, 'lm head', () => {
      this.endNs = this.sim.now;
    });
  }

  private onActA(): void {
    this.actAReady = true;
    if (this.gpuAWaiting) {
      this.gpuAWaiting = false;
      this.runGpuA();
    }
  }

  private onActB(): void {
    this.actBReady = true;
    if (this.gpuBWaiting) {
      this.gpuBWaiting = false;
      this.runGpuB();
    } else if (this.lmWaiting) {
      this.lmWaiting = false;
      this.runLm();
    }
  }

  private phase1(): void {
    this.phase = 1;
    this.cpuDone = false;
    this.gpuDone = false;
    if (this.qkvAReady) this.runCpuA();
    else this.cpuAWaitSince = this.sim.now;
    if (this.actBReady) this.runGpuB();
    else this.gpuBWaiting = true;
  }

  private phase2(): void {
    this.phase = 2;
    this.cpuDone = false;
    this.gpuDone = false;
    if (this.qkvBReady) this.runCpuB();
    else this.cpuBWaitSince = this.sim.now;
    if (this.actAReady) this.runGpuA();
    else this.gpuAWaiting = true;
  }

  private onDma(): void {
    this.dmaDone = true;
    this.maybeEndStage();
  }

  private startStage(): void {
    this.dmaDone = this.l + 1 >= this.L;
    this.p2Done = false;
    if (!this.dmaDone) this.pipe.mover.weights(this.x.layerBytes[this.l + 1]!, () => this.onDma());
    this.phase1();
  }

  private maybeEndStage(): void {
    if (!this.p2Done || !this.dmaDone) return;
    if (this.contention) {
      const c = this.pipe.dram.contendedTimeNs();
      if (c > this.tally.lastContended) this.tally.dramBoundStages++;
      this.tally.lastContended = c;
    }
    this.l++;
    if (this.l < this.L) this.startStage();
    else if (this.actBReady) this.runLm();
    else this.lmWaiting = true;
  }
}
