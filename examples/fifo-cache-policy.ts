/**
 * An example policy plugin: a FIFO expert cache (evict the expert that entered the buffer
 * first) with an optional "prefetch the same experts at the next layer" heuristic.
 *
 * A plugin is a module whose default export is a `PolicyDefinition`: a name, the executor
 * family it plugs into, a zod schema for its parameters, and a factory returning an object
 * that fills some of the hooks of `ServingPolicy` (sim/serving/policy.ts). Point a config at it:
 *
 * ```yaml
 * policies:
 *   - path: ../examples/fifo-cache-policy.ts   # relative to the config file
 *     label: fifo
 *     params: { capacitySlots: 48, prefetchSameExpert: true }
 * ```
 *
 * Hooks receive read-only views and return decisions; the executor validates them and enforces
 * memory, so a plugin cannot overflow the buffer even if it asks for too much.
 */
import { z } from 'zod';
import { definePolicy } from '../policies/types.ts';

const Params = z
  .object({
    /** Expert buffer size in slots (default: the executor's `bufferSlots`). */
    capacitySlots: z.number().int().positive().optional(),
    /** After layer l routes expert e, prefetch expert e of layer l+1 (a naive cross-layer guess). */
    prefetchSameExpert: z.boolean().default(false),
  })
  .strict();

export default definePolicy({
  name: 'fifo-example',
  family: 'serving',
  summary: 'example plugin: FIFO expert cache, optional same-expert next-layer prefetch',
  params: Params,
  bufferSlots: (p) => p.capacitySlots,
  create: (p) => ({
    name: 'fifo-example',
    onLayerRouted(view, routing) {
      if (!p.prefetchSameExpert || routing.layer + 1 >= view.moeLayers) return;
      return {
        prefetch: routing.activated.map((e, i) => ({ key: view.keyOf(routing.layer + 1, e), priority: 1 + i })),
      };
    },
    // Entries are listed in insertion order, so the first candidate entered first.
    chooseVictim: (_view, q) => q.candidates[0],
  }),
});
