/**
 * `moesim new policy <name> --project <dir>`: a standalone policy-plugin project with moesim as
 * a dependency (the route docs/PLUGINS.md leads with). Writes, under `<dir>`:
 * - `package.json`: `"type": "module"`, moesim as a dependency (`--moesim <spec>`: a path, a
 *   tarball, a git URL or a version; default: this moesim's folder), vitest and typescript;
 * - `tsconfig.json` and `vitest.config.ts` (vitest transforms moesim's TypeScript sources:
 *   moesim ships .ts run by tsx, so it is inlined rather than loaded by Node);
 * - `src/<name>.ts`: the policy, importing only `moesim/policy`;
 * - `<name>.yaml`: an experiment running it next to built-in baselines (`npx moesim experiment <name>.yaml`);
 * - `test/<name>.test.ts`: a vitest file using `moesim/testing` (`npm test`).
 * The policy, config and test texts are the in-checkout scaffold's (new.ts) with package
 * imports. Nothing is overwritten: an existing file is an error (exit 2).
 */
import path from 'node:path';
import { servingConfig, servingPlugin, testFile, throughputConfig, throughputPlugin, type Hint } from './new.ts';

/** Versions the generated project's dev tools start from: moesim's own (package.json devDependencies). */
const VITEST = '^4.1.12';
const TYPESCRIPT = '^5.9.3';
const TYPES_NODE = '^20.19.43';

/** `--moesim` as a package.json dependency value: local paths (folder or .tgz) become `file:<absolute path>`. */
export function moesimDependency(spec: string): string {
  if (/^(file:|git\+|git:|github:|https?:|\^|~|\d)/.test(spec)) return spec;
  return `file:${path.resolve(spec)}`;
}

export interface ProjectScaffold {
  readonly files: Record<string, string>;
  readonly config: string;
  readonly test: string;
}

/** The files of a standalone plugin project at `root`. */
export function projectScaffold(
  name: string,
  family: 'serving' | 'throughput',
  root: string,
  moesim: string,
): ProjectScaffold {
  const hint: Hint = {
    run: `Run it: \`npx moesim experiment ${name}.yaml\`. Test it: \`npm test\`.`,
    runConfig: `Run: npx moesim experiment ${name}.yaml`,
    pluginPath: `./src/${name}.ts`,
  };
  const api = (rel: string): string => (rel === 'api/testing.ts' ? 'moesim/testing' : 'moesim/policy');
  const serving = family === 'serving';
  const pkg = {
    name,
    version: '0.1.0',
    private: true,
    type: 'module',
    description: `${name}: a moesim policy plugin`,
    scripts: { experiment: 'moesim experiment', test: 'vitest run', typecheck: 'tsc --noEmit' },
    dependencies: { moesim: moesimDependency(moesim) },
    devDependencies: { '@types/node': TYPES_NODE, typescript: TYPESCRIPT, vitest: VITEST },
    engines: { node: '>=20.19' },
  };
  const tsconfig = {
    compilerOptions: {
      target: 'ES2022',
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      strict: true,
      noEmit: true,
      allowImportingTsExtensions: true,
      skipLibCheck: true,
      types: ['node'],
    },
    include: ['src', 'test'],
  };
  const vitestConfig = `// moesim ships TypeScript sources (run by tsx): vitest must transform them, not hand them to Node.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: { server: { deps: { inline: ['moesim'] } }, testTimeout: 60_000 },
});
`;
  const j = (o: unknown): string => `${JSON.stringify(o, null, 2)}\n`;
  const testPath = path.join(root, 'test', `${name}.test.ts`);
  const files: Record<string, string> = {
    [path.join(root, 'package.json')]: j(pkg),
    [path.join(root, 'tsconfig.json')]: j(tsconfig),
    [path.join(root, 'vitest.config.ts')]: vitestConfig,
    [path.join(root, '.gitignore')]: 'node_modules/\nresults/\n',
    [path.join(root, 'src', `${name}.ts`)]: serving
      ? servingPlugin(name, api, hint)
      : throughputPlugin(name, api, hint),
    [path.join(root, `${name}.yaml`)]: serving ? servingConfig(name, hint) : throughputConfig(name, hint),
    [testPath]: testFile(name, family, `../src/${name}.ts`, api),
  };
  return { files, config: path.join(root, `${name}.yaml`), test: testPath };
}
