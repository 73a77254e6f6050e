/**
 * What `npm run mutation` mutates, folder by folder, and which tests guard each folder. A mutant
 * is run against its folder's guarding tests only (the whole suite takes minutes per mutant on
 * two cores); a mutant those tests miss is a gap in the folder's own tests, which is what the
 * score is meant to show.
 */
export interface MutationFolder {
  /** Name printed in the score table (the folder's path). */
  readonly name: string;
  /** Stryker mutate globs. */
  readonly mutate: readonly string[];
  /** Vitest include globs: the tests that guard this folder. */
  readonly tests: readonly string[];
  /** Target share of mutants killed, where the project set one. */
  readonly target?: number;
}

export const MUTATION_FOLDERS: readonly MutationFolder[] = [
  {
    name: 'sim/kernel',
    mutate: ['sim/kernel/**/*.ts'],
    // The kernel's own tests: every other suite also runs the kernel, but a mutant only they catch
    // is a gap in the kernel's tests (and running them per mutant took hours on two cores).
    tests: [
      'test/unit/kernel.test.ts',
      'test/unit/kernel-messages.test.ts',
      'test/unit/event-queue-order.test.ts',
      'test/unit/rng-scripted-draws.test.ts',
    ],
    target: 0.85,
  },
  {
    name: 'sim/resources',
    mutate: ['sim/resources/**/*.ts'],
    // The resources' own unit and model-based tests (the task-graph suites add minutes per mutant).
    // ssd-tier and host-experts drive the NVMe link, page cache and CPU pool through the executor.
    tests: ['test/unit/{resources-*,pcie-link-mutation,ssd-tier,host-experts}.test.ts', 'test/model-based/*.test.ts'],
    target: 0.85,
  },
  {
    name: 'sim/serving',
    mutate: ['sim/serving/**/*.ts'],
    tests: [
      'test/unit/serving-*.test.ts',
      'test/unit/{split-experts,moepic,moe-infinity,baselines,request-table,oracle-prefetch}.test.ts',
      // The executor's engine mechanisms (host-computed experts, SSD tier, linear attention, every hook).
      'test/unit/{host-experts,ssd-tier,linear-attention,plugin-every-hook}.test.ts',
      'test/property/{serving-*,baselines,victims,expert-buffer-index}.test.ts',
      // Exact goldens: metrics and timelines of every cache/prefetch policy and engine mechanism.
      'test/golden/{golden,systems,timelines}.test.ts',
    ],
  },
  {
    name: 'sim/throughput',
    mutate: ['sim/throughput/**/*.ts'],
    tests: [
      'test/unit/{throughput-*,moe-lens-*,cap}.test.ts',
      'test/property/{throughput,cap,host-batch}.test.ts',
      // Exact goldens: the throughput family's metrics and timelines (every task's label, track and times).
      'test/golden/{systems,timelines}.test.ts',
    ],
  },
  {
    // MoE-Lens's scheduler, analytic model and execution (the throughput family's third executor
    // before the redesign, in the simulator's folder then): guarded by the same tests.
    name: 'policies/moe-lens',
    mutate: ['policies/moe-lens/**/*.ts'],
    tests: [
      'test/unit/{throughput-*,moe-lens-*}.test.ts',
      'test/property/throughput.test.ts',
      'test/golden/{systems,timelines}.test.ts',
    ],
  },
  {
    name: 'sim/taskgraph',
    mutate: ['sim/taskgraph/**/*.ts'],
    tests: [
      'test/unit/{taskgraph,taskgraph-edges,taskgraph-parts,taskgraph-reports,throughput-estimator}.test.ts',
      'test/property/taskgraph.test.ts',
      'test/golden/timelines.test.ts',
    ],
  },
  {
    name: 'sim/metrics',
    mutate: ['sim/metrics/**/*.ts'],
    tests: [
      'test/unit/{cap,metrics-summary,request-table,serving-executor,thresholds}.test.ts',
      'test/property/{cap,serving-lru-stack}.test.ts',
      'test/golden/{systems,timelines}.test.ts',
    ],
  },
  {
    name: 'policies/cache',
    mutate: ['policies/cache/**/*.ts'],
    tests: [
      'test/unit/{lcp-rank,baselines,moepic,cache-policies-mutation,evictable-set}.test.ts',
      'test/property/{victims,serving-lru-stack,baselines}.test.ts',
      'test/golden/{systems,timelines}.test.ts',
    ],
  },
  {
    name: 'policies/prefetch',
    mutate: ['policies/prefetch/**/*.ts'],
    tests: [
      'test/unit/{oracle-prefetch,budget-experts,baselines,pre-gated}.test.ts',
      'test/property/{baselines,adapmoe-allocator}.test.ts',
      'test/golden/{systems,timelines}.test.ts',
    ],
  },
  {
    // MoE-Infinity: its speed paths (floored rankings, kept victims, lazy victim order, row bounds)
    // must make the decisions of their exact references; the equivalence properties guard them.
    name: 'policies/moe-infinity',
    mutate: ['policies/moe-infinity/**/*.ts'],
    tests: [
      'test/unit/{cheapest-victims,moe-infinity,moe-infinity-warmup}.test.ts',
      'test/property/{moe-infinity,moe-infinity-equivalence,moe-infinity-victims,victims,eamc-*}.test.ts',
    ],
  },
];

/** The share of mutants killed: timeouts count as killed, mutants no test reaches as survivors. */
export function mutationScore(counts: Readonly<Record<string, number>>): number {
  const killed = (counts.Killed ?? 0) + (counts.Timeout ?? 0);
  const total = killed + (counts.Survived ?? 0) + (counts.NoCoverage ?? 0);
  return total === 0 ? 1 : killed / total;
}
