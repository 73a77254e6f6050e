/**
 * Workload benchmarks (`npm run bench`): synthetic routing on the simulator's hot path,
 * synthetic trace generation, aggregate routing, writing and streaming a trace of ≥ 1 GB
 * uncompressed, and the peak RSS of the streaming reader (target < 300 MB).
 *
 * The big trace is written to os.tmpdir() (fast gzip level 1, from a pool of distinct
 * synthetic requests repeated under new ids) and deleted afterwards. The reader runs in a child
 * process so that its peak RSS is its own. Prints nothing; returns one record per figure.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { createGzip } from 'node:zlib';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Rng } from '../sim/kernel/rng.ts';
import { loadProfile } from '../workloads/synthetic/profile.ts';
import { SyntheticModel } from '../workloads/synthetic/model.ts';
import { SyntheticRouting } from '../workloads/synthetic/router.ts';
import { syntheticAggregate } from '../workloads/synthetic/aggregate.ts';
import { generateRequests, type RequestShape } from '../workloads/synthetic/generate.ts';
import { serialiseRequest } from '../workloads/trace/writer.ts';
import { TRACE_FORMAT, TRACE_VERSION } from '../workloads/trace/format.ts';
import { TraceReader } from '../workloads/trace/reader.ts';

type BenchRecord = Record<string, number | string>;

const CHILD_FLAG = '--workloads-read-child';
const TARGET_BYTES = 1.05e9;

export async function workloadBenchmarks(): Promise<BenchRecord[]> {
  const records: BenchRecord[] = [];
  const { profile } = await loadProfile('deepseek-v2-lite');
  const shape = profile.model;
  const model = new SyntheticModel(shape, profile.knobs);
  const routing = new SyntheticRouting(model, 'bench');
  const { moeLayers: L, topK: k } = shape;

  // 1. route(): decode-style calls, one token per (request, layer), 64 live requests.
  {
    const requests = 64;
    const tokens = 256;
    const out = new Int32Array(k);
    const routers = Array.from({ length: requests }, (_, i) =>
      routing.forRequest({ id: i, arrivalNs: 0 as never, promptTokens: 1, outputTokens: tokens }),
    );
    const t0 = performance.now();
    for (let t = 0; t < tokens; t++) for (const r of routers) for (let l = 0; l < L; l++) r.route(l, t, t + 1, out);
    const s = (performance.now() - t0) / 1000;
    const calls = requests * tokens * L;
    records.push({
      name: 'workloads/synthetic-route',
      model: shape.id,
      routeCallsPerS: Math.round(calls / s),
      nsPerCall: Math.round((s * 1e9) / calls),
    });
  }

  // 2. Synthetic trace generation (whole requests, all layers), including per-request setup.
  {
    const shapes: RequestShape[] = Array.from({ length: 200 }, (_, i) => ({
      id: `r${i}`,
      promptTokens: 256,
      prefillRecorded: true,
      tokens: 512,
      outputTokens: 257,
    }));
    const t0 = performance.now();
    let tokens = 0;
    for (const r of generateRequests(routing, shapes)) tokens += r.tokens;
    const s = (performance.now() - t0) / 1000;
    records.push({
      name: 'workloads/synthetic-generate',
      model: shape.id,
      tokensPerS: Math.round(tokens / s),
      tokenLayersPerS: Math.round((tokens * L) / s),
    });
  }

  // 3. Aggregate routing: per-expert counts of a 4096-token batch.
  {
    const t0 = performance.now();
    const agg = syntheticAggregate(model, new Rng('bench-agg'));
    const setupS = (performance.now() - t0) / 1000;
    const out = new Float64Array(shape.experts);
    const n = 20_000;
    const t1 = performance.now();
    for (let i = 0; i < n; i++) agg.counts(i % L, 4096, out);
    const s = (performance.now() - t1) / 1000;
    records.push({
      name: 'workloads/aggregate-counts',
      model: shape.id,
      callsPerS: Math.round(n / s),
      tokensPerCall: 4096,
      setupMs: Math.round(setupS * 1000),
    });
  }

  // 4. Write a ≥ 1 GB (uncompressed) trace, then 5. stream it back in a child process.
  const dir = mkdtempSync(path.join(tmpdir(), 'moesim-bench-'));
  const file = path.join(dir, 'big.jsonl.gz');
  try {
    const poolShapes: RequestShape[] = Array.from({ length: 48 }, (_, i) => ({
      id: `r${i}`,
      promptTokens: 384,
      prefillRecorded: true,
      tokens: 512,
      outputTokens: 129,
    }));
    const pool = [...generateRequests(routing, poolShapes)].map((r) =>
      serialiseRequest(r, L, k).replace(/^\{"id":"[^"]*"/, ''),
    );
    const header = JSON.stringify({
      format: TRACE_FORMAT,
      version: TRACE_VERSION,
      model: { id: shape.id, moeLayers: L, experts: shape.experts, topK: k },
      source: 'moesim bench',
    });
    const t0 = performance.now();
    const fileStream = createWriteStream(file);
    const gz = createGzip({ level: 1, chunkSize: 1 << 20 });
    gz.pipe(fileStream);
    let bytes = 0;
    let lines = 0;
    let tokens = 0;
    const put = async (s: string): Promise<void> => {
      bytes += s.length;
      if (!gz.write(s)) await once(gz, 'drain');
    };
    await put(`${header}\n`);
    while (bytes < TARGET_BYTES) {
      const i = lines % pool.length;
      await put(`{"id":"b${lines}"${pool[i]!}\n`);
      lines++;
      tokens += poolShapes[i]!.tokens;
    }
    const closed = once(fileStream, 'close');
    gz.end();
    await closed;
    const writeS = (performance.now() - t0) / 1000;
    records.push({
      name: 'workloads/trace-write',
      uncompressedBytes: bytes,
      compressedBytes: statSync(file).size,
      requests: lines,
      tokens,
      uncompressedBytesPerS: Math.round(bytes / writeS),
    });

    const child = await runChild(file);
    records.push({
      name: 'workloads/trace-read',
      uncompressedBytes: bytes,
      tokens: child.tokens,
      tokensPerS: Math.round(child.tokens / child.seconds),
      uncompressedBytesPerS: Math.round(bytes / child.seconds),
      peakRssBytes: child.peakRssBytes,
      rssTargetBytes: 300 * 1024 * 1024,
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return records;
}

async function runChild(file: string): Promise<{ tokens: number; seconds: number; peakRssBytes: number }> {
  const self = fileURLToPath(import.meta.url);
  const child = spawn(process.execPath, ['--import', 'tsx', self, CHILD_FLAG, file], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let text = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (text += d));
  const [code] = (await once(child, 'close')) as [number];
  if (code !== 0) throw new Error(`trace-read child exited with ${code}`);
  return JSON.parse(text) as { tokens: number; seconds: number; peakRssBytes: number };
}

/** Child: stream the trace, report tokens, time and this process's peak RSS. */
async function childMain(file: string): Promise<void> {
  const t0 = performance.now();
  let tokens = 0;
  for await (const r of await TraceReader.open(file, { scores: false, predictions: false })) tokens += r.tokens;
  const seconds = (performance.now() - t0) / 1000;
  process.stdout.write(JSON.stringify({ tokens, seconds, peakRssBytes: process.resourceUsage().maxRSS * 1024 }));
}

if (process.argv[2] === CHILD_FLAG && import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  await childMain(process.argv[3]!);
}

export const suite = { name: 'workloads', run: workloadBenchmarks };
