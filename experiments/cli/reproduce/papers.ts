/**
 * The papers `moesim reproduce` knows: each is a folder under experiments/ whose every `.yaml`
 * is a shipped experiment, with a comparison module `comparison.ts` beside them. Its outputs go
 * to `reproduction/<paper>/` at the root of the checkout.
 */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { PaperComparison } from './kit.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
/** The checkout's root. */
export const ROOT = path.resolve(here, '../../..');
/** Where reproductions are written by default. */
export const REPRODUCTION_DIR = path.join(ROOT, 'reproduction');

export const PAPERS = ['moe-infinity', 'moepic', 'moe-gen', 'moe-lens', 'moe-cap'] as const;
export type Paper = (typeof PAPERS)[number];

export const paperDir = (paper: Paper): string => path.join(ROOT, 'experiments', paper);

/** The shipped experiment configs of a paper, by name (file name without `.yaml`), sorted. */
export function experimentsOf(paper: Paper): { name: string; file: string }[] {
  return readdirSync(paperDir(paper))
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .map((f) => ({ name: f.slice(0, -'.yaml'.length), file: path.join(paperDir(paper), f) }));
}

/** The paper's comparison module. */
export async function comparisonOf(paper: Paper): Promise<PaperComparison> {
  const url = pathToFileURL(path.join(paperDir(paper), 'comparison.ts')).href;
  const mod = (await import(url)) as { comparison: PaperComparison };
  return mod.comparison;
}

/** The FIDELITY.md (or README.md for MoE-CAP) that carries a paper's generated tables. */
export const fidelityFile = (paper: Paper): string =>
  path.join(paperDir(paper), paper === 'moe-cap' ? 'README.md' : 'FIDELITY.md');
