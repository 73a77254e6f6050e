/**
 * Synthetic traces: requests of given shapes (lengths, phases, tasks) routed by a synthetic
 * model, produced lazily one request at a time (for `trace generate` and the calibrator).
 */
import type { Rng } from '../../sim/kernel/rng.ts';
import type { TraceRequest } from '../trace/format.ts';
import { lengthSampler, type LengthConfig } from '../lengths.ts';
import type { SyntheticRouting } from './router.ts';

/** What a request looks like, without its routing. */
export interface RequestShape {
  readonly id: string;
  readonly promptTokens: number;
  readonly prefillRecorded: boolean;
  /** Tokens to route (listed tokens). */
  readonly tokens: number;
  readonly outputTokens: number;
  readonly task?: string;
  readonly arrivalS?: number;
}

/** The shape of a recorded request (to build its synthetic twin). */
export const shapeOf = (r: TraceRequest): RequestShape => ({
  id: r.id,
  promptTokens: r.promptTokens,
  prefillRecorded: r.prefillRecorded,
  tokens: r.tokens,
  outputTokens: r.outputTokens,
  ...(r.task !== undefined ? { task: r.task } : {}),
  ...(r.arrivalS !== undefined ? { arrivalS: r.arrivalS } : {}),
});

/**
 * Routes each shape with the synthetic model; request i (0-based, in iteration order) uses the
 * router seed of request id i, so the same shapes and seed give the same trace.
 */
export function* generateRequests(routing: SyntheticRouting, shapes: Iterable<RequestShape>): Generator<TraceRequest> {
  const { moeLayers: L, topK: k } = routing;
  let i = 0;
  for (const s of shapes) {
    const experts = new Int32Array(s.tokens * L * k);
    routing.create(i++, s.task, s.prefillRecorded ? s.promptTokens : 0).generateAll(s.tokens, experts);
    yield { ...s, line: 0, experts };
  }
}

/**
 * Shapes of `n` fresh requests: a prompt of `prompt` tokens (all routed as prefill) followed by
 * `output − 1` decode tokens, task drawn from `tasks` (label → weight) if given.
 */
export function* sampleShapes(
  n: number,
  lengths: { prompt: LengthConfig; output: LengthConfig },
  tasks: Readonly<Record<string, number>> | undefined,
  rng: { lengths: Rng; tasks: Rng },
): Generator<RequestShape> {
  const prompt = lengthSampler(lengths.prompt, 'prompt');
  const output = lengthSampler(lengths.output, 'output');
  const names = tasks ? Object.keys(tasks) : [];
  const weights = names.map((t) => tasks![t]!);
  for (let i = 0; i < n; i++) {
    const task = names.length ? names[rng.tasks.weighted(weights)] : undefined;
    const p = Math.max(1, prompt(rng.lengths, task));
    const o = Math.max(1, output(rng.lengths, task));
    yield {
      id: `r${i}`,
      promptTokens: p,
      prefillRecorded: true,
      tokens: p + o - 1,
      outputTokens: o,
      ...(task !== undefined ? { task } : {}),
    };
  }
}
