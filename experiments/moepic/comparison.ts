/** Paper vs ours for moepic (placeholder). */
import type { PaperComparison } from '../cli/reproduce/kit.ts';

export const comparison: PaperComparison = { paper: 'moepic', title: 'moepic', tables: () => [] };
