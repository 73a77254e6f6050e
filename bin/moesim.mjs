#!/usr/bin/env node
// The `moesim` bin: runs the TypeScript CLI through tsx (no build step).
import { register } from 'tsx/esm/api';

register();
await import('../experiments/cli/main.ts');
