/**
 * The model walk: which layers an iteration visits and how many tokens each processes, for the
 * two shapes of model the serving executor runs. The layer walk, the router and the LM head ask
 * it; nothing else in the executor knows whether a model has an encoder.
 *
 * - Decoder-only: every layer sees each request's tokens of this iteration (its prompt in its
 *   prefill, one token in decode) under causal attention.
 * - Encoder–decoder (Switch, NLLB): the encoder runs once per request, in its prefill iteration,
 *   over the prompt (bidirectional self-attention); every iteration then walks the decoder with
 *   one token per request (self-attention over the tokens generated so far, cross-attention over
 *   the prompt's encoder states). An iteration without a prefill skips the encoder entirely.
 *
 * A new shape is a new `ModelWalk`. A hybrid model's linear-attention layers are not a new
 * shape (same tokens, same order): the layer walk prices them by layer index.
 */
import type { ModelProfile } from '../../../hardware-profiles/types.ts';
import type { IterationState, RequestState } from './state.ts';

/** An iteration's token plan, from its batch. */
export interface IterationTokens {
  readonly tokens: number[];
  readonly totalTokens: number;
  readonly encTokens: number[];
  readonly encTotal: number;
  readonly layerTokens: number[];
  readonly layerTotal: number;
  readonly crossContext: number;
  /** The first layer the iteration runs, and the first MoE layer it routes. */
  readonly startLayer: number;
  readonly firstMoeLayer: number;
}

export interface ModelWalk {
  /** Layers below this index form the encoder (0 for decoder-only models). */
  readonly encoderLayers: number;
  plan(batch: readonly RequestState[]): IterationTokens;
  /**
   * Enters `layer`: sets `it.layerTokens` / `it.layerTotal` for it and returns the attention
   * context (Σ over tokens of the positions each attends to).
   */
  enterLayer(it: IterationState, layer: number): number;
  /** Whether `layer` has cross-attention (over `it.crossContext`). */
  hasCross(layer: number): boolean;
  /** Position of request `s`'s first token at the current layer (what its router is asked from). */
  routeFrom(it: IterationState, s: RequestState): number;
  /** Tokens through the LM head. */
  headTokens(it: IterationState): number;
}

function iterationTokens(batch: readonly RequestState[]): number[] {
  return batch.map((s) => (s.processed === 0 ? s.spec.promptTokens : 1));
}

export class DecoderOnlyWalk implements ModelWalk {
  readonly encoderLayers = 0;

  plan(batch: readonly RequestState[]): IterationTokens {
    const tokens = iterationTokens(batch);
    const totalTokens = tokens.reduce((a, b) => a + b, 0);
    return {
      tokens,
      totalTokens,
      encTokens: [],
      encTotal: 0,
      layerTokens: tokens,
      layerTotal: totalTokens,
      crossContext: 0,
      startLayer: 0,
      firstMoeLayer: 0,
    };
  }

  enterLayer(it: IterationState): number {
    let contextTokens = 0;
    for (let i = 0; i < it.batch.length; i++) {
      const s = it.batch[i]!;
      const n = it.tokens[i]!;
      // Causal attention: token at position p attends to p + 1 positions.
      contextTokens += n * s.processed + (n * (n + 1)) / 2;
    }
    return contextTokens;
  }

  hasCross(): boolean {
    return false;
  }

  routeFrom(_it: IterationState, s: RequestState): number {
    return s.processed;
  }

  headTokens(it: IterationState): number {
    return it.totalTokens;
  }
}

export class EncoderDecoderWalk implements ModelWalk {
  readonly encoderLayers: number;
  private readonly firstDecoderMoeLayer: number;

  constructor(model: ModelProfile) {
    // Loaded profiles carry the decoder depth in `details`; a hand-built profile without it splits evenly.
    const details = (model as { details?: { decoderLayers?: number } }).details;
    const decoderLayers = details?.decoderLayers ?? Math.ceil(model.layers / 2);
    this.encoderLayers = Math.max(0, model.layers - decoderLayers);
    this.firstDecoderMoeLayer = Math.max(
      0,
      model.moeLayerIndices.findIndex((li) => li >= this.encoderLayers),
    );
  }

  plan(batch: readonly RequestState[]): IterationTokens {
    const tokens = iterationTokens(batch);
    const totalTokens = tokens.reduce((a, b) => a + b, 0);
    const encTokens = batch.map((s) => (s.processed === 0 ? s.spec.promptTokens : 0));
    const encTotal = encTokens.reduce((a, b) => a + b, 0);
    const skipEncoder = this.encoderLayers > 0 && encTotal === 0;
    return {
      tokens,
      totalTokens,
      encTokens,
      encTotal,
      layerTokens: batch.map(() => 1),
      layerTotal: batch.length,
      crossContext: batch.reduce((a, r) => a + r.spec.promptTokens, 0),
      startLayer: skipEncoder ? this.encoderLayers : 0,
      firstMoeLayer: skipEncoder ? this.firstDecoderMoeLayer : 0,
    };
  }

  enterLayer(it: IterationState, layer: number): number {
    let contextTokens = 0;
    if (layer < this.encoderLayers) {
      // Encoder: bidirectional self-attention over the prompts of the requests in prefill.
      it.layerTokens = it.encTokens;
      it.layerTotal = it.encTotal;
      for (const n of it.encTokens) contextTokens += n * n;
      return contextTokens;
    }
    // Decoder: one token per request over the tokens generated so far, then cross-attention.
    if (layer === this.encoderLayers) {
      it.layerTokens = it.batch.map(() => 1);
      it.layerTotal = it.batch.length;
    }
    for (const s of it.batch) contextTokens += s.emitted + 1;
    return contextTokens;
  }

  hasCross(layer: number): boolean {
    return layer >= this.encoderLayers;
  }

  routeFrom(it: IterationState, s: RequestState): number {
    // Positions: the prompt's in the encoder, the output token's in the decoder.
    return it.layer < this.encoderLayers ? 0 : s.spec.promptTokens + s.emitted;
  }

  headTokens(it: IterationState): number {
    return it.batch.length;
  }
}

export function modelWalkOf(model: ModelProfile): ModelWalk {
  if (model.arch !== 'encoder-decoder') return new DecoderOnlyWalk();
  const walk = new EncoderDecoderWalk(model);
  // An encoder-decoder profile whose decoder is every layer behaves as decoder-only.
  return walk.encoderLayers > 0 ? walk : new DecoderOnlyWalk();
}
