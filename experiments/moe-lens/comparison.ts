/** Paper vs ours for moe-lens (placeholder). */
import type { PaperComparison } from '../cli/reproduce/kit.ts';

export const comparison: PaperComparison = { paper: 'moe-lens', title: 'moe-lens', tables: () => [] };
