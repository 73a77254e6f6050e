/**
 * Typed errors. Every error says where it came from.
 *
 * - `UserError` (and subclasses): bad input from a user — config, profile, trace, CLI
 *   argument. Printed as one line, exit code 2.
 * - `SimError` (and subclasses): something went wrong inside a run; carries the simulated
 *   time and the origin (resource, executor, policy + hook). Internal errors keep their stack.
 */
export class UserError extends Error {
  override readonly name: string = 'UserError';
  /**
   * @param file  the file the input came from, if any
   * @param field the field path inside it (dot/bracket notation), if any
   * @param value the offending value, if any
   */
  constructor(
    message: string,
    readonly file?: string,
    readonly field?: string,
    readonly value?: unknown,
  ) {
    super(message);
  }

  /** The one line the CLI prints: `file: field: message (got value)`. */
  oneLine(): string {
    const parts: string[] = [];
    if (this.file) parts.push(this.file);
    if (this.field) parts.push(this.field);
    let line = parts.length ? `${parts.join(': ')}: ${this.message}` : this.message;
    if (this.value !== undefined && !line.includes('(got ')) line += ` (got ${formatValue(this.value)})`;
    return line.replace(/\s*\n\s*/g, ' ');
  }
}

export function formatValue(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v);
  // NaN and ±Infinity by name (JSON would write null).
  if (typeof v === 'number') return String(v);
  try {
    const s = JSON.stringify(v, (_k, x: unknown) => (typeof x === 'number' && !Number.isFinite(x) ? String(x) : x));
    if (s === undefined) return String(v);
    return s.length > 80 ? `${s.slice(0, 77)}...` : s;
  } catch {
    return String(v);
  }
}

export class SimError extends Error {
  override readonly name: string = 'SimError';
  constructor(
    message: string,
    readonly simTimeNs: number,
    readonly origin: string,
  ) {
    super(`[t=${simTimeNs}ns ${origin}] ${message}`);
  }
}

/** An allocation that cannot be satisfied. Resources throw it; executors may catch it. */
export class CapacityError extends SimError {
  override readonly name: string = 'CapacityError';
  constructor(
    message: string,
    simTimeNs: number,
    origin: string,
    readonly requestedBytes: number,
    readonly freeBytes: number,
  ) {
    super(message, simTimeNs, origin);
  }
}

/** A policy hook threw or returned an invalid decision. */
export class PolicyError extends SimError {
  override readonly name: string = 'PolicyError';
  constructor(
    message: string,
    simTimeNs: number,
    readonly policy: string,
    readonly hook: string,
  ) {
    super(message, simTimeNs, `policy ${policy}.${hook}`);
  }
}

/** An invariant of the simulator was broken: always a bug. */
export class InvariantError extends SimError {
  override readonly name: string = 'InvariantError';
}
