/**
 * MoE-Infinity's prefetcher (DESIGN §8, "Prefetch"): activation probabilities → a ranked
 * multi-layer prefetch through one sequential PCIe queue, re-ranked and cancelled as rows of
 * the iteration EAM arrive.
 *
 * 1. Activation probabilities. After layer l is routed, each matched iteration EAM's best
 *    EAMC entries are summed and each row normalised: p(i, e) = share of the matched
 *    requests' tokens at layer i routed to e. A batch's score of (i, e) is the expected number
 *    of its tokens routed there, Σ_g tokens_g · p_g(i, e) over its matched iteration EAMs
 *    (`ScoreAccumulator`): for one request it ranks exactly as the paper's activation ratio.
 * 2. Proximity. Future layer i is scaled by 1 − (i − l)/L (`layerProximity`); layers
 *    l+1 … l+horizon are considered (horizon = all remaining layers with
 *    `multiLayerPrefetch`, else 1).
 * 3. Ranking (`selectPrefetch`). The `budget` best cells (score > 0; ties: nearer layer,
 *    then lower expert; rows scanned nearest first, a row skipped when its score bound cannot
 *    beat the cells already held; after a ranking of the previous layer, only cells and rows
 *    reaching 0.9 × its worst selected score are looked at, the rest provably outranked when at
 *    least `budget` cells reach it — else the plain scan) form the ranked set, queued nearest
 *    layer first (then by score) — or
 *    purely by score with `queueOrder: 'score'`. The queue position is encoded in the H2D
 *    priority (lower is more urgent, ≥ 1) without sorting: nearest-first
 *    u = (i − l) + (1 − s/s_max), by score u = 1 + (1 − s/s_max).
 * 4. Re-ranking (`PrefetchQueue.plan`). At every layer the ranked set is recomputed: still
 *    queued prefetches in it are re-prioritised, ones no longer in it are cancelled (only
 *    while loading: completed ones stay cached, and a prefetch the GPU now needs is the
 *    executor's, pinned, never cancelled), and the absent members the policy admits are
 *    issued (admission: `cache-priority.ts`). Resident members of the set are protected from
 *    eviction (cache priority maximal).
 *
 * Without request tracing (`dependencySelection`): the first n experts of layer l+1 in expert
 * order — DeepSpeed-style dependency prefetch, the first row of the paper's ablation (still
 * re-ranked per layer: stale next-layer prefetches are cancelled).
 */
export * from './heap.ts';
export * from './prefetch-queue.ts';
export * from './prefetch-rank.ts';
export * from './rank-scratch.ts';
export * from './score-accumulator.ts';
