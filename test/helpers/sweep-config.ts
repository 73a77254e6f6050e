/**
 * The small sweep the parallel and distributed sweep tests run: 2 arrival rates × 3 policies
 * (one a plugin, so workers must load policy code themselves) × 2 seeds = 12 runs, with
 * relative metrics, a seed summary and a plot (all computed after every run is in).
 */
export const sweepConfig = (name: string, pluginPath: string, requests = 6): string => `name: ${name}
model: olmoe
hardware: rtx4090
seeds: [1, 2]
workload:
  requests: ${requests}
  arrival: { kind: poisson, ratePerS: 2 }
  promptTokens: { kind: uniform, min: 8, max: 64 }
  outputTokens: { kind: uniform, min: 2, max: 8 }
executor: { batching: continuous, maxBatchSize: 4, packetMiB: 4 }
policies:
  - name: on-demand
  - name: lru
    capacitySlots: 128
  - path: ${JSON.stringify(pluginPath)}
    label: my-fifo
    params: { capacitySlots: 128 }
sweep:
  workload.arrival.ratePerS: [1, 4]
output:
  relative: { baseline: on-demand, metrics: [h2dBytes] }
  seedSummary: [tpotMs.mean]
  plots:
    - { name: tpot, x: workload.arrival.ratePerS, y: metrics.tpotMs.mean, series: policy }
`;
