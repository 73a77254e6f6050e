/**
 * `bench/compare.ts`: the before/after rows of `npm run bench -- --vs` — pairing by benchmark
 * and figure, medians, context figures left out, which way is better, and the verdict only when
 * the rounds' ranges are apart.
 */
import { describe, expect, it } from 'vitest';
import { betterWay, compareRounds, formatValue, median } from '../../bench/compare.ts';

describe('bench --vs comparison', () => {
  it('names which way a figure is better from its name', () => {
    const higher = ['simulatedSPerWallS', 'simulatedSPerCpuS', 'eventsPerS', 'medianRatio'];
    const lower = [
      'eamcShareOfWall',
      'peakRssBytes',
      'coldWallS',
      'wallS',
      'runCpuS',
      'usPerDecodeRowInRun',
      'nsPerCall',
      'wallRatio_100000to1000000',
    ];
    for (const f of higher) expect(betterWay(f), f).toBe('higher');
    for (const f of lower) expect(betterWay(f), f).toBe('lower');
    // Descriptions of the run, not speed: no direction.
    for (const f of ['events', 'simulatedS', 'bufferHitRate', 'requests', 'ttftP50Ms', 'tokensPerCall'])
      expect(betterWay(f), f).toBeUndefined();
  });

  it('takes medians', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(Number.isNaN(median([]))).toBe(true);
  });

  it('pairs rounds by benchmark and figure, leaves out figures equal everywhere, keeps changed descriptions', () => {
    const base = [
      [{ name: 'a', requests: 24, events: 100, simulatedSPerWallS: 1000, wallS: 2, kernel: 'wasm' }],
      [{ name: 'a', requests: 24, events: 100, simulatedSPerWallS: 1200, wallS: 1.8, kernel: 'wasm' }],
    ];
    const head = [
      [{ name: 'a', requests: 24, events: 90, simulatedSPerWallS: 1500, wallS: 1.9, kernel: 'wasm' }],
      [{ name: 'a', requests: 24, events: 90, simulatedSPerWallS: 1700, wallS: 1.7, kernel: 'wasm' }],
    ];
    const rows = compareRounds(base, head);
    expect(rows.map((r) => r.figure)).toEqual(['events', 'simulatedSPerWallS', 'wallS']);
    const rate = rows.find((r) => r.figure === 'simulatedSPerWallS')!;
    expect(rate.base).toEqual([1000, 1200]);
    expect(rate.head).toEqual([1500, 1700]);
    expect(rate.baseMedian).toBe(1100);
    expect(rate.headMedian).toBe(1600);
    expect(rate.ratio).toBeCloseTo(1600 / 1100, 12);
    // Every head round beats every base round.
    expect(rate.verdict).toBe('better');
    // Ranges [1.8, 2] and [1.7, 1.9] overlap.
    expect(rows.find((r) => r.figure === 'wallS')!.verdict).toBe('overlap');
    const ev = rows.find((r) => r.figure === 'events')!;
    expect(ev.better).toBeUndefined();
    expect(ev.verdict).toBe('—');
  });

  it('says worse when every base round beats every head round, for lower-is-better figures too', () => {
    const rows = compareRounds(
      [[{ name: 'x', eamcShareOfWall: 0.2 }], [{ name: 'x', eamcShareOfWall: 0.21 }]],
      [[{ name: 'x', eamcShareOfWall: 0.3 }], [{ name: 'x', eamcShareOfWall: 0.25 }]],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]!.verdict).toBe('worse');
    expect(rows[0]!.better).toBe('lower');
  });

  it('keeps a benchmark found on one side only, with no values on the other', () => {
    const rows = compareRounds(
      [[{ name: 'old', wallS: 1 }]],
      [
        [
          { name: 'old', wallS: 1 },
          { name: 'new', wallS: 3 },
        ],
      ],
    );
    // `old` is equal everywhere (context); `new` exists at head only.
    expect(rows).toHaveLength(1);
    expect(rows[0]!.name).toBe('new');
    expect(rows[0]!.base).toEqual([]);
    expect(Number.isNaN(rows[0]!.ratio)).toBe(true);
    expect(rows[0]!.verdict).toBe('—');
  });

  it('filters figures by a pattern', () => {
    const base = [[{ name: 'a', wallS: 1, cpuS: 1, simulatedSPerWallS: 10 }]];
    const head = [[{ name: 'a', wallS: 2, cpuS: 2, simulatedSPerWallS: 5 }]];
    expect(compareRounds(base, head, /PerWallS$/).map((r) => r.figure)).toEqual(['simulatedSPerWallS']);
  });

  it('formats values for the table', () => {
    expect(formatValue(24)).toBe('24');
    expect(formatValue(1234.5678)).toBe('1235');
    expect(formatValue(0.123456)).toBe('0.1235');
    expect(formatValue(NaN)).toBe('—');
  });
});
