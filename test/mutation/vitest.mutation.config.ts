/**
 * The vitest config a mutation run uses: the project's config with `include` replaced by the
 * tests that guard the folder being mutated (MOESIM_MUTATION_TESTS, a JSON list of globs, set
 * by test/mutation/run.ts).
 */
import { defineConfig } from 'vitest/config';
import base from '../../vitest.config.ts';

const raw = process.env.MOESIM_MUTATION_TESTS;
const include: string[] = raw ? (JSON.parse(raw) as string[]) : ['test/**/*.test.ts'];

export default defineConfig({ ...base, test: { ...base.test, include } });
