/**
 * The serving executor's invariants extended to split experts (MoEpic, DESIGN §8), checked from
 * the outside like `invariant-checker.ts`, from the records only:
 *
 * (a) memory: every pool's used bytes ≤ its capacity, categories sum to the pool's use;
 * (b) residency per *piece*: residency and compute are reported under piece keys — the expert key
 *     (whole expert), key + span (its top segment), key + 2·span (its bottom segment), span =
 *     moeLayers × experts. A piece becomes resident only after a completed H2D transfer of that
 *     piece (labels `expert M<l>E<e>`, `… top`, `… bottom`), or — for a top — at the instant the
 *     whole expert it was cut from is released (`keepTop`: no bytes move), or as a preloaded top
 *     (before the first transfer); a piece computes only while resident;
 * (c) bytes: per transfer Σ packets = its bytes (done) or sentBytes (cancelled); Σ packets on h2d
 *     = Σ done + Σ cancelled-sent = the link's bytesMoved; a bottom and the top cached with it never
 *     exceed one expert's bytes (top + bottom transfers of a key, when both are whole-sized, are
 *     flagged);
 * (d) every request emits all its tokens, in order.
 */
import type {
  MemoryRecord,
  PacketRecord,
  RequestPhase,
  TraceSink,
  TransferRecord,
} from '../../sim/observe/trace-sink.ts';
import type { ServingOutcome } from '../../sim/serving/serving-executor.ts';

const LABEL = /^expert M(\d+)E(\d+)(?: (top|bottom))?$/;

export class SegmentChecker implements TraceSink {
  private readonly out: string[] = [];
  private readonly resident = new Set<number>();
  private readonly arrived = new Map<number, number>();
  private readonly packets = new Map<string, number>();
  private readonly cats = new Map<string, Map<string, number>>();
  private h2dPackets = 0;
  private h2dAccounted = 0;
  private transfersSeen = 0;
  /** Whole experts released at the current instant (a keepTop may turn them into tops). */
  private releasedWholeAt = new Map<number, number>();
  private readonly tokens = new Map<number, number>();
  computes = 0;
  topComputes = 0;
  bottomComputes = 0;

  constructor(
    private readonly experts: number,
    private readonly span: number,
    private readonly bytesPerExpert: number,
  ) {}

  violations(): string[] {
    return [...this.out];
  }
  private fail(m: string): void {
    if (this.out.length < 50) this.out.push(m);
  }

  onMemory(r: MemoryRecord): void {
    if (r.usedBytes > r.capacityBytes)
      this.fail(`t=${r.timeNs} ${r.pool}: used ${r.usedBytes} > capacity ${r.capacityBytes}`);
    let c = this.cats.get(r.pool);
    if (!c) this.cats.set(r.pool, (c = new Map()));
    c.set(r.category, r.categoryUsedBytes);
    let sum = 0;
    for (const v of c.values()) sum += v;
    if (sum !== r.usedBytes) this.fail(`t=${r.timeNs} ${r.pool}: categories ${sum} ≠ used ${r.usedBytes}`);
  }

  onExpertResidency(piece: number, resident: boolean, timeNs: number): void {
    if (!resident) {
      if (!this.resident.delete(piece)) this.fail(`t=${timeNs}: piece ${piece} released but not resident`);
      if (piece < this.span) this.releasedWholeAt.set(piece, timeNs);
      return;
    }
    if (this.resident.has(piece)) this.fail(`t=${timeNs}: piece ${piece} resident twice`);
    const n = this.arrived.get(piece) ?? 0;
    if (n > 0) this.arrived.set(piece, n - 1);
    else {
      const isTop = piece >= this.span && piece < 2 * this.span;
      const fromWhole = isTop && this.releasedWholeAt.get(piece - this.span) === timeNs;
      const preload = isTop && this.transfersSeen === 0 && timeNs === 0;
      if (!fromWhole && !preload) this.fail(`t=${timeNs}: piece ${piece} resident without a completed transfer`);
    }
    this.resident.add(piece);
  }

  onExpertCompute(piece: number, timeNs: number, resident: boolean): void {
    this.computes++;
    if (piece >= 2 * this.span) this.bottomComputes++;
    else if (piece >= this.span) this.topComputes++;
    if (!this.resident.has(piece) || !resident)
      this.fail(`t=${timeNs}: piece ${piece} computed before its bytes were resident`);
  }

  onPacket(r: PacketRecord): void {
    const id = `${r.link}#${r.transferId}`;
    this.packets.set(id, (this.packets.get(id) ?? 0) + r.bytes);
    if (r.link === 'h2d') this.h2dPackets += r.bytes;
  }

  onTransfer(r: TransferRecord): void {
    this.transfersSeen++;
    const id = `${r.link}#${r.id}`;
    const p = this.packets.get(id) ?? 0;
    const want = r.outcome === 'done' ? r.bytes : r.sentBytes;
    if (p !== want) this.fail(`transfer ${r.label}: packets ${p} B ≠ ${want} B`);
    if (r.link !== 'h2d') return;
    this.h2dAccounted += want;
    if (!r.category.startsWith('expert')) return;
    const m = LABEL.exec(r.label);
    if (!m) {
      this.fail(`unparseable expert transfer label '${r.label}'`);
      return;
    }
    const key = Number(m[1]) * this.experts + Number(m[2]);
    const piece = m[3] === 'top' ? key + this.span : m[3] === 'bottom' ? key + 2 * this.span : key;
    if (m[3] === undefined && r.bytes !== this.bytesPerExpert) this.fail(`whole transfer of ${key} is ${r.bytes} B`);
    if (m[3] !== undefined && !(r.bytes > 0 && r.bytes < this.bytesPerExpert + 1))
      this.fail(`segment transfer ${r.label} of ${r.bytes} B`);
    if (r.outcome === 'done') this.arrived.set(piece, (this.arrived.get(piece) ?? 0) + 1);
  }

  onRequest(id: number, phase: RequestPhase): void {
    if (phase === 'firstToken' || phase === 'token') this.tokens.set(id, (this.tokens.get(id) ?? 0) + 1);
  }

  finish(o: ServingOutcome): string[] {
    for (const pool of [o.resources.vram, o.resources.host])
      if (pool.peakBytes > pool.capacityBytes) this.fail(`${pool.name} peak over capacity`);
    const h2d = o.resources.h2d;
    if (this.h2dPackets !== this.h2dAccounted)
      this.fail(`h2d packets ${this.h2dPackets} ≠ done + cancelled-sent ${this.h2dAccounted}`);
    if (h2d.bytesMoved !== this.h2dPackets) this.fail(`h2d bytesMoved ${h2d.bytesMoved} ≠ packets ${this.h2dPackets}`);
    for (const [piece, n] of this.arrived)
      if (n > 0) this.fail(`${n} completed transfer(s) of piece ${piece} never made it resident`);
    for (const r of o.requests)
      if ((this.tokens.get(r.id) ?? 0) !== r.outputTokens)
        this.fail(`request ${r.id}: ${this.tokens.get(r.id) ?? 0} tokens of ${r.outputTokens}`);
    return this.violations();
  }
}
