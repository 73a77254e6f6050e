/** Paper vs ours for moe-gen (placeholder). */
import type { PaperComparison } from '../cli/reproduce/kit.ts';

export const comparison: PaperComparison = { paper: 'moe-gen', title: 'moe-gen', tables: () => [] };
