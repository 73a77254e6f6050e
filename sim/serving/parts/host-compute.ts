/**
 * Expert work by placement (`PlacementCompute`, the `ExpertCompute` of host-expert residencies):
 * - `gpu-slot`: the GPU from a VRAM slot (delegated to `GpuSlotCompute`).
 * - `cpu`: the CPU pool computes the expert in host DRAM (llama.cpp `-ot exps=CPU`). One CPU
 *   task per expert on the runtime's threads: its FLOP term is the format's measured dequant +
 *   matvec rate for the token count (sim/cost/cpu-expert.ts), its DRAM term the expert's bytes
 *   through the host-DRAM fluid share (the pool takes the larger). The first CPU expert of a layer
 *   is preceded by the runtime's per-layer host submit / synchronise / merge task. With overlap
 *   `concurrent` the GPU goes on with resident experts meanwhile (llama.cpp's scheduler splits a
 *   layer's graph between backends); with `serial` the GPU waits. The layer waits for both.
 * - `gpu-host` (zero-copy): a GPU kernel reading host-mapped pinned memory; no slot. The read is
 *   a transfer of the expert's bytes on the H2D link (bytes conserved), and the kernel holds the
 *   stream for the read and for max(0, kernel − read) more; a small-transaction efficiency < 1
 *   stretches the read (the link carries the bytes at its full rate; the stream is held for
 *   read / efficiency).
 */
import { ceilNs, type Ns } from '../../kernel/time.ts';
import { cpuExpertCost } from '../../cost/cpu-expert.ts';
import type { QuantKernelFile } from '../../../hardware-profiles/quant-kernels.ts';
import type { Transfer } from '../../resources/pcie-link.ts';
import { GpuSlotCompute, type ExpertCompute } from './compute.ts';
import type { Kernels } from './kernels.ts';
import type { PieceWork, Residency } from './residency.ts';
import type { IterationState, ServingContext } from './state.ts';

/** How the runtime computes host experts (runtime profile `hostExperts`, policy parameters). */
export interface HostComputeOptions {
  /** The runtime's CPU kernel rates; null: DRAM term only. */
  readonly kernels: QuantKernelFile | null;
  /** The expert format key into `kernels.formats`. */
  readonly format: string;
  readonly threads: number;
  /** Host submit + synchronise + merge of a layer that has CPU experts (runtime property). */
  readonly layerSyncNs: Ns;
  readonly overlap: 'concurrent' | 'serial';
  /** What one CPU core can draw from host DRAM (the CPU profile's). */
  readonly perCoreDramBytesPerSec: number;
  /** Zero-copy: the link's efficiency for a kernel's small reads (1: full rate). */
  readonly zeroCopyEfficiency: number;
}

/** Pure: the CPU kernel (FLOP) term of one expert over `tokens` tokens, ns (0 when unmeasured). */
export function cpuKernelNs(o: HostComputeOptions, weights: number, bytes: number, tokens: number, dram: number): Ns {
  if (!o.kernels) return ceilNs(0);
  const c = cpuExpertCost(o.kernels, o.format, weights, bytes, tokens, o.threads, dram);
  return ceilNs(c.kernelNs ?? 0);
}

export class PlacementCompute implements ExpertCompute {
  private readonly gpu: GpuSlotCompute;
  private readonly work: PieceWork = {
    key: 0,
    fraction: 1,
    label: '',
    reportKey: 0,
    resident: false,
    placement: 'gpu-slot',
  };
  /** The MoE layer (iteration · layers + layer) whose sync task was submitted last. */
  private syncedLayer = -1;
  private readonly weightsPerExpert: number;
  private readonly bytesPerExpert: number;
  /** Zero-copy reads in flight: transfer tag → piece (one at a time: the stream is held). */
  private zeroCopyPiece = -1;
  private zeroCopyKernelNs = 0;
  private zeroCopyStartNs = 0;
  private readonly cpuQueue: { piece: number; computeNs: Ns; bytes: number; label: string }[] = [];
  private cpuBusy = false;
  /** CPU expert tasks started and finished (tests, reports). */
  cpuExperts = 0;
  zeroCopyReads = 0;

  constructor(
    private readonly ctx: ServingContext,
    private readonly kernels: Kernels,
    private readonly residency: Residency,
    /** A GPU piece finished (the executor's expert-kernel completion). */
    private readonly onGpuDone: () => void,
    /** A CPU piece finished: the layer may go on (not touching the GPU stream's state). */
    private readonly onCpuDone: (piece: number) => void,
    /** Asks the expert order to start the next ready piece (concurrent CPU work). */
    private readonly pump: () => void,
    private readonly o: HostComputeOptions,
  ) {
    this.gpu = new GpuSlotCompute(ctx, kernels, residency, onGpuDone);
    this.weightsPerExpert = ctx.model.derived.paramsPerExpert;
    this.bytesPerExpert = ctx.model.derived.bytesPerExpert;
  }

  start(it: IterationState, piece: number): void {
    const w = this.work;
    this.residency.describe(piece, w);
    if (w.placement === 'gpu-slot') this.gpu.start(it, piece);
    else if (w.placement === 'cpu') this.startCpu(it, piece, w);
    else this.startZeroCopy(it, piece, w);
  }

  private startCpu(it: IterationState, piece: number, w: PieceWork): void {
    const ctx = this.ctx;
    ctx.sink?.onHostExpertCompute?.(w.reportKey, ctx.sim.now, 'cpu');
    const layerId = it.index * ctx.model.layers + it.layer;
    if (this.syncedLayer !== layerId && this.o.layerSyncNs > 0) {
      this.cpuQueue.push({ piece: -1, computeNs: this.o.layerSyncNs, bytes: 0, label: 'cpu layer sync' });
    }
    this.syncedLayer = layerId;
    const tokens = it.tokensPerExpert[w.key % ctx.E]!;
    const dram = ctx.res.hostDram.capacityBytesPerSec;
    const computeNs = cpuKernelNs(this.o, this.weightsPerExpert, this.bytesPerExpert, tokens, dram);
    const label = this.kernels.countLabel(`cpu ${w.label}`, tokens);
    this.cpuQueue.push({ piece, computeNs, bytes: this.bytesPerExpert, label });
    if (this.o.overlap === 'serial') it.computing = true;
    this.cpuExperts++;
    if (!this.cpuBusy) this.nextCpuTask();
    if (this.o.overlap !== 'serial') this.pump();
  }

  /**
   * The runtime's CPU backend runs one graph node at a time on all its threads: expert tasks
   * (and the layer's sync task) go to the pool one after another, each on `threads` cores.
   */
  private nextCpuTask(): void {
    const t = this.cpuQueue.shift();
    if (!t) {
      this.cpuBusy = false;
      return;
    }
    this.cpuBusy = true;
    const cpu = this.ctx.res.cpu;
    const cores = Math.min(this.o.threads, cpu.cores);
    const onDone = (): void => {
      if (t.piece >= 0) {
        if (this.o.overlap === 'serial') this.ctx.iter!.computing = false;
        this.onCpuDone(t.piece);
      }
      this.nextCpuTask();
    };
    const category = t.piece >= 0 ? 'cpuExpert' : 'cpuSync';
    cpu.submit({ cores, computeNs: t.computeNs, bytes: t.bytes, label: t.label, category, onDone });
  }

  private startZeroCopy(it: IterationState, piece: number, w: PieceWork): void {
    const ctx = this.ctx;
    it.computing = true;
    it.computingKey = piece;
    this.zeroCopyReads++;
    const tokens = it.tokensPerExpert[w.key % ctx.E]!;
    this.zeroCopyPiece = piece;
    this.zeroCopyKernelNs = this.kernels.tokenOpNs('expert', tokens);
    this.zeroCopyStartNs = ctx.sim.now;
    ctx.res.h2d.submitTransfer(this.bytesPerExpert, 0, `zero-copy ${w.label}`, 'expert-zero-copy', this.onRead, piece);
  }

  /** The zero-copy read landed: the kernel holds the stream for the rest of its time. */
  private readonly onRead = (t: Transfer): void => {
    const ctx = this.ctx;
    const readNs = ctx.sim.now - this.zeroCopyStartNs;
    const eff = this.o.zeroCopyEfficiency;
    const stretchNs = eff >= 1 ? 0 : Math.ceil(readNs / eff) - readNs;
    const rest = Math.max(stretchNs, this.zeroCopyKernelNs - readNs, 0);
    const piece = t.tag;
    this.zeroCopyPiece = -1;
    ctx.sink?.onHostExpertCompute?.(piece, ctx.sim.now, 'gpu-host');
    this.kernels.submit(ceilNs(rest), this.kernels.expertLabel(piece), 'expert', this.gpuDone);
  };

  private readonly gpuDone = (): void => this.onGpuDone();

  /** Whether a zero-copy read is in flight (tests). */
  get reading(): boolean {
    return this.zeroCopyPiece >= 0;
  }
}
