/**
 * Ad hoc checks behind FIDELITY.md's "Event-level VSLPipe vs the closed form" reading (not an
 * experiment config: they change the testbed's link latency and the data mover's packet, which a
 * config does not sweep). 5 000 sequences with prompts 20–179 tokens (a deterministic LCG),
 * g 64, 210 GB of KV, Mixtral-8x7B on `a40-xeon8380-lens.json`:
 * 1. closed form vs event level with the link's 10 µs setup latency and with 0: how much of their
 *    difference is the latency each activation copy pays at event level;
 * 2. event level with 16 MiB, 100 MB and 4 GB (a whole layer) data-mover packets.
 *
 *   npx tsx experiments/moe-lens/pipeline-checks.ts
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadHardware, loadModel, loadRuntime } from '../../hardware-profiles/load.ts';
import { createCostModel } from '../../sim/cost/cost-model.ts';
import { runLens } from '../../policies/moe-lens/execution.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const model = loadModel('mixtral-8x7b');
const base = loadHardware(path.join(here, 'a40-xeon8380-lens.json'));
let s = 7;
const next = () => {
  s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
  return s;
};
const requests = Array.from({ length: 5000 }, (_, id) => ({ id, promptTokens: 20 + (next() % 160), outputTokens: 64 }));
const settings = { kvCapacityBytes: 210e9, pageTokens: 16 };

for (const latencyNs of [base.pcie.latencyNs, 0]) {
  const hw = { ...base, pcie: { ...base.pcie, latencyNs } };
  const cost = createCostModel(model, hw, { runtime: loadRuntime('moe-lightning') });
  for (const contention of [false, true]) {
    const cf = runLens({ model, hardware: hw, cost, requests, settings: { ...settings, contention } });
    const ev = runLens({
      model,
      hardware: hw,
      cost,
      requests,
      settings: { ...settings, contention, pipeline: 'events' },
    });
    const d = ev.endNs - cf.endNs;
    console.log(
      `link latency ${latencyNs} ns, DRAM sharing ${contention ? 'on ' : 'off'}: ${cf.iterations} iterations, closed ${(cf.endNs / 1e9).toFixed(6)} s, events ${(ev.endNs / 1e9).toFixed(6)} s, difference ${((d / cf.endNs) * 100).toFixed(4)} % = ${(d / cf.iterations / 1e3).toFixed(1)} µs per iteration`,
    );
  }
}
const cost = createCostModel(model, base, { runtime: loadRuntime('moe-lightning') });
const cf = runLens({ model, hardware: base, cost, requests, settings: { ...settings, contention: true } });
for (const packetBytes of [16 * 1024 * 1024, 100e6, 4e9]) {
  const ev = runLens({
    model,
    hardware: base,
    cost,
    requests,
    settings: { ...settings, contention: true, pipeline: 'events', packetBytes },
  });
  const e = ev.eventStats!;
  console.log(
    `packet ${packetBytes} B: makespan ${(ev.endNs / 1e9).toFixed(4)} s (${((ev.endNs / cf.endNs - 1) * 100).toFixed(3)} % vs closed form), activation wait mean ${(e.activationQueueNs / e.activationTransfers / 1e6).toFixed(3)} ms, max ${(e.activationMaxQueueNs / 1e6).toFixed(3)} ms, kernel events ${e.events}`,
  );
}
