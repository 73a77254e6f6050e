/**
 * What a routing trace says about expert caches: for each cache size (experts per MoE layer),
 * the hit rate of LRU and of Belady's oracle (evict the expert used farthest in the future),
 * per layer group, against the trace itself and against a shuffled copy (tokens permuted
 * within each request, requests permuted) — so locality is measured against the same
 * popularity without order, not against uniform routing; plus the reuse-distance
 * distribution, per-request vs global popularity and next-token reuse.
 *
 * A token's k experts at a layer are one access step: hits are counted for each of them
 * against the cache as it was before the token, then all k enter it (so sizes ≥ k). LRU is
 * exact for every size at once through the recency list (an expert hits at size C iff fewer
 * than C experts were used more recently); Belady is simulated per size. Caches are per layer;
 * `reset: 'request'` empties them at every request (as cache studies that replay one prompt at
 * a time do), `'never'` carries them across requests in file order.
 */
import { Rng } from '../../sim/kernel/rng.ts';
import { MISSING, type TraceRequest } from '../trace/format.ts';

export interface CacheTrace {
  readonly L: number;
  readonly E: number;
  readonly k: number;
  readonly requests: readonly Pick<TraceRequest, 'tokens' | 'experts'>[];
}

export type CacheReset = 'request' | 'never';

export interface CurveOptions {
  /** Cache sizes (experts per layer); default k, 2k, 4k … below E, and E/2. */
  readonly sizes?: readonly number[];
  readonly reset?: CacheReset;
  /** Contiguous layer groups to report besides all layers (default 3). */
  readonly groups?: number;
  /** Seed of the shuffled copy (stream `cache-curves:shuffle`). */
  readonly seed?: number;
  /** Skip the shuffled control (faster, for calibration loops). */
  readonly shuffled?: boolean;
  /** Skip Belady (faster). */
  readonly belady?: boolean;
  /**
   * 'token' (default): a token's k experts are one access step (sizes ≥ k). 'access': each
   * expert access is its own step, in slot order (as cache studies that replay routing events
   * one by one count it; then a cache of k can miss experts of the previous token).
   */
  readonly granularity?: 'token' | 'access';
}

export interface Curve {
  /** Hit rate (0…1) of LRU and Belady at each size. */
  readonly lru: number[];
  readonly belady: number[];
}

export interface GroupCurves extends Curve {
  /** First and last MoE layer (0-based, inclusive). */
  readonly layers: [number, number];
}

export interface CacheReport {
  readonly sizes: number[];
  readonly reset: CacheReset;
  readonly granularity: 'token' | 'access';
  readonly accesses: number;
  readonly all: Curve;
  readonly groups: GroupCurves[];
  readonly shuffled?: { all: Curve; groups: GroupCurves[] };
  /** Share of accesses by LRU reuse distance (distinct experts used since): bucket label → share; "cold" = first use. */
  readonly reuseDistance: Record<string, number>;
  readonly popularity: {
    /** Mean over layers of the global activation entropy / log2 E. */
    readonly globalEntropy: number;
    /** Token-weighted mean over (request, layer) of the request's entropy / log2 E (in-sample: short requests score low). */
    readonly requestEntropy: number;
    /** Share of activations on the layer's k·4 hottest experts: globally, and within each request (token-weighted). */
    readonly globalTopShare: number;
    readonly requestTopShare: number;
    readonly topC: number;
  };
  /** Mean |S_t ∩ S_{t−1}| / k for consecutive tokens of a request at a layer. */
  readonly nextTokenReuse: number;
}

export function defaultSizes(E: number, k: number): number[] {
  const s = new Set<number>();
  for (let c = k; c < E; c *= 2) s.add(c);
  if (E / 2 >= k) s.add(Math.floor(E / 2));
  return [...s].sort((a, b) => a - b);
}

/** Per layer: the token-sets of every request concatenated (T × k), and where each request starts. */
interface LayerSeq {
  readonly ids: Int32Array;
  readonly starts: Int32Array;
}

function layerSeq(trace: CacheTrace, l: number, order?: { req: number[]; tok: Int32Array[] }): LayerSeq {
  const { L, k } = trace;
  let T = 0;
  for (const r of trace.requests) T += r.tokens;
  const ids = new Int32Array(T * k);
  const starts = new Int32Array(trace.requests.length + 1);
  let o = 0;
  const reqs = order?.req ?? trace.requests.map((_, i) => i);
  reqs.forEach((ri, n) => {
    const r = trace.requests[ri]!;
    starts[n] = o / k;
    const perm = order?.tok[ri];
    for (let t = 0; t < r.tokens; t++) {
      const src = ((perm ? perm[t]! : t) * L + l) * k;
      for (let j = 0; j < k; j++) ids[o++] = r.experts[src + j]!;
    }
  });
  starts[reqs.length] = o / k;
  return { ids, starts };
}

/** LRU hits at every size (via recency positions) and the reuse-distance histogram, for one layer. */
function lruLayer(
  seq: LayerSeq,
  E: number,
  k: number,
  sizes: readonly number[],
  reset: CacheReset,
  hist: Float64Array,
): { hits: Float64Array; accesses: number } {
  const list = new Int32Array(E);
  const scratch = new Int32Array(E);
  let n = 0;
  const pos = new Int32Array(k);
  const hits = new Float64Array(sizes.length);
  let accesses = 0;
  const T = seq.ids.length / k;
  let req = 0;
  for (let t = 0; t < T; t++) {
    while (seq.starts[req + 1]! <= t) {
      req++;
      if (reset === 'request') n = 0;
    }
    const b = t * k;
    if (seq.ids[b] === MISSING) continue;
    for (let j = 0; j < k; j++) {
      const e = seq.ids[b + j]!;
      let p = -1;
      for (let i = 0; i < n; i++)
        if (list[i] === e) {
          p = i;
          break;
        }
      pos[j] = p;
      accesses++;
      if (p < 0) hist[0]!++;
      else {
        hist[1 + Math.min(30, 31 - Math.clz32(p + 1))]!++;
        for (let s = 0; s < sizes.length; s++) if (p < sizes[s]!) hits[s]!++;
      }
    }
    // Move the token's experts to the front, keeping the others in order.
    let m = 0;
    for (let i = 0; i < n; i++) {
      const e = list[i]!;
      let inTok = false;
      for (let j = 0; j < k; j++)
        if (seq.ids[b + j] === e) {
          inTok = true;
          break;
        }
      if (!inTok) scratch[m++] = e;
    }
    for (let j = 0; j < k; j++) list[j] = seq.ids[b + j]!;
    list.set(scratch.subarray(0, m), k);
    n = k + m;
  }
  return { hits, accesses };
}

/** Belady (farthest next use) hits at one size, for one layer. */
function beladyLayer(seq: LayerSeq, E: number, k: number, size: number, reset: CacheReset, next: Int32Array): number {
  const T = seq.ids.length / k;
  const cached = new Uint8Array(E);
  const slot = new Int32Array(size);
  const nextUse = new Float64Array(E);
  let n = 0;
  let hits = 0;
  let req = 0;
  for (let t = 0; t < T; t++) {
    while (seq.starts[req + 1]! <= t) {
      req++;
      if (reset === 'request') {
        for (let i = 0; i < n; i++) cached[slot[i]!] = 0;
        n = 0;
      }
    }
    const b = t * k;
    if (seq.ids[b] === MISSING) continue;
    for (let j = 0; j < k; j++) if (cached[seq.ids[b + j]!]) hits++;
    for (let j = 0; j < k; j++) {
      const e = seq.ids[b + j]!;
      nextUse[e] = next[b + j]! < 0 ? Infinity : next[b + j]!;
      if (cached[e]) continue;
      if (n < size) {
        slot[n++] = e;
        cached[e] = 1;
        continue;
      }
      let victim = -1;
      let far = -1;
      for (let i = 0; i < n; i++) {
        const f = slot[i]!;
        let inTok = false;
        for (let q = 0; q < k; q++)
          if (seq.ids[b + q] === f) {
            inTok = true;
            break;
          }
        if (!inTok && nextUse[f]! > far) {
          far = nextUse[f]!;
          victim = i;
        }
      }
      if (victim < 0) continue;
      cached[slot[victim]!] = 0;
      slot[victim] = e;
      cached[e] = 1;
    }
  }
  return hits;
}

/** For each (token, slot): the next token (index) that uses the same expert, −1 if none (within the request when resetting). */
function nextUses(seq: LayerSeq, E: number, k: number, reset: CacheReset): Int32Array {
  const T = seq.ids.length / k;
  const next = new Int32Array(T * k).fill(-1);
  const last = new Int32Array(E).fill(-1);
  let req = seq.starts.length - 2;
  for (let t = T - 1; t >= 0; t--) {
    while (req > 0 && seq.starts[req]! > t) {
      req--;
    }
    if (reset === 'request' && t === seq.starts[req + 1]! - 1) last.fill(-1);
    const b = t * k;
    if (seq.ids[b] === MISSING) continue;
    for (let j = 0; j < k; j++) {
      const e = seq.ids[b + j]!;
      next[b + j] = last[e]!;
      last[e] = t;
    }
  }
  return next;
}

function curvesOver(
  trace: CacheTrace,
  layers: number[],
  sizes: number[],
  o: CurveOptions,
  order?: { req: number[]; tok: Int32Array[] },
  hist?: Float64Array,
): { lru: Float64Array; belady: Float64Array; accesses: number } {
  const reset = o.reset ?? 'never';
  const lru = new Float64Array(sizes.length);
  const bel = new Float64Array(sizes.length);
  let accesses = 0;
  const h = hist ?? new Float64Array(32);
  const perAccess = o.granularity === 'access';
  const k = perAccess ? 1 : trace.k;
  for (const l of layers) {
    let seq = layerSeq(trace, l, order);
    if (perAccess) seq = { ids: seq.ids, starts: seq.starts.map((s) => s * trace.k) };
    const r = lruLayer(seq, trace.E, k, sizes, reset, h);
    accesses += r.accesses;
    r.hits.forEach((v, i) => (lru[i]! += v));
    if (o.belady !== false) {
      const next = nextUses(seq, trace.E, k, reset);
      sizes.forEach((s, i) => (bel[i]! += beladyLayer(seq, trace.E, k, s, reset, next)));
    }
  }
  return { lru, belady: bel, accesses };
}

const rate = (hits: Float64Array, accesses: number): number[] => Array.from(hits, (h) => (accesses ? h / accesses : 0));

function groupsOf(L: number, g: number): [number, number][] {
  const n = Math.max(1, Math.min(g, L));
  return Array.from(
    { length: n },
    (_, i) => [Math.floor((i * L) / n), Math.floor(((i + 1) * L) / n) - 1] as [number, number],
  );
}

/** Per-layer-group and overall LRU / Belady curves of `layers`. */
function curveSet(
  trace: CacheTrace,
  sizes: number[],
  o: CurveOptions,
  order?: { req: number[]; tok: Int32Array[] },
  hist?: Float64Array,
): { all: Curve; groups: GroupCurves[]; accesses: number } {
  const groups: GroupCurves[] = [];
  const lru = new Float64Array(sizes.length);
  const bel = new Float64Array(sizes.length);
  let accesses = 0;
  for (const [a, b] of groupsOf(trace.L, o.groups ?? 3)) {
    const layers = Array.from({ length: b - a + 1 }, (_, i) => a + i);
    const r = curvesOver(trace, layers, sizes, o, order, hist);
    groups.push({ layers: [a, b], lru: rate(r.lru, r.accesses), belady: rate(r.belady, r.accesses) });
    r.lru.forEach((v, i) => (lru[i]! += v));
    r.belady.forEach((v, i) => (bel[i]! += v));
    accesses += r.accesses;
  }
  return { all: { lru: rate(lru, accesses), belady: rate(bel, accesses) }, groups, accesses };
}

/** Tokens permuted within each request and requests permuted, from stream `cache-curves:shuffle`. */
export function shuffledOrder(trace: CacheTrace, seed = 1): { req: number[]; tok: Int32Array[] } {
  const rng = new Rng(`${seed}/cache-curves:shuffle`);
  const req = rng.shuffle(trace.requests.map((_, i) => i));
  const tok = trace.requests.map((r) => Int32Array.from(rng.shuffle(Array.from({ length: r.tokens }, (_, i) => i))));
  return { req, tok };
}

/** LRU and Belady curves only (for calibration): overall, no groups, no shuffle. */
export function hitCurves(
  trace: CacheTrace,
  sizes: number[],
  reset: CacheReset,
  belady = true,
  granularity: 'token' | 'access' = 'token',
): Curve {
  const layers = Array.from({ length: trace.L }, (_, i) => i);
  const r = curvesOver(trace, layers, sizes, { reset, belady, granularity });
  return { lru: rate(r.lru, r.accesses), belady: rate(r.belady, r.accesses) };
}

export function cacheReport(trace: CacheTrace, o: CurveOptions = {}): CacheReport {
  const sizes = [...(o.sizes ?? defaultSizes(trace.E, trace.k))].filter(
    (s) => s >= (o.granularity === 'access' ? 1 : trace.k) && s <= trace.E,
  );
  const hist = new Float64Array(32);
  const base = curveSet(trace, sizes, o, undefined, hist);
  const shuffled = o.shuffled === false ? undefined : curveSet(trace, sizes, o, shuffledOrder(trace, o.seed));
  const reuseDistance: Record<string, number> = {};
  const total = hist.reduce((a, b) => a + b, 0) || 1;
  reuseDistance['cold'] = hist[0]! / total;
  for (let i = 1; i < 32; i++) {
    if (!hist[i]) continue;
    const lo = 2 ** (i - 1) - 1;
    const hi = Math.min(trace.E - 1, 2 ** i - 2);
    reuseDistance[lo === hi ? `=${lo}` : `${lo}-${hi}`] = hist[i]! / total;
  }
  return {
    sizes,
    reset: o.reset ?? 'never',
    granularity: o.granularity ?? 'token',
    accesses: base.accesses,
    all: base.all,
    groups: base.groups,
    ...(shuffled ? { shuffled: { all: shuffled.all, groups: shuffled.groups } } : {}),
    reuseDistance,
    popularity: popularity(trace),
    nextTokenReuse: nextTokenReuse(trace),
  };
}

function entropyBits(c: Float64Array, n: number): number {
  let h = 0;
  for (const v of c) if (v > 0) h -= (v / n) * Math.log2(v / n);
  return h;
}

function topShare(c: Float64Array, n: number, C: number): number {
  const s = Array.from(c).sort((a, b) => b - a);
  let t = 0;
  for (let i = 0; i < C && i < s.length; i++) t += s[i]!;
  return n ? t / n : 0;
}

function popularity(trace: CacheTrace): CacheReport['popularity'] {
  const { L, E, k } = trace;
  const C = Math.min(E, 4 * k);
  const glob = Array.from({ length: L }, () => new Float64Array(E));
  let reqH = 0;
  let reqTop = 0;
  let w = 0;
  const c = new Float64Array(E);
  for (const r of trace.requests) {
    for (let l = 0; l < L; l++) {
      c.fill(0);
      let n = 0;
      for (let t = 0; t < r.tokens; t++) {
        const b = (t * L + l) * k;
        if (r.experts[b] === MISSING) continue;
        for (let j = 0; j < k; j++) {
          c[r.experts[b + j]!]!++;
          glob[l]![r.experts[b + j]!]!++;
          n++;
        }
      }
      if (!n) continue;
      reqH += entropyBits(c, n) * n;
      reqTop += topShare(c, n, C) * n;
      w += n;
    }
  }
  let gH = 0;
  let gTop = 0;
  for (const g of glob) {
    const n = g.reduce((a, b) => a + b, 0);
    gH += n ? entropyBits(g, n) : 0;
    gTop += topShare(g, n, C);
  }
  const max = Math.log2(E);
  return {
    globalEntropy: gH / L / max,
    requestEntropy: w ? reqH / w / max : 0,
    globalTopShare: gTop / L,
    requestTopShare: w ? reqTop / w : 0,
    topC: C,
  };
}

function nextTokenReuse(trace: CacheTrace): number {
  const { L, k } = trace;
  let same = 0;
  let pairs = 0;
  for (const r of trace.requests) {
    for (let t = 1; t < r.tokens; t++) {
      for (let l = 0; l < L; l++) {
        const a = ((t - 1) * L + l) * k;
        const b = (t * L + l) * k;
        if (r.experts[a] === MISSING || r.experts[b] === MISSING) continue;
        for (let j = 0; j < k; j++) for (let q = 0; q < k; q++) if (r.experts[b + j] === r.experts[a + q]) same++;
        pairs++;
      }
    }
  }
  return pairs ? same / (pairs * k) : 0;
}
