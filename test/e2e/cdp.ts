/**
 * Opens a local page in headless Chromium driven over the DevTools protocol (`--remote-debugging-pipe`,
 * no WebSocket needed) and watches what the page does (not a test file):
 * - every script Chromium compiles for the page (`Debugger.scriptParsed`: inline, event handler,
 *   `javascript:` URL, timer), so "no script ran" is a count, not a guess from the DOM;
 * - every navigation of any frame after the first load (`Page.frameRequestedNavigation` / `frameNavigated`);
 * - every request other than the page itself and `data:` URLs, each intercepted (`Fetch`) and failed,
 *   so nothing leaves the machine even when the page tries.
 * After the load it waits `settleMs` (a `<meta http-equiv="refresh" content="0">` fires in that time),
 * then reads a few facts of the DOM with one evaluation of its own.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { pathToFileURL } from 'node:url';

/** What a page did while it loaded and settled. */
export interface PageWatch {
  /** Scripts compiled for the page (URL or `inline`, with the first characters of their source). */
  readonly scripts: string[];
  /** URLs any frame tried to navigate to after the page itself loaded. */
  readonly navigations: string[];
  /** Requests other than the page and `data:` URLs (all were blocked). */
  readonly requests: string[];
  /** The value of `probe` evaluated in the page at the end (JSON). */
  readonly probe: unknown;
}

interface Message {
  id?: number;
  method?: string;
  params?: Record<string, any>;
  result?: Record<string, any>;
  error?: { message: string };
  sessionId?: string;
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
];

/**
 * Loads `file` in a fresh Chromium profile and reports what it did; `probe` is a JavaScript
 * expression (evaluated by the test harness, after everything else is counted) whose value is returned.
 */
export async function watchPage(
  bin: string,
  file: string,
  probe: string,
  settleMs = 2_000,
  timeoutMs = 60_000,
): Promise<PageWatch> {
  const profile = mkdtempSync(path.join(tmpdir(), 'moesim-cdp-'));
  const child = spawn(bin, [...FLAGS, '--remote-debugging-pipe', `--user-data-dir=${profile}`, 'about:blank'], {
    stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'],
  });
  child.stderr!.resume();
  const toChrome = child.stdio[3] as Writable;
  const fromChrome = child.stdio[4] as Readable;
  const pending = new Map<number, { resolve: (r: Record<string, any>) => void; reject: (e: Error) => void }>();
  const listeners: ((m: Message) => void)[] = [];
  let nextId = 1;
  let buffer = '';
  fromChrome.setEncoding('utf8').on('data', (chunk: string) => {
    buffer += chunk;
    let end: number;
    while ((end = buffer.indexOf('\0')) >= 0) {
      const msg = JSON.parse(buffer.slice(0, end)) as Message;
      buffer = buffer.slice(end + 1);
      if (msg.id !== undefined) {
        const p = pending.get(msg.id);
        pending.delete(msg.id);
        if (msg.error) p?.reject(new Error(msg.error.message));
        else p?.resolve(msg.result ?? {});
      } else for (const l of listeners) l(msg);
    }
  });
  const send = (
    method: string,
    params: Record<string, unknown> = {},
    sessionId?: string,
  ): Promise<Record<string, any>> =>
    new Promise((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { resolve, reject });
      toChrome.write(`${JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) })}\0`);
    });
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  try {
    const pageUrl = pathToFileURL(file).href;
    const { targetInfos } = await send('Target.getTargets');
    const target = (targetInfos as { type: string; targetId: string }[]).find((t) => t.type === 'page')!;
    const { sessionId } = await send('Target.attachToTarget', { targetId: target.targetId, flatten: true });
    const watch = {
      scripts: [] as string[],
      navigations: [] as string[],
      requests: [] as string[],
      probe: undefined as unknown,
    };
    let loaded = false;
    let onLoad!: () => void;
    const load = new Promise<void>((r) => (onLoad = r));
    listeners.push((m) => {
      if (m.sessionId !== sessionId || !m.params) return;
      const p = m.params;
      if (m.method === 'Debugger.scriptParsed') {
        watch.scripts.push(p.url || `inline@${p.startLine}:${p.startColumn}`);
      } else if (m.method === 'Fetch.requestPaused') {
        const url: string = p.request.url;
        if (url === pageUrl && !loaded) void send('Fetch.continueRequest', { requestId: p.requestId }, sessionId);
        else {
          watch.requests.push(url);
          void send('Fetch.failRequest', { requestId: p.requestId, errorReason: 'BlockedByClient' }, sessionId);
        }
      } else if (m.method === 'Network.requestWillBeSent') {
        const url: string = p.request.url;
        if (!url.startsWith('data:') && !(url === pageUrl && !loaded) && !watch.requests.includes(url))
          watch.requests.push(url);
      } else if (m.method === 'Page.frameRequestedNavigation' || (m.method === 'Page.frameNavigated' && loaded)) {
        watch.navigations.push(p.url ?? p.frame?.url);
      } else if (m.method === 'Page.loadEventFired') {
        loaded = true;
        onLoad();
      }
    });
    for (const domain of ['Page.enable', 'Network.enable', 'Debugger.enable']) await send(domain, {}, sessionId);
    await send('Fetch.enable', { patterns: [{ urlPattern: '*' }] }, sessionId);
    await send('Page.navigate', { url: pageUrl }, sessionId);
    await Promise.race([
      load,
      new Promise((_r, reject) => setTimeout(() => reject(new Error(`no load event for ${pageUrl}`)), timeoutMs / 2)),
    ]);
    await new Promise((r) => setTimeout(r, settleMs));
    // Our own evaluation compiles a script too: count the page's first.
    const counted = { scripts: [...watch.scripts], navigations: [...watch.navigations], requests: [...watch.requests] };
    const { result } = await send(
      'Runtime.evaluate',
      { expression: `JSON.stringify(${probe})`, returnByValue: true },
      sessionId,
    );
    return { ...counted, probe: JSON.parse(result.value as string) };
  } finally {
    clearTimeout(timer);
    send('Browser.close').catch(() => undefined);
    const exited = new Promise<void>((r) =>
      child.exitCode !== null || child.signalCode !== null ? r() : child.once('exit', () => r()),
    );
    const kill = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(kill);
    rmSync(profile, { recursive: true, force: true });
  }
}
