/** Paper vs ours for moe-cap (placeholder). */
import type { PaperComparison } from '../cli/reproduce/kit.ts';

export const comparison: PaperComparison = { paper: 'moe-cap', title: 'moe-cap', tables: () => [] };
