/**
 * The throughput family's plug point on hand-computed tiny cases: the loop (`runIterations`)
 * adds integer durations and reports milestones; the host-batch scheduler's passes (from a spec
 * array or read by position from a request table); vLLM's
 * scheduler admitting, preempting (recompute) and re-admitting two sequences in a 3-page pool.
 */
import { describe, expect, it } from 'vitest';
import { VllmScheduler } from '../../policies/throughput/vllm-scheduler.ts';
import type { Ns } from '../../sim/kernel/time.ts';
import type { RequestPhase } from '../../sim/observe/trace-sink.ts';
import { HostBatchScheduler } from '../../sim/throughput/host-batch.ts';
import {
  runIterations,
  type Iteration,
  type IterationScheduler,
  type ExecutionContext,
} from '../../sim/throughput/iteration.ts';
import { KvPages } from '../../sim/throughput/kv-pages.ts';
import { RequestTable } from '../../sim/workload.ts';
import { defaultPassConfig, type RunPlan } from '../../sim/throughput/types.ts';

const seq = (id: number) => ({ id, prompt: 4, kvTokens: 4 });

describe('runIterations', () => {
  it('adds the pipeline durations and reports admit / first token / finish', () => {
    const its: Iteration[] = [
      {
        prefill: [{ seq: seq(0), tokens: 4, recomputed: 0 }],
        decode: [],
        preempted: [],
        decodeContextTokens: 0,
        finished: [],
      },
      {
        prefill: [{ seq: seq(1), tokens: 4, recomputed: 0 }],
        decode: [seq(0)],
        preempted: [],
        decodeContextTokens: 5,
        finished: [0],
      },
      { prefill: [], decode: [seq(1)], preempted: [], decodeContextTokens: 5, finished: [1] },
    ];
    let i = 0;
    const scheduler: IterationScheduler = {
      get done() {
        return i >= its.length;
      },
      next: () => its[i++]!,
    };
    const durations = [10, 20, 30];
    let k = 0;
    const log: [number, RequestPhase, number][] = [];
    const run = runIterations(
      { scheduler, pipeline: { run: () => durations[k++]! as Ns } },
      { onRequest: (id, ph, t) => log.push([id, ph, t]) },
      (s) => 100 + s,
    );
    expect(run).toEqual({ endNs: 60, iterations: 3 });
    expect(log).toEqual([
      [100, 'admit', 0],
      [100, 'firstToken', 10],
      [101, 'admit', 10],
      [101, 'firstToken', 30],
      [100, 'finish', 30],
      [101, 'finish', 60],
    ]);
  });

  it('rejects a pipeline duration that is not integer ns', () => {
    let done = false;
    const scheduler: IterationScheduler = {
      get done() {
        return done;
      },
      next: () => {
        done = true;
        return { prefill: [], decode: [], preempted: [], decodeContextTokens: 0, finished: [] };
      },
    };
    expect(() => runIterations({ scheduler, pipeline: { run: () => 1.5 as Ns } })).toThrow(/integer/);
  });
});

describe('HostBatchScheduler', () => {
  it('groups of N: prefill passes, then decode steps while sequences remain', () => {
    // N = 2, prefill batch 2, P = 4; outputs 3, 1, 2 → group 1 (outputs 3, 1): P2, D1 (past 4), D1 (past 5);
    // group 2 (output 2): P1, D1 (past 4).
    const c = defaultPassConfig(2);
    const plan: RunPlan = {
      hostBatchSeqs: 2,
      prefill: { batchSeqs: 2, config: c },
      decode: { batchSeqs: 2, config: c },
    };
    const requests = [3, 1, 2].map((o, id) => ({ id, arrivalNs: 0 as Ns, promptTokens: 4, outputTokens: o }));
    const x = {
      requests,
      workload: { sequences: 3, promptTokens: 4, outputTokens: 3, phases: { prefill: true, decode: true } },
    } as unknown as ExecutionContext;
    const passes = (ctx: ExecutionContext) => {
      const s = new HostBatchScheduler(
        ctx,
        plan,
        { contextBucketTokens: 1, kvLayout: 'contiguous', kvPageTokens: 16, packetBytes: 1 << 20, memoise: false },
        () => 0,
      );
      const got: string[] = [];
      const finished: number[][] = [];
      while (!s.done) {
        const it = s.next(0 as Ns);
        got.push(`${it.pass!.shape.phase[0]}${it.pass!.shape.seqs}/${it.pass!.shape.pastTokens}`);
        if (it.finished.length > 0) finished.push([...it.finished]);
      }
      return { got, finished, groups: s.groups };
    };
    const { got, finished, groups } = passes(x);
    expect(got).toEqual(['p2/0', 'd1/4', 'd1/5', 'p1/0', 'd1/4']);
    expect(finished).toEqual([[0, 1], [2]]);
    expect(groups).toBe(2);
    // Read by position from the workload's table (the executor's path): the same passes, and the
    // spec array is never asked for.
    const table = new RequestTable(3);
    for (const r of requests) table.push(r.arrivalNs, r.promptTokens, r.outputTokens);
    const bySource = {
      get requests(): never {
        throw new Error('the spec array was read');
      },
      source: table,
      workload: x.workload,
    } as unknown as ExecutionContext;
    expect(passes(bySource)).toEqual({ got, finished, groups });
  });
});

describe('VllmScheduler on a 3-page GPU pool (b = 4)', () => {
  it('admits both prompts, preempts the newest for recomputation, re-admits it when pages free up', () => {
    const reqs = [
      { promptTokens: 4, outputTokens: 3 },
      { promptTokens: 4, outputTokens: 3 },
    ];
    const gpu = new KvPages(3, 4, 1);
    const s = new VllmScheduler(reqs, gpu, new KvPages(1, 4, 1), {
      maxNumSeqs: 8,
      maxNumBatchedTokens: 100,
      watermark: 0,
      preemption: 'recompute',
    });
    const steps: string[] = [];
    while (!s.done) {
      const it = s.next(0 as Ns);
      steps.push(
        `${it.kind}:${it.prefill.map((p) => `${p.seq.id}+${p.tokens}${p.recomputed ? `r${p.recomputed}` : ''}`).join(',')}${it.decode.map((q) => q.id).join(',')}${it.recomputePreempted.length ? ` preempt ${it.recomputePreempted.map((q) => q.id)}` : ''}`,
      );
    }
    // 1: both prompts (1 page each); 2: each needs a 2nd page, 1 free → B preempted, A decodes (5 tokens);
    // 3: B (5 tokens = 2 pages) does not fit beside A's 2 → A decodes its last token and frees;
    // 4: B re-prefilled (4 + 1 tokens, 4 recomputed); 5: B decodes its last token.
    expect(steps).toEqual(['prefill:0+4,1+4', 'decode:0 preempt 1', 'decode:0', 'prefill:1+5r4', 'decode:1']);
    expect(s.preemptions).toBe(1);
    expect(s.recomputedTokens).toBe(4);
    expect(gpu.usedPages).toBe(0);
    expect(gpu.pool.usedBytes).toBe(0);
  });
});
