/**
 * Hold-out validation of the trace calibrator on a real per-request trace: fit a profile to
 * the even-numbered requests (`trace calibrate` with a request filter), route the odd-numbered
 * requests' shapes with it, and compare the odd half's real LRU and Belady curves with the
 * twin's, in points per cache size. It answers "does a profile fitted to my traffic predict
 * what N slots per layer buy on traffic it has not seen?".
 *
 * Run: npx tsx workloads/stats/holdout.ts <trace> [--sizes 6,12,24] [--reset never|request]
 *        [--no-shared] [--evals 30] [--out result.json]   (a bad option: one line naming it, exit 2)
 */
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { UserError } from '../../sim/kernel/errors.ts';
import { calibrateTrace } from '../synthetic/calibrate.ts';
import type { Profile } from '../synthetic/profile.ts';
import { loadCacheTrace, twinTrace } from './cache-tools.ts';
import { cacheReport, defaultSizes, type CacheReset, type CacheTrace, type Curve } from './cache-curves.ts';

export interface HoldoutOptions {
  readonly sizes?: readonly number[];
  readonly reset?: CacheReset;
  /** Fit the adjacent tokens' shared fraction too (default true). */
  readonly sharedFraction?: boolean;
  readonly maxEvaluations?: number;
  readonly log?: (m: string) => void;
}

export interface HoldoutResult {
  readonly sizes: number[];
  readonly reset: CacheReset;
  readonly real: Curve & { nextTokenReuse: number };
  readonly twin: Curve & { nextTokenReuse: number };
  /** twin − real, percentage points, per size. */
  readonly lruErrorPoints: number[];
  readonly beladyErrorPoints: number[];
  readonly profile: Profile;
}

export async function holdout(path: string, o: HoldoutOptions = {}): Promise<HoldoutResult> {
  const fit = await calibrateTrace(path, {
    name: 'holdout-even',
    select: (i) => i % 2 === 0,
    sharedFraction: o.sharedFraction ?? true,
    ...(o.maxEvaluations !== undefined ? { maxEvaluations: o.maxEvaluations } : {}),
    ...(o.log ? { log: o.log } : {}),
  });
  const all = await loadCacheTrace(path);
  const oddIdx = all.requests.map((_, i) => i).filter((i) => i % 2 === 1);
  const real: CacheTrace = { L: all.L, E: all.E, k: all.k, requests: oddIdx.map((i) => all.requests[i]!) };
  const twin = twinTrace(
    fit.profile,
    oddIdx.map((i) => all.shapes[i]!),
  );
  const sizes = [...(o.sizes ?? defaultSizes(all.E, all.k))];
  const reset = o.reset ?? 'never';
  const opts = { sizes, reset, shuffled: false, groups: 1 } as const;
  const rr = cacheReport(real, opts);
  const tr = cacheReport(twin, opts);
  const pts = (a: number[], b: number[]): number[] => a.map((x, i) => Math.round(1000 * (x - b[i]!)) / 10);
  return {
    sizes: rr.sizes,
    reset,
    real: { ...rr.all, nextTokenReuse: rr.nextTokenReuse },
    twin: { ...tr.all, nextTokenReuse: tr.nextTokenReuse },
    lruErrorPoints: pts(tr.all.lru, rr.all.lru),
    beladyErrorPoints: pts(tr.all.belady, rr.all.belady),
    profile: fit.profile,
  };
}

export function formatHoldout(h: HoldoutResult): string {
  const p = (x: number): string => (100 * x).toFixed(1);
  const lines = [
    `hold-out (fit: even requests, predict: odd), caches ${h.reset === 'never' ? 'kept across requests' : 'emptied per request'}`,
    `next-token shared fraction: real ${h.real.nextTokenReuse.toFixed(3)}, twin ${h.twin.nextTokenReuse.toFixed(3)}`,
    'size  LRU real  twin   err | Belady real  twin   err',
  ];
  h.sizes.forEach((s, i) => {
    lines.push(
      `${String(s).padStart(4)}  ${p(h.real.lru[i]!).padStart(8)} ${p(h.twin.lru[i]!).padStart(5)} ${h.lruErrorPoints[i]!.toFixed(1).padStart(5)} |` +
        ` ${p(h.real.belady[i]!).padStart(11)} ${p(h.twin.belady[i]!).padStart(5)} ${h.beladyErrorPoints[i]!.toFixed(1).padStart(5)}`,
    );
  });
  return lines.join('\n');
}

/** The command line's options, checked: a bad one is a UserError naming the flag and the value. */
export function parseHoldoutArgs(args: readonly string[]): { trace: string; o: HoldoutOptions; out?: string } {
  const opt = (name: string): string | undefined => {
    const i = args.indexOf(name);
    if (i >= 0 && (i + 1 >= args.length || args[i + 1]!.startsWith('--')))
      throw new UserError('needs a value', undefined, name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const trace = args[0];
  if (trace === undefined || trace.startsWith('--'))
    throw new UserError('a trace file is required', undefined, 'trace');
  if (!existsSync(trace)) throw new UserError('no such file', undefined, 'trace', trace);
  const posInt = (name: string, v: string): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) throw new UserError('must be a positive integer', undefined, name, v);
    return n;
  };
  const sizesArg = opt('--sizes');
  const sizes = sizesArg?.split(',').map((x) => posInt('--sizes', x));
  const reset = opt('--reset') ?? 'never';
  if (reset !== 'never' && reset !== 'request')
    throw new UserError('must be never or request', undefined, '--reset', reset);
  const evals = opt('--evals');
  const out = opt('--out');
  return {
    trace,
    o: {
      ...(sizes ? { sizes } : {}),
      reset,
      sharedFraction: !args.includes('--no-shared'),
      ...(evals !== undefined ? { maxEvaluations: posInt('--evals', evals) } : {}),
    },
    ...(out !== undefined ? { out } : {}),
  };
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) {
  let parsed: ReturnType<typeof parseHoldoutArgs>;
  try {
    parsed = parseHoldoutArgs(process.argv.slice(2));
  } catch (e) {
    if (!(e instanceof UserError)) throw e;
    process.stderr.write(`holdout: ${e.oneLine()}\n`);
    process.exit(2);
  }
  const h = await holdout(parsed.trace, { ...parsed.o, log: (m) => process.stderr.write(m + '\n') });
  console.log(formatHoldout(h));
  console.log('knobs ' + JSON.stringify({ ...h.profile.knobs, popularity: undefined }));
  if (parsed.out) await writeFile(parsed.out, JSON.stringify(h, null, 1));
}
