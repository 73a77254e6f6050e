/**
 * The `setup` parameter of a baseline that two papers run differently (`moe-gen`: MoE-Gen's
 * comparison on the host-batch loop; `moe-lens`: the MoE-Lens paper's, with its own scheduler and
 * closed-form pipeline). One parameter schema per policy: the MoE-Lens setup's fields are accepted
 * (without their defaults, which its own schema applies) and rejected under `setup: moe-gen`, so a
 * parameter is never silently ignored.
 */
import { z } from 'zod';

type Shape = Readonly<Record<string, z.ZodType>>;

/** The fields of `shape` (except `shared`) as optional, defaults removed. */
export function lensOnly(shape: Shape, shared: readonly string[]): Record<string, z.ZodType> {
  const out: Record<string, z.ZodType> = {};
  for (const [k, t] of Object.entries(shape)) {
    if (shared.includes(k)) continue;
    const inner = t instanceof z.ZodDefault ? (t.unwrap() as z.ZodType) : t;
    out[k] = inner.optional();
  }
  return out;
}

/** An issue for every MoE-Lens-setup field given without `setup: moe-lens`. */
export function lensOnlyCheck(
  p: Readonly<Record<string, unknown>>,
  shape: Shape,
  shared: readonly string[],
  ctx: z.RefinementCtx,
): void {
  if (p['setup'] === 'moe-lens') return;
  for (const k of Object.keys(shape)) {
    if (shared.includes(k) || p[k] === undefined) continue;
    ctx.addIssue({ code: 'custom', path: [k], message: 'needs setup: moe-lens' });
  }
}
