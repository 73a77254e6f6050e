/**
 * The boundary arithmetic of a PCIe link's packet runs (`pcie-link.ts`, whose header says what
 * a run is): how many packets of a run have landed by the event being dispatched. A pure
 * function of the run and the kernel's current event, kept apart so the link's class holds the
 * state machine and this the exact tie-break at a boundary that falls at `now`.
 */
import { EventPriority, type Scheduler } from '../kernel/simulation.ts';

/** What the arithmetic reads of the kernel: the time and the event being dispatched. */
export type RunClock = Pick<Scheduler<unknown>, 'now' | 'currentPriority' | 'currentStamp' | 'currentSeq'>;

/**
 * Packets of a run completed by the event being dispatched: boundary k (the end of packet
 * k − 1, at start + k · full) has passed when it is before now, or at now and its virtual
 * completion event — (now, completion, stamp = start of packet k − 1) — precedes the current one.
 * Returns −1 while the run's latency has not passed.
 *
 * @param startNs the first packet's start; `latStartNs` the latency's start (−1: none)
 * @param fullNs a full packet's time on the wire; `packets` the run's packets
 * @param seq the kernel seq of the run's event
 */
export function packetsPassed(
  sched: RunClock,
  startNs: number,
  latStartNs: number,
  fullNs: number,
  packets: number,
  seq: number,
): number {
  if (latStartNs >= 0 && sched.now <= startNs) {
    // In the latency, or at its end: its virtual completion is (end, completion, its start, the run's seq).
    if (sched.now < startNs) return -1;
    const p = sched.currentPriority;
    const passed =
      p > EventPriority.completion ||
      (p === EventPriority.completion &&
        (latStartNs < sched.currentStamp || (latStartNs === sched.currentStamp && sched.currentSeq > seq)));
    if (!passed) return -1;
  }
  const elapsed = sched.now - startNs;
  let k = Math.min(Math.floor(elapsed / fullNs), packets - 1);
  if (k >= 1 && k * fullNs === elapsed) {
    const p = sched.currentPriority;
    let passed = p > EventPriority.completion;
    if (p === EventPriority.completion) {
      const stamp = startNs + (k - 1) * fullNs;
      const cur = sched.currentStamp;
      // Equal stamps: the first packet's completion would have been scheduled where the run's
      // event was (compare seqs); a later one's by the previous boundary's completion, taken
      // as scheduled before the current event (exact unless that event was itself scheduled at
      // the previous boundary by an earlier completion of the same instant).
      passed = stamp < cur || (stamp === cur && (k > 1 || latStartNs >= 0 || sched.currentSeq > seq));
    }
    if (!passed) k--;
  }
  return k;
}
