/**
 * Per-layer cost lookups of the closed-form pipelines (VSLPipe, CGOPipe, serial offload): one cost
 * model, one set of layer bytes and transfer times, one memo, so that a comparison between them
 * is a comparison of schedules and pipelines only.
 *
 * - `ns(op)`: the cost model's duration of `op`, memoised (a pure lookup; keyed per op kind on
 *   its numeric fields, no string building on the hot path).
 * - `gpuLayerNs(l, g)`: GPU time of layer l over a token group: attention projections of its
 *   decode tokens + GPU (flash) attention of its prefill tokens + router + shared experts +
 *   routed experts at the expected (even) per-expert counts, or the dense FFN.
 * - `cpuNs(g)`: CPU decode attention of the group over its KV (`cpuAttention`, `cores` cores).
 * - `transferNs[l]`: layer l's weight bytes (dense part + all its experts) over H2D.
 */
import type { HardwareProfile, ModelProfile } from '../../../hardware-profiles/types.ts';
import type { CostModel, Operation } from '../../cost/types.ts';
import { expectedCounts } from '../pass-dag.ts';
import { modelModules, type ModelModules } from '../memory-model.ts';

/** One token group of an iteration (VSLPipe's α or β, or a whole batch). */
export interface GroupLoad {
  decode: number;
  decodeCtx: number;
  prefillTokens: number;
  prefillCtx: number;
}

export const emptyGroup = (): GroupLoad => ({ decode: 0, decodeCtx: 0, prefillTokens: 0, prefillCtx: 0 });

export interface LayerCosts {
  readonly model: ModelProfile;
  readonly mm: ModelModules;
  readonly layerBytes: readonly number[];
  readonly transferNs: readonly number[];
  ns(op: Operation): number;
  gpuLayerNs(l: number, g: GroupLoad): number;
  cpuNs(g: GroupLoad): number;
  lmHead(n: number): number;
}

/** Memo key of an operation: its kind and numeric fields (no JSON on the hot path). */
function opKey(op: Operation): string {
  switch (op.kind) {
    case 'expert':
      return op.fraction === undefined ? `e${op.tokens}` : `e${op.tokens}f${op.fraction}`;
    case 'attentionProj':
      return `p${op.tokens}`;
    case 'attention':
      return `a${op.tokens},${op.contextTokens}`;
    case 'cpuAttention':
      return `c${op.tokens},${op.contextTokens},${op.cores}`;
    case 'router':
      return `r${op.tokens}`;
    case 'sharedExperts':
      return `s${op.tokens}`;
    case 'denseFfn':
      return `d${op.tokens}`;
    case 'lmHead':
      return `l${op.tokens}`;
    case 'transfer':
      return `t${op.direction}${op.bytes}`;
    default:
      return JSON.stringify(op);
  }
}

export function layerCosts(model: ModelProfile, _hw: HardwareProfile, cost: CostModel, cores: number): LayerCosts {
  const mm = modelModules(model);
  const memo = new Map<string, number>();
  const ns = (op: Operation): number => {
    const k = opKey(op);
    let v = memo.get(k);
    if (v === undefined) {
      v = cost.estimate(op).ns as number;
      memo.set(k, v);
    }
    return v;
  };
  const E = model.experts;
  const countsFn = expectedCounts(model.topK);
  const counts = new Float64Array(E);
  const layerBytes = mm.denseBytes.map((d, l) => d + (mm.moeIndexOfLayer[l]! >= 0 ? E * mm.expertBytes : 0));
  const transferNs = layerBytes.map((b) => ns({ kind: 'transfer', bytes: b, direction: 'h2d' }));

  /** GPU ns of layer l over n tokens (prefill attention separately). */
  const gpuLayerNs = (l: number, g: GroupLoad): number => {
    const n = g.decode + g.prefillTokens;
    if (n === 0) return 0;
    let t = 0;
    if (g.decode > 0) t += ns({ kind: 'attentionProj', tokens: g.decode });
    if (g.prefillTokens > 0) t += ns({ kind: 'attention', tokens: g.prefillTokens, contextTokens: g.prefillCtx });
    const mi = mm.moeIndexOfLayer[l]!;
    if (mi >= 0) {
      t += ns({ kind: 'router', tokens: n });
      if (model.sharedExperts > 0) t += ns({ kind: 'sharedExperts', tokens: n });
      counts.fill(0);
      countsFn(mi, n, counts);
      for (let e = 0; e < E; e++) if (counts[e]! > 0) t += ns({ kind: 'expert', tokens: counts[e]! });
    } else {
      t += ns({ kind: 'denseFfn', tokens: n });
    }
    return t;
  };
  const cpuNs = (g: GroupLoad): number =>
    g.decode > 0 ? ns({ kind: 'cpuAttention', tokens: g.decode, contextTokens: g.decodeCtx, cores }) : 0;
  const lmHead = (n: number) => (n > 0 ? ns({ kind: 'lmHead', tokens: n }) : 0);
  return { model, mm, layerBytes, transferNs, ns, gpuLayerNs, cpuNs, lmHead };
}
