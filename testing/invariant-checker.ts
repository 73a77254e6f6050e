/**
 * A trace sink that checks the serving executor's invariants (DESIGN §1 "testers", §10) from
 * the outside: it keeps its own books from the records the resources and the executor report,
 * never reading the executor's state during the run, and compares with the outcome only at
 * the end.
 *
 * Checked:
 * (a) memory: at every `onMemory` record, used ≤ capacity, 0 ≤ category ≤ used, and the sum of
 *     the latest per-category figures of a pool equals its used bytes;
 * (b) residency: an expert computes only when it is resident. The checker keeps its own
 *     resident set from `onExpertResidency` (true on arrival / preload, false on release), and
 *     every arrival must be backed by a completed (`done`) H2D transfer of that expert (category
 *     `expert*`, label `expert M<layer>E<expert>`) whose bytes are one expert's bytes;
 *     `onExpertCompute(key)` must find the key resident (and the executor must agree);
 * (c) PCIe bytes on h2d: per transfer Σ packet bytes = its bytes when done, its `sentBytes`
 *     when cancelled; each transfer is reported once, never receives a packet afterwards; in
 *     total Σ packets = Σ done bytes + Σ cancelled sentBytes = `resources.h2d.bytesMoved`
 *     = `completedBytes + cancelledSentBytes` at the end, and no transfer is left unreported;
 * (d) requests: arrive, admit, firstToken, finish once each; tokens emitted (firstToken +
 *     token) = outputTokens; arrive ≤ admit ≤ firstToken ≤ finish; the outcome agrees;
 * (e) SSD tier (`ssd: true`): an expert is computed on the CPU, or copied over H2D, only while
 *     its file is in the page cache (from `onPageCache`: resident from its read's landing to its
 *     eviction), the whole copy long; the NVMe link's bytes add up as the H2D link's do
 *     (Σ packets = Σ done + Σ cancelled sent = `resources.nvme.bytesMoved`);
 * plus: kernels on one GPU stream never overlap, and simulated time never runs backwards
 * within a kind of record.
 *
 * Use it as (one of) the executor's sinks, run, then `finish(outcome)` and `violations()`.
 */
import type {
  KernelRecord,
  MemoryRecord,
  PacketRecord,
  RequestPhase,
  TraceSink,
  TransferRecord,
} from '../sim/observe/trace-sink.ts';
import type { ServingOutcome } from '../sim/serving/serving-executor.ts';

export interface InvariantCheckerOptions {
  /** Experts per MoE layer: keys are `layer * experts + expert` (needed to match transfer labels). */
  readonly experts: number;
  /** Bytes of one expert; when given, every expert transfer must move exactly this many bytes. */
  readonly bytesPerExpert?: number;
  /** Allow experts to become resident without a transfer (the gpu-rich preload). Default false. */
  readonly allowPreload?: boolean;
  /** Stop recording after this many violations (the first ones are the interesting ones). Default 50. */
  readonly maxViolations?: number;
  /** The run has the SSD tier: experts live on NVMe behind the page cache (checks (e)). */
  readonly ssd?: boolean;
}

interface RequestBook {
  arrive: number[];
  admit: number[];
  firstToken: number[];
  token: number[];
  finish: number[];
}

interface TransferBook {
  packetBytes: number;
  reported: boolean;
  lastPacketEndNs: number;
}

const EXPERT_LABEL = /^expert M(\d+)E(\d+)$/;
const ZERO_COPY_LABEL = /^zero-copy expert M(\d+)E(\d+)$/;

export class InvariantChecker implements TraceSink {
  private readonly out: string[] = [];
  private readonly max: number;
  private readonly experts: number;

  // (a)
  private readonly poolCategories = new Map<string, Map<string, number>>();
  private memoryRecords = 0;
  // (b)
  private readonly resident = new Set<number>();
  /** Completed expert transfers per key not yet matched by an arrival. */
  private readonly arrivedTransfers = new Map<number, number>();
  private computes = 0;
  /** Completed zero-copy reads per key not yet matched by a compute. */
  private readonly zeroCopyReads = new Map<number, number>();
  // (c)
  private readonly transfers = new Map<string, TransferBook>();
  private h2dPacketBytes = 0;
  private h2dDoneBytes = 0;
  private h2dCancelledSentBytes = 0;
  // (e)
  /** Page-cache residency: key → since when (absent: not cached). */
  private readonly pageCached = new Map<number, number>();
  private nvmePacketBytes = 0;
  private nvmeDoneBytes = 0;
  private nvmeCancelledSentBytes = 0;
  // (d)
  private readonly requests = new Map<number, RequestBook>();
  // kernels
  private readonly streamEndNs = new Map<string, number>();
  private finished = false;

  constructor(private readonly o: InvariantCheckerOptions) {
    this.max = o.maxViolations ?? 50;
    this.experts = o.experts;
  }

  /** Violations found so far (empty when every invariant held). */
  violations(): string[] {
    return [...this.out];
  }

  /** Counters, for tests that want to be sure the checker saw something. */
  get seen(): { memoryRecords: number; computes: number; h2dPacketBytes: number; transfers: number } {
    return {
      memoryRecords: this.memoryRecords,
      computes: this.computes,
      h2dPacketBytes: this.h2dPacketBytes,
      transfers: this.transfers.size,
    };
  }

  private fail(msg: string): void {
    if (this.out.length < this.max) this.out.push(msg);
  }

  private keyName(key: number): string {
    return `expert ${key} (M${Math.floor(key / this.experts)}E${key % this.experts})`;
  }

  // ------------------------------------------------------------------ (a) memory

  onMemory(r: MemoryRecord): void {
    this.memoryRecords++;
    const at = `t=${r.timeNs} ${r.pool}/${r.category}`;
    if (r.usedBytes > r.capacityBytes) this.fail(`${at}: used ${r.usedBytes} B > capacity ${r.capacityBytes} B`);
    if (r.usedBytes < 0 || r.categoryUsedBytes < 0)
      this.fail(`${at}: negative use (${r.usedBytes} B used, ${r.categoryUsedBytes} B in category)`);
    if (r.categoryUsedBytes > r.usedBytes)
      this.fail(`${at}: category ${r.categoryUsedBytes} B > pool used ${r.usedBytes} B`);
    let cats = this.poolCategories.get(r.pool);
    if (!cats) this.poolCategories.set(r.pool, (cats = new Map()));
    cats.set(r.category, r.categoryUsedBytes);
    let sum = 0;
    for (const v of cats.values()) sum += v;
    if (sum !== r.usedBytes) this.fail(`${at}: categories sum to ${sum} B but the pool reports ${r.usedBytes} B used`);
  }

  // ------------------------------------------------------------------ (b) residency

  onExpertResidency(key: number, resident: boolean, timeNs: number): void {
    if (resident) {
      if (this.resident.has(key))
        this.fail(`t=${timeNs}: ${this.keyName(key)} became resident twice without a release`);
      const pending = this.arrivedTransfers.get(key) ?? 0;
      if (pending > 0) this.arrivedTransfers.set(key, pending - 1);
      else if (!this.o.allowPreload)
        this.fail(`t=${timeNs}: ${this.keyName(key)} became resident without a completed transfer`);
      this.resident.add(key);
    } else {
      if (!this.resident.has(key)) this.fail(`t=${timeNs}: ${this.keyName(key)} released but it was not resident`);
      this.resident.delete(key);
    }
  }

  /**
   * (b) for experts computed off a slot: on the CPU its bytes must be in host DRAM (the host
   * pool holds the expert weights); read zero-copy, a completed read of it must have landed.
   */
  onHostExpertCompute(key: number, timeNs: number, where: 'cpu' | 'gpu-host'): void {
    this.computes++;
    if (this.o.ssd) {
      if (!this.pageCached.has(key))
        this.fail(`t=${timeNs}: ${this.keyName(key)} computed on the CPU, not in the page cache`);
      return;
    }
    const hostExperts = this.poolCategories.get('host')?.get('expertWeights') ?? 0;
    if (hostExperts <= 0) this.fail(`t=${timeNs}: ${this.keyName(key)} computed from host DRAM holding no experts`);
    if (where === 'gpu-host') {
      const n = this.zeroCopyReads.get(key) ?? 0;
      if (n <= 0) this.fail(`t=${timeNs}: ${this.keyName(key)} computed zero-copy before its read landed`);
      else this.zeroCopyReads.set(key, n - 1);
    }
  }

  onExpertCompute(key: number, timeNs: number, resident: boolean): void {
    this.computes++;
    if (!this.resident.has(key)) this.fail(`t=${timeNs}: ${this.keyName(key)} computed before its bytes were resident`);
    if (!resident) this.fail(`t=${timeNs}: the executor itself reports ${this.keyName(key)} not resident at compute`);
  }

  /** (e) An expert file entered (its read landed) or left the page cache. */
  onPageCache(key: number, resident: boolean, timeNs: number): void {
    if (resident) {
      if (this.pageCached.has(key)) this.fail(`t=${timeNs}: ${this.keyName(key)} entered the page cache twice`);
      this.pageCached.set(key, timeNs);
    } else {
      if (!this.pageCached.has(key)) this.fail(`t=${timeNs}: ${this.keyName(key)} evicted but not in the page cache`);
      this.pageCached.delete(key);
    }
  }

  // ------------------------------------------------------------------ (c) PCIe

  onPacket(r: PacketRecord): void {
    const id = `${r.link}#${r.transferId}`;
    let b = this.transfers.get(id);
    if (!b) this.transfers.set(id, (b = { packetBytes: 0, reported: false, lastPacketEndNs: -1 }));
    if (b.reported)
      this.fail(`t=${r.endNs}: packet of ${r.bytes} B for ${r.label} (${id}) after the transfer was reported`);
    if (r.bytes <= 0) this.fail(`t=${r.endNs}: packet of ${r.bytes} B for ${r.label}`);
    if (r.startNs > r.endNs) this.fail(`packet of ${r.label} ends (${r.endNs}) before it starts (${r.startNs})`);
    if (r.startNs < b.lastPacketEndNs) this.fail(`t=${r.startNs}: packets of ${r.label} overlap`);
    b.lastPacketEndNs = r.endNs;
    b.packetBytes += r.bytes;
    if (r.link === 'h2d') this.h2dPacketBytes += r.bytes;
    if (r.link === 'nvme') this.nvmePacketBytes += r.bytes;
  }

  onTransfer(r: TransferRecord): void {
    const id = `${r.link}#${r.id}`;
    let b = this.transfers.get(id);
    if (!b) this.transfers.set(id, (b = { packetBytes: 0, reported: false, lastPacketEndNs: -1 }));
    if (b.reported) this.fail(`t=${r.endNs}: transfer ${r.label} (${id}) reported twice`);
    b.reported = true;
    if (r.outcome === 'done') {
      if (b.packetBytes !== r.bytes)
        this.fail(`t=${r.endNs}: transfer ${r.label} done with ${b.packetBytes} B of packets for ${r.bytes} B`);
      if (r.sentBytes !== r.bytes)
        this.fail(`t=${r.endNs}: transfer ${r.label} done but sentBytes ${r.sentBytes} ≠ ${r.bytes}`);
      if (r.link === 'h2d') this.h2dDoneBytes += r.bytes;
      if (r.link === 'nvme') this.nvmeDoneBytes += r.bytes;
    } else {
      if (b.packetBytes !== r.sentBytes)
        this.fail(
          `t=${r.endNs}: cancelled transfer ${r.label} sent ${b.packetBytes} B of packets but reports ${r.sentBytes} B`,
        );
      if (r.sentBytes > r.bytes)
        this.fail(`t=${r.endNs}: cancelled transfer ${r.label} sent ${r.sentBytes} B of ${r.bytes} B`);
      if (r.link === 'h2d') this.h2dCancelledSentBytes += r.sentBytes;
      if (r.link === 'nvme') this.nvmeCancelledSentBytes += r.sentBytes;
    }
    if (r.link === 'h2d' && r.category === 'expert-zero-copy') {
      const m = ZERO_COPY_LABEL.exec(r.label);
      if (!m) this.fail(`zero-copy read with an unparseable label '${r.label}'`);
      else if (r.outcome === 'done') {
        const key = Number(m[1]) * this.experts + Number(m[2]);
        this.zeroCopyReads.set(key, (this.zeroCopyReads.get(key) ?? 0) + 1);
      }
      return;
    }
    if (r.link === 'h2d' && r.category.startsWith('expert')) {
      const m = EXPERT_LABEL.exec(r.label);
      if (!m) {
        this.fail(`expert transfer with an unparseable label '${r.label}'`);
        return;
      }
      const key = Number(m[1]) * this.experts + Number(m[2]);
      if (this.o.bytesPerExpert !== undefined && r.bytes !== this.o.bytesPerExpert) {
        this.fail(
          `t=${r.endNs}: transfer of ${this.keyName(key)} is ${r.bytes} B, an expert is ${this.o.bytesPerExpert} B`,
        );
      }
      if (r.outcome === 'done') this.arrivedTransfers.set(key, (this.arrivedTransfers.get(key) ?? 0) + 1);
      if (this.o.ssd && r.outcome === 'done') {
        const since = this.pageCached.get(key);
        if (since === undefined || since > r.startNs) {
          this.fail(`t=${r.endNs}: ${this.keyName(key)} crossed H2D from ${r.startNs} without being in the page cache`);
        }
      }
    }
  }

  // ------------------------------------------------------------------ (d) requests

  onRequest(id: number, phase: RequestPhase, timeNs: number): void {
    let b = this.requests.get(id);
    if (!b) this.requests.set(id, (b = { arrive: [], admit: [], firstToken: [], token: [], finish: [] }));
    b[phase].push(timeNs);
    const at = `request ${id} ${phase} at t=${timeNs}`;
    if (phase !== 'arrive' && b.arrive.length === 0) this.fail(`${at} before it arrived`);
    if ((phase === 'firstToken' || phase === 'token' || phase === 'finish') && b.admit.length === 0)
      this.fail(`${at} before it was admitted`);
    if (phase === 'token' && b.firstToken.length === 0) this.fail(`${at}: a token before the first token`);
    if (phase === 'finish' && b.firstToken.length === 0) this.fail(`${at}: finished without a first token`);
    if (b.finish.length > 0 && phase !== 'finish') this.fail(`${at} after it finished`);
  }

  // ------------------------------------------------------------------ GPU streams

  onKernel(r: KernelRecord): void {
    if (r.endNs < r.startNs) this.fail(`kernel ${r.label} ends (${r.endNs}) before it starts (${r.startNs})`);
    const prev = this.streamEndNs.get(r.stream) ?? 0;
    if (r.startNs < prev)
      this.fail(`t=${r.startNs}: kernel ${r.label} starts before the previous kernel of ${r.stream} ended (${prev})`);
    this.streamEndNs.set(r.stream, r.endNs);
  }

  // ------------------------------------------------------------------ end of run

  /** End-of-run checks against the outcome. Call once, after `run()`. Returns the violations. */
  finish(outcome: ServingOutcome): string[] {
    if (this.finished) {
      this.fail('finish() called twice');
      return this.violations();
    }
    this.finished = true;

    // (a) the pools' own figures agree with what they reported.
    const pc = outcome.resources.pageCache;
    for (const pool of pc
      ? [outcome.resources.vram, outcome.resources.host, pc.pool]
      : [outcome.resources.vram, outcome.resources.host]) {
      if (pool.usedBytes > pool.capacityBytes)
        this.fail(`end: ${pool.name} used ${pool.usedBytes} B > capacity ${pool.capacityBytes} B`);
      if (pool.peakBytes > pool.capacityBytes)
        this.fail(`end: ${pool.name} peak ${pool.peakBytes} B > capacity ${pool.capacityBytes} B`);
    }

    // (c) h2d bytes.
    const h2d = outcome.resources.h2d;
    const fromTransfers = this.h2dDoneBytes + this.h2dCancelledSentBytes;
    if (this.h2dPacketBytes !== fromTransfers) {
      this.fail(
        `end: h2d packets carried ${this.h2dPacketBytes} B but done transfers (${this.h2dDoneBytes} B) + cancelled sent (${this.h2dCancelledSentBytes} B) = ${fromTransfers} B`,
      );
    }
    if (h2d.bytesMoved !== this.h2dPacketBytes)
      this.fail(`end: h2d.bytesMoved ${h2d.bytesMoved} B ≠ Σ packets ${this.h2dPacketBytes} B`);
    if (h2d.bytesMoved !== h2d.completedBytes + h2d.cancelledSentBytes) {
      this.fail(
        `end: h2d.bytesMoved ${h2d.bytesMoved} B ≠ completed ${h2d.completedBytes} B + cancelled sent ${h2d.cancelledSentBytes} B`,
      );
    }
    if (h2d.completedBytes !== this.h2dDoneBytes)
      this.fail(`end: h2d.completedBytes ${h2d.completedBytes} B ≠ Σ done transfers ${this.h2dDoneBytes} B`);
    const nvme = outcome.resources.nvme;
    if (nvme) {
      const sent = this.nvmeDoneBytes + this.nvmeCancelledSentBytes;
      if (this.nvmePacketBytes !== sent || nvme.bytesMoved !== sent || nvme.completedBytes !== this.nvmeDoneBytes) {
        this.fail(
          `end: nvme packets ${this.nvmePacketBytes} B, done ${this.nvmeDoneBytes} B + cancelled sent ${this.nvmeCancelledSentBytes} B, ` +
            `link says moved ${nvme.bytesMoved} B (completed ${nvme.completedBytes} B)`,
        );
      }
    } else if (this.nvmePacketBytes > 0) this.fail('end: NVMe packets without an NVMe link');
    for (const [id, b] of this.transfers)
      if (!b.reported)
        this.fail(`end: transfer ${id} carried ${b.packetBytes} B but was never reported done or cancelled`);
    for (const [key, n] of this.arrivedTransfers)
      if (n > 0) this.fail(`end: ${n} completed transfer(s) of ${this.keyName(key)} never made it resident`);

    // (d) requests.
    const ids = new Set<number>();
    for (const r of outcome.requests) {
      ids.add(r.id);
      const b = this.requests.get(r.id);
      const at = `request ${r.id}`;
      if (!b) {
        this.fail(`${at}: no request records at all`);
        continue;
      }
      for (const phase of ['arrive', 'admit', 'firstToken', 'finish'] as const) {
        if (b[phase].length !== 1) this.fail(`${at}: '${phase}' reported ${b[phase].length} times`);
      }
      const emitted = b.firstToken.length + b.token.length;
      if (emitted !== r.outputTokens) this.fail(`${at}: ${emitted} tokens emitted for ${r.outputTokens} output tokens`);
      if (r.emittedTokens !== r.outputTokens)
        this.fail(`${at}: outcome says ${r.emittedTokens} tokens emitted for ${r.outputTokens}`);
      const [arrive, admit, first, finish] = [b.arrive[0], b.admit[0], b.firstToken[0], b.finish[0]];
      if (arrive === undefined || admit === undefined || first === undefined || finish === undefined) continue;
      if (!(arrive <= admit && admit <= first && first <= finish)) {
        this.fail(`${at}: out of order: arrive ${arrive}, admit ${admit}, firstToken ${first}, finish ${finish}`);
      }
      const lastToken = b.token.length > 0 ? b.token[b.token.length - 1]! : first;
      if (lastToken !== finish) this.fail(`${at}: finished at ${finish} but its last token came at ${lastToken}`);
      for (let i = 1; i < b.token.length; i++)
        if (b.token[i]! < b.token[i - 1]!) this.fail(`${at}: tokens out of order`);
      if (arrive !== r.arrivalNs || admit !== r.admitNs || first !== r.firstTokenNs || finish !== r.finishNs) {
        this.fail(
          `${at}: outcome times (${r.arrivalNs}, ${r.admitNs}, ${r.firstTokenNs}, ${r.finishNs}) ≠ recorded (${arrive}, ${admit}, ${first}, ${finish})`,
        );
      }
      if (finish > outcome.endNs) this.fail(`${at}: finished at ${finish} after the end of the run (${outcome.endNs})`);
    }
    for (const id of this.requests.keys())
      if (!ids.has(id)) this.fail(`records of request ${id}, which is not in the outcome`);
    return this.violations();
  }
}
