/**
 * Synthetic routing taped by a thread's first run and replayed by its later runs on the same
 * inputs (`workloads/synthetic/tape.ts`): every route and peek answer equals a router without
 * the tape, whether the tape covers the call or the replaying router has to generate past its end;
 * both paths are counted. Other seeds, knobs, tasks or prompt lengths get routing of their own.
 * Tapes are bounded per thread with their objects counted: past the bound, requests are not taped.
 */
import { describe, expect, it } from 'vitest';
import { Rng, RngStreams } from '../../sim/kernel/rng.ts';
import type { RequestRouter, RequestSpec, Workload } from '../../sim/workload.ts';
import { buildWorkload, WorkloadSchema } from '../../workloads/config.ts';
import { SyntheticRouting } from '../../workloads/synthetic/router.ts';
import {
  clearRoutingTapes,
  MAX_BYTES,
  TAPE_OBJECT_BYTES,
  TapeRouter,
  tapeSet,
} from '../../workloads/synthetic/tape.ts';

const MIXTRAL = { modelId: 'mixtral-8x7b', moeLayers: 32, experts: 8, topK: 2 };

const config = (over: Record<string, unknown> = {}): Record<string, unknown> => ({
  requests: 8,
  arrival: { kind: 'offline' },
  tasks: { mmlu: 1, gsm8k: 1 },
  promptTokens: { kind: 'uniform', min: 4, max: 30 },
  outputTokens: { kind: 'fixed', tokens: 12 },
  routing: { kind: 'synthetic', profile: 'mixtral-8x7b' },
  ...over,
});

const build = (raw: unknown, seed: number): Promise<Workload> =>
  buildWorkload(WorkloadSchema.parse(raw), MIXTRAL, new RngStreams(seed));

/** A router for `spec` on `w`'s routing model and seed, without tapes. */
function plain(w: Workload, spec: RequestSpec): RequestRouter {
  const s = w.routing as SyntheticRouting;
  return new SyntheticRouting(s.model, s.seedBase).forRequest(spec);
}

/** Routes `upTo` tokens of a request as the executor does (prompt whole, then token by token), peeking ahead at random. */
function walk(r: RequestRouter, spec: RequestSpec, upTo: number, rng: Rng): number[] {
  const out = new Int32Array(64 * 2);
  const seen: number[] = [];
  const steps: [number, number][] = [[0, Math.min(upTo, spec.promptTokens)]];
  for (let t = spec.promptTokens; t < upTo; t++) steps.push([t, t + 1]);
  for (const [a, b] of steps) {
    if (b <= a) continue;
    for (let l = 0; l < MIXTRAL.moeLayers; l++) {
      if (rng.next() < 0.1) {
        const from = rng.int(upTo);
        const to = Math.min(upTo, from + 1 + rng.int(3));
        r.peek!(l, from, to, out);
        seen.push(...out.subarray(0, (to - from) * 2));
      }
      r.route(l, a, b, out);
      seen.push(...out.subarray(0, (b - a) * 2));
    }
  }
  return seen;
}

describe('routing tape', () => {
  it('replayed routing equals a router without tapes, inside and past the tape', async () => {
    clearRoutingTapes();
    const variants = [
      { raw: config(), seed: 1 },
      { raw: config(), seed: 2 },
      { raw: config({ routing: { kind: 'synthetic', profile: 'mixtral-8x7b', temporalReuse: 0.2 } }), seed: 1 },
    ];
    let replayed = 0;
    let past = 0;
    for (let run = 0; run < 3; run++) {
      for (const [v, { raw, seed }] of variants.entries()) {
        const w = await build(raw, seed);
        for (const spec of w.requests) {
          const total = spec.promptTokens + spec.outputTokens - 1;
          // The first run routes part of some requests, so later runs go past the tape.
          const upTo = run === 0 && spec.id % 2 === 0 ? spec.promptTokens + 3 : total;
          const r = w.routing!.forRequest(spec);
          if (r instanceof TapeRouter) {
            replayed++;
            if (upTo > spec.promptTokens + 3 && run === 1 && spec.id % 2 === 0) past++;
          }
          const again = new Rng(`walk ${run} ${v} ${spec.id}`);
          expect(walk(r, spec, upTo, again)).toEqual(
            walk(plain(w, spec), spec, upTo, new Rng(`walk ${run} ${v} ${spec.id}`)),
          );
        }
      }
    }
    expect(replayed).toBe(2 * 3 * 8);
    expect(past).toBe(3 * 4);
  });
});

describe('routing tape bound', () => {
  it('counts each tape object: once the thread bound is reached no tape is made, and kept tapes still answer', () => {
    clearRoutingTapes();
    const set = tapeSet('bound test', 64);
    // 64 MiB / 128 B = 524 288 empty tapes fit; the next request gets none.
    const fit = MAX_BYTES / TAPE_OBJECT_BYTES;
    expect(fit).toBe(524_288);
    let made = 0;
    for (let id = 0; id < fit; id++) if (set.tapeFor(id, 'mmlu', 10) !== undefined) made++;
    expect(made).toBe(fit);
    expect(set.tapeFor(fit, 'mmlu', 10)).toBeUndefined();
    expect(set.tapeFor(fit + 1, 'mmlu', 10)).toBeUndefined();
    expect(set.size).toBe(fit);
    expect(set.bytes).toBe(MAX_BYTES);
    // A tape already kept is found again (same request), and another request's id stays refused.
    expect(set.tapeFor(7, 'mmlu', 10)).toBeDefined();
    expect(set.tapeFor(7, 'gsm8k', 10)).toBeUndefined();
    // A full bound refuses a kept tape's growth too: it stays empty and the request is generated.
    const t = set.tapeFor(3, 'mmlu', 10)!;
    t.append(new Int32Array(64).fill(1), 0, 0);
    expect(t.tokens).toBe(0);
    clearRoutingTapes();
  });
});
