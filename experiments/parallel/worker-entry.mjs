// Entry of a pool worker thread. A worker thread starts without the TypeScript loader of the
// process that made it (tsx in `bin/moesim.mjs`, vite under vitest), so it registers tsx itself,
// then loads the task module.
import { register } from 'tsx/esm/api';

register();
const { runTask } = await import('./task.ts');

export default runTask;
