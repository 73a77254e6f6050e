/**
 * The young-generation setting (experiments/heap.ts) is the same everywhere a simulating
 * process or thread starts: package.json's scripts, the bin's shebang, the worker pools and
 * the scale bench's child processes.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { SEMI_SPACE_FLAG, SEMI_SPACE_MB, YOUNG_GENERATION_MB } from '../../experiments/heap.ts';

const read = (rel: string): string => readFileSync(new URL(`../../${rel}`, import.meta.url), 'utf8');

describe('V8 young generation', () => {
  it('package.json runs experiment, moesim and bench with the semi-space flag', () => {
    const scripts = (JSON.parse(read('package.json')) as { scripts: Record<string, string> }).scripts;
    for (const name of ['experiment', 'moesim', 'bench'])
      expect(scripts[name], name).toMatch(new RegExp(`^tsx ${SEMI_SPACE_FLAG} `));
  });
  it('the bin passes it in its shebang', () => {
    expect(read('bin/moesim.mjs').split('\n')[0]).toBe(`#!/usr/bin/env -S node ${SEMI_SPACE_FLAG}`);
  });
  it('worker threads and scale-bench children get the same size', () => {
    expect(YOUNG_GENERATION_MB).toBe(3 * SEMI_SPACE_MB);
    for (const f of ['experiments/parallel/pool.ts', 'experiments/parallel/queue.ts'])
      expect(read(f), f).toContain('resourceLimits: { maxYoungGenerationSizeMb: YOUNG_GENERATION_MB }');
    expect(read('bench/scale-bench.ts')).toContain('SEMI_SPACE_FLAG, ');
  });
});
