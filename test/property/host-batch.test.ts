/**
 * The host-batch loop's fast paths against the loop they replace. The scheduler hands out the
 * passes of a group from a template shared by groups with the same size and outputs, and the
 * pipeline finds a memoised pass by its shape object: on random workloads and plans, the
 * iterations it hands out equal, field by field and in order, those of the reference below (the
 * generator the scheduler was before), and the pipeline's totals equal a plain per-iteration
 * memo's. The generators reach what the fast paths guard: groups that repeat a template and
 * groups that do not (varied outputs), a short last group, workloads without prefill or decode,
 * and a cap on host batches.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Ns } from '../../sim/kernel/time.ts';
import { HostBatchScheduler, type HostBatchSettings, PassDagPipeline } from '../../sim/throughput/host-batch.ts';
import type { ExecutionContext, Iteration } from '../../sim/throughput/iteration.ts';
import type { PassResult } from '../../sim/throughput/pass-sim.ts';
import { defaultPassConfig, type PassConfig, type PassShape, type RunPlan } from '../../sim/throughput/types.ts';

const NO_WORK: Iteration = { prefill: [], decode: [], preempted: [], decodeContextTokens: 0, finished: [] };

/** The scheduler's passes as the generator before the templates produced them. */
function* reference(
  outputs: readonly number[],
  P: number,
  phases: { prefill: boolean; decode: boolean },
  plan: RunPlan,
  cfg: HostBatchSettings,
  hostKv: (c: PassConfig, seqs: number, tokens: number) => number,
  groupsSeen: { n: number },
): Generator<Iteration, void> {
  const N = plan.hostBatchSeqs;
  const reserve = P + Math.max(...outputs);
  for (let g = 0; g < outputs.length; g += N) {
    if (cfg.maxHostBatches !== undefined && groupsSeen.n >= cfg.maxHostBatches) return;
    groupsSeen.n++;
    const size = Math.min(N, outputs.length - g);
    const outs = outputs.slice(g, g + size).sort((a, b) => b - a);
    const ids = Array.from({ length: size }, (_, i) => g + i);
    const its: Iteration[] = [];
    if (phases.prefill) {
      const Bp = plan.prefill.batchSeqs;
      for (let off = 0; off < size; off += Bp) {
        const seqs = Math.min(Bp, size - off);
        const shape: PassShape = {
          phase: 'prefill',
          seqs,
          newTokens: P,
          pastTokens: 0,
          hostSeqs: N,
          reserveTokens: reserve,
        };
        its.push({
          ...NO_WORK,
          firstTokens: ids.slice(off, off + seqs),
          pass: { shape, plan: plan.prefill, hostKvBytes: hostKv(plan.prefill.config, size, P) },
        });
      }
    }
    if (phases.decode) {
      let active = size;
      for (let st = 1; st < outs[0]!; st++) {
        while (active > 0 && outs[active - 1]! <= st) active--;
        const past = P + st - 1;
        const bucket = cfg.contextBucketTokens;
        const pastB = cfg.memoise ? Math.min(reserve - 1, Math.ceil(past / bucket) * bucket) : past;
        const shape: PassShape = {
          phase: 'decode',
          seqs: active,
          newTokens: 1,
          pastTokens: pastB,
          hostSeqs: N,
          reserveTokens: reserve,
        };
        its.push({
          ...NO_WORK,
          pass: { shape, plan: plan.decode, hostKvBytes: hostKv(plan.decode.config, size, past + 1) },
        });
      }
    }
    if (its.length === 0) its.push(NO_WORK);
    its[0] = { ...its[0]!, admitted: ids, ...(phases.prefill ? {} : { firstTokens: ids }) };
    const last = its.length - 1;
    its[last] = { ...its[last]!, finished: ids };
    yield* its;
  }
}

/** An iteration's content without the fields left undefined (the fast path sets every field). */
const content = (it: Iteration): Record<string, unknown> =>
  Object.fromEntries(Object.entries(it).filter(([, v]) => v !== undefined));

const world = fc.record({
  N: fc.integer({ min: 1, max: 6 }),
  Bp: fc.integer({ min: 1, max: 6 }),
  P: fc.integer({ min: 1, max: 40 }),
  requests: fc.integer({ min: 0, max: 20 }),
  /** Fixed outputs (groups repeat a template) or varied ones. */
  fixed: fc.boolean(),
  outputs: fc.array(fc.integer({ min: 1, max: 7 }), { minLength: 20, maxLength: 20 }),
  phase: fc.constantFrom('both', 'prefill', 'decode'),
  memoise: fc.boolean(),
  bucket: fc.integer({ min: 1, max: 8 }),
  maxHostBatches: fc.option(fc.integer({ min: 0, max: 4 }), { nil: undefined }),
});

type World = typeof world extends fc.Arbitrary<infer T> ? T : never;

function setUp(w: World) {
  const outputs = w.outputs.slice(0, w.requests).map((o) => (w.fixed ? w.outputs[0]! : o));
  const phases = { prefill: w.phase !== 'decode', decode: w.phase !== 'prefill' };
  const c = defaultPassConfig(2);
  const plan: RunPlan = {
    hostBatchSeqs: w.N,
    prefill: { batchSeqs: w.Bp, config: c },
    decode: { batchSeqs: w.N, config: c },
  };
  const settings: HostBatchSettings = {
    contextBucketTokens: w.bucket,
    kvLayout: 'paged',
    kvPageTokens: 4,
    packetBytes: 1 << 20,
    memoise: w.memoise,
    ...(w.maxHostBatches === undefined ? {} : { maxHostBatches: w.maxHostBatches }),
  };
  const hostKv = (_c: PassConfig, seqs: number, tokens: number) => seqs * 1000 + tokens;
  const x = {
    requests: outputs.map((o, id) => ({ id, arrivalNs: 0 as Ns, promptTokens: w.P, outputTokens: o })),
    workload: { sequences: outputs.length, promptTokens: w.P, outputTokens: Math.max(1, ...outputs), phases },
  } as unknown as ExecutionContext;
  return { outputs, phases, plan, settings, hostKv, x };
}

describe('HostBatchScheduler: templates of repeated groups', () => {
  it('hands out the reference generator’s iterations, in order, and counts the same groups', () => {
    const seen = { repeated: 0, varied: 0, shortLast: 0, noPrefill: 0, noDecode: 0, capped: 0 };
    fc.assert(
      fc.property(world, (w) => {
        const { outputs, phases, plan, settings, hostKv, x } = setUp(w);
        if (outputs.length === 0) return;
        const s = new HostBatchScheduler(x, plan, settings, hostKv);
        const got: Record<string, unknown>[] = [];
        while (!s.done) got.push(content(s.next(0 as Ns)));
        const groups = { n: 0 };
        const want = [...reference(outputs, w.P, phases, plan, settings, hostKv, groups)].map(content);
        expect(got).toEqual(want);
        expect(s.groups).toBe(groups.n);
        expect(() => s.next(0 as Ns)).toThrow(/no iteration left/);
        if (groups.n >= 2 && w.fixed) seen.repeated++;
        if (groups.n >= 2 && !w.fixed) seen.varied++;
        if (outputs.length % w.N !== 0 && groups.n * w.N >= outputs.length) seen.shortLast++;
        if (!phases.prefill) seen.noPrefill++;
        if (!phases.decode) seen.noDecode++;
        if (w.maxHostBatches !== undefined && groups.n === w.maxHostBatches) seen.capped++;
      }),
      { numRuns: 400 },
    );
    for (const [k, n] of Object.entries(seen)) expect(n, k).toBeGreaterThan(20);
  });
});

describe('PassDagPipeline: memoised passes found by their shape', () => {
  it('totals, hits and simulations equal a memo keyed on (phase, sequences, past KV) alone', () => {
    fc.assert(
      fc.property(world, (w) => {
        const { outputs, plan, settings, hostKv, x } = setUp(w);
        if (outputs.length === 0) return;
        const fake = (shape: PassShape, hostKvBytes: number): PassResult =>
          ({
            durationNs: shape.seqs * 7 + shape.pastTokens * 3 + hostKvBytes,
            gpuBusyNs: shape.seqs + 0.25,
            gpuBusyNsByCategory: { expert: shape.seqs * 0.1, attention: shape.pastTokens / 3 },
            h2dBusyNs: 1,
            d2hBusyNs: 2,
            h2dBytes: 3,
            d2hBytes: 4,
            cpuBusyCoreNs: 5.5,
            hostDramBytes: 6,
            routedTokenSlots: 7,
            expertLayerPairs: 8,
            activatedPairs: 9,
            peaks: { vram: { total: shape.seqs }, host: {} },
            events: 1,
          }) as unknown as PassResult;
        const pipeline = new PassDagPipeline(x, settings);
        pipeline.simulate = (_c, shape, hostKvBytes) => {
          pipeline.simulated++;
          return fake(shape, hostKvBytes);
        };
        const s = new HostBatchScheduler(x, plan, settings, hostKv);
        let now = 0;
        while (!s.done) now += pipeline.run(s.next(now as Ns), now as Ns);
        // The reference: a string-keyed memo per iteration, every category added in its order.
        const memo = new Map<string, PassResult>();
        const totals = {
          prefill: { ns: 0, cats: {} as Record<string, number> },
          decode: { ns: 0, cats: {} as Record<string, number> },
        };
        let hits = 0;
        let simulated = 0;
        for (const it of reference(
          outputs,
          w.P,
          { prefill: w.phase !== 'decode', decode: w.phase !== 'prefill' },
          plan,
          settings,
          hostKv,
          { n: 0 },
        )) {
          const p = it.pass;
          if (!p) continue;
          const key = `${p.shape.phase}|${p.shape.seqs}|${p.shape.pastTokens}`;
          let r = settings.memoise ? memo.get(key) : undefined;
          if (r) hits++;
          else {
            r = fake(p.shape, p.hostKvBytes);
            simulated++;
            if (settings.memoise) memo.set(key, r);
          }
          const into = totals[p.shape.phase];
          into.ns += r.durationNs;
          for (const [k, v] of Object.entries(r.gpuBusyNsByCategory)) into.cats[k] = (into.cats[k] ?? 0) + v;
        }
        expect(pipeline.hits).toBe(hits);
        expect(pipeline.simulated).toBe(simulated);
        expect(now).toBe(totals.prefill.ns + totals.decode.ns);
        for (const ph of ['prefill', 'decode'] as const) {
          expect(pipeline[ph].ns).toBe(totals[ph].ns);
          expect(pipeline[ph].gpuBusyNsByCategory).toEqual(totals[ph].cats);
          expect(Object.keys(pipeline[ph].gpuBusyNsByCategory)).toEqual(Object.keys(totals[ph].cats));
        }
      }),
      { numRuns: 300 },
    );
  });
});
