/**
 * Host-resident experts (`HostResidency`, the `Residency` of a policy declaring `hostExperts`):
 * the engines that keep experts in host DRAM and decide per activated expert where it is
 * computed (llama.cpp `-ot exps=CPU` / `--n-cpu-moe N`, its `--moe-expert-cache`, Fiddler,
 * FreeToken's hybrid, paddock's zero-copy).
 *
 * - The first `cpuLayers` MoE layers are host layers; the experts of every other MoE layer are
 *   loaded into VRAM slots with the model (resident all run, computed on the GPU).
 * - A host layer may have a GPU cache of `cacheSlotsPerLayer` slots: a resident expert is a hit,
 *   computed on the GPU from its slot. A miss (and an expert whose upload is still in flight) is
 *   placed by `miss`: `cpu` (computed in place by the CPU pool), `zero-copy` (a GPU kernel
 *   reading host memory, no slot), `fetch` (a blocking copy into a slot of its layer), or `cost`
 *   (Fiddler: whichever of CPU and fetch-then-GPU is estimated faster for its token count).
 *   `cpuShare` (FreeToken hybrid) sends that share of the misses that would be fetched to the CPU
 *   instead, deterministically (an accumulator, no randomness).
 * - Misses not fetched may be uploaded into their layer's cache in the background, in decode
 *   iterations only, at most `uploadsPerLayer` per layer per iteration, once an expert has been
 *   used `admitAfterUses` times within a window of `admitWindow` iterations (a tumbling window
 *   opened at its first counted use). An upload takes the layer's least recently used unpinned
 *   resident expert's slot when the layer is at its cap; it costs H2D link time like a prefetch.
 * - With the SSD tier (ssd-tier.ts; llama.cpp's mmap of a model larger than RAM) host DRAM holds
 *   only the page cache: fetches and uploads go through it, and a CPU-computed miss pins its
 *   file there (reading it from the drive first when absent) before it is ready.
 */
import type { PageCache, PageTicket } from '../../resources/page-cache.ts';
import type { ExpertKey, HostExpertsSpec } from '../policy.ts';
import type { HostComputeOptions } from './host-compute.ts';
import { cpuKernelNs } from './host-compute.ts';
import type { Kernels } from './kernels.ts';
import type { PieceWork, ReadyListener } from './residency.ts';
import { DEMAND_PRIORITY, SlotResidency } from './slot-residency.ts';
import type { SsdSource } from './ssd-tier.ts';
import type { IterationState, ServingContext } from './state.ts';

const ON_GPU = 0;
const ON_CPU = 1;
const ZERO_COPY = 2;
/** Background uploads go behind every demand fetch. */
const UPLOAD_PRIORITY = 1;

/** What a host residency did, for tests and the validation report. */
export interface HostStats {
  cpuComputed: number;
  zeroCopyReads: number;
  uploads: number;
  fetchedOnMiss: number;
}

export class HostResidency extends SlotResidency {
  /** Placement of each key in the current layer (0 GPU slot, 1 CPU, 2 zero-copy). */
  private readonly placement: Uint8Array;
  private readonly gateCount: Int32Array;
  private readonly gateSince: Int32Array;
  private readonly absent: ExpertKey[] = [];
  private shareAcc = 0;
  private uploadsLeft = 0;
  readonly stats: HostStats = { cpuComputed: 0, zeroCopyReads: 0, uploads: 0, fetchedOnMiss: 0 };
  /** SSD tier: the page cache CPU-computed experts are read from, and their pins. */
  private readonly files: PageCache | undefined;
  private readonly cpuTickets = new Map<ExpertKey, PageTicket>();

  constructor(
    ctx: ServingContext,
    kernels: Kernels,
    ready: ReadyListener,
    slots: number,
    private readonly spec: HostExpertsSpec,
    private readonly host: HostComputeOptions,
    ssd?: SsdSource,
  ) {
    super(ctx, kernels, ready, slots, ssd);
    this.files = ssd ? ctx.res.pageCache : undefined;
    const keys = ctx.model.moeLayers * ctx.E;
    this.placement = new Uint8Array(keys);
    this.gateCount = new Int32Array(keys);
    this.gateSince = new Int32Array(keys).fill(-1);
  }

  /** Slots a spec needs: every expert of a GPU layer, plus the caches of host layers. */
  static slotsFor(spec: HostExpertsSpec, moeLayers: number, experts: number): number {
    const cpu = Math.min(spec.cpuLayers, moeLayers);
    return (moeLayers - cpu) * experts + cpu * Math.min(spec.cacheSlotsPerLayer, experts);
  }

  private isHostLayer(moeLayer: number): boolean {
    return moeLayer < this.spec.cpuLayers;
  }

  override start(): void {
    const E = this.ctx.E;
    for (let l = Math.min(this.spec.cpuLayers, this.ctx.model.moeLayers); l < this.ctx.model.moeLayers; l++) {
      for (let e = 0; e < E; e++) this.buffer.occupy(l * E + e, 'cache', true);
    }
  }

  override claimLayer(it: IterationState, moeLayer: number, activated: readonly number[]): void {
    it.remaining = activated.length;
    this.uploadsLeft = this.spec.uploadsPerLayer;
    const absent = this.absent;
    while (absent.length > 0) absent.pop();
    const E = this.ctx.E;
    const c = this.ctx.counters;
    for (const e of activated) {
      const key = moeLayer * E + e;
      c.needs++;
      if (it.decodeOnly) c.decodeNeeds++;
      if (this.isHostLayer(moeLayer)) this.countUse(it, key);
      const entry = this.buffer.entry(key);
      if (entry && entry.state === 'resident') this.hit(it, key);
      else absent.push(key);
    }
    for (const key of absent) this.miss(it, key, moeLayer);
  }

  private hit(it: IterationState, key: ExpertKey): void {
    const c = this.ctx.counters;
    const entry = this.buffer.entry(key)!;
    if (entry.prefetchUnused) {
      c.prefetchHits++;
      if (it.decodeOnly) c.decodePrefetchHits++;
      this.markPrefetchUsed(entry);
    } else {
      c.cacheHits++;
      if (it.decodeOnly) c.decodeCacheHits++;
    }
    this.buffer.pin(entry, true);
    this.placement[key] = ON_GPU;
    this.ready.markReady(key);
  }

  /** Uses counted for the admission gate (tumbling window of `admitWindow` iterations). */
  private countUse(it: IterationState, key: ExpertKey): void {
    const since = this.gateSince[key]!;
    if (since < 0 || it.index - since >= this.spec.admitWindow) {
      this.gateSince[key] = it.index;
      this.gateCount[key] = 0;
    }
    this.gateCount[key] = this.gateCount[key]! + 1;
  }

  private miss(it: IterationState, key: ExpertKey, moeLayer: number): void {
    const spec = this.spec;
    const loading = this.buffer.entry(key) !== undefined;
    let mode = spec.miss;
    if (mode === 'cost') mode = this.cheaperOnCpu(it, key) ? 'cpu' : 'fetch';
    if (mode === 'fetch' && spec.cpuShare > 0) {
      this.shareAcc += spec.cpuShare;
      if (this.shareAcc >= 1 - 1e-9) {
        this.shareAcc -= 1;
        mode = 'cpu';
      }
    }
    if (mode === 'fetch' && !loading && this.layerSlot(key, moeLayer, 'demand')) {
      this.placement[key] = ON_GPU;
      this.stats.fetchedOnMiss++;
      this.fetch(key, 'demand', DEMAND_PRIORITY, true);
      return;
    }
    // An upload in flight is not waited for: the engine computes the expert where it is now.
    this.placement[key] = mode === 'zero-copy' ? ZERO_COPY : ON_CPU;
    if (this.files && mode !== 'zero-copy') this.fromPageCache(key, this.files);
    else this.ready.markReady(key);
    if (!loading) this.maybeUpload(it, key, moeLayer);
  }

  /** SSD tier: a CPU-computed expert is ready once its file is pinned in the page cache. */
  private fromPageCache(key: ExpertKey, files: PageCache): void {
    const label = this.kernels.expertLabel(key);
    const t = files.acquire(key, this.bytesPerExpert, DEMAND_PRIORITY, label, () => {
      this.ready.markReady(key);
      this.ready.pump();
    });
    this.cpuTickets.set(key, t);
    if (t.ready) this.ready.markReady(key);
  }

  /** Fiddler's choice: CPU in place against copy + GPU kernel, for this expert's token count. */
  private cheaperOnCpu(it: IterationState, key: ExpertKey): boolean {
    const ctx = this.ctx;
    const d = ctx.model.derived;
    const tokens = it.tokensPerExpert[key % ctx.E]!;
    const dram = ctx.res.hostDram.capacityBytesPerSec;
    const threads = Math.min(this.host.threads, ctx.res.cpu.cores);
    const memNs = (d.bytesPerExpert / Math.min(dram, threads * this.host.perCoreDramBytesPerSec)) * 1e9;
    const cpuNs = Math.max(cpuKernelNs(this.host, d.paramsPerExpert, d.bytesPerExpert, tokens, dram), memNs);
    const link = ctx.res.h2d;
    const copyNs = (d.bytesPerExpert / link.bytesPerSec) * 1e9 + link.latencyNs;
    const fetchNs = copyNs + this.kernels.tokenOpNs('expert', tokens);
    return cpuNs <= fetchNs;
  }

  private maybeUpload(it: IterationState, key: ExpertKey, moeLayer: number): void {
    const spec = this.spec;
    if (spec.cacheSlotsPerLayer <= 0 || !it.decodeOnly || this.uploadsLeft <= 0) return;
    if (this.gateCount[key]! < spec.admitAfterUses) return;
    if (!this.layerSlot(key, moeLayer, 'prefetch')) return;
    this.uploadsLeft--;
    this.stats.uploads++;
    this.fetch(key, 'prefetch', UPLOAD_PRIORITY, false);
  }

  /** Makes room in `moeLayer`'s cache for `key`; false when every slot of the layer is pinned or loading. */
  private layerSlot(key: ExpertKey, moeLayer: number, _why: 'demand' | 'prefetch'): boolean {
    const cap = Math.min(this.spec.cacheSlotsPerLayer, this.ctx.E);
    if (cap <= 0) return false;
    if (this.buffer.layerCount(moeLayer) >= cap) {
      let victim: { key: ExpertKey; lastUsedNs: number } | undefined;
      for (const e of this.buffer.layerEntries(moeLayer)) {
        if (e.state !== 'resident' || e.pinned || e.key === key) continue;
        if (!victim || e.lastUsedNs < victim.lastUsedNs) victim = e;
      }
      if (!victim) return false;
      this.evict(victim.key, true);
    }
    return this.buffer.free > 0;
  }

  override describe(piece: number, out: PieceWork): void {
    super.describe(piece, out);
    const p = this.placement[piece]!;
    if (p === ON_CPU) {
      out.placement = 'cpu';
      out.label = `${out.label} (cpu)`;
      out.resident = true; // host DRAM holds every expert for the whole run
    } else if (p === ZERO_COPY) {
      out.placement = 'gpu-host';
      out.resident = true; // read in place from host-mapped memory
    }
  }

  override afterCompute(key: ExpertKey): void {
    const p = this.placement[key]!;
    this.placement[key] = ON_GPU;
    if (p === ON_CPU) {
      this.stats.cpuComputed++;
      const t = this.cpuTickets.get(key);
      if (t) {
        this.files!.release(t);
        this.cpuTickets.delete(key);
      }
      return;
    }
    if (p === ZERO_COPY) {
      this.stats.zeroCopyReads++;
      return;
    }
    const e = this.buffer.entry(key)!;
    this.used(e);
    this.serveSlotWaiters();
  }
}
