#!/usr/bin/env node
/**
 * The `moesim` executable: runs the command line (`program.ts`) on this process's arguments and
 * exits with its code (2 bad input, 3 a plugin's fault, 1 a bug in moesim).
 */
import { hideBin } from 'yargs/helpers';
import { main } from './program.ts';

const code = await main(hideBin(process.argv));
process.exitCode = code;
