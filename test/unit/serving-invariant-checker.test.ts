/**
 * The invariant checker of the property tests must itself catch what it claims to: each case
 * feeds it a hand-made record sequence that breaks one invariant and expects a violation
 * naming it (and a clean sequence expects none).
 */
import { describe, expect, it } from 'vitest';
import type { Ns } from '../../sim/kernel/time.ts';
import type { PacketRecord, TransferRecord } from '../../sim/observe/trace-sink.ts';
import type { ServingOutcome } from '../../sim/serving/serving-executor.ts';
import { InvariantChecker } from '../helpers/invariant-checker.ts';

const t = (n: number) => n as Ns;
const MB = 1_000_000;

function transfer(id: number, label: string, o: Partial<TransferRecord> = {}): TransferRecord {
  return {
    link: 'h2d',
    id,
    label,
    category: 'expert-demand',
    bytes: MB,
    priority: 0,
    submitNs: t(0),
    startNs: t(0),
    endNs: t(10),
    outcome: 'done',
    sentBytes: MB,
    ...o,
  };
}
function packet(transferId: number, label: string, bytes = MB, o: Partial<PacketRecord> = {}): PacketRecord {
  return { link: 'h2d', transferId, label, category: 'expert-demand', bytes, startNs: t(0), endNs: t(10), ...o };
}

/** The parts of an outcome `finish` reads. */
function outcome(o: {
  bytesMoved: number;
  completedBytes: number;
  cancelledSentBytes: number;
  requests?: ServingOutcome['requests'];
}): ServingOutcome {
  const pool = (name: string) => ({ name, usedBytes: 0, capacityBytes: 100, peakBytes: 0 });
  return {
    requests: o.requests ?? [],
    counters: {} as ServingOutcome['counters'],
    resources: {
      vram: pool('vram'),
      host: pool('host'),
      h2d: { bytesMoved: o.bytesMoved, completedBytes: o.completedBytes, cancelledSentBytes: o.cancelledSentBytes },
    } as unknown as ServingOutcome['resources'],
    endNs: t(1000),
    events: 0,
    slots: 1,
  };
}

/** A clean run of one expert (M0E1 = key 1 with 4 experts) and one request of 2 tokens. */
function cleanRun(c: InvariantChecker): void {
  c.onRequest(0, 'arrive', t(0));
  c.onRequest(0, 'admit', t(0));
  c.onMemory({
    pool: 'vram',
    category: 'expertCache',
    timeNs: t(0),
    categoryUsedBytes: MB,
    usedBytes: MB,
    capacityBytes: 2 * MB,
  });
  c.onPacket(packet(0, 'expert M0E1'));
  c.onTransfer(transfer(0, 'expert M0E1'));
  c.onExpertResidency(1, true, t(10));
  c.onExpertCompute(1, t(10), true);
  c.onKernel({ stream: 'gpu', label: 'e', category: 'expert', startNs: t(10), endNs: t(20) });
  c.onRequest(0, 'firstToken', t(20));
  c.onRequest(0, 'token', t(30));
  c.onRequest(0, 'finish', t(30));
}
const cleanRequest = {
  id: 0,
  arrivalNs: 0,
  admitNs: 0,
  firstTokenNs: 20,
  finishNs: 30,
  promptTokens: 1,
  outputTokens: 2,
  emittedTokens: 2,
};

describe('invariant checker', () => {
  it('accepts a clean run', () => {
    const c = new InvariantChecker({ experts: 4, bytesPerExpert: MB });
    cleanRun(c);
    expect(
      c.finish(outcome({ bytesMoved: MB, completedBytes: MB, cancelledSentBytes: 0, requests: [cleanRequest] })),
    ).toEqual([]);
  });

  it('(a) a pool over capacity, or categories that do not add up', () => {
    const c = new InvariantChecker({ experts: 4 });
    c.onMemory({
      pool: 'vram',
      category: 'kvCache',
      timeNs: t(5),
      categoryUsedBytes: 90,
      usedBytes: 110,
      capacityBytes: 100,
    });
    expect(c.violations().join('\n')).toMatch(/used 110 B > capacity 100 B/);
    expect(c.violations().join('\n')).toMatch(/categories sum to 90 B but the pool reports 110 B/);
  });

  it('(b) compute before residency, residency without a transfer, release of a non-resident expert', () => {
    const c = new InvariantChecker({ experts: 4 });
    c.onExpertCompute(5, t(1), true);
    c.onExpertResidency(6, true, t(2));
    c.onExpertResidency(7, false, t(3));
    const v = c.violations().join('\n');
    expect(v).toMatch(/expert 5 \(M1E1\) computed before its bytes were resident/);
    expect(v).toMatch(/expert 6 \(M1E2\) became resident without a completed transfer/);
    expect(v).toMatch(/expert 7 \(M1E3\) released but it was not resident/);
  });

  it('(b) residency of one expert is not backed by the transfer of another', () => {
    const c = new InvariantChecker({ experts: 4, bytesPerExpert: MB });
    c.onPacket(packet(0, 'expert M0E1'));
    c.onTransfer(transfer(0, 'expert M0E1'));
    c.onExpertResidency(2, true, t(10));
    expect(c.violations().join('\n')).toMatch(/M0E2\) became resident without a completed transfer/);
    expect(c.finish(outcome({ bytesMoved: MB, completedBytes: MB, cancelledSentBytes: 0 })).join('\n')).toMatch(
      /transfer\(s\) of expert 1 \(M0E1\) never made it resident/,
    );
  });

  it('(c) packets that do not add up to the transfer, and a link total that disagrees', () => {
    const c = new InvariantChecker({ experts: 4 });
    c.onPacket(packet(0, 'expert M0E1', MB / 2));
    c.onTransfer(transfer(0, 'expert M0E1'));
    c.onPacket(packet(1, 'expert M0E2', MB / 4));
    c.onTransfer(transfer(1, 'expert M0E2', { outcome: 'cancelled', sentBytes: 0 }));
    c.onPacket(packet(1, 'expert M0E2', 10));
    const v = c.violations().join('\n');
    expect(v).toMatch(/done with 500000 B of packets for 1000000 B/);
    expect(v).toMatch(/cancelled transfer expert M0E2 sent 250000 B of packets but reports 0 B/);
    expect(v).toMatch(/after the transfer was reported/);
    const end = c.finish(outcome({ bytesMoved: 123, completedBytes: 100, cancelledSentBytes: 0 })).join('\n');
    expect(end).toMatch(/h2d.bytesMoved 123 B ≠ Σ packets/);
    expect(end).toMatch(/≠ completed 100 B \+ cancelled sent 0 B/);
  });

  it('(d) a token too many, a second finish, phases out of order', () => {
    const c = new InvariantChecker({ experts: 4 });
    c.onRequest(0, 'arrive', t(0));
    c.onRequest(0, 'firstToken', t(5));
    c.onRequest(0, 'admit', t(6));
    c.onRequest(0, 'token', t(7));
    c.onRequest(0, 'finish', t(7));
    c.onRequest(0, 'finish', t(8));
    const v = c
      .finish(
        outcome({
          bytesMoved: 0,
          completedBytes: 0,
          cancelledSentBytes: 0,
          requests: [{ ...cleanRequest, outputTokens: 1, emittedTokens: 2 }],
        }),
      )
      .join('\n');
    expect(v).toMatch(/firstToken at t=5 before it was admitted/);
    expect(v).toMatch(/'finish' reported 2 times/);
    expect(v).toMatch(/2 tokens emitted for 1 output tokens/);
    expect(v).toMatch(/out of order/);
  });

  it('kernels of one stream never overlap', () => {
    const c = new InvariantChecker({ experts: 4 });
    c.onKernel({ stream: 'gpu', label: 'a', category: 'x', startNs: t(0), endNs: t(10) });
    c.onKernel({ stream: 'gpu', label: 'b', category: 'x', startNs: t(5), endNs: t(15) });
    expect(c.violations().join('\n')).toMatch(/kernel b starts before the previous kernel of gpu ended/);
  });
});
