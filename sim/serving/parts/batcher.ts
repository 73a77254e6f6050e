/**
 * Iteration formation (the batcher): which requests the next iteration runs. A request is
 * admitted when its KV cache (reserved for prompt + output at admission: no preemption, so
 * admission waits instead) fits the VRAM left after what the expert residency and the
 * activations hold free. Two batchers:
 * - `StaticBatcher` (the auto-batcher): waits for `maxBatchSize` requests or `maxWait` after the
 *   oldest, then runs that batch to completion.
 * - `ContinuousBatcher`: admits waiting requests at every iteration boundary, up to
 *   `maxBatchSize` requests and `maxBatchTokens` tokens (one request is always admitted).
 */
import { SimError } from '../../kernel/errors.ts';
import { EventPriority } from '../../kernel/simulation.ts';
import type { Ns } from '../../kernel/time.ts';
import type { RequestState, ServingContext } from './state.ts';

export interface Batcher {
  /** A request arrived. */
  arrive(s: RequestState): void;
  /** The requests of the next iteration (a fresh array), or null to wait. */
  next(): RequestState[] | null;
  /** The batch timer fired. */
  onTimer(): void;
  /** An iteration ended: drops the requests that emitted their last token. */
  retire(): void;
}

abstract class Admission implements Batcher {
  protected readonly waiting: RequestState[] = [];
  protected active: RequestState[] = [];

  constructor(
    protected readonly ctx: ServingContext,
    /** VRAM admission must leave free (the residency's free slots and segments, the activation reserve). */
    private readonly reservedBytes: () => number,
    /** Called once a request's KV is allocated (its router, its admission time). */
    private readonly admitted: (s: RequestState) => void,
  ) {}

  abstract next(): RequestState[] | null;

  arrive(s: RequestState): void {
    this.waiting.push(s);
  }

  onTimer(): void {}

  retire(): void {
    this.active = this.active.filter((s) => s.emitted < s.spec.outputTokens);
  }

  /** Admits `s` if its KV fits without eating what the residency and activations keep free. */
  private tryAdmit(s: RequestState): boolean {
    const d = this.ctx.model.derived;
    // KV of the full-attention layers, plus a hybrid model's fixed recurrent state.
    const kv =
      (s.spec.promptTokens + s.spec.outputTokens) * d.kvBytesPerToken + (d.recurrentStateBytesPerSequence ?? 0);
    const vram = this.ctx.res.vram;
    if (vram.freeBytes - this.reservedBytes() < kv) return false;
    s.kv = vram.allocate(kv, 'kvCache', `kv r${s.spec.id}`);
    this.admitted(s);
    return true;
  }

  protected admitFromQueue(): void {
    const cfg = this.ctx.cfg;
    let tokens = 0;
    for (const a of this.active) tokens += a.processed === 0 ? a.spec.promptTokens : 1;
    while (this.waiting.length > 0 && this.active.length < cfg.maxBatchSize) {
      const s = this.waiting[0]!;
      if (this.active.length > 0 && tokens + s.spec.promptTokens > cfg.maxBatchTokens) break;
      if (!this.tryAdmit(s)) break;
      this.waiting.shift();
      this.active.push(s);
      tokens += s.spec.promptTokens;
    }
  }
}

export class ContinuousBatcher extends Admission {
  next(): RequestState[] | null {
    this.admitFromQueue();
    if (this.active.length > 0) return this.active.slice();
    if (this.waiting.length > 0) {
      const id = this.waiting[0]!.spec.id;
      throw new SimError(`request ${id} cannot be admitted into an empty GPU`, this.ctx.sim.now, 'serving executor');
    }
    return null;
  }
}

export class StaticBatcher extends Admission {
  private timerAtNs = -1;

  override onTimer(): void {
    this.timerAtNs = -1;
  }

  next(): RequestState[] | null {
    if (this.active.length === 0 && this.waiting.length > 0) {
      const sim = this.ctx.sim;
      const deadline = this.waiting[0]!.spec.arrivalNs + this.ctx.cfg.maxWaitNs;
      if (this.waiting.length >= this.ctx.cfg.maxBatchSize || sim.now >= deadline) {
        this.admitFromQueue();
      } else if (this.timerAtNs !== deadline) {
        this.timerAtNs = deadline;
        sim.schedule(deadline as Ns, { kind: 'serving.batchTimer' }, EventPriority.decision);
      }
    }
    return this.active.length > 0 ? this.active.slice() : null;
  }
}
