/**
 * A plugin policy (loaded by path, as a user's) that implements every hook and setting of
 * `ServingPolicy`, for `plugin-every-hook.test.ts`. Each decision it returns asks for something
 * whose effect the next hook call can see (a prefetch is in the buffer, an evicted or victim
 * expert is gone, a kept or loaded top is in the segment cache, a dropped top is not); the next
 * hook checks and counts it in `globalThis.__everyHook`. Not a test file.
 */
import { z } from 'zod';
import { definePolicy } from '../../policies/types.ts';
import type { ExpertKey, ServingHook, ServingView } from '../../sim/serving/policy.ts';

export interface EveryHookLog {
  /** Calls per hook. */
  readonly calls: Partial<Record<ServingHook, number>>;
  /** Effects of a hook's result seen by a later hook, per hook. */
  readonly effects: Partial<Record<ServingHook, number>>;
  /** Effects that did not happen: "hook: what". */
  readonly missed: string[];
}

const g = globalThis as { __everyHook?: EveryHookLog };
const newLog = (): EveryHookLog => ({ calls: {}, effects: {}, missed: [] });

/** A check of an earlier result, run at the next hook call. */
type Pending = { readonly hook: ServingHook; readonly what: string; readonly holds: (view: ServingView) => boolean };

export default definePolicy({
  name: 'every-hook',
  family: 'serving',
  summary: 'test plugin: implements every serving hook and checks each took effect',
  params: z
    .object({ slots: z.number().int().positive().default(64), segmentExperts: z.number().positive().default(6) })
    .strict(),
  bufferSlots: (p) => p.slots,
  create: (p, ctx) => {
    const log = (g.__everyHook = newLog());
    let pending: Pending[] = [];
    const call = (hook: ServingHook, view?: ServingView): void => {
      log.calls[hook] = (log.calls[hook] ?? 0) + 1;
      if (!view) return;
      for (const c of pending) {
        if (c.holds(view)) log.effects[c.hook] = (log.effects[c.hook] ?? 0) + 1;
        else log.missed.push(`${c.hook}: ${c.what} (at ${hook})`);
      }
      pending = [];
    };
    const expect = (hook: ServingHook, what: string, holds: (view: ServingView) => boolean): void => {
      pending.push({ hook, what, holds });
    };
    const segs = (view: ServingView) => view.segments!;
    const resident = (view: ServingView): ExpertKey | undefined => {
      for (const e of view.buffer.entries()) {
        if (e.state === 'resident' && !e.pinned && e.part !== 'bottom') return e.key;
      }
      return undefined;
    };
    const prefetched = new Set<ExpertKey>();
    /** Gone from the buffer, or fetched again on demand by the layer that needs it. */
    const gone = (v: ServingView, key: ExpertKey): boolean =>
      !v.buffer.has(key) || v.buffer.entry(key)!.origin === 'demand';
    const bytesPerExpert = ctx.model.derived.bytesPerExpert;
    return {
      name: 'every-hook',
      queueJump: false,
      computeOrder: 'ready-first',
      segmentCacheBytes: Math.round(p.segmentExperts * bytesPerExpert),
      init(shape) {
        call('init');
        if (shape.slots === p.slots) log.effects.init = 1;
      },
      initialTops() {
        call('initialTops');
        expect('initialTops', 'top of key 0 resident at the first hook', (v) => segs(v).topState(0) === 'resident');
        return [{ key: 0, fraction: 0.5 }];
      },
      report() {
        call('report');
        return { everyHook: true };
      },
      onIterationStart(view) {
        call('onIterationStart', view);
        // A full buffer with nothing evictable drops a prefetch (no slot can be freed).
        if (view.buffer.occupied >= view.slots && resident(view) === undefined) return;
        // The last MoE layer's experts: nothing this early in the iteration needs them.
        for (let e = 0; e < view.experts; e++) {
          const key = view.keyOf(view.moeLayers - 1, e);
          if (view.buffer.has(key) || segs(view).topFraction(key) > 0) continue;
          // A demand fetch may cancel it (it takes the slot of the least urgent prefetch): its
          // effect is counted when it completes (onPrefetchDone).
          prefetched.add(key);
          return { prefetch: [{ key, priority: 5 }] };
        }
      },
      onLayerRouted(view, routing) {
        call('onLayerRouted', view);
        if (routing.layer + 1 >= view.moeLayers) return;
        const s = segs(view);
        for (let e = 0; e < view.experts; e++) {
          const key = view.keyOf(routing.layer + 1, e);
          const room = s.capacityBytes - s.usedBytes;
          if (view.buffer.has(key) || s.topFraction(key) > 0 || s.topBytes(0.25) > room) continue;
          expect('onLayerRouted', `top of ${key} loading`, (v) => segs(v).topFraction(key) === 0.25);
          return { loadTops: [{ key, fraction: 0.25 }], topPriority: 3 };
        }
      },
      onLayerDone(view) {
        call('onLayerDone', view);
        const key = resident(view);
        if (key === undefined) return;
        expect('onLayerDone', `${key} evicted`, (v) => gone(v, key));
        return { evict: [key] };
      },
      afterUse(view, key) {
        call('afterUse', view);
        const e = view.buffer.entry(key);
        const s = segs(view);
        if (e?.part === 'whole' && s.topFraction(key) === 0 && s.topBytes(0.5) <= s.capacityBytes - s.usedBytes) {
          expect('afterUse', `top of ${key} kept`, (v) => segs(v).topFraction(key) === 0.5);
          return { keepTop: 0.5 };
        }
        return true;
      },
      onPrefetchDone(view, key) {
        call('onPrefetchDone', view);
        if (prefetched.delete(key)) log.effects.onIterationStart = (log.effects.onIterationStart ?? 0) + 1;
        expect('onPrefetchDone', `${key} evicted`, (v) => gone(v, key));
        return { evict: [key] };
      },
      chooseVictim(_view, q) {
        // Called while a decision is being applied (a prefetch looking for a slot): checks wait for the next hook.
        call('chooseVictim');
        // The most recently entered candidate (not the executor's default, least recently used).
        const victim = q.candidates[q.candidates.length - 1];
        if (victim !== undefined) expect('chooseVictim', `${victim} evicted`, (v) => gone(v, victim));
        return victim;
      },
      onIterationEnd(view) {
        call('onIterationEnd', view);
        for (const key of segs(view).keys()) {
          if (segs(view).topPinned(key)) continue;
          expect('onIterationEnd', `top of ${key} dropped`, (v) => segs(v).topFraction(key) === 0);
          return { dropTops: [key] };
        }
      },
      onRequestFinished(view, request) {
        call('onRequestFinished', view);
        if (request.outputTokens > 0) log.effects.onRequestFinished = (log.effects.onRequestFinished ?? 0) + 1;
      },
    };
  },
});
