// Entry of the throwaway thread that imports a plugin module before the run does (see
// sandbox.ts `probeImport`): registers tsx (a thread starts without the parent's loader),
// imports the module, and says it is done. A load error is posted too: the real import reports it.
import { register } from 'tsx/esm/api';
import { parentPort, workerData } from 'node:worker_threads';
import { pathToFileURL } from 'node:url';

register();
// The loader and the plugin API are loaded before the clock starts: the budget times the plugin's own import.
await import('../../policies/types.ts');
parentPort.postMessage('ready');
try {
  await import(pathToFileURL(workerData.file).href);
} catch {
  // reported by the real import
}
parentPort.postMessage('done');
