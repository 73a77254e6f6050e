/**
 * Expert residency: where the bytes of an activated expert are and how they get to where it is
 * computed. The executor's coordinator asks a `Residency` to claim a layer's experts, to say
 * what each piece of work is, to settle a piece once computed and to apply a policy's
 * decisions; it never looks at slots or segments itself.
 *
 * Two implementations today:
 * - `SlotResidency` (slot-residency.ts): whole experts in the GPU slot buffer, fetched from host
 *   DRAM over the H2D link (on demand at the top priority, or prefetched by the policy).
 * - `SplitResidency` (split-residency.ts): MoEpic's split experts — a top-segment cache beside
 *   the slots; an expert is computed as a top piece and a bottom piece, each when resident.
 *
 * Where an expert is computed and where its bytes come from are separate questions, and each
 * answer is a new implementation, not a branch:
 * - A *piece* (`PieceWork`) carries its `placement`: `gpu-slot` (the GPU, from a VRAM slot) is
 *   the only one today. A CPU-computed expert (llama.cpp `-ot exps=CPU`) is a residency that
 *   claims host experts with placement `cpu` and marks them ready at once (no fetch); a GPU
 *   cache in front of CPU compute is a residency that marks hits `gpu-slot`, misses `cpu`, and
 *   issues capped background uploads through the same slot machinery; zero-copy is placement
 *   `gpu-host` (no slot, the kernel bound by the link). The executor hands each piece to the
 *   `ExpertCompute` for its placement (compute.ts).
 * - A slot residency's fetches come from an `ExpertSource`: the H2D link itself (host DRAM), or
 *   the SSD tier's `SsdSource` (ssd-tier.ts), which first reads the expert over the NVMe link
 *   into the host page cache.
 *
 * Piece ids: an expert key `layer · experts + expert`, or (split experts) key + `span` for a
 * top segment, span = MoE layers × experts.
 */
import type { Transfer } from '../../resources/pcie-link.ts';
import type { ExpertBuffer } from '../expert-buffer.ts';
import type { ExpertKey, PolicyDecision, SegmentCacheView, ServingHook } from '../policy.ts';
import type { IterationState } from './state.ts';

/**
 * Where a piece of expert work runs: the GPU from a VRAM slot; the CPU from host DRAM
 * (host-residency.ts); the GPU reading host-mapped memory in place (zero-copy).
 */
export type Placement = 'gpu-slot' | 'cpu' | 'gpu-host';

/** One piece of a layer's expert work, as `Residency.describe` fills it (one object, reused). */
export interface PieceWork {
  /** The expert the piece belongs to. */
  key: ExpertKey;
  /** Share of the expert's compute (1 for a whole expert). */
  fraction: number;
  /** Kernel label (without the token count). */
  label: string;
  /** The key reported to the trace's `onExpertCompute`. */
  reportKey: number;
  /** Whether its bytes are resident when it starts (the invariant checker's view). */
  resident: boolean;
  placement: Placement;
}

/**
 * Where a slot residency's fetches come from: the H2D link itself (experts in host DRAM; a
 * `PcieLink` is one), or a tier in front of it that first brings the bytes into host DRAM
 * (`SsdSource`, ssd-tier.ts). The returned handle is what the residency re-prioritises or
 * cancels; `onDone` gets the H2D transfer whose tag is the piece.
 */
export interface ExpertSource {
  submitTransfer(
    bytes: number,
    priority: number,
    label: string,
    category: string,
    onDone: (t: Transfer) => void,
    tag: number,
  ): Transfer;
  reprioritize(t: Transfer, priority: number): void;
  cancel(t: Transfer): void;
}

/** How a residency tells the executor that a piece the current layer needs can run now. */
export interface ReadyListener {
  markReady(piece: number): void;
  pump(): void;
}

export interface Residency {
  /** The slot buffer policies see (`ServingView.buffer`). */
  readonly buffer: ExpertBuffer;
  /** The top-segment cache policies see (split experts), else undefined. */
  readonly segments: SegmentCacheView | undefined;
  /** VRAM it holds free for itself, which admitting a request's KV must not take. */
  reservedFreeBytes(): number;
  /** Before the first arrival, after the policy's `init`: preloads, initial segments. */
  start(): void;
  /**
   * Claims MoE layer `moeLayer`'s activated experts: counts the needs and hits, pins what is
   * present, marks resident pieces ready, starts on-demand fetches; sets `it.remaining`.
   */
  claimLayer(it: IterationState, moeLayer: number, activated: readonly number[]): void;
  /** Fills `out` for `piece`, about to start. */
  describe(piece: number, out: PieceWork): void;
  /** `piece` has computed: unpins it, and once its expert is done asks the policy whether to keep it. */
  afterCompute(piece: number): void;
  /** Applies a policy's decision (from hook `hook`). */
  apply(hook: ServingHook, d: PolicyDecision | void): void;
  /** At the end of the run: counts prefetches never used. */
  finish(): void;
}
