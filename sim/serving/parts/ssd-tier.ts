/**
 * The SSD tier (flash-moe, colibri, llama.cpp's mmap of a model larger than RAM): experts live
 * on the testbed's NVMe drive; host DRAM is the OS page cache, an LRU of expert files within the
 * RAM the engine leaves free (`PageCache`, the third memory pool); VRAM slots sit in front.
 *
 * - `storagePlanOf`: the tier's resources for a policy declaring `ssdTier` — the page cache's
 *   size (given, or host DRAM − the host copy of dense weights − the reserve) and the reads in
 *   flight; every mistake is a UserError naming the field.
 * - `placeHostWeights`: host DRAM at the start. Without the tier every expert is in it (as
 *   always); with it, the dense weights' host copy and the page cache's share, no expert.
 * - `SsdSource` (the `ExpertSource` of a slot residency with the tier): a fetch pins the
 *   expert's file in the page cache — a hit goes straight to the H2D link; a miss reads the
 *   drive first (NVMe link: queue-depth latency, then the sequential rate) — and the copy into
 *   the VRAM slot starts when the file is in host DRAM; the file stays pinned until the copy
 *   lands. Cancelling withdraws whichever stage it is in. The handle the residency holds is a
 *   `StagedFetch` (priority and submission order for its choices), not a PCIe transfer.
 * - CPU-computed experts (host-experts with the tier) pin their file the same way before they
 *   are ready (host-residency.ts).
 */
import { UserError } from '../../kernel/errors.ts';
import type { Ns } from '../../kernel/time.ts';
import type { Resources, StorageOptions } from '../../resources/index.ts';
import type { PageCache, PageTicket } from '../../resources/page-cache.ts';
import type { PcieLink, Transfer, TransferState } from '../../resources/pcie-link.ts';
import type { HardwareProfile, ModelProfile } from '../../../hardware-profiles/types.ts';
import type { SsdTierSpec } from '../policy.ts';
import type { ExpertSource } from './residency.ts';

/** The page cache and queue depth of a policy's SSD tier, or undefined without one. @throws UserError */
export function storagePlanOf(
  spec: SsdTierSpec | undefined,
  model: ModelProfile,
  hardware: HardwareProfile,
): StorageOptions | undefined {
  if (!spec) return undefined;
  const drive = hardware.drive;
  if (!drive) {
    throw new UserError(`the SSD tier needs a testbed naming a drive; ${hardware.id} has none`, undefined, 'drive');
  }
  const d = model.derived;
  if (d.allExpertBytes > drive.capacityBytes) {
    const msg = `${model.id}'s experts (${d.allExpertBytes} B) do not fit drive ${drive.id} (${drive.capacityBytes} B)`;
    throw new UserError(msg, undefined, 'drive');
  }
  const free = hardware.hostDramBytes - d.nonExpertBytes - spec.reservedBytes;
  const pageCacheBytes = Math.floor(spec.pageCacheBytes ?? free);
  if (!(pageCacheBytes >= d.bytesPerExpert) || pageCacheBytes > hardware.hostDramBytes - d.nonExpertBytes) {
    throw new UserError(
      `page cache of ${pageCacheBytes} B must hold one expert (${d.bytesPerExpert} B) and fit host DRAM ` +
        `(${hardware.hostDramBytes} B) beside the dense weights (${d.nonExpertBytes} B)`,
      undefined,
      spec.pageCacheBytes === undefined ? 'ssd.reservedGiB' : 'ssd.pageCacheGiB',
      spec.pageCacheBytes ?? spec.reservedBytes,
    );
  }
  if (!(spec.parallelReads >= 1)) throw new UserError('parallelReads must be ≥ 1', undefined, 'ssd.parallelReads');
  return { pageCacheBytes, maxQueueDepth: spec.parallelReads };
}

/** Host DRAM at the start of a serving run: every expert, or (SSD tier) the page cache's share. */
export function placeHostWeights(res: Resources, model: ModelProfile, storage: StorageOptions | undefined): void {
  const d = model.derived;
  if (!storage) {
    res.host.allocate(d.allExpertBytes, 'expertWeights', 'all experts (host copy)');
    res.host.allocate(d.nonExpertBytes, 'denseWeights', 'dense weights (host copy)');
    return;
  }
  res.host.allocate(d.nonExpertBytes, 'denseWeights', 'dense weights (host copy)');
  res.host.allocate(storage.pageCacheBytes, 'pageCache', 'OS page cache (expert files from NVMe)');
}

/** A fetch through the page cache: the handle a slot residency holds while it loads. */
export class StagedFetch implements Transfer {
  readonly id: number;
  readonly seq: number;
  state: TransferState = 'queued';
  sentBytes = 0;
  startNs: Ns | -1 = -1;
  doneNs: Ns | -1 = -1;
  latencyPaid = false;
  ticket: PageTicket | null = null;
  /** The H2D copy, once the file is in host DRAM. */
  inner: Transfer | null = null;

  constructor(
    seq: number,
    readonly bytes: number,
    public priority: number,
    readonly label: string,
    readonly category: string,
    readonly tag: number,
    readonly submitNs: Ns,
    public onDone: ((t: Transfer) => void) | undefined,
  ) {
    this.id = seq;
    this.seq = seq;
  }
}

export class SsdSource implements ExpertSource {
  private nextSeq = 0;

  constructor(
    private readonly h2d: PcieLink,
    private readonly cache: PageCache,
    private readonly clock: { readonly now: Ns },
  ) {}

  submitTransfer(
    bytes: number,
    priority: number,
    label: string,
    category: string,
    onDone: (t: Transfer) => void,
    tag: number,
  ): Transfer {
    const s = new StagedFetch(this.nextSeq++, bytes, priority, label, category, tag, this.clock.now, onDone);
    s.ticket = this.cache.acquire(tag, bytes, priority, label, () => this.cross(s));
    if (s.ticket.ready) this.cross(s);
    return s;
  }

  /** The file is in host DRAM: copy it into the slot. */
  private cross(s: StagedFetch): void {
    s.state = 'active';
    s.startNs = this.clock.now;
    s.inner = this.h2d.submitTransfer(s.bytes, s.priority, s.label, s.category, (t) => this.landed(s, t), s.tag);
  }

  private landed(s: StagedFetch, t: Transfer): void {
    s.state = 'done';
    s.doneNs = this.clock.now;
    s.sentBytes = s.bytes;
    s.inner = null;
    this.cache.release(s.ticket!);
    s.onDone?.(t);
  }

  reprioritize(t: Transfer, priority: number): void {
    const s = t as StagedFetch;
    s.priority = priority;
    if (s.inner) this.h2d.reprioritize(s.inner, priority);
    else if (s.ticket) this.cache.reprioritize(s.ticket, priority);
  }

  cancel(t: Transfer): void {
    const s = t as StagedFetch;
    if (s.state === 'done' || s.state === 'cancelled') return;
    s.state = 'cancelled';
    if (s.inner) this.h2d.cancel(s.inner);
    s.inner = null;
    if (s.ticket) this.cache.release(s.ticket);
  }
}
