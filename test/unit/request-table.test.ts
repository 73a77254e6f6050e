/**
 * Requests streamed from a column table (so that million-request runs fit in memory): `RequestTable` gives back exactly the
 * specs pushed into it, `buildWorkload` exposes the same requests as its table and (on first
 * access, kept) as an array, and the serving executor gives the same outcome whether it streams
 * the table or reads a plain array of the same specs.
 */
import { describe, expect, it } from 'vitest';
import { loadHardware, loadModel } from '../../hardware-profiles/load.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import { RngStreams } from '../../sim/kernel/rng.ts';
import { msToNs, type Ns } from '../../sim/kernel/time.ts';
import { ServingExecutor } from '../../sim/serving/serving-executor.ts';
import { RequestTable, arraySource, type Workload } from '../../sim/workload.ts';
import { builtinPolicy } from '../../policies/registry.ts';
import { WorkloadSchema, buildWorkload } from '../../workloads/config.ts';

const MIXTRAL = { modelId: 'mixtral-8x7b', moeLayers: 32, experts: 8, topK: 2 };

describe('RequestTable', () => {
  it('gives back the pushed specs, ids being positions, tasks only where given', () => {
    const t = new RequestTable(3);
    t.push(5 as Ns, 10, 2);
    t.push(7 as Ns, 3, 1, 'chat');
    t.push(7 as Ns, 4, 9, 'code');
    expect(t.count).toBe(3);
    expect(t.spec(0)).toEqual({ id: 0, arrivalNs: 5, promptTokens: 10, outputTokens: 2 });
    expect('task' in t.spec(0)).toBe(false);
    expect(t.spec(1)).toEqual({ id: 1, arrivalNs: 7, promptTokens: 3, outputTokens: 1, task: 'chat' });
    expect(t.spec(2).task).toBe('code');
    expect([t.arrivalNs(2), t.promptTokens(2), t.outputTokens(2)]).toEqual([7, 4, 9]);
    expect(t.toArray().map((s) => s.id)).toEqual([0, 1, 2]);
    expect(() => t.spec(3)).toThrow(RangeError);
    expect(() => t.push(9 as Ns, 1, 1)).toThrow(/full/);
  });

  it('arraySource reads the array, the same objects', () => {
    const specs = [{ id: 0, arrivalNs: 1 as Ns, promptTokens: 2, outputTokens: 3 }];
    const s = arraySource(specs);
    expect(s.count).toBe(1);
    expect(s.spec(0)).toBe(specs[0]);
    expect([s.arrivalNs(0), s.promptTokens(0), s.outputTokens(0)]).toEqual([1, 2, 3]);
  });
});

describe('buildWorkload streams its requests', () => {
  it('the table and the (cached) array hold the same specs', async () => {
    const cfg = WorkloadSchema.parse({
      requests: 40,
      arrival: { kind: 'poisson', ratePerS: 3 },
      promptTokens: { kind: 'uniform', min: 4, max: 40 },
      outputTokens: { kind: 'uniform', min: 1, max: 9 },
      tasks: { chat: 1, code: 2 },
      routing: { kind: 'synthetic', profile: 'mixtral-8x7b' },
    });
    const w = await buildWorkload(cfg, MIXTRAL, new RngStreams(3));
    const src = w.source!;
    expect(src.count).toBe(40);
    const arr = w.requests;
    expect(w.requests).toBe(arr);
    for (let i = 0; i < 40; i++) expect(src.spec(i)).toEqual(arr[i]);
    // Arrival order and dense ids, as the Workload contract says.
    for (let i = 1; i < 40; i++) expect(arr[i]!.arrivalNs).toBeGreaterThanOrEqual(arr[i - 1]!.arrivalNs);
    expect(arr.map((r) => r.id)).toEqual([...Array(40).keys()]);
  });

  it('the executor gives the same outcome streaming the table as reading an array', async () => {
    const model = loadModel('mixtral-8x7b');
    const hardware = loadHardware('a5000-pcie4-1tb');
    const cfg = WorkloadSchema.parse({
      requests: 6,
      arrival: { kind: 'poisson', ratePerS: 0.5 },
      promptTokens: { kind: 'uniform', min: 8, max: 32 },
      outputTokens: { kind: 'uniform', min: 2, max: 6 },
      routing: { kind: 'synthetic', profile: 'mixtral-8x7b' },
    });
    const run = async (asArray: boolean) => {
      const streams = new RngStreams(11);
      const built = await buildWorkload(cfg, MIXTRAL, streams);
      const workload: Workload = asArray
        ? { requests: built.requests.map((r) => ({ ...r })), routing: built.routing, describe: built.describe }
        : built;
      const def = builtinPolicy('lru')!;
      const params = def.params.parse({ perLayerSlots: 1 });
      const policy = def.create(params, { rng: streams.stream('policy:lru'), model, hardware, workload });
      const ex = new ServingExecutor({
        model,
        hardware,
        cost: createCostModel(model, hardware, () => {}),
        workload,
        policy,
        config: {
          batching: 'continuous',
          maxBatchSize: 4,
          maxWaitNs: msToNs(10),
          maxBatchTokens: 4096,
          bufferSlots: 'auto',
          packetBytes: 16 * 1024 * 1024,
          preloadAllExperts: false,
        },
      });
      const o = ex.run();
      return { requests: o.requests, counters: { ...o.counters }, endNs: o.endNs, events: o.events };
    };
    const streamed = await run(false);
    const fromArray = await run(true);
    expect(streamed.requests.length).toBe(6);
    expect(streamed).toEqual(fromArray);
  });
});
