/**
 * The world builder's range check: before a run starts, every rate the profiles resolve to is
 * finite and positive, and every duration derived from them (a unit of work at each rate, a
 * probe of each cost-model operation, the executor's wait) is a finite integer number of ns
 * well inside the exact range of simulated time. A schema-valid but absurd value (PCIe at
 * 1e-9 GB/s, a CPU clock of 1e-300 GHz, a 1e300 µs launch cost) would otherwise fail inside the
 * run, after output was started; here it is a `UserError` naming the field and its value.
 */
import type { CostModel, Operation } from '../sim/cost/types.ts';
import { UserError } from '../sim/kernel/errors.ts';
import type { HardwareProfile, ModelProfile, RuntimeProfile } from '../hardware-profiles/types.ts';

/**
 * The longest duration one unit of work may take: 2^53 ns (the exact range of integer-ns time,
 * about 104 days; `sim/kernel/time.ts`) / 1024, about 2.4 simulated hours. One expert's copy or
 * one token's FLOPs taking longer is no hardware, and a run needs room for many of them.
 */
export const MAX_UNIT_NS = Math.floor(Number.MAX_SAFE_INTEGER / 1024);

/** A rate of a profile, as the profile file spells it. */
interface Rate {
  /** The field (or product of fields) of the hardware/runtime profile, e.g. `pcie.h2dGBPerSec`. */
  readonly field: string;
  /** Its value in the file's unit. */
  readonly value: number;
  /** The resolved rate (per second) the simulator uses. */
  readonly perSec: number;
  /** The unit of work priced at that rate, and its size (bytes or FLOPs). */
  readonly work: string;
  readonly amount: number;
}

/** Rounds away binary noise of unit conversions (1e-9 GB/s × 1e9 / 1e9 shows as 1e-9). */
const shown = (x: number): number => (Number.isFinite(x) ? Number(x.toPrecision(12)) : x);

function fail(field: string, value: number, message: string): never {
  throw new UserError(message, undefined, field, shown(value));
}

/** The hardware's rates, each with the unit of work the check prices at it. */
function ratesOf(model: ModelProfile, hw: HardwareProfile): Rate[] {
  const { gpu, cpu, pcie, drive } = hw;
  const expertBytes = model.derived.bytesPerExpert;
  const expertFlops = model.derived.expertFlopsPerToken;
  const copy = `copying one expert (${expertBytes} B)`;
  const read = `reading one expert (${expertBytes} B)`;
  const one = `one token through one expert (${expertFlops} FLOP)`;
  const bytes = (field: string, value: number, perSec: number, work: string): Rate => ({
    field,
    value,
    perSec,
    work,
    amount: expertBytes,
  });
  const flops = (field: string, value: number, perSec: number, work: string): Rate => ({
    field,
    value,
    perSec,
    work,
    amount: expertFlops,
  });
  const pageable = hw.pinnedHostMemory ? 1 : pcie.pageableFactor;
  const coreFlops = cpu.vectorFlopsPerSecPerCore;
  return [
    bytes('pcie.h2dGBPerSec', pcie.h2dBytesPerSec / 1e9, pcie.h2dBytesPerSec, `${copy} host→GPU`),
    bytes('pcie.d2hGBPerSec', pcie.d2hBytesPerSec / 1e9, pcie.d2hBytesPerSec, `${copy} GPU→host`),
    bytes('pcie.pageableFactor', pcie.pageableFactor, pcie.h2dBytesPerSec * pageable, `${copy} from pageable memory`),
    bytes('gpu.hbmGBPerSec', gpu.hbmBytesPerSec / 1e9, gpu.hbmBytesPerSec, `${read} from HBM`),
    bytes('gpu.hbmEfficiency', gpu.hbmEfficiency, gpu.hbmBytesPerSec * gpu.hbmEfficiency, `${read} from HBM`),
    flops('gpu.bf16DenseTflops', gpu.bf16FlopsPerSec / 1e12, gpu.bf16FlopsPerSec, one),
    ...(gpu.fp32FlopsPerSec === undefined
      ? []
      : [flops('gpu.fp32DenseTflops', gpu.fp32FlopsPerSec / 1e12, gpu.fp32FlopsPerSec, one)]),
    flops(
      'cpu GFLOP/s per core (vectorFlopsPerCyclePerCore × sustainedClockGHz)',
      coreFlops / 1e9,
      coreFlops,
      `${one} on a core`,
    ),
    flops('cpu.vectorEfficiency', cpu.vectorEfficiency, coreFlops * cpu.vectorEfficiency, `${one} on a core`),
    bytes(
      'cpu DRAM GB/s (memoryChannels × memoryMegaTransfersPerSec × 8 B × dramEfficiency)',
      cpu.dramBytesPerSec / 1e9,
      cpu.dramBytesPerSec,
      `${read} from host DRAM`,
    ),
    bytes(
      'cpu.perCoreDramGBPerSec',
      cpu.perCoreDramBytesPerSec / 1e9,
      cpu.perCoreDramBytesPerSec,
      `${read} from host DRAM on a core`,
    ),
    ...(drive === undefined
      ? []
      : [
          bytes('drive.seqReadGBPerSec', drive.seqReadBytesPerSec / 1e9, drive.seqReadBytesPerSec, `${read} from disk`),
        ]),
  ];
}

/** Fixed per-call costs (ns) of the hardware and runtime profiles, as their files spell them (µs). */
function fixedCostsOf(hw: HardwareProfile, runtime: RuntimeProfile | undefined): [string, number][] {
  const on = `hardware ${JSON.stringify(hw.id)}`;
  const fixed: [string, number][] = [
    [`${on} pcie.latencyUs`, hw.pcie.latencyNs],
    [`${on} gpu.kernelLaunchUs`, hw.gpu.kernelLaunchNs],
  ];
  for (const [depth, latNs] of hw.drive?.readLatencyNsByQueueDepth ?? [])
    fixed.push([`${on} drive read latency at queue depth ${depth} (µs)`, latNs]);
  const rt = `runtime ${JSON.stringify(runtime?.id)}`;
  if (runtime?.dispatchNs != null) fixed.push([`${rt} dispatchUs`, runtime.dispatchNs]);
  if (runtime) fixed.push([`${rt} syncUs`, runtime.syncNs]);
  return fixed;
}

/** Cost-model operations at their smallest shape: every path from profile to duration is priced once. */
const PROBES: readonly [string, (cores: number) => Operation][] = [
  ['one expert over 1 token', () => ({ kind: 'expert', tokens: 1 })],
  ['the shared experts over 1 token', () => ({ kind: 'sharedExperts', tokens: 1 })],
  ['a dense FFN over 1 token', () => ({ kind: 'denseFfn', tokens: 1 })],
  ['attention over 1 token', () => ({ kind: 'attention', tokens: 1, contextTokens: 1 })],
  ['attention projections over 1 token', () => ({ kind: 'attentionProj', tokens: 1 })],
  ['the router over 1 token', () => ({ kind: 'router', tokens: 1 })],
  ['the LM head over 1 token', () => ({ kind: 'lmHead', tokens: 1 })],
  ['CPU attention over 1 token', (cores) => ({ kind: 'cpuAttention', tokens: 1, contextTokens: 1, cores })],
  ['copying 1 MiB host→GPU', () => ({ kind: 'transfer', bytes: 2 ** 20, direction: 'h2d' })],
  ['copying 1 MiB GPU→host', () => ({ kind: 'transfer', bytes: 2 ** 20, direction: 'd2h' })],
];

const WHY = `must be finite and at most ${MAX_UNIT_NS} ns (2^53 ns / 1024, about 2.4 simulated hours)`;

/**
 * Throws a `UserError` naming the profile field (and its value) whose derived rate or duration
 * is not finite, not positive, or longer than `MAX_UNIT_NS`; `maxWaitMs` is the executor's
 * batching wait (serving family) when it has one.
 */
export function checkDerivedCosts(
  model: ModelProfile,
  hw: HardwareProfile,
  cost: CostModel,
  runtime: RuntimeProfile | undefined,
  maxWaitMs?: number,
): void {
  const on = `hardware ${JSON.stringify(hw.id)}`;
  for (const r of ratesOf(model, hw)) {
    if (!Number.isFinite(r.perSec) || !(r.perSec > 0))
      fail(`${on} ${r.field}`, r.value, `resolves to a rate of ${r.perSec}/s; a rate must be finite and positive`);
    const ns = (r.amount / r.perSec) * 1e9;
    if (!(ns <= MAX_UNIT_NS))
      fail(`${on} ${r.field}`, r.value, `makes ${r.work} take ${ns.toPrecision(3)} ns; a unit of work ${WHY}`);
  }
  for (const [field, ns] of fixedCostsOf(hw, runtime))
    if (!(ns <= MAX_UNIT_NS)) fail(field, ns / 1e3, `is ${ns} ns; a fixed cost ${WHY}`);
  if (maxWaitMs !== undefined && !(maxWaitMs * 1e6 <= MAX_UNIT_NS))
    fail('executor.maxWaitMs', maxWaitMs, `as a batching wait ${WHY}`);
  for (const [what, op] of PROBES) {
    let ns: number;
    try {
      ns = cost.estimate(op(hw.cpu.cores)).ns;
    } catch (err) {
      if (!(err instanceof RangeError)) throw err;
      ns = Number.NaN;
    }
    if (!(Number.isSafeInteger(ns) && ns <= MAX_UNIT_NS))
      fail(
        `${on} with model ${JSON.stringify(model.id)}`,
        ns,
        `prices ${what} at ${ns} ns; a duration ${WHY} (a rate or fixed cost of the profiles is out of range)`,
      );
  }
}
