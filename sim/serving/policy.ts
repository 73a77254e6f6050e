/**
 * The policy hook interface of the layer-wise serving executor (DESIGN §7): how cache and
 * prefetch policies plug in.
 *
 * A policy is a plain object filling some hooks (only `name` is required). Hooks receive
 * read-only views and return decisions; the executor validates and applies them and enforces
 * memory: a policy can ask for anything, but it can never overflow the expert buffer, evict
 * an expert that is being computed or an in-flight transfer the GPU is waiting for, or move
 * bytes that are not needed by a decision it made. Every error a hook throws is wrapped in a
 * `PolicyError` naming the policy and the hook.
 *
 * Vocabulary:
 * - An expert is identified by a *key* `layer * experts + expert` (layer = MoE layer index,
 *   0-based among MoE layers). `view.keyOf` / `view.layerOf` / `view.expertOf` convert.
 * - The *buffer* is the set of GPU slots (one expert each) shared by cached and prefetched
 *   experts. An entry is `loading` (its H2D transfer has not completed) or `resident`.
 * - A *need* is one (iteration, layer, expert) the router activated. It is a *buffer hit*
 *   when the expert is resident at the moment the router decides (DESIGN §7); hits are split
 *   into cache hits (resident because it was kept after an earlier use) and prefetch hits
 *   (resident because a prefetch brought it and it had not been used since).
 * - Priorities: lower is more urgent. The executor's on-demand fetches use priority 0;
 *   prefetch priorities are clamped to ≥ 1.
 */
import type { Ns } from '../kernel/time.ts';
import type { Operation } from '../cost/types.ts';
import type { RequestSpec } from '../workload.ts';

export type ExpertKey = number;

/** Where a buffer entry came from; `cache` once it has been used. */
export type EntryOrigin = 'demand' | 'prefetch' | 'cache';

export interface BufferEntryView {
  readonly key: ExpertKey;
  readonly state: 'loading' | 'resident';
  readonly origin: EntryOrigin;
  /** Being computed or awaited by the current layer: never evictable. */
  readonly pinned: boolean;
  /** Simulated time it became resident (−1 while loading) and was last used (−1 if never). */
  readonly residentSinceNs: number;
  readonly lastUsedNs: number;
  /** Times it has been used while in the buffer. */
  readonly uses: number;
  /**
   * What the slot holds: the whole expert, or (split experts, MoEpic) only its bottom segment,
   * the part its cached top segment lacks. Always 'whole' for policies without a segment cache.
   */
  readonly part?: 'whole' | 'bottom';
  /** Bytes the entry holds (one expert's bytes for a whole entry). */
  readonly bytes?: number;
}

export interface BufferView {
  /** Capacity in expert slots. */
  readonly slots: number;
  /** Occupied slots (loading + resident). */
  readonly occupied: number;
  has(key: ExpertKey): boolean;
  isResident(key: ExpertKey): boolean;
  isLoading(key: ExpertKey): boolean;
  entry(key: ExpertKey): BufferEntryView | undefined;
  /** All entries in insertion order. */
  entries(): Iterable<BufferEntryView>;
  /** Entries of one MoE layer (loading + resident), in insertion order; optional (the executor's buffer has it). */
  layerEntries?(layer: number): Iterable<BufferEntryView>;
  /** Entries of one MoE layer (loading + resident); optional, with `layerEntries`. */
  layerCount?(layer: number): number;
  /** The loading entries, in insertion order; optional (the executor's buffer has it). */
  loadingEntries?(): Iterable<BufferEntryView>;
  /**
   * Changes so far to the evictable set (resident, unpinned entries: an eviction query's
   * candidates), one per entry that joined or left it; optional (the executor's buffer has it).
   * A policy that remembers the candidates can tell from it that they are the same, less its
   * victims the executor released, without listing them again.
   */
  readonly evictableVersion?: number;
  /**
   * The evictable entries' keys: the first `evictableCount` of the array, in no particular order
   * (for a policy whose eviction order is total, a walk over these instead of `entries()`);
   * optional, with `evictableCount` and `lastUsedByKey` (the executor's buffer has them).
   */
  evictableKeys?(): Int32Array;
  readonly evictableCount?: number;
  /** Last use by expert key (−1: never used since it entered the buffer, or absent): the entries' `lastUsedNs`. */
  lastUsedByKey?(): Float64Array;
}

/**
 * Split experts (MoEpic, DESIGN §8): the top-segment cache beside the slot buffer. An expert
 * key may have a *top* segment (the first `fraction` of its bytes and of its compute) in this
 * cache; its *bottom* (the rest) is then what a slot of the buffer holds when it is fetched.
 * Present only for policies that declare `segmentCacheBytes`.
 */
export interface SegmentCacheView {
  /** Byte capacity of the top-segment cache, and bytes it holds now (loading + resident). */
  readonly capacityBytes: number;
  readonly usedBytes: number;
  /** Fraction of `key`'s expert its top segment holds; 0 when it has none. */
  topFraction(key: ExpertKey): number;
  /** State of `key`'s top segment; undefined when it has none. */
  topState(key: ExpertKey): 'loading' | 'resident' | undefined;
  /** Being computed or awaited by the current layer: cannot be dropped. */
  topPinned(key: ExpertKey): boolean;
  /** Keys with a top segment, in insertion order. */
  keys(): Iterable<ExpertKey>;
  /** Bytes of a top segment of `fraction` (what the executor allocates and transfers). */
  topBytes(fraction: number): number;
}

/** A top segment to load (or resize) into the segment cache. */
export interface TopRequest {
  readonly key: ExpertKey;
  /** Fraction of the expert, in (0, 1]. */
  readonly fraction: number;
}

/** Static facts, given once to `init`. */
export interface ModelShapeView {
  readonly moeLayers: number;
  readonly experts: number;
  readonly topK: number;
  readonly bytesPerExpert: number;
  /** Slots of the expert buffer. */
  readonly slots: number;
}

export interface RequestView {
  readonly spec: RequestSpec;
  /** Tokens processed before this iteration. */
  readonly processedTokens: number;
  /** Tokens this request processes in the current iteration (prompt length in prefill, 1 in decode). */
  readonly iterationTokens: number;
  readonly phase: 'prefill' | 'decode';
  /** Output tokens emitted so far. */
  readonly emittedTokens: number;
}

/** The view every hook gets. */
export interface ServingView extends ModelShapeView {
  readonly nowNs: Ns;
  readonly buffer: BufferView;
  /** Requests of the current iteration (empty between iterations). */
  readonly batch: readonly RequestView[];
  /** Current iteration number (0-based), and MoE layer being processed (−1 before the first). */
  readonly iteration: number;
  readonly layer: number;
  /**
   * The first MoE layer the current iteration routes: 0, except for an encoder-decoder model in
   * an iteration without a prefill, which skips the encoder (its first decoder MoE layer).
   */
  readonly firstLayer: number;
  keyOf(layer: number, expert: number): ExpertKey;
  layerOf(key: ExpertKey): number;
  expertOf(key: ExpertKey): number;
  /** Ranked predicted experts of `layer` for the current batch, best first (speculative prefetchers); empty if the workload has no predictor. */
  predict(layer: number): readonly number[];
  /** The top-segment cache (split experts); undefined for policies without one. */
  readonly segments?: SegmentCacheView;
  /**
   * The uncontended duration (ns) of an operation under the run's cost model and runtime: what
   * a profiler of the deployment measures with everything resident (MoEpic's configurator
   * takes its per-module times T_att, T_moe, T_head, T_load this way).
   */
  estimateNs?(op: Operation): number;
}

/**
 * Routing of one MoE layer of the current iteration, given to `onLayerRouted`. Valid during the
 * call only: the executor reuses the object and its arrays for the next layer (copy what you keep).
 */
export interface LayerRouting {
  readonly layer: number;
  /** Tokens routed to each expert, summed over the batch (length = experts). */
  readonly tokensPerExpert: Int32Array;
  /** Per request of the batch (same order as `view.batch`): tokens routed to each expert. */
  readonly perRequest: readonly Int32Array[];
  /** Experts activated (tokensPerExpert > 0), ascending. */
  readonly activated: readonly number[];
}

export interface PrefetchRequest {
  readonly key: ExpertKey;
  /** Lower is more urgent; clamped to ≥ 1. Re-issuing a key that is loading re-prioritises it. */
  readonly priority: number;
}

export interface PolicyDecision {
  /** Experts to bring into the buffer. Ignored for keys already resident; dropped when no slot can be freed, and once every request has finished. */
  readonly prefetch?: readonly PrefetchRequest[];
  /** Loading prefetches to cancel (no further bytes move; the slot is freed). Pinned ones are ignored. */
  readonly cancel?: readonly ExpertKey[];
  /** Resident, unpinned experts to drop from the buffer now. */
  readonly evict?: readonly ExpertKey[];
  /**
   * Segment cache only. Top segments to drop (cancelled if loading; pinned ones are ignored).
   * Dropping a top also drops the expert's bottom entry from the buffer (cancelled if loading)
   * unless that is pinned, in which case the drop is ignored.
   */
  readonly dropTops?: readonly ExpertKey[];
  /**
   * Segment cache only. Top segments to load over the H2D link at `topPriority` (default the
   * least urgent). A key whose top exists with another fraction is dropped and reloaded (the
   * reload moves the new top's bytes). Requests that do not fit the cache's free bytes are
   * ignored: drop first.
   */
  readonly loadTops?: readonly TopRequest[];
  readonly topPriority?: number;
}

/** `afterUse` result that keeps a top segment of the expert just computed (split experts). */
export interface KeepTop {
  /** Fraction of the expert kept as its top segment (in (0, 1]); the rest is released. */
  readonly keepTop: number;
  /** Tops dropped first to make room (same rules as `PolicyDecision.dropTops`). */
  readonly dropTops?: readonly ExpertKey[];
}

export interface EvictionQuery {
  /** Why a slot is needed: an on-demand fetch (must free one if any candidate exists) or a prefetch (may decline). */
  readonly reason: 'demand' | 'prefetch';
  /** The expert that needs the slot. */
  readonly forKey: ExpertKey;
  /** Resident, unpinned experts, in buffer insertion order. Valid during the call only (the executor reuses the array). */
  readonly candidates: readonly ExpertKey[];
  /**
   * True when `candidates` are exactly the buffer's evictable set (its resident, unpinned
   * entries): the executor's queries. A policy whose eviction order is total may then walk the
   * buffer's dense set (`BufferView.evictableKeys`) or per-layer index instead of listing them.
   */
  readonly allEvictable?: boolean;
}

/** See `ServingPolicy.hostExperts` and sim/serving/parts/host-residency.ts. */
export interface HostExpertsSpec {
  /** The first N MoE layers keep their experts in host DRAM (llama.cpp `--n-cpu-moe N`; all: `-ot exps=CPU`). */
  readonly cpuLayers: number;
  /** GPU cache slots per host layer (llama.cpp `--moe-expert-cache N`); 0: none. */
  readonly cacheSlotsPerLayer: number;
  /** Background uploads of missed experts per layer per decode iteration (`--moe-expert-cache-inserts K`). */
  readonly uploadsPerLayer: number;
  /** Admission gate: upload after this many uses (1: ungated) within `admitWindow` iterations. */
  readonly admitAfterUses: number;
  readonly admitWindow: number;
  /** Where a miss is computed: the CPU, a zero-copy GPU read, a blocking fetch, or by estimated cost (Fiddler). */
  readonly miss: 'cpu' | 'zero-copy' | 'fetch' | 'cost';
  /** Share of would-be fetched misses computed on the CPU instead (FreeToken hybrid). */
  readonly cpuShare: number;
  /** CPU threads for expert work (llama.cpp `-t`). */
  readonly threads: number;
  /** Expert format key into the runtime's CPU kernel rates (e.g. `iq2_s`); '' = DRAM term only. */
  readonly format: string;
}

/** See `ServingPolicy.ssdTier` and sim/serving/parts/ssd-tier.ts. */
export interface SsdTierSpec {
  /** Page-cache bytes; absent: host DRAM − the host copy of dense weights − `reservedBytes`. */
  readonly pageCacheBytes?: number;
  /** Host DRAM the OS and the engine keep for themselves (not page cache). */
  readonly reservedBytes: number;
  /** Expert reads the engine keeps in flight at once (flash-moe: its K parallel `pread`s). */
  readonly parallelReads: number;
}

export interface ServingPolicy {
  readonly name: string;
  /**
   * Whether a loading prefetch that the router now needs jumps the H2D queue (is
   * re-prioritised to the on-demand priority 0). Default true; `false` leaves it at its
   * prefetch priority (MoE-Infinity's `queueJump` ablation). On-demand fetches of experts that
   * are not loading always use priority 0.
   */
  readonly queueJump?: boolean;
  /**
   * Split experts (MoEpic): bytes of VRAM for a top-segment cache beside the slot buffer.
   * When set, the executor keeps per (layer, expert) a top segment (in this cache) and a
   * whole-or-bottom entry (in a slot); prefetches and on-demand fetches of an expert whose top
   * is cached move only its bottom; each segment computes as soon as it is resident (its kernel
   * is the `expert` op with the segment's `fraction`); and `afterUse` may keep a top. Absent:
   * whole experts only (every existing policy).
   */
  readonly segmentCacheBytes?: number;
  /**
   * Tops resident before the run starts (loaded with the model, like `preloadAllExperts`; no
   * transfer). Must fit `segmentCacheBytes`.
   */
  initialTops?(shape: ModelShapeView): readonly TopRequest[];
  /**
   * `ready-first`: this policy's engine computes whatever experts or segments of the layer are
   * resident while the missing ones load (MoEpic §3.2), overriding a runtime's `expertOrder:
   * index`. A runtime that loops over all experts still pays the idle iterations, once per
   * layer after the activated experts.
   */
  readonly computeOrder?: 'ready-first';
  /**
   * Host-resident experts (host-residency.ts): which MoE layers keep their experts in host DRAM,
   * where a miss is computed (CPU, zero-copy, fetch, by cost), a GPU cache in front and its
   * background uploads. Absent: every expert is fetched into a slot (every existing policy).
   */
  readonly hostExperts?: HostExpertsSpec;
  /**
   * The SSD tier (ssd-tier.ts): experts live on the testbed's NVMe drive, host DRAM holds an
   * LRU page cache of them; a miss in VRAM and in the page cache reads the drive first. Absent:
   * every expert stays in host DRAM (every other policy).
   */
  readonly ssdTier?: SsdTierSpec;
  /** Policy-specific results merged into the run's metrics under `policy` (e.g. MoEpic's chosen configuration). */
  report?(): Record<string, unknown>;
  /** Before the run. */
  init?(shape: ModelShapeView): void;
  /** A new iteration's batch is known; nothing has been routed yet. */
  onIterationStart?(view: ServingView): PolicyDecision | void;
  /** MoE layer `routing.layer`'s router has run. Typically prefetches for later layers. */
  onLayerRouted?(view: ServingView, routing: LayerRouting): PolicyDecision | void;
  /** Every activated expert of MoE layer `layer` has computed (the GPU moves on to the next layer). */
  onLayerDone?(view: ServingView, layer: number): PolicyDecision | void;
  /**
   * An expert finished computing (every segment of it, for split experts). Return `false` to
   * release its slot now (no cache), `true` or nothing to keep it; with a segment cache, a
   * `KeepTop` keeps the first `keepTop` of a whole expert as its top segment and releases the
   * slot (no bytes move).
   */
  afterUse?(view: ServingView, key: ExpertKey): boolean | void | KeepTop;
  /** A prefetch completed. */
  onPrefetchDone?(view: ServingView, key: ExpertKey): PolicyDecision | void;
  /**
   * A slot is needed and the buffer is full. Return one of `query.candidates` to evict, or
   * `undefined` to decline (allowed only for prefetches: the prefetch is dropped). When the
   * hook is absent the executor evicts the least recently used candidate.
   */
  chooseVictim?(view: ServingView, query: EvictionQuery): ExpertKey | undefined;
  /** The iteration finished (tokens emitted). */
  onIterationEnd?(view: ServingView): PolicyDecision | void;
  /** A request emitted its last token. */
  onRequestFinished?(view: ServingView, request: RequestSpec): void;
}

/**
 * The hooks of `ServingPolicy`, each with what a wrapper may check of its result: `decision`
 * hooks return a `PolicyDecision`, `keep` is `afterUse`, `victim` is `chooseVictim`, `setup`
 * hooks run once around the run, `notice` hooks return nothing. The compiler forces this list
 * to name every hook of `ServingPolicy` and nothing else, so the executor's driver, the
 * runner's plugin guard and the bench's timer (`interceptPolicy`) never miss one.
 */
export type ServingHookKind = 'setup' | 'decision' | 'keep' | 'victim' | 'notice';
type HookKeys<T> = { [K in keyof T]-?: NonNullable<T[K]> extends (...args: never[]) => unknown ? K : never }[keyof T];
/** A function-valued member of `ServingPolicy`. */
export type ServingHook = HookKeys<ServingPolicy>;
/** A value member of `ServingPolicy` (its name and the options the executor reads once). */
export type ServingSetting = Exclude<keyof ServingPolicy, ServingHook>;

export const SERVING_HOOKS = {
  init: 'setup',
  initialTops: 'setup',
  report: 'setup',
  onIterationStart: 'decision',
  onLayerRouted: 'decision',
  onLayerDone: 'decision',
  afterUse: 'keep',
  onPrefetchDone: 'decision',
  chooseVictim: 'victim',
  onIterationEnd: 'decision',
  onRequestFinished: 'notice',
} as const satisfies Record<ServingHook, ServingHookKind>;

/** Every value member of `ServingPolicy` (forced complete by the compiler, as `SERVING_HOOKS`). */
export const SERVING_SETTINGS = {
  name: true,
  queueJump: true,
  segmentCacheBytes: true,
  computeOrder: true,
  hostExperts: true,
  ssdTier: true,
} as const satisfies Record<ServingSetting, true>;

export const SERVING_HOOK_NAMES = Object.keys(SERVING_HOOKS) as ServingHook[];
export const SERVING_SETTING_NAMES = Object.keys(SERVING_SETTINGS) as ServingSetting[];
