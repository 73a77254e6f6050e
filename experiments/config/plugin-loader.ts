/**
 * Loads policy plugins by path, from anywhere on disk, and checks their definitions before any
 * run starts.
 *
 * Loading: a module in an ES-module scope (`.mts`/`.mjs`, or `.ts`/`.js` under a package.json
 * with `"type": "module"`) is imported natively. Any other `.ts`/`.js` (a folder with no
 * package.json, or a CommonJS package) is loaded through tsx's `tsImport`: a plain `import()`
 * of such a file under tsx on Node ≥ 20.19 fails with "Cannot require() ES Module … in a
 * cycle" (tsx compiles it as CommonJS, Node detects ESM syntax and re-enters require(esm)).
 * Either way the plugin's own imports resolve from the plugin's folder (its project's
 * node_modules). Modules are cached by absolute path, so the runner sees the same definition
 * object the config expansion checked.
 *
 * Checking: the API version, the definition's shape (functions where functions are expected),
 * and the hooks of a created serving policy, each as one line naming the plugin, the field and
 * what was expected (a UserError: exit 2).
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { UserError } from '../../sim/kernel/errors.ts';
import { POLICY_API_VERSION, type PolicyDefinition } from '../../policies/types.ts';
import type { ServingPolicy } from '../../sim/serving/policy.ts';

/** The hooks a serving policy may define (sim/serving/policy.ts): each must be a function when present. */
export const SERVING_HOOKS = [
  'init',
  'onIterationStart',
  'onLayerRouted',
  'onLayerDone',
  'afterUse',
  'onPrefetchDone',
  'chooseVictim',
  'onIterationEnd',
  'onRequestFinished',
] as const;

const cache = new Map<string, Promise<Record<string, unknown>>>();

/** Is `file` an ES module for Node: by extension, else by the nearest package.json's `type`. */
export function isEsmScope(file: string): boolean {
  if (/\.m[jt]s$/.test(file)) return true;
  if (/\.c[jt]s$/.test(file)) return false;
  for (let dir = path.dirname(file); ; dir = path.dirname(dir)) {
    const pkg = path.join(dir, 'package.json');
    if (existsSync(pkg)) {
      try {
        return (JSON.parse(readFileSync(pkg, 'utf8')) as { type?: unknown }).type === 'module';
      } catch {
        return false;
      }
    }
    if (path.dirname(dir) === dir) return false;
  }
}

async function importFresh(abs: string): Promise<Record<string, unknown>> {
  const url = pathToFileURL(abs).href;
  if (isEsmScope(abs)) return (await import(url)) as Record<string, unknown>;
  const { tsImport } = await import('tsx/esm/api');
  const mod = (await tsImport(url, import.meta.url)) as Record<string, unknown>;
  // A CommonJS-compiled module: `default` is its module.exports, which holds the ESM exports.
  const cjs = mod.default as Record<string, unknown> | undefined;
  return cjs && typeof cjs === 'object' && ('default' in cjs || 'policy' in cjs) ? cjs : mod;
}

/** The module at absolute path `abs` (imported once). */
export function importPluginModule(abs: string): Promise<Record<string, unknown>> {
  let p = cache.get(abs);
  if (!p) {
    p = importFresh(abs);
    cache.set(abs, p);
  }
  return p;
}

const isFn = (v: unknown): boolean => typeof v === 'function';

/** Throws the first problem of a plugin's default export as a one-line UserError. */
export function checkPluginDefinition(
  def: unknown,
  entryPath: string,
  file: string | undefined,
  field: string,
): PolicyDefinition<unknown> {
  const shape =
    'a PolicyDefinition { apiVersion, name, family, summary, params (zod), create } (definePolicy from moesim/policy)';
  if (!def || typeof def !== 'object')
    throw new UserError(`policy module must default-export ${shape}`, file, field, entryPath);
  const o = def as Record<string, unknown>;
  if (typeof o.name !== 'string' || o.name === '')
    throw new UserError(`plugin ${entryPath}: 'name' must be a non-empty string`, file, field, o.name);
  const who = `plugin '${o.name}' (${entryPath})`;
  const version = o.apiVersion ?? POLICY_API_VERSION;
  if (version !== POLICY_API_VERSION) {
    throw new UserError(
      `${who}: 'apiVersion' ${String(version)} is not supported by this moesim, which expects apiVersion ${POLICY_API_VERSION}: rebuild the plugin against this moesim`,
      file,
      `${field}.apiVersion`,
      version,
    );
  }
  if (o.family !== 'serving' && o.family !== 'throughput')
    throw new UserError(`${who}: 'family' must be 'serving' or 'throughput'`, file, `${field}.family`, o.family);
  const params = o.params as Record<string, unknown> | undefined;
  if (!params || !isFn(params.safeParse) || !isFn(params.parse))
    throw new UserError(
      `${who}: 'params' must be a zod schema (z.object({...}))`,
      file,
      `${field}.params`,
      typeof params,
    );
  for (const k of ['create', 'createThroughput', 'bufferSlots'] as const) {
    if (k === 'create' ? !isFn(o[k]) : o[k] !== undefined && !isFn(o[k])) {
      throw new UserError(`${who}: '${k}' must be a function`, file, `${field}.${k}`, typeof o[k]);
    }
  }
  return def as PolicyDefinition<unknown>;
}

/**
 * The line of an import failure that says what is wrong: for a syntax error, the compiler's
 * `file:line:column: ERROR: message` line (its first line is only "Transform failed with 1 error:").
 */
function loadFailure(err: unknown): string {
  const first = (
    err as { errors?: { text?: string; location?: { file?: string; line?: number; column?: number } | null }[] }
  ).errors?.[0];
  if (first?.text)
    return first.location
      ? `${first.location.file}:${first.location.line}:${first.location.column}: ${first.text}`
      : first.text;
  const lines = (err instanceof Error ? err.message : String(err))
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.length > 0);
  return lines.find((l) => /:\d+:\d+: ERROR: /.test(l)) ?? lines[0] ?? 'unknown error';
}

/** Imports and checks the plugin at `entryPath` (relative to `baseDir`). */
export async function loadPlugin(
  entryPath: string,
  baseDir: string,
  file: string | undefined,
  field: string,
): Promise<PolicyDefinition<unknown>> {
  const abs = path.resolve(baseDir, entryPath);
  if (!existsSync(abs)) throw new UserError('policy module not found', file, field, entryPath);
  let mod: Record<string, unknown>;
  try {
    mod = await importPluginModule(abs);
  } catch (err) {
    cache.delete(abs);
    throw new UserError(`policy module failed to load: ${loadFailure(err)}`, file, field, entryPath);
  }
  return checkPluginDefinition(mod.default ?? mod.policy, entryPath, file, field);
}

/** Checks a created serving policy's hooks: present hooks must be functions. */
export function checkServingHooks(p: ServingPolicy, plugin: string, file: string): ServingPolicy {
  if (!p || typeof p !== 'object')
    throw new UserError(`plugin '${plugin}': create() must return a serving policy object`, file, 'create', typeof p);
  const o = p as unknown as Record<string, unknown>;
  for (const h of SERVING_HOOKS) {
    if (o[h] !== undefined && !isFn(o[h]))
      throw new UserError(`plugin '${plugin}': hook '${h}' must be a function`, file, h, typeof o[h]);
  }
  if (o.queueJump !== undefined && typeof o.queueJump !== 'boolean')
    throw new UserError(`plugin '${plugin}': 'queueJump' must be a boolean`, file, 'queueJump', o.queueJump);
  return p;
}
