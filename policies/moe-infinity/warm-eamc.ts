/**
 * EAMC warm-up for MoE-Infinity (`eamcWarmup`): the EAMs of held-out requests, routed as the
 * serving executor routes them, loaded into the policy's collections before the run, so a run
 * can start from a trained collection as the paper's does.
 *
 * The warm-up EAMs are a pure function of the routing and the request specs, and the runs of a
 * sweep (and a run's preflight) mostly share them: with synthetic routing they are memoised per
 * process, keyed on everything the routers read (routing shape and knobs, the routing seed, the
 * specs cycled, the model's layer split). Other routing sources are routed anew each time.
 * Loading them into the collections (insertions, storage growth, and replacements when the
 * warm-up exceeds the capacity) is memoised too, by the same key and the collections' capacity,
 * replacement rule and kernel: a run whose collections are still empty copies the warmed ones
 * (`EamCollection.copyFrom`: the same state, so the same decisions).
 */
import type { ModelProfile } from '../../hardware-profiles/types.ts';
import type { RequestRouter, RequestSpec, Workload } from '../../sim/workload.ts';
import { BoundedMemo } from '../../sim/bounded-memo.ts';
import { SyntheticRouting } from '../../workloads/synthetic/router.ts';
import { EamCollection } from './eam-collection.ts';
import type { MoeInfinityPolicy } from './policy.ts';

/** One held-out request's EAMs (decode: null when it emits one token only). Never mutated. */
interface WarmEams {
  readonly prefill: Float64Array;
  readonly decode: Float64Array | null;
}

/** Bound on the memo's EAM bytes per process (a few warm-ups of the largest models: Arctic 200 × 2 × 36 KB). */
const MEMO_BYTES = 64 * 1024 * 1024;
/** Memoised warm-ups by key (`memoKey`); at most `MEMO_BYTES` of EAMs kept. */
const memo = new BoundedMemo<{ readonly eams: readonly WarmEams[]; readonly bytes: number }>(
  Infinity,
  MEMO_BYTES,
  (e) => e.bytes,
);

/** Bound on the warmed collections' storage per process (a few dozen Switch-128 warm-ups of 200 requests, ~3 MB each). */
const WARMED_BYTES = 128 * 1024 * 1024;
/** Warmed collections by key (`memoKey` and the collections' settings); at most `WARMED_BYTES` kept. */
const warmed = new BoundedMemo<{
  readonly prefill: EamCollection;
  readonly decode: EamCollection;
  readonly bytes: number;
}>(Infinity, WARMED_BYTES, (e) => e.bytes);

/**
 * Loads the prefill and decode EAMs of `n` held-out requests into the policy's EAMC: the run's
 * request specs cycled under ids past the run's, routed as the serving executor routes them
 * (encoder-decoder models: encoder MoE layers over the prompt, decoder MoE layers one token per
 * output position; decoder-only: every layer over the prompt, then each decode input token).
 */
export function warmEamc(policy: MoeInfinityPolicy, n: number, model: ModelProfile, workload: Workload): void {
  if (workload.requests.length === 0) return;
  const split = layerSplit(model);
  const key = memoKey(policy, n, model, workload, split);
  const { prefill, decode } = policy.collections;
  // Copied only into collections nothing was stored in yet (then the copy is the whole state).
  const fresh = prefill.version === 0 && decode.version === 0;
  const cKey =
    key === undefined || !fresh
      ? undefined
      : JSON.stringify([key, prefill.capacity, prefill.replacement, prefill.kernel, decode.kernel]);
  const done = cKey === undefined ? undefined : warmed.get(cKey);
  if (done) {
    prefill.copyFrom(done.prefill);
    decode.copyFrom(done.decode);
    return;
  }
  let eams = key === undefined ? undefined : memo.get(key)?.eams;
  if (!eams) {
    eams = routeWarmEams(policy, n, model, workload, split);
    if (key !== undefined) remember(key, eams);
  }
  for (const m of eams) {
    policy.preload('prefill', [m.prefill]);
    if (m.decode) policy.preload('decode', [m.decode]);
  }
  if (cKey !== undefined) rememberWarmed(cKey, prefill, decode);
}

/** Keeps copies of freshly warmed collections under `key` (least recently used dropped past `WARMED_BYTES`). */
function rememberWarmed(key: string, prefill: EamCollection, decode: EamCollection): void {
  const copy = (c: EamCollection): EamCollection => {
    const out = new EamCollection({ layers: c.layers, experts: c.experts }, c.capacity, c.replacement);
    out.copyFrom(c);
    return out;
  };
  const bytes = prefill.storageBytes + decode.storageBytes;
  if (bytes > WARMED_BYTES) return;
  warmed.set(key, { prefill: copy(prefill), decode: copy(decode), bytes });
}

/** Where the decoder's MoE layers start (encoder-decoder models), and whether there is an encoder. */
function layerSplit(model: ModelProfile): { readonly encoder: boolean; readonly firstDecoderMoe: number } {
  const decoderLayers = (model as { details?: { decoderLayers?: number } }).details?.decoderLayers ?? model.layers;
  const encoderLayers = model.arch === 'encoder-decoder' ? model.layers - decoderLayers : 0;
  const firstDecoderMoe =
    encoderLayers > 0
      ? Math.max(
          0,
          model.moeLayerIndices.findIndex((li) => li >= encoderLayers),
        )
      : 0;
  return { encoder: encoderLayers > 0, firstDecoderMoe };
}

/**
 * The memo key of a warm-up, or undefined when the routing is not synthetic. A synthetic router
 * is a function of the routing model (shape, knobs), the routing seed and the request's id, task,
 * prompt and total length, so the key holds exactly those (ids are the run's count + i).
 */
function memoKey(
  policy: MoeInfinityPolicy,
  n: number,
  model: ModelProfile,
  workload: Workload,
  split: ReturnType<typeof layerSplit>,
): string | undefined {
  const routing = workload.routing;
  if (!(routing instanceof SyntheticRouting)) return undefined;
  const specs = workload.requests;
  const used: unknown[] = [];
  for (let i = 0; i < Math.min(n, specs.length); i++) {
    const s = specs[i]!;
    used.push([s.task ?? null, s.promptTokens, s.outputTokens]);
  }
  const m = routing.model;
  return JSON.stringify([
    policy.shape.layers,
    policy.shape.experts,
    model.topK,
    split,
    m.L,
    m.E,
    m.k,
    m.knobs,
    routing.seedBase,
    n,
    specs.length,
    used,
  ]);
}

function remember(key: string, eams: readonly WarmEams[]): void {
  let bytes = 0;
  for (const m of eams) bytes += m.prefill.byteLength + (m.decode?.byteLength ?? 0);
  memo.set(key, { eams, bytes });
}

/** Routes the `n` held-out requests (see `warmEamc`). */
function routeWarmEams(
  policy: MoeInfinityPolicy,
  n: number,
  model: ModelProfile,
  workload: Workload,
  split: ReturnType<typeof layerSplit>,
): WarmEams[] {
  const specs = workload.requests;
  const { layers: L, experts: E } = policy.shape;
  const k = model.topK;
  const { firstDecoderMoe } = split;
  let scratch = new Int32Array(1024);
  const route = (router: RequestRouter, layer: number, from: number, to: number, into: Float64Array): void => {
    const need = (to - from) * k;
    if (need <= 0) return;
    if (scratch.length < need) scratch = new Int32Array(need * 2);
    router.route(layer, from, to, scratch);
    for (let j = 0; j < need; j++) into[layer * E + scratch[j]!]! += 1;
  };
  const out: WarmEams[] = [];
  for (let i = 0; i < n; i++) {
    const base = specs[i % specs.length]!;
    const spec: RequestSpec = { ...base, id: specs.length + i };
    const router = workload.routing.forRequest(spec);
    const prefill = new Float64Array(L * E);
    const decode = new Float64Array(L * E);
    const P = spec.promptTokens;
    if (split.encoder) {
      for (let l = 0; l < L; l++)
        route(router, l, l < firstDecoderMoe ? 0 : P, l < firstDecoderMoe ? P : P + 1, prefill);
      for (let t = 1; t < spec.outputTokens; t++)
        for (let l = firstDecoderMoe; l < L; l++) route(router, l, P + t, P + t + 1, decode);
    } else {
      for (let l = 0; l < L; l++) route(router, l, 0, P, prefill);
      for (let t = P; t < P + spec.outputTokens - 1; t++)
        for (let l = 0; l < L; l++) route(router, l, t, t + 1, decode);
    }
    out.push({ prefill, decode: spec.outputTokens > 1 ? decode : null });
  }
  return out;
}
