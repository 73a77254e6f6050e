/**
 * Per-format expert kernel rates of an engine on an ISA (`quant-kernels/<id>.json`): how many
 * quantised weights per second one CPU thread dequantises and multiplies, for the formats a
 * source measured with every expert on the CPU. A format without an entry is unmeasured; the
 * CPU expert cost (`sim/cost/cpu-expert.ts`) then has only its DRAM term and flags it.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { z } from 'zod';
import { UserError } from '../sim/kernel/errors.ts';
import { PROFILES_DIR } from './load.ts';

export const QuantKernelFileSchema = z.strictObject({
  id: z.string().regex(/^[a-z0-9][a-z0-9._-]*$/),
  name: z.string().min(1),
  isa: z.enum(['avx2', 'avx512', 'amx', 'neon']),
  formats: z.record(
    z.string(),
    z.strictObject({
      weightsPerSecPerThread: z.number().positive(),
      /** What bound the measurement was taken under (the source's reading). */
      bound: z.enum(['compute', 'memory']),
      source: z.string().min(1),
    }),
  ),
  /** Formats looked for and not found, with why. */
  unmeasured: z.array(z.string()).default([]),
  sources: z.array(z.string().min(1)).min(1),
  notes: z.string().optional(),
});
export type QuantKernelFile = z.infer<typeof QuantKernelFileSchema>;

/** Loads `quant-kernels/<id>.json`. @throws UserError naming the file and field */
export function loadQuantKernels(id: string): QuantKernelFile {
  const file = resolve(PROFILES_DIR, 'quant-kernels', `${id}.json`);
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new UserError(`cannot read quant-kernel profile: ${(e as Error).message}`, file);
  }
  const parsed = QuantKernelFileSchema.safeParse(raw);
  if (!parsed.success) {
    const first = parsed.error.issues[0];
    throw new UserError(first?.message ?? 'invalid', file, first?.path.join('.'));
  }
  return parsed.data;
}
