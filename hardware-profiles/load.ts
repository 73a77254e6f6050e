/**
 * Loading profiles: JSON file → zod validation → resolved, frozen runtime object
 * (`types.ts`), cached per absolute path.
 *
 * An argument ending in `.json` is a path (relative to the current directory); anything else
 * is an id looked up in this folder (`models/<id>.json`, `testbeds/<id>.json`, ...), which is
 * found relative to this module, not the current directory. A testbed names its GPU, CPU
 * and PCIe link by id (or by a `.json` path relative to the testbed file).
 *
 * Every failure is a `UserError` naming the file, the field path (dot notation, e.g.
 * `attention.kvHeads`, `moeLayerIndices.3`) and the offending value.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { z } from 'zod';
import { parse as parseYaml } from 'yaml';
import { UserError } from '../sim/kernel/errors.ts';
import { defaultDetails, deriveModel, type ModelArchitectureDetails } from './derive.ts';
import {
  CpuFileSchema,
  DriveFileSchema,
  GpuFileSchema,
  ModelFileSchema,
  PcieFileSchema,
  RuntimeFileSchema,
  TestbedFileSchema,
  type CpuFile,
  type DriveFile,
  type GpuFile,
  type ModelFile,
  type PcieFile,
  type RuntimeFile,
  type TestbedFile,
} from './schema.ts';
import type {
  CpuProfile,
  DriveProfile,
  GpuProfile,
  HardwareProfile,
  ModelProfile,
  PcieProfile,
  RuntimeProfile,
} from './types.ts';

/** The folder holding `models/`, `gpus/`, `cpus/`, `pcie/`, `testbeds/`. */
export const PROFILES_DIR: string = fileURLToPath(new URL('.', import.meta.url));

const GIB = 2 ** 30;

/** A loaded model profile: a `ModelProfile` plus the details `deriveModel` needs to re-derive it. */
export interface LoadedModelProfile extends ModelProfile {
  readonly details: ModelArchitectureDetails;
  readonly notes?: string;
}

type Kind = 'model' | 'gpu' | 'cpu' | 'pcie' | 'drive' | 'hardware' | 'runtime';
const FOLDER: Record<Kind, string> = {
  model: 'models',
  gpu: 'gpus',
  cpu: 'cpus',
  pcie: 'pcie',
  drive: 'drives',
  hardware: 'testbeds',
  runtime: 'runtimes',
};

/** A path (not an id): a `.json` file, or a `.yaml`/`.yml` testbed a user wrote (`moesim hardware new`). */
export const isProfilePath = (ref: string): boolean => /\.(json|ya?ml)$/.test(ref);

// ---------------------------------------------------------------------------------------
// Listing
// ---------------------------------------------------------------------------------------

function listIds(kind: Kind): string[] {
  let names: string[];
  try {
    names = readdirSync(resolve(PROFILES_DIR, FOLDER[kind]));
  } catch {
    return [];
  }
  return names
    .filter((n) => n.endsWith('.json'))
    .map((n) => n.slice(0, -'.json'.length))
    .sort();
}

/** Ids of the shipped model profiles, sorted. */
export const listModels = (): string[] => listIds('model');
/** Ids of the shipped testbeds (what `loadHardware` accepts), sorted. */
export const listHardware = (): string[] => listIds('hardware');
/** Ids of the shipped GPU profiles, sorted. */
export const listGpus = (): string[] => listIds('gpu');
/** Ids of the shipped CPU profiles, sorted. */
export const listCpus = (): string[] => listIds('cpu');
/** Ids of the shipped PCIe link profiles, sorted. */
export const listPcie = (): string[] => listIds('pcie');
/** Ids of the shipped NVMe drive profiles, sorted. */
export const listDrives = (): string[] => listIds('drive');
/** Ids of the shipped runtime profiles, sorted. */
export const listRuntimes = (): string[] => listIds('runtime');

// ---------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------

/** Validated file contents by absolute path, and resolved profiles by kind + path. */
const cache = new Map<string, unknown>();
const resolved = new Map<string, unknown>();

/** Forgets every parsed file (tests that rewrite a file in place need it). */
export function clearProfileCache(): void {
  cache.clear();
  resolved.clear();
}

/**
 * Resolves `idOrPath` to an absolute file path: `.json` → path relative to `baseDir`;
 * otherwise `<folder>/<id>.json`, which must exist.
 * @throws UserError for an unknown id, listing the known ones.
 */
function locate(
  kind: Kind,
  idOrPath: string,
  baseDir: string,
  file?: string,
  field: string = kind,
): { path: string; byId: boolean } {
  if (isProfilePath(idOrPath)) return { path: resolve(baseDir, idOrPath), byId: false };
  const known = listIds(kind);
  if (!known.includes(idOrPath)) {
    throw new UserError(
      `unknown ${kind === 'hardware' ? 'hardware profile' : kind} (known: ${known.join(', ')})`,
      file,
      field,
      idOrPath,
    );
  }
  return { path: resolve(PROFILES_DIR, FOLDER[kind], `${idOrPath}.json`), byId: true };
}

/** Reads, parses and validates one file; the result is cached by path. */
function readValidated<S extends z.ZodType>(schema: S, file: string, byId: boolean): z.output<S> {
  const hit = cache.get(file);
  if (hit !== undefined) return hit as z.output<S>;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new UserError(`cannot read file: ${(e as NodeJS.ErrnoException).code ?? String(e)}`, file);
  }
  let raw: unknown;
  const yaml = /\.ya?ml$/.test(file);
  try {
    raw = yaml ? parseYaml(text) : JSON.parse(text);
  } catch (e) {
    throw new UserError(`invalid ${yaml ? 'YAML' : 'JSON'}: ${(e as Error).message}`, file);
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    const issues = parsed.error.issues;
    const first = issues[0];
    // An unknown key is reported on its parent object; point at the key itself.
    const at = first ? [...first.path, ...(first.code === 'unrecognized_keys' ? first.keys.slice(0, 1) : [])] : [];
    const fieldPath = at.map(String).join('.');
    const more = issues.length > 1 ? ` (and ${issues.length - 1} more problem${issues.length > 2 ? 's' : ''})` : '';
    throw new UserError(
      `${first?.message ?? 'invalid profile'}${more}`,
      file,
      fieldPath || undefined,
      valueAt(raw, at),
    );
  }
  const data = parsed.data as { id?: unknown };
  if (byId && data.id !== basename(file, '.json')) {
    throw new UserError(`id must match the file name "${basename(file, '.json')}"`, file, 'id', data.id);
  }
  cache.set(file, parsed.data);
  return parsed.data;
}

function valueAt(raw: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = raw;
  for (const k of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[k];
  }
  return v;
}

function deepFreeze<T>(o: T): T {
  if (o !== null && typeof o === 'object' && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o)) deepFreeze(v);
  }
  return o;
}

function memo<T>(key: string, build: () => T): T {
  const hit = resolved.get(key);
  if (hit !== undefined) return hit as T;
  const value = deepFreeze(build());
  resolved.set(key, value);
  return value;
}

// ---------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------

/** Resolves a validated model file into a profile with derived quantities. */
export function resolveModel(f: ModelFile): LoadedModelProfile {
  let moeLayerIndices: number[];
  if (f.moeLayerIndices !== undefined) moeLayerIndices = [...f.moeLayerIndices];
  else {
    const first = f.firstDenseLayers ?? 0;
    moeLayerIndices = Array.from({ length: f.layers - first }, (_, k) => first + k);
  }
  const details: ModelArchitectureDetails = {
    ...defaultDetails(f),
    encoderLayers: f.encoderLayers ?? 0,
    decoderLayers: f.arch === 'encoder-decoder' ? (f.decoderLayers ?? f.layers) : f.layers,
    normsPerLayer: f.normsPerLayer,
    normBias: f.normBias,
    ffnBias: f.ffnBias,
    sharedExpertGate: f.sharedExpertGate,
    qkvBias: f.attention.qkvBias,
    outBias: f.attention.outBias,
    qkNorm: f.attention.qkNorm,
    lmHeadBias: f.lmHeadBias,
  };
  const a = f.attention;
  const attention: ModelProfile['attention'] = {
    type: a.type,
    heads: a.heads,
    kvHeads: a.kvHeads,
    headDim: a.headDim,
    ...(a.kvLoraRank !== undefined && { kvLoraRank: a.kvLoraRank }),
    ...(a.qLoraRank !== undefined && { qLoraRank: a.qLoraRank }),
    ...(a.ropeHeadDim !== undefined && { ropeHeadDim: a.ropeHeadDim }),
    ...(a.vHeadDim !== undefined && { vHeadDim: a.vHeadDim }),
    ...(a.outputGate !== undefined && { outputGate: a.outputGate }),
  };
  const base = {
    id: f.id,
    name: f.name,
    arch: f.arch,
    layers: f.layers,
    moeLayers: f.moeLayers,
    moeLayerIndices,
    hiddenSize: f.hiddenSize,
    expertIntermediateSize: f.expertIntermediateSize,
    experts: f.experts,
    topK: f.topK,
    sharedExperts: f.sharedExperts,
    sharedIntermediateSize: f.sharedIntermediateSize,
    denseIntermediateSize: f.denseIntermediateSize,
    ffnMatrices: f.ffnMatrices,
    attention,
    ...(f.linearAttention !== undefined && { linearAttention: { ...f.linearAttention } }),
    vocabSize: f.vocabSize,
    tiedEmbeddings: f.tiedEmbeddings,
    dtypes: { ...f.dtypes },
    sources: [...f.sources],
    details,
    ...(f.notes !== undefined && { notes: f.notes }),
  };
  return { ...base, derived: deriveModel(base) };
}

/**
 * Loads a model profile by id (`mixtral-8x7b`) or by path (`./my-model.json`). Cached and
 * deeply frozen: callers share one object.
 * @throws UserError (unknown id with the known ids; unreadable file; invalid field with its path and value)
 */
export function loadModel(idOrPath: string): LoadedModelProfile {
  const { path, byId } = locate('model', idOrPath, process.cwd());
  return memo(`model:${path}`, () => withinRange(resolveModel(readValidated(ModelFileSchema, path, byId)), path));
}

/** The most weight bytes a model may have: 1 PiB, as the largest memory (byte counts stay exact sums). */
const MAX_MODEL_BYTES = 2 ** 50;

/** `m`, unless its weights exceed `MAX_MODEL_BYTES` (each width is in range, their product need not be). */
function withinRange(m: LoadedModelProfile, file: string): LoadedModelProfile {
  const bytes = m.derived.totalBytes;
  if (!(bytes <= MAX_MODEL_BYTES)) {
    throw new UserError(
      `the weights come to ${bytes.toPrecision(3)} B, more than the 1 PiB (2^50 B) the simulator counts exactly: check hiddenSize, expertIntermediateSize, experts and layers`,
      file,
    );
  }
  return m;
}

// ---------------------------------------------------------------------------------------
// Hardware components
// ---------------------------------------------------------------------------------------

/** Resolves a validated GPU file (GiB → bytes, GB/s → B/s, TFLOP/s → FLOP/s, µs → ns). */
export function resolveGpu(f: GpuFile): GpuProfile {
  const measured =
    f.measured &&
    Object.fromEntries(
      Object.entries(f.measured).map(([k, t]) => [
        k,
        t.pointsTokensUs.map(([tokens, us]) => [tokens, us * 1e3] as const),
      ]),
    );
  return {
    id: f.id,
    name: f.name,
    vramBytes: Math.round(f.vramGiB * GIB),
    hbmBytesPerSec: f.hbmGBPerSec * 1e9,
    bf16FlopsPerSec: f.bf16DenseTflops * 1e12,
    ...(f.fp32DenseTflops !== undefined && { fp32FlopsPerSec: f.fp32DenseTflops * 1e12 }),
    kernelLaunchNs: Math.round(f.kernelLaunchUs * 1e3),
    gemmEfficiency: { ...f.gemmEfficiency },
    hbmEfficiency: f.hbmEfficiency,
    ...(measured && { measured }),
    ...(f.priceUsd !== undefined && { priceUsd: f.priceUsd }),
    ...(f.tdpWatts !== undefined && { tdpWatts: f.tdpWatts }),
    sources: [...f.sources],
  };
}

/** Resolves a validated CPU file: vector FLOP/s per core = FLOPs/cycle × sustained clock; DRAM = channels × MT/s × 8 B × efficiency. */
export function resolveCpu(f: CpuFile): CpuProfile {
  return {
    id: f.id,
    name: f.name,
    cores: f.cores,
    vectorFlopsPerSecPerCore: f.vectorFlopsPerCyclePerCore * f.sustainedClockGHz * 1e9,
    vectorEfficiency: f.vectorEfficiency,
    memoryChannels: f.memoryChannels,
    dramBytesPerSec: f.memoryChannels * f.memoryMegaTransfersPerSec * 1e6 * 8 * f.dramEfficiency,
    perCoreDramBytesPerSec: f.perCoreDramGBPerSec * 1e9,
    dramPeakBytesPerSec: f.memoryChannels * f.memoryMegaTransfersPerSec * 1e6 * 8,
    ...(f.isa !== undefined && { isa: [...f.isa] }),
    ...(f.priceUsd !== undefined && { priceUsd: f.priceUsd }),
    ...(f.tdpWatts !== undefined && { tdpWatts: f.tdpWatts }),
    sources: [...f.sources],
  };
}

/** Resolves a validated PCIe file (GB/s → B/s, µs → ns). */
export function resolvePcie(f: PcieFile): PcieProfile {
  return {
    id: f.id,
    generation: f.generation,
    lanes: f.lanes,
    h2dBytesPerSec: f.h2dGBPerSec * 1e9,
    d2hBytesPerSec: f.d2hGBPerSec * 1e9,
    latencyNs: Math.round(f.latencyUs * 1e3),
    pageableFactor: f.pageableFactor,
    sources: [...f.sources],
  };
}

/** Resolves a validated drive file (GB/s → B/s, µs → ns, GB → B). */
export function resolveDrive(f: DriveFile): DriveProfile {
  return {
    id: f.id,
    name: f.name,
    seqReadBytesPerSec: f.seqReadGBPerSec * 1e9,
    readLatencyNsByQueueDepth: f.readLatencyUsByQueueDepth.map(([qd, us]) => [qd, Math.round(us * 1e3)] as const),
    readGranularityBytes: Math.round(f.readGranularityKiB * 1024),
    capacityBytes: f.capacityGB * 1e9,
    sources: [...f.sources],
  };
}

function loadComponent<T>(
  kind: 'gpu' | 'cpu' | 'pcie' | 'drive',
  idOrPath: string,
  baseDir: string,
  referrer?: string,
): T {
  const { path, byId } = locate(kind, idOrPath, baseDir, referrer, kind);
  switch (kind) {
    case 'gpu':
      return memo(`gpu:${path}`, () => resolveGpu(readValidated(GpuFileSchema, path, byId))) as T;
    case 'cpu':
      return memo(`cpu:${path}`, () => resolveCpu(readValidated(CpuFileSchema, path, byId))) as T;
    case 'pcie':
      return memo(`pcie:${path}`, () => resolvePcie(readValidated(PcieFileSchema, path, byId))) as T;
    case 'drive':
      return memo(`drive:${path}`, () => resolveDrive(readValidated(DriveFileSchema, path, byId))) as T;
  }
}

/** Loads a GPU profile by id or `.json` path. @throws UserError */
export const loadGpu = (idOrPath: string): GpuProfile => loadComponent<GpuProfile>('gpu', idOrPath, process.cwd());
/** Loads a CPU profile by id or `.json` path. @throws UserError */
export const loadCpu = (idOrPath: string): CpuProfile => loadComponent<CpuProfile>('cpu', idOrPath, process.cwd());
/** Loads an NVMe drive profile by id or `.json` path. @throws UserError */
export const loadDrive = (idOrPath: string): DriveProfile =>
  loadComponent<DriveProfile>('drive', idOrPath, process.cwd());
/** Loads a PCIe link profile by id or `.json` path. @throws UserError */
export const loadPcie = (idOrPath: string): PcieProfile => loadComponent<PcieProfile>('pcie', idOrPath, process.cwd());

// ---------------------------------------------------------------------------------------
// Testbeds
// ---------------------------------------------------------------------------------------

/** The validated testbed file of a hardware profile, with its notes (for reports). */
export function resolveTestbed(f: TestbedFile, path: string): HardwareProfile & { readonly notes?: string } {
  const dir = dirname(path);
  const cpu = loadComponent<CpuProfile>('cpu', f.cpu, dir, path);
  return {
    id: f.id,
    name: f.name,
    gpu: loadComponent<GpuProfile>('gpu', f.gpu, dir, path),
    cpu:
      f.dram === undefined
        ? cpu
        : withDram(cpu, f.dram, readValidated(CpuFileSchema, locate('cpu', f.cpu, dir, path).path, false)),
    pcie: loadComponent<PcieProfile>('pcie', f.pcie, dir, path),
    hostDramBytes: Math.round(f.hostDramGiB * GIB),
    pinnedHostMemory: f.pinnedHostMemory,
    ...(f.drive !== undefined && { drive: loadComponent<DriveProfile>('drive', f.drive, dir, path) }),
    cost: { ...f.cost },
    sources: [...f.sources],
    ...(f.notes !== undefined && { notes: f.notes }),
  };
}

/** The CPU with a testbed's own DIMMs: channels × MT/s × 8 B, at the given or the CPU's sustained fraction. */
function withDram(cpu: CpuProfile, dram: NonNullable<TestbedFile['dram']>, file: CpuFile): CpuProfile {
  const peak = dram.channels * dram.megaTransfersPerSec * 1e6 * 8;
  return {
    ...cpu,
    memoryChannels: dram.channels,
    dramPeakBytesPerSec: peak,
    dramBytesPerSec: peak * (dram.efficiency ?? file.dramEfficiency),
  };
}

/**
 * Loads a testbed (hardware profile) by id (`a5000-pcie4-1tb`) or by path, resolving its GPU,
 * CPU and PCIe references. Cached and deeply frozen.
 * @throws UserError (unknown testbed or component id, unreadable file, invalid field)
 */
export function loadHardware(idOrPath: string): HardwareProfile & { readonly notes?: string } {
  const { path, byId } = locate('hardware', idOrPath, process.cwd());
  return memo(`hardware:${path}`, () => resolveTestbed(readValidated(TestbedFileSchema, path, byId), path));
}

// ---------------------------------------------------------------------------------------
// Runtimes
// ---------------------------------------------------------------------------------------

/** The runtime a config gets when it names none: today's fused-kernel roofline. */
export const DEFAULT_RUNTIME = 'fused';

/** Resolves a validated runtime file (µs → ns). */
export function resolveRuntime(f: RuntimeFile): RuntimeProfile {
  return {
    id: f.id,
    name: f.name,
    dispatchNs: f.dispatchUs === null ? null : f.dispatchUs * 1e3,
    syncNs: f.syncUs * 1e3,
    modules: Object.fromEntries(
      Object.entries(f.modules).map(([k, w]) => [k, { ops: w.ops, syncs: w.syncs }]),
    ) as RuntimeProfile['modules'],
    expertLoop: f.expertLoop,
    expertOrder: f.expertOrder,
    attention: f.attention,
    ...(f.gemmEfficiency && { gemmEfficiency: { ...f.gemmEfficiency } }),
    cpuAttention: { ...f.cpuAttention },
    ...(f.hostExperts && {
      hostExperts: {
        kernels: f.hostExperts.kernels,
        layerSyncNs: f.hostExperts.layerSyncUs * 1e3,
        overlap: f.hostExperts.overlap,
        zeroCopyEfficiency: f.hostExperts.zeroCopyEfficiency,
        source: f.hostExperts.source,
      },
    }),
    calibration: f.calibration.map((c) => ({ ...c })),
    sources: [...f.sources],
  };
}

/**
 * Loads a runtime profile by id (`hf-eager`) or `.json` path (relative to `baseDir`, default
 * the current directory). Cached and deeply frozen.
 * @throws UserError (unknown id with the known ones; invalid field with its path and value)
 */
export function loadRuntime(idOrPath: string = DEFAULT_RUNTIME, baseDir: string = process.cwd()): RuntimeProfile {
  const { path, byId } = locate('runtime', idOrPath, baseDir);
  return memo(`runtime:${path}`, () => resolveRuntime(readValidated(RuntimeFileSchema, path, byId)));
}
