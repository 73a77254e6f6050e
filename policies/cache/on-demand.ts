/**
 * on-demand — no prefetch, no cache.
 *
 * Reproduces: the naive offloading baseline of every paper in this family (MoE-Infinity §6,
 * MoEpic, Pre-gated MoE): after the router decides, each activated expert missing from the GPU
 * is fetched at top priority and the GPU waits; after computing, the expert is released.
 * When to use: the normalisation row of prefetch experiments ("GPU blocking time and PCIe
 * bytes relative to on-demand"). Known gaps: none — it is the definition. (With `keep: true`
 * experts are retained until evicted, i.e. on-demand + the executor's default LRU eviction.)
 */
import { z } from 'zod';
import { definePolicy } from '../types.ts';

export const onDemand = definePolicy({
  name: 'on-demand',
  family: 'serving',
  summary: 'fetch activated experts after routing, block the GPU, release after use (no cache)',
  params: z.object({ keep: z.boolean().default(false) }).strict(),
  create: (p) => ({
    name: 'on-demand',
    afterUse: () => p.keep,
  }),
});
