/**
 * The simulation kernel: a clock, an event queue and a dispatch loop. Nothing more.
 *
 * Events are plain data, a discriminated union on `kind`; the table of handlers is typed so
 * that every kind has exactly one handler (a new kind that nobody handles does not compile).
 * Handlers schedule follow-up events through the kernel.
 *
 * Ordering contract (tested): events run in ascending `(time, priority, seq)`. `priority` is
 * a small integer, lower first, that orders *simultaneous* events by meaning (see
 * `EventPriority`): work that releases resources completes before new work is admitted, so a
 * decision taken at time t sees every completion of time t. `seq` is a per-simulation counter
 * (no global state), so equal (time, priority) events run in scheduling order and two
 * simulations never influence each other.
 *
 * Between `priority` and `seq` sits the event's `stamp`: the time it was scheduled at (for
 * ordinary events `now`, so (stamp, seq) is plain scheduling order and the contract above is
 * unchanged). A resource that stands for many events by one — a PCIe transfer as one event
 * instead of one per packet — schedules that event with the stamp its last stand-in would have
 * had (the start of the last packet), so it runs exactly where that stand-in would have run
 * among simultaneous events; `currentPriority` / `currentStamp` let it tell, mid-transfer,
 * whether a virtual packet boundary at `now` has already passed.
 */
import { SimError } from './errors.ts';
import type { Ns } from './time.ts';

export interface EventBase {
  readonly kind: string;
}

/** One handler per event kind, each receiving its own variant. */
export type Handlers<E extends EventBase> = {
  readonly [K in E['kind']]: (event: Extract<E, { kind: K }>) => void;
};

/** Ordering of simultaneous events, lower first. */
export const EventPriority = {
  /** Completions of work on a resource (kernels, packets, flows, CPU tasks): they free resources. */
  completion: 10,
  /** Internal wake-ups of resources (start the next queued item). */
  resource: 20,
  /** Request arrivals. */
  arrival: 50,
  /** Decisions that should see every arrival and completion of the same instant (batch formation, timers). */
  decision: 80,
} as const;

/** What `schedule` returns: enough to cancel the event, nothing about its type. */
export interface EventHandle {
  readonly time: Ns;
  /** Its place in scheduling order (unique per simulation). */
  readonly seq: number;
  cancelled: boolean;
}

export interface ScheduledEvent<E> extends EventHandle {
  readonly priority: number;
  /** Posted (no handle given out): the entry is reused after it runs. */
  readonly pooled: boolean;
  /** Scheduling time (or an earlier one given to `schedule`): tie-break after `priority`. */
  readonly stamp: number;
  readonly event: E;
}

/** What resources and executors need from the kernel. */
export interface Scheduler<E> {
  readonly now: Ns;
  /**
   * Schedules `event` at absolute time `at` (≥ now). Returns a handle for `cancel`. `stamp`
   * (default now) orders it among events of equal time and priority as if it had been
   * scheduled at that time (see the module comment); `seq` (default: the next one) likewise
   * places it among events of equal stamp — a stand-in reuses the seq of the event it replaces.
   */
  schedule(at: Ns, event: E, priority?: number, stamp?: number, seq?: number): EventHandle;
  /**
   * `schedule` without a handle (the event cannot be cancelled): its queue entry is reused once
   * it has run, so the events of resources that never cancel (GPU kernels, packets, latencies,
   * CPU tasks) allocate nothing.
   */
  post(at: Ns, event: E, priority?: number, stamp?: number, seq?: number): void;
  /** Priority, stamp and seq of the event being dispatched (for deciding ties at `now`). */
  readonly currentPriority: number;
  readonly currentStamp: number;
  readonly currentSeq: number;
  /** Marks a scheduled event cancelled; it will be skipped. Idempotent. */
  cancel(handle: EventHandle): void;
}

export interface RunOptions {
  /**
   * Stop before processing any event later than this time; `now` becomes `until` (also when
   * the queue runs dry first, so that work scheduled afterwards starts at `until`). Throws a
   * SimError if `until` is before `now`: the clock never goes backwards.
   */
  until?: Ns;
  /** Stop after this many events (a safety net against runaway runs). */
  maxEvents?: number;
}

export interface RunResult {
  readonly events: number;
  readonly stoppedBy: 'empty' | 'until' | 'maxEvents';
}

export interface KernelObserver<E> {
  onEvent?(time: Ns, event: E): void;
}

/**
 * Strict `(time, priority, stamp, seq)` order; `seq` is unique among live events (a stand-in
 * reuses the seq of an event it cancelled), so the heap pops events in exactly one order.
 */
type Mutable<T> = { -readonly [K in keyof T]: T[K] };

function before<E>(a: ScheduledEvent<E>, b: ScheduledEvent<E>): boolean {
  if (a.time !== b.time) return a.time < b.time;
  if (a.priority !== b.priority) return a.priority < b.priority;
  if (a.stamp !== b.stamp) return a.stamp < b.stamp;
  return a.seq < b.seq;
}

/**
 * A binary min-heap on `before`, written out (no comparator callback, no generic container):
 * push and pop are most of the kernel's own cost.
 */
class EventHeap<E> {
  private readonly h: ScheduledEvent<E>[] = [];

  get size(): number {
    return this.h.length;
  }

  peek(): ScheduledEvent<E> | undefined {
    return this.h[0];
  }

  push(e: ScheduledEvent<E>): void {
    const h = this.h;
    let i = h.length;
    h.push(e);
    while (i > 0) {
      const p = (i - 1) >> 1;
      const pe = h[p]!;
      if (!before(e, pe)) break;
      h[i] = pe;
      i = p;
    }
    h[i] = e;
  }

  pop(): ScheduledEvent<E> | undefined {
    const h = this.h;
    const top = h[0];
    const last = h.pop();
    const n = h.length;
    if (n > 0 && last !== undefined) {
      let i = 0;
      for (;;) {
        let c = 2 * i + 1;
        if (c >= n) break;
        const r = c + 1;
        if (r < n && before(h[r]!, h[c]!)) c = r;
        const ce = h[c]!;
        if (!before(ce, last)) break;
        h[i] = ce;
        i = c;
      }
      h[i] = last;
    }
    return top;
  }
}

export class Simulation<E extends EventBase> implements Scheduler<E> {
  private _now = 0 as Ns;
  private seq = 0;
  private processed = 0;
  private readonly queue = new EventHeap<E>();
  /** Entries of posted events that have run, for reuse. */
  private readonly free: ScheduledEvent<E>[] = [];
  private handlers: Handlers<E> | null = null;
  private readonly observers: KernelObserver<E>[] = [];
  /** +Infinity outside dispatch: code running between events runs after everything at `now`. */
  private _curPriority = Number.POSITIVE_INFINITY;
  private _curStamp = 0;
  private _curSeq = 0;

  get now(): Ns {
    return this._now;
  }

  get currentPriority(): number {
    return this._curPriority;
  }

  get currentStamp(): number {
    return this._curStamp;
  }

  get currentSeq(): number {
    return this._curSeq;
  }

  /** Events processed so far (cancelled ones are not counted). */
  get eventsProcessed(): number {
    return this.processed;
  }

  /** Events waiting in the queue (including cancelled ones not yet discarded). */
  get pending(): number {
    return this.queue.size;
  }

  /** Installs the handler table. Separate from the constructor so handlers can close over the simulation. */
  setHandlers(handlers: Handlers<E>): void {
    this.handlers = handlers;
  }

  observe(observer: KernelObserver<E>): void {
    this.observers.push(observer);
  }

  schedule(
    at: Ns,
    event: E,
    priority: number = EventPriority.resource,
    stamp: number = this._now,
    seq: number = this.seq++,
  ): ScheduledEvent<E> {
    if (at < this._now || !Number.isSafeInteger(at)) {
      throw new SimError(`cannot schedule ${event.kind} at ${at}ns (now ${this._now}ns)`, this._now, 'kernel');
    }
    const entry: ScheduledEvent<E> = { time: at, priority, stamp, seq, event, cancelled: false, pooled: false };
    this.queue.push(entry);
    return entry;
  }

  post(
    at: Ns,
    event: E,
    priority: number = EventPriority.resource,
    stamp: number = this._now,
    seq: number = this.seq++,
  ): void {
    if (at < this._now || !Number.isSafeInteger(at)) {
      throw new SimError(`cannot schedule ${event.kind} at ${at}ns (now ${this._now}ns)`, this._now, 'kernel');
    }
    const entry = this.free.pop() as Mutable<ScheduledEvent<E>> | undefined;
    if (entry === undefined) {
      this.queue.push({ time: at, priority, stamp, seq, event, cancelled: false, pooled: true });
      return;
    }
    entry.time = at;
    entry.priority = priority;
    entry.stamp = stamp;
    entry.seq = seq;
    entry.event = event;
    this.queue.push(entry);
  }

  cancel(handle: EventHandle): void {
    handle.cancelled = true;
  }

  /** Processes the next non-cancelled event. Returns false when the queue is empty. */
  step(): boolean {
    for (;;) {
      const entry = this.queue.pop();
      if (!entry) return false;
      if (entry.cancelled) continue;
      this.dispatch(entry);
      return true;
    }
  }

  run(options: RunOptions = {}): RunResult {
    const until = options.until;
    if (until !== undefined && (!(until >= this._now) || !Number.isSafeInteger(until))) {
      throw new SimError(`cannot run until ${until}ns (now ${this._now}ns)`, this._now, 'kernel');
    }
    const maxEvents = options.maxEvents ?? Number.POSITIVE_INFINITY;
    let events = 0;
    for (;;) {
      if (events >= maxEvents) return { events, stoppedBy: 'maxEvents' };
      const head = this.queue.peek();
      if (!head) {
        // Idle until `until`: the clock still advances, as if `until` were itself an event.
        if (until !== undefined) this._now = until;
        return { events, stoppedBy: 'empty' };
      }
      if (head.cancelled) {
        this.queue.pop();
        continue;
      }
      if (until !== undefined && head.time > until) {
        this._now = until;
        return { events, stoppedBy: 'until' };
      }
      this.queue.pop();
      this.dispatch(head);
      events++;
    }
  }

  private dispatch(entry: ScheduledEvent<E>): void {
    const handlers = this.handlers;
    if (!handlers) throw new SimError('no handlers installed', this._now, 'kernel');
    this._now = entry.time;
    this._curPriority = entry.priority;
    this._curStamp = entry.stamp;
    this._curSeq = entry.seq;
    this.processed++;
    const observers = this.observers;
    // Checked first: most runs have no observer, and this runs for every event.
    if (observers.length > 0) for (const o of observers) o.onEvent?.(entry.time, entry.event);
    const handler = handlers[entry.event.kind as E['kind']] as (e: E) => void;
    handler(entry.event);
    this._curPriority = Number.POSITIVE_INFINITY;
    if (entry.pooled) this.free.push(entry);
  }
}
