/**
 * gpu-rich — the no-offloading reference: the same GPU compute with every expert resident from
 * the start and VRAM unbounded (`servingOverrides.preloadAllExperts`), so no expert ever crosses
 * PCIe and every need is a buffer hit.
 *
 * Reproduces: the "GPU-only" / "all parameters on GPU" row of the offloading papers (Pre-gated
 * MoE's GPU-only mode, the ideal of MoE-Infinity's and MoEpic's latency plots). When to use: the
 * lower bound on latency of a configuration — what offloading costs is the gap to this row.
 * Known gaps: VRAM is grown to fit everything, so it is not a real device; KV and batching are
 * as in the other runs (a GPU rich enough to hold the model would also batch more).
 */
import { z } from 'zod';
import { definePolicy } from '../types.ts';

export const gpuRich = definePolicy({
  name: 'gpu-rich',
  family: 'serving',
  summary: 'reference: every expert resident, VRAM unbounded, no transfers (the no-offloading bound)',
  params: z.object({}).strict(),
  servingOverrides: { preloadAllExperts: true },
  create: () => ({ name: 'gpu-rich' }),
});
