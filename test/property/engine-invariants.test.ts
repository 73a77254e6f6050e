/**
 * Property: random worlds of the host-expert mechanisms (test/helpers/engine-world.ts) keep the
 * invariants, checked from the outside by `InvariantChecker`:
 * - no memory pool over capacity;
 * - no expert computed before its bytes are where it is computed: on the GPU in a VRAM slot
 *   (resident after a completed transfer, or loaded with the model for GPU layers), on the CPU
 *   in host DRAM, zero-copy only after its read landed;
 * - bytes conserved on the H2D link (packets = completed + cancelled-sent = bytesMoved), and on
 *   the NVMe link in SSD-tier worlds;
 * - SSD tier: no pool over capacity includes the page cache; an expert crosses H2D or is
 *   computed on the CPU only while its file is in the page cache;
 * - every request finishes with its tokens.
 * Coverage is counted: each mechanism (CPU experts, GPU cache hits in host layers, background
 * uploads, zero-copy reads, fetch on miss, serial overlap, per-layer sync, a hybrid model's
 * linear-attention and full-attention layers both run) occurs in at least 25 % of its worlds —
 * the worlds that ran whose parameters enable it; and over the SSD-tier worlds a `CoverageTally`
 * asserts NVMe reads and page-cache evictions occur in ≥ 25 % of them.
 */
import * as fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { UserError } from '../../sim/kernel/errors.ts';
import type { KernelRecord, TraceSink, TransferRecord } from '../../sim/observe/trace-sink.ts';
import { CoverageTally } from '../helpers/coverage.ts';
import { InvariantChecker } from '../helpers/invariant-checker.ts';
import { buildEngineWorld, engineWorldArb, hasSsd, type EngineWorld } from '../helpers/engine-world.ts';
import { worldModel } from '../helpers/serving-world.ts';

const MECHANISMS = [
  'cpu',
  'cacheHit',
  'upload',
  'zeroCopy',
  'fetchOnMiss',
  'serial',
  'layerSync',
  'hybridLayers',
  'indexOrder',
] as const;
type Mechanism = (typeof MECHANISMS)[number];

/** The worlds whose parameters enable each mechanism (host layers exist in all of them). */
const ENABLED: Record<Mechanism, (w: EngineWorld) => boolean> = {
  cpu: (w) => w.miss === 'cpu' || w.cpuShare > 0.2,
  cacheHit: (w) => w.cacheFraction > 0.2 && w.uploadsPerLayer > 0,
  upload: (w) => w.cacheFraction > 0.2 && w.uploadsPerLayer > 0 && w.miss !== 'fetch',
  zeroCopy: (w) => w.miss === 'zero-copy',
  fetchOnMiss: (w) => w.miss === 'fetch' && w.cacheFraction > 0.2 && w.cpuShare < 0.8,
  serial: (w) => w.overlap === 'serial' && w.miss === 'cpu',
  layerSync: (w) => w.layerSyncUs > 0 && w.miss === 'cpu',
  hybridLayers: (w) => w.hybrid,
  // CPU experts under a loop in index order (concurrent: the loop runs out while they compute).
  indexOrder: (w) => w.expertOrder === 'index' && w.miss === 'cpu',
};

class Seen implements TraceSink {
  readonly m = new Set<Mechanism>();
  linearKernels = 0;
  fullAttentionKernels = 0;
  onKernel(r: KernelRecord): void {
    if (r.category !== 'attention') return;
    if (r.label.endsWith('linear attention')) this.linearKernels++;
    else this.fullAttentionKernels++;
  }
  onHostExpertCompute(_k: number, _t: number, where: 'cpu' | 'gpu-host'): void {
    this.m.add(where === 'cpu' ? 'cpu' : 'zeroCopy');
  }
  onTransfer(r: TransferRecord): void {
    if (r.category === 'expert-prefetch') this.m.add('upload');
    if (r.category === 'expert-demand') this.m.add('fetchOnMiss');
  }
}

const SSD_BEHAVIOURS = ['nvmeRead', 'pageCacheEviction', 'pageCacheHit'] as const;
const ssdTally = new CoverageTally('engine SSD tier', SSD_BEHAVIOURS);

async function runWorld(w: EngineWorld): Promise<Set<Mechanism> | 'refused'> {
  const model = worldModel(w.base);
  const bytesPerExpert = model.derived.bytesPerExpert;
  const ssd = hasSsd(w);
  const checker = new InvariantChecker({ experts: model.experts, bytesPerExpert, allowPreload: true, ssd });
  const seen = new Seen();
  let executor;
  try {
    executor = await buildEngineWorld(w, {
      onHostExpertCompute: (k, t, where) => {
        checker.onHostExpertCompute(k, t, where);
        seen.onHostExpertCompute(k, t, where);
      },
      onTransfer: (r) => {
        checker.onTransfer(r);
        seen.onTransfer(r);
      },
      onPacket: (r) => checker.onPacket(r),
      onMemory: (r) => checker.onMemory(r),
      onExpertCompute: (k, t, r) => checker.onExpertCompute(k, t, r),
      onExpertResidency: (k, r, t) => checker.onExpertResidency(k, r, t),
      onRequest: (id, p, t) => checker.onRequest(id, p, t),
      onKernel: (r) => {
        checker.onKernel(r);
        seen.onKernel(r);
      },
      onPageCache: (k, r, t) => checker.onPageCache(k, r, t),
    });
  } catch (err) {
    expect(err, `world refused with a non-user error: ${String(err)}`).toBeInstanceOf(UserError);
    return 'refused';
  }
  const out = executor.run();
  expect(checker.finish(out)).toEqual([]);
  for (const r of out.requests) expect(r.emittedTokens).toBe(r.outputTokens);
  const h2d = out.resources.h2d;
  expect(h2d.bytesMoved).toBe(h2d.completedBytes + h2d.cancelledSentBytes);
  const { nvme, pageCache } = out.resources;
  expect(nvme !== undefined, 'an NVMe link exactly in SSD worlds').toBe(ssd);
  if (nvme && pageCache) {
    expect(nvme.bytesMoved).toBe(nvme.completedBytes + nvme.cancelledSentBytes);
    expect(pageCache.pool.peakBytes).toBeLessThanOrEqual(pageCache.pool.capacityBytes);
    const s = pageCache.stats;
    ssdTally.record({
      nvmeRead: nvme.completedReads > 0,
      pageCacheEviction: s.evictions > 0,
      pageCacheHit: s.hits > 0,
    });
  }
  if (out.counters.prefetchHits > 0) seen.m.add('cacheHit'); // hits on uploaded experts (host layers)
  if (w.overlap === 'serial' && seen.m.has('cpu')) seen.m.add('serial');
  if (w.layerSyncUs > 0 && seen.m.has('cpu')) seen.m.add('layerSync');
  if (w.expertOrder === 'index' && seen.m.has('cpu')) seen.m.add('indexOrder');
  // A hybrid world walks both kinds of layer; any other world never runs a linear-attention block.
  if (seen.linearKernels > 0 && seen.fullAttentionKernels > 0) seen.m.add('hybridLayers');
  if (!w.hybrid) expect(seen.linearKernels).toBe(0);
  return seen.m;
}

describe('host-expert mechanisms on random worlds', () => {
  it('keep every invariant, and each mechanism occurs in ≥ 25 % of the worlds', async () => {
    const counts = new Map<Mechanism, number>(MECHANISMS.map((m) => [m, 0]));
    const enabled = new Map<Mechanism, number>(MECHANISMS.map((m) => [m, 0]));
    let ran = 0;
    await fc.assert(
      fc.asyncProperty(engineWorldArb, async (w) => {
        const r = await runWorld(w);
        if (r === 'refused') return;
        ran++;
        for (const m of MECHANISMS) {
          if (!ENABLED[m](w)) continue;
          enabled.set(m, enabled.get(m)! + 1);
          if (r.has(m)) counts.set(m, counts.get(m)! + 1);
        }
      }),
      { numRuns: 150 },
    );
    expect(ran).toBeGreaterThan(30);
    expect(ssdTally.count, 'SSD-tier worlds that ran').toBeGreaterThanOrEqual(10);
    ssdTally.check();
    const shares = Object.fromEntries(MECHANISMS.map((m) => [m, `${counts.get(m)}/${enabled.get(m)}`]));
    for (const m of MECHANISMS) {
      expect(enabled.get(m), `${m} enabled in ${JSON.stringify(shares)}`).toBeGreaterThanOrEqual(5);
      expect(counts.get(m)! / enabled.get(m)!, `${m} in ${JSON.stringify(shares)}`).toBeGreaterThanOrEqual(0.25);
    }
  }, 600_000);
});
