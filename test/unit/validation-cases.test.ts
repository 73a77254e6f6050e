/**
 * The validation suite's own checks (no judged figure is asserted): every case file parses and
 * names known mechanisms; its config validates and its model, hardware and runtime profiles
 * load; every judged or calibrating figure with a policy names a label of the config; the cases
 * whose mechanisms are built run (8 output tokens per request, to keep the suite fast) and print a
 * simulated value, the others print "not modelled yet"; the support matrix lists every mechanism.
 */
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { validateConfig } from '../../experiments/config/load.ts';
import { loadHardware, loadModel, loadRuntime } from '../../hardware-profiles/load.ts';
import { loadCases, type Case } from '../../validation/case.ts';
import { MECHANISMS } from '../../validation/mechanisms.ts';
import { formatCase, runCase, supportMatrix } from '../../validation/run.ts';

const cases = loadCases();

/** A case with a few output tokens per request: this test checks that it runs and prints, not its figures. */
function short(c: Case): Case {
  const workload = c.config.workload as Record<string, unknown> | undefined;
  if (workload === undefined) return c;
  return { ...c, config: { ...c.config, workload: { ...workload, outputTokens: { kind: 'fixed', tokens: 8 } } } };
}

describe('validation cases', () => {
  it('there are at least six cases, each with calibration and judged figures kept apart', () => {
    expect(cases.length).toBeGreaterThanOrEqual(6);
    for (const c of cases) expect(c.judged.length).toBeGreaterThan(0);
  });

  it.each(cases.map((c) => [c.id, c] as const))('%s: config validates and its profiles load', (_id, c) => {
    const config = validateConfig(c.config, c.file);
    const dir = path.dirname(c.file);
    const ref = (r: string): string => (/\.(json|ya?ml)$/.test(r) ? path.resolve(dir, r) : r);
    expect(loadModel(ref(config.model)).id).toBeTruthy();
    expect(loadHardware(ref(config.hardware)).gpu).toBeTruthy();
    if (config.runtime !== undefined) expect(loadRuntime(config.runtime).id).toBe(config.runtime);
    const labels = new Set(config.policies.map((p) => p.label ?? ('name' in p ? p.name : '')));
    for (const f of [...c.calibrate, ...c.judged]) {
      if (f.metric !== 'info') expect(labels, `${c.id}: ${f.figure}`).toContain(f.policy);
    }
  });

  it('runs the runnable cases and prints every figure; the others say "not modelled yet"', async () => {
    const results = [];
    for (const c of cases) {
      const r = await runCase(short(c));
      results.push(r);
      const text = formatCase(r);
      for (const f of r.figures) expect(text).toContain(f.figure.figure);
      if (r.runnable) {
        const simulated = r.figures.filter((f) => f.figure.metric !== 'info');
        for (const f of simulated) expect(f.simulated, `${c.id}: ${f.figure.figure}`).not.toBeNull();
      } else {
        expect(text).toMatch(/not modelled yet|run failed/);
        expect(text).not.toMatch(/run failed/);
      }
    }
    expect(results.some((r) => r.runnable)).toBe(true);
    const matrix = supportMatrix(results);
    for (const m of MECHANISMS) expect(matrix).toContain(m.id);
  }, 600_000);
});
