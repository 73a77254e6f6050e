/** One CSV row per run: policy, params, seed, and every metric flattened to dotted columns. */
import { stringify } from 'csv-stringify/sync';

function flatten(prefix: string, v: unknown, out: Record<string, unknown>): void {
  if (v !== null && typeof v === 'object' && !Array.isArray(v)) {
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) flatten(prefix ? `${prefix}.${k}` : k, x, out);
  } else {
    out[prefix] = Array.isArray(v) ? JSON.stringify(v) : v;
  }
}

export interface CsvRun {
  readonly policy: string;
  readonly params: Readonly<Record<string, unknown>>;
  readonly seed: number;
  readonly metrics: Readonly<Record<string, unknown>>;
}

export function runsToCsv(runs: readonly CsvRun[]): string {
  const rows = runs.map((r) => {
    const o: Record<string, unknown> = { policy: r.policy };
    for (const [k, v] of Object.entries(r.params))
      o[`param:${k}`] = typeof v === 'object' && v !== null ? JSON.stringify(v) : v;
    o.seed = r.seed;
    flatten('', r.metrics, o);
    return o;
  });
  const columns: string[] = [];
  for (const r of rows) for (const k of Object.keys(r)) if (!columns.includes(k)) columns.push(k);
  return stringify(rows, { header: true, columns });
}
