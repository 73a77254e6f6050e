/** Paper vs ours for moe-infinity (placeholder). */
import type { PaperComparison } from '../cli/reproduce/kit.ts';

export const comparison: PaperComparison = { paper: 'moe-infinity', title: 'moe-infinity', tables: () => [] };
