/**
 * Synthetic routing recorded as it is generated and replayed by later runs of the same thread.
 * A request's synthetic routing is a pure function of (model shape and knobs, routing seed,
 * request id, task, prompt length): see `router.ts`. The runs of a sweep on one case (every
 * policy, budget and hardware variant) route the same requests, and each generated them anew
 * (per request Dirichlet draws and alias tables, then the token draws). The first router of a
 * request writes each token it generates to the request's tape; a later run's router reads the
 * tape, and only past its end builds a generator (which regenerates from token 0, as a router
 * asked for released tokens does, and extends the tape). Bounded per thread: `MAX_TAPES`
 * routing sources and `MAX_BYTES` of tapes, each tape counted with its object
 * (`TAPE_OBJECT_BYTES`), so a long run stops making tapes once the bound is reached instead of
 * keeping an empty one per request; models of more than 256 experts are not taped.
 */
import { BoundedMemo } from '../../sim/bounded-memo.ts';
import type { RequestRouter } from '../../sim/workload.ts';

/** Tape bytes per thread (one byte per expert slot: a 64-request MMLU run of Qwen1.5-MoE holds ~3.5 MB). */
export const MAX_BYTES = 64 * 1024 * 1024;
/** Routing sources remembered per thread (a sweep runs one case's runs next to each other). */
const MAX_TAPES = 4;
/**
 * What a tape costs before any routing is in it: the `RoutingTape` object (72 B in a V8 heap
 * snapshot of the 100 K-request scale point, Node 20) and its entry in its set's map, rounded
 * up. Counted against `MAX_BYTES`: uncounted, a 1 M-request run kept a million empty tapes (with
 * a fresh empty array each: 256 B per request, ~55 % of that run's live heap per request).
 */
export const TAPE_OBJECT_BYTES = 128;
/** The data of a tape with nothing recorded (shared: a tape writes only into arrays it grew). */
const EMPTY = new Uint8Array(0);

/** The routing of one request, tokens [0, tokens), token-major (L·k expert ids per token). */
export class RoutingTape {
  private data: Uint8Array;
  tokens = 0;

  constructor(
    readonly task: string | undefined,
    readonly promptTokens: number,
    private readonly stride: number,
    private readonly owner: TapeSet,
  ) {
    this.data = EMPTY;
  }

  /** Records token `t` from src[pos … pos + L·k) if it is the next one and the thread's bound allows. */
  append(src: Int32Array, pos: number, t: number): void {
    if (t !== this.tokens) return;
    const stride = this.stride;
    const need = (t + 1) * stride;
    if (need > this.data.length) {
      const grown = Math.max(need, this.data.length * 2, 64 * stride);
      if (!this.owner.reserve(grown - this.data.length)) return;
      const bigger = new Uint8Array(grown);
      bigger.set(this.data.subarray(0, t * stride));
      this.data = bigger;
    }
    const d = this.data;
    const o = t * stride;
    for (let i = 0; i < stride; i++) d[o + i] = src[pos + i]!;
    this.tokens = t + 1;
  }

  /** Writes tokens [from, to) at `layer` (k ids each) into `out`; the caller checks to ≤ tokens. */
  read(layer: number, k: number, from: number, to: number, out: Int32Array): void {
    const stride = this.stride;
    const d = this.data;
    let o = 0;
    let p = from * stride + layer * k;
    for (let t = from; t < to; t++, p += stride) for (let j = 0; j < k; j++) out[o++] = d[p + j]!;
  }
}

/** Replays a tape; past its end, a generator built on first need. */
export class TapeRouter implements RequestRouter {
  private generator: RequestRouter | undefined;

  constructor(
    private readonly tape: RoutingTape,
    private readonly L: number,
    private readonly k: number,
    private readonly generate: () => RequestRouter,
  ) {}

  route(layer: number, fromToken: number, toToken: number, out: Int32Array): void {
    if (this.taped(layer, fromToken, toToken, out)) this.tape.read(layer, this.k, fromToken, toToken, out);
    else (this.generator ??= this.generate()).route(layer, fromToken, toToken, out);
  }

  peek(layer: number, fromToken: number, toToken: number, out: Int32Array): void {
    if (this.taped(layer, fromToken, toToken, out)) this.tape.read(layer, this.k, fromToken, toToken, out);
    else (this.generator ??= this.generate()).peek!(layer, fromToken, toToken, out);
  }

  /** Whether the tape answers the call (bad arguments go to the generator, which names them). */
  private taped(layer: number, from: number, to: number, out: Int32Array): boolean {
    return (
      layer >= 0 &&
      layer < this.L &&
      Number.isInteger(layer) &&
      from >= 0 &&
      to >= from &&
      Number.isInteger(from) &&
      Number.isInteger(to) &&
      to <= this.tape.tokens &&
      out.length >= (to - from) * this.k
    );
  }
}

/** The tapes of one routing source, by request id. */
export class TapeSet {
  private readonly byId = new Map<number, RoutingTape>();
  bytes = 0;

  constructor(private readonly stride: number) {}

  /**
   * The tape of request `id`: its own if recorded for the same task and prompt length, a new one
   * if none and the thread's bound has room for it; undefined if the id's tape was made for
   * another request or there is no room (then nothing is taped).
   */
  tapeFor(id: number, task: string | undefined, promptTokens: number): RoutingTape | undefined {
    const t = this.byId.get(id);
    if (t) return t.task === task && t.promptTokens === promptTokens ? t : undefined;
    if (!this.reserve(TAPE_OBJECT_BYTES)) return undefined;
    const made = new RoutingTape(task, promptTokens, this.stride, this);
    this.byId.set(id, made);
    return made;
  }

  /** Tapes kept. */
  get size(): number {
    return this.byId.size;
  }

  reserve(bytes: number): boolean {
    if (!sets.reserve(this, bytes)) return false;
    this.bytes += bytes;
    return true;
  }
}

const sets = new BoundedMemo<TapeSet>(MAX_TAPES, MAX_BYTES, (s) => s.bytes);

/** The thread's tapes for routing inputs `key` (made on first use, the least recently used forgotten beyond `MAX_TAPES`). */
export function tapeSet(key: string, stride: number): TapeSet {
  return sets.getOrMake(key, () => new TapeSet(stride));
}

/** Forgets every tape (tests). */
export function clearRoutingTapes(): void {
  sets.clear();
}
