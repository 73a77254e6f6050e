/**
 * What the task-graph executor (`task-graph.ts`) records of finished work: busy totals per task
 * kind and per category, the first start and the last finish (the end of the critical path),
 * and one task's timing as the public `TaskTiming`. Kept apart from the executor so that its
 * class holds only the graph's bookkeeping; read by `diagnostics.ts`.
 */
import type { Ns } from '../kernel/time.ts';
import { type MutableBusy, type Node, NOT_YET } from './nodes.ts';
import { TASK_KINDS, type TaskKind, type TaskTiming } from './types.ts';

export class GraphAccounting {
  finishedCount = 0;
  readonly byKind: Record<TaskKind, MutableBusy>;
  readonly byCategory = new Map<string, MutableBusy>();
  firstStartNs: Ns | undefined;
  /** The task that finished last (the last of those at the latest time). */
  lastFinished: Node | undefined;

  constructor() {
    this.byKind = Object.fromEntries(TASK_KINDS.map((k) => [k, { finished: 0, busyNs: 0 }])) as Record<
      TaskKind,
      MutableBusy
    >;
  }

  /** Counts a finished task (its start and finish are set). */
  account(node: Node): void {
    const busy = node.finishNs - node.startNs;
    this.finishedCount++;
    const k = this.byKind[node.spec.kind];
    k.finished++;
    k.busyNs += busy;
    let c = this.byCategory.get(node.spec.category);
    if (!c) {
      c = { finished: 0, busyNs: 0 };
      this.byCategory.set(node.spec.category, c);
    }
    c.finished++;
    c.busyNs += busy;
    if (this.firstStartNs === undefined || node.startNs < this.firstStartNs) this.firstStartNs = node.startNs;
    // The last of the latest: a join (barrier) finishing at the same instant as its deps wins.
    if (!this.lastFinished || node.finishNs >= this.lastFinished.finishNs) this.lastFinished = node;
  }
}

/** What is known of one task (the times it has reached so far). */
export function timingOf(n: Node): TaskTiming {
  const s = n.spec;
  return {
    id: s.id,
    kind: s.kind,
    label: n.label,
    category: s.category,
    priority: n.priority,
    state: n.state,
    addedNs: n.addedNs,
    ...(n.readyNs !== NOT_YET ? { readyNs: n.readyNs } : {}),
    ...(n.dispatchNs !== NOT_YET ? { dispatchNs: n.dispatchNs } : {}),
    ...(n.startNs !== NOT_YET ? { startNs: n.startNs } : {}),
    ...(n.finishNs !== NOT_YET ? { finishNs: n.finishNs } : {}),
  };
}
