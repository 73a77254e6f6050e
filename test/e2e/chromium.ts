/**
 * Headless Chromium for the report's browser test (not a test file): Debian's `chromium` package
 * at /usr/bin/chromium, or the binary named by `MOESIM_CHROMIUM`. Driven through its command line
 * (`--dump-dom`, `--screenshot`), with the flags it needs as root in a container without network,
 * and a fresh profile per call.
 */
import { spawn } from 'node:child_process';
import { accessSync, constants, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

/** The Chromium binary, or why there is none (one line, for a skipped test). */
export function findChromium(): { bin: string } | { missing: string } {
  const bin = process.env.MOESIM_CHROMIUM || '/usr/bin/chromium';
  try {
    accessSync(bin, constants.X_OK);
    return { bin };
  } catch {
    return {
      missing: `no Chromium at ${bin} (install Debian's chromium package, or set MOESIM_CHROMIUM to a Chromium binary)`,
    };
  }
}

const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-dev-shm-usage',
  '--hide-scrollbars',
];

/** Runs Chromium on a local HTML file with `extra` flags; resolves with its stdout. */
function run(bin: string, file: string, extra: readonly string[], timeoutMs: number): Promise<string> {
  const profile = mkdtempSync(path.join(tmpdir(), 'moesim-chromium-'));
  return new Promise<string>((resolve, reject) => {
    const child = spawn(bin, [...FLAGS, `--user-data-dir=${profile}`, ...extra, pathToFileURL(file).href], {
      timeout: timeoutMs,
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (code === 0) resolve(stdout);
      else reject(new Error(`chromium exited with ${code ?? signal}: ${stderr.slice(-2000)}`));
    });
  }).finally(() => rmSync(profile, { recursive: true, force: true }));
}

/** The DOM after the page has loaded (and any script would have run), serialised. */
export const dumpDom = (bin: string, file: string, timeoutMs = 60_000): Promise<string> =>
  run(bin, file, ['--dump-dom'], timeoutMs);

/** A PNG screenshot of the top `width` × `height` pixels of the page. */
export async function screenshot(
  bin: string,
  file: string,
  png: string,
  width = 1280,
  height = 2000,
  timeoutMs = 60_000,
): Promise<void> {
  await run(bin, file, [`--window-size=${width},${height}`, `--screenshot=${png}`], timeoutMs);
}
