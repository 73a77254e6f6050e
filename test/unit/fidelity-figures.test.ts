/**
 * Calibration figures quoted in the experiments' FIDELITY.md and in the runtime profiles are the
 * ones the code and the profiles give now. Only calibration inputs and quantities derived from
 * them are checked here (a kernel's fraction of the FMA peak from its benchmark time, the
 * MoE-Lens profiler's n_real from the cost model); the papers' judged results are compared in
 * FIDELITY.md and never asserted. The hf-eager and hf-eager-moepic fits are checked in
 * runtime-profiles.test.ts and moepic.test.ts.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { loadHardware, loadRuntime } from '../../hardware-profiles/load.ts';
import { validateConfig } from '../../experiments/config/load.ts';
import { runExperiment } from '../../experiments/runner.ts';
import { REPO_ROOT } from '../helpers/cli.ts';

const read = (f: string): string => readFileSync(path.join(REPO_ROOT, f), 'utf8');
/** A count as the documents print it: groups of three digits separated by a space. */
const grouped = (n: number): string => String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ' ');

describe('CPU attention kernels: fraction of the FMA peak from the bench time (cpu-attention-bench)', () => {
  // 16 384 FLOP per context token per layer (Mixtral) in t ns at the bench's ~3.1 GHz, over the
  // Zen 3 profile's 32 FP32 FLOP per cycle.
  const fraction = (ns: number): number => 16384 / (ns * 3.1) / 32;
  const zen3 = loadHardware('moe-gen-c2').cpu;

  it('moe-gen: 1 650 ns → 0.10 (the profile), 2 400 ns → 0.069, as its notes and FIDELITY.md say', () => {
    expect(zen3.vectorFlopsPerSecPerCore / 2.75e9).toBe(32);
    const rt = loadRuntime('moe-gen');
    expect(rt.cpuAttention.fmaPeakFraction).toBe(Number(fraction(1650).toFixed(2)));
    const notes = JSON.parse(read('hardware-profiles/runtimes/moe-gen.json')).notes as string;
    expect(notes).toContain(`= ${(fraction(1650) * 32).toFixed(2)} FLOP/cycle`);
    expect(notes).toContain(`gives ${fraction(2400).toFixed(3)}`);
    const row = `| ${fraction(1650).toFixed(2)} of the FP32 FMA peak per thread, 16 threads |`;
    expect(read('experiments/moe-gen/FIDELITY.md')).toContain(row);
  });

  it('moe-lightning: 1 130 ns → 0.146 (the profile), 1 260 ns → 0.131', () => {
    const rt = loadRuntime('moe-lightning');
    expect(rt.cpuAttention.fmaPeakFraction).toBe(Number(fraction(1130).toFixed(3)));
    const notes = JSON.parse(read('hardware-profiles/runtimes/moe-lightning.json')).notes as string;
    const [fast, slow] = [fraction(1130).toFixed(3), fraction(1260).toFixed(3)];
    expect(notes).toContain(`= ${fast} of the FMA peak (${slow} at 1 260 ns)`);
    expect(read('experiments/moe-gen/FIDELITY.md')).toContain(`| ${fraction(1130).toFixed(3)} of peak, all cores |`);
  });
});

describe('host DRAM of the testbeds (8 × DDR4-3200 × 0.8)', () => {
  it('is the figure the MoE-Gen and MoE-Lens FIDELITY.md quote', () => {
    const c2 = loadHardware('moe-gen-c2').cpu.dramBytesPerSec;
    expect(c2).toBeCloseTo(8 * 25.6e9 * 0.8, 0);
    expect(read('experiments/moe-gen/FIDELITY.md')).toContain(`| host DRAM | ${(c2 / 1e9).toFixed(1)} GB/s,`);
    const lens = loadHardware(path.join(REPO_ROOT, 'experiments/moe-lens/a40-xeon8380-lens.json')).cpu.dramBytesPerSec;
    const quoted = `8 × DDR4-3200 × 0.8 = ${(lens / 1e9).toFixed(0)} GB/s`;
    expect(read('experiments/moe-lens/FIDELITY.md')).toContain(quoted);
  });
});

describe('MoE-Lens profiler', () => {
  it('n_real for Mixtral-8x7B on the lens testbed is the figure FIDELITY.md quotes', async () => {
    // n_real depends only on the model, the testbed and the cost model: a 20-sequence run of
    // contention.yaml's setting reports it.
    const file = 'experiments/moe-lens/contention.yaml';
    const raw = YAML.parse(read(file)) as Record<string, unknown> & { workload: object; policies: unknown[] };
    const { cases: _cases, ...rest } = raw;
    const workload = { ...raw.workload, requests: 20, outputTokens: { kind: 'fixed', tokens: 4 } };
    const config = validateConfig({ ...rest, workload, policies: [raw.policies[0]] });
    const baseDir = path.join(REPO_ROOT, 'experiments/moe-lens');
    const r = await runExperiment({ config, file: path.join(REPO_ROOT, file), baseDir });
    const nReal = (r.runs[0]!.metrics as unknown as { schedule: { nReal: number } }).schedule.nReal;
    expect(read('experiments/moe-lens/FIDELITY.md')).toContain(`**n_real = ${grouped(nReal)}**`);
  }, 60_000);
});
