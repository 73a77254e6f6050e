/**
 * A trace sink that records the run as a Chrome trace (JSON object format), which Perfetto
 * (ui.perfetto.dev) and chrome://tracing open. Tracks: GPU streams and a "blocked" track,
 * the H2D and D2H links (one slice per packet, named after its transfer), CPU cores; memory
 * pools as counters (used bytes per category). Timestamps are µs (the format's unit).
 */
import type { TraceSink } from '../../sim/observe/trace-sink.ts';

interface ChromeEvent {
  name: string;
  ph: 'X' | 'C' | 'M' | 'i';
  pid: number;
  tid?: number;
  ts: number;
  dur?: number;
  cat?: string;
  args?: Record<string, unknown>;
  s?: string;
}

const PID = { gpu: 1, pcie: 2, cpu: 3, memory: 4, requests: 5 } as const;
const us = (ns: number): number => ns / 1000;

export class TimelineSink implements TraceSink {
  private readonly events: ChromeEvent[] = [];
  private readonly tids = new Map<string, number>();

  constructor(readonly maxEvents = 2_000_000) {}

  get size(): number {
    return this.events.length;
  }

  private tid(pid: number, name: string): number {
    const key = `${pid}:${name}`;
    let t = this.tids.get(key);
    if (t === undefined) {
      t = this.tids.size + 1;
      this.tids.set(key, t);
      this.events.push({ name: 'thread_name', ph: 'M', pid, tid: t, ts: 0, args: { name } });
    }
    return t;
  }

  private push(e: ChromeEvent): void {
    if (this.events.length < this.maxEvents) this.events.push(e);
  }

  onKernel: NonNullable<TraceSink['onKernel']> = (r) => {
    this.push({
      name: r.label,
      cat: r.category,
      ph: 'X',
      pid: PID.gpu,
      tid: this.tid(PID.gpu, r.stream),
      ts: us(r.startNs),
      dur: us(r.endNs - r.startNs),
    });
  };

  onBlocked: NonNullable<TraceSink['onBlocked']> = (r) => {
    this.push({
      name: `blocked: ${r.reason}`,
      cat: 'blocked',
      ph: 'X',
      pid: PID.gpu,
      tid: this.tid(PID.gpu, `${r.stream} blocked`),
      ts: us(r.startNs),
      dur: us(r.endNs - r.startNs),
    });
  };

  onPacket: NonNullable<TraceSink['onPacket']> = (r) => {
    this.push({
      name: r.label,
      cat: r.category,
      ph: 'X',
      pid: PID.pcie,
      tid: this.tid(PID.pcie, r.link),
      ts: us(r.startNs),
      dur: us(r.endNs - r.startNs),
      args: { bytes: r.bytes, transfer: r.transferId },
    });
  };

  onTransfer: NonNullable<TraceSink['onTransfer']> = (r) => {
    // Packets are recorded as they land; the transfer summary goes on a per-link "transfers" track as an instant.
    this.push({
      name: `${r.label} ${r.outcome}`,
      cat: r.category,
      ph: 'i',
      s: 't',
      pid: PID.pcie,
      tid: this.tid(PID.pcie, `${r.link} transfers`),
      ts: us(r.endNs),
      args: { bytes: r.bytes, sentBytes: r.sentBytes, priority: r.priority, submitUs: us(r.submitNs) },
    });
  };

  onCpuTask: NonNullable<TraceSink['onCpuTask']> = (r) => {
    this.push({
      name: r.label,
      cat: r.category,
      ph: 'X',
      pid: PID.cpu,
      tid: this.tid(PID.cpu, `core ${r.firstCore}${r.cores > 1 ? `+${r.cores - 1}` : ''}`),
      ts: us(r.startNs),
      dur: us(r.endNs - r.startNs),
    });
  };

  onMemory: NonNullable<TraceSink['onMemory']> = (r) => {
    this.push({
      name: `${r.pool} ${r.category}`,
      ph: 'C',
      pid: PID.memory,
      ts: us(r.timeNs),
      args: { bytes: r.categoryUsedBytes },
    });
    this.push({ name: `${r.pool} used`, ph: 'C', pid: PID.memory, ts: us(r.timeNs), args: { bytes: r.usedBytes } });
  };

  onRequest: NonNullable<TraceSink['onRequest']> = (id, phase, t) => {
    if (phase === 'token') return;
    this.push({
      name: `r${id} ${phase}`,
      ph: 'i',
      s: 't',
      pid: PID.requests,
      tid: this.tid(PID.requests, 'requests'),
      ts: us(t),
    });
  };

  toJson(): string {
    const meta: ChromeEvent[] = Object.entries(PID).map(([name, pid]) => ({
      name: 'process_name',
      ph: 'M',
      pid,
      ts: 0,
      args: { name },
    }));
    return JSON.stringify({ displayTimeUnit: 'ms', traceEvents: [...meta, ...this.events] });
  }
}
