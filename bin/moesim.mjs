#!/usr/bin/env -S node --max-semi-space-size=64
// The `moesim` bin: runs the TypeScript CLI through tsx (no build step), with V8's larger
// semi-spaces (experiments/heap.ts).
import { register } from 'tsx/esm/api';

register();
await import('../experiments/cli/main.ts');
