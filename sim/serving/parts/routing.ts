/**
 * Routing of one MoE layer of an iteration: asks each request's router for its tokens' experts,
 * counts tokens per expert (per request and over the batch) and lists the activated experts.
 * Everything is written into arrays reused from layer to layer: this runs once per MoE layer
 * step, the executor's innermost loop. The `LayerRouting` object the policy sees is built here.
 */
import { SimError } from '../../kernel/errors.ts';
import type { LayerRouting } from '../policy.ts';
import type { ModelWalk } from './model-walk.ts';
import type { IterationState, ServingContext } from './state.ts';

export class LayerRouter {
  private scratch = new Int32Array(1024);
  /** Activated experts of the layer being run, ascending (valid while it runs). */
  private readonly activated: number[] = [];
  private readonly perRequestCounts: Int32Array[] = [];
  private readonly routing: { -readonly [K in keyof LayerRouting]: LayerRouting[K] } & { perRequest: Int32Array[] } = {
    layer: -1,
    tokensPerExpert: new Int32Array(0),
    perRequest: [],
    activated: [],
  };

  constructor(
    private readonly ctx: ServingContext,
    private readonly walk: ModelWalk,
  ) {}

  /** Makes sure there are counts for `requests` requests (at an iteration's start). */
  reserve(requests: number): void {
    while (this.perRequestCounts.length < requests) this.perRequestCounts.push(new Int32Array(this.ctx.E));
  }

  /** Routes MoE layer `moeLayer` of `it`: fills `it.tokensPerExpert`, returns the activated experts. */
  route(it: IterationState, moeLayer: number): readonly number[] {
    const E = this.ctx.E;
    const k = this.ctx.model.topK;
    const total = it.tokensPerExpert;
    // Zeroed by a loop: `fill` is a runtime call, dearer than a handful of stores.
    for (let e = 0; e < E; e++) total[e] = 0;
    for (let i = 0; i < it.batch.length; i++) {
      const s = it.batch[i]!;
      const n = it.layerTokens[i]!;
      const counts = this.perRequestCounts[i]!;
      for (let e = 0; e < E; e++) counts[e] = 0;
      if (n === 0) continue;
      if (this.scratch.length < n * k) this.scratch = new Int32Array(n * k * 2);
      const from = this.walk.routeFrom(it, s);
      s.router!.route(moeLayer, from, from + n, this.scratch);
      for (let j = 0; j < n * k; j++) {
        const e = this.scratch[j]!;
        if (!(e >= 0 && e < E)) {
          const msg = `router returned expert ${e} (experts ${E}) for request ${s.spec.id} layer ${moeLayer}`;
          throw new SimError(msg, this.ctx.sim.now, 'routing');
        }
        counts[e]!++;
      }
      for (let e = 0; e < E; e++) total[e]! += counts[e]!;
    }
    // Written by index over the previous layer's list, the length cut once (up to E entries).
    const activated = this.activated;
    let na = 0;
    for (let e = 0; e < E; e++) {
      if (total[e]! === 0) continue;
      if (na < activated.length) activated[na] = e;
      else activated.push(e);
      na++;
    }
    if (activated.length > na) activated.length = na;
    this.ctx.counters.activationRatioSum += activated.length / E;
    this.ctx.counters.layerRoutings++;
    return activated;
  }

  /** The layer's routing as the policy sees it (one object and one array for every layer). */
  layerRouting(it: IterationState, moeLayer: number): LayerRouting {
    const routing = this.routing;
    routing.layer = moeLayer;
    routing.tokensPerExpert = it.tokensPerExpert;
    const perRequest = routing.perRequest;
    while (perRequest.length > it.batch.length) perRequest.pop();
    for (let i = 0; i < it.batch.length; i++) {
      if (i < perRequest.length) perRequest[i] = this.perRequestCounts[i]!;
      else perRequest.push(this.perRequestCounts[i]!);
    }
    routing.activated = this.activated;
    return routing;
  }
}
