/**
 * Observers of a run. Resources and executors report what happened through a `TraceSink`;
 * metrics, timelines and invariant checkers implement the hooks they care about. Every hook is
 * optional; no handler writes files (the runner does, after the run).
 *
 * Times are simulated ns. Hooks are called when the thing *ends* (with its start time), except
 * `onMemory`, called after every change, and the request hooks, called at the instant.
 */
import type { Ns } from '../kernel/time.ts';

export interface KernelRecord {
  readonly stream: string;
  readonly label: string;
  /** What the kernel computes: 'attention', 'expert', 'router', 'lmHead', 'dense', ... */
  readonly category: string;
  readonly startNs: Ns;
  readonly endNs: Ns;
}

export interface TransferRecord {
  readonly link: string;
  readonly id: number;
  readonly label: string;
  readonly category: string;
  readonly bytes: number;
  readonly priority: number;
  readonly submitNs: Ns;
  readonly startNs: Ns;
  readonly endNs: Ns;
  /** 'done', or 'cancelled' with the bytes already sent in `sentBytes`. */
  readonly outcome: 'done' | 'cancelled';
  readonly sentBytes: number;
}

export interface PacketRecord {
  readonly link: string;
  readonly transferId: number;
  readonly label: string;
  readonly category: string;
  readonly bytes: number;
  readonly startNs: Ns;
  readonly endNs: Ns;
}

export interface CpuTaskRecord {
  readonly pool: string;
  readonly label: string;
  readonly category: string;
  readonly cores: number;
  readonly firstCore: number;
  readonly startNs: Ns;
  readonly endNs: Ns;
}

export interface MemoryRecord {
  readonly pool: string;
  readonly category: string;
  readonly timeNs: Ns;
  readonly categoryUsedBytes: number;
  readonly usedBytes: number;
  readonly capacityBytes: number;
}

export interface BlockedRecord {
  readonly stream: string;
  readonly reason: string;
  readonly startNs: Ns;
  readonly endNs: Ns;
}

export type RequestPhase = 'arrive' | 'admit' | 'firstToken' | 'token' | 'finish';

export interface TraceSink {
  onKernel?(r: KernelRecord): void;
  onTransfer?(r: TransferRecord): void;
  onPacket?(r: PacketRecord): void;
  onCpuTask?(r: CpuTaskRecord): void;
  onMemory?(r: MemoryRecord): void;
  onBlocked?(r: BlockedRecord): void;
  onRequest?(requestId: number, phase: RequestPhase, timeNs: Ns): void;
  /** An expert's compute is about to start on the GPU; `resident` says whether its bytes are all in VRAM. */
  onExpertCompute?(key: number, timeNs: Ns, resident: boolean): void;
  /**
   * An expert is computed off a VRAM slot: on the CPU from host DRAM (`cpu`, at its start), or by
   * a GPU kernel that has read it from host-mapped memory (`gpu-host`, once the read landed).
   */
  onHostExpertCompute?(key: number, timeNs: Ns, where: 'cpu' | 'gpu-host'): void;
  /** An expert's bytes became resident in the GPU expert buffer (transfer complete, or preloaded), or its slot was freed. */
  onExpertResidency?(key: number, resident: boolean, timeNs: Ns): void;
  /** An expert's file entered host DRAM's page cache (its NVMe read landed) or was evicted from it (SSD tier). */
  onPageCache?(key: number, resident: boolean, timeNs: Ns): void;
  onEnd?(timeNs: Ns): void;
}

const HOOKS = [
  'onKernel',
  'onTransfer',
  'onPacket',
  'onCpuTask',
  'onMemory',
  'onBlocked',
  'onRequest',
  'onExpertCompute',
  'onHostExpertCompute',
  'onExpertResidency',
  'onPageCache',
  'onEnd',
] as const satisfies readonly (keyof TraceSink)[];

/** One sink that forwards each hook to every sink that implements it (no cost for hooks nobody implements). */
export function fanout(sinks: readonly TraceSink[]): TraceSink {
  const out: Record<string, unknown> = {};
  for (const hook of HOOKS) {
    const fns = sinks.map((s) => s[hook]?.bind(s)).filter((f): f is NonNullable<typeof f> => f !== undefined);
    if (fns.length === 1) out[hook] = fns[0];
    else if (fns.length > 1)
      out[hook] = (...args: unknown[]) => {
        for (const f of fns) (f as (...a: unknown[]) => void)(...args);
      };
  }
  return out as TraceSink;
}
